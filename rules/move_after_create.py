"""
## What it does

Finds a tensor made by a factory (`torch.zeros`, `torch.ones`, `torch.empty`, `torch.full`,
`torch.arange`, `torch.eye`, `torch.rand`, `torch.randn`, `torch.randint`, `torch.linspace`, ...)
that is moved to a device right away: `torch.zeros(n).cuda()`, `torch.randn(b, d).to("cuda:1")`;
or bound to a name that a later statement of the same block moves into itself, with nothing in
between reading it: `z = torch.randn(n, d)` ... `z = z.to(device)`.

Also found with methods between the factory and the move that the device would compute the same
way: casts, views and fills (`torch.zeros(n).float().cuda()`, `torch.arange(n).view(1, -1).to(device)`,
`torch.empty(n).uniform_(-1, 1).cuda()`), or with the result scaled by a number first
(`(torch.ones(n) * i).long().to(device)`). And with the pre-0.4 typed constructors given sizes,
which allocate on the CPU as `torch.empty` does: `torch.ByteTensor(size=(n,)).to("cuda")`,
`torch.Tensor(b, b).fill_(v).to(device)`, `torch.LongTensor(8).random_(0, k).cuda()`. A typed
constructor given one argument that is not a number may be given data (`torch.LongTensor(labels)`),
which must be copied anyway; it is reported only when a fill follows it, because the fill replaces
whatever it was given.

Also when the tensor is given another tensor's type with `.type_as(t)`, which copies it to `t`'s
device (and casts it to `t`'s dtype): `torch.arange(n).type_as(self.inv_freq)`, as rotary and
sinusoidal position embeddings write it.

Also when the factory sits in a function of the project's, in any module, whose result the caller
moves: `self.beta = self.prepare_noise_schedule().to(device)` where the method returns
`torch.linspace(...)`. The finding is at the call and points to the factory. There is no fix:
`device=` belongs in the function, whose other callers may want the CPU tensor.

Not reported, because the move costs nothing that `device=` would save: `torch.tensor(data)` and
`torch.as_tensor(data)` (the data is on the host and is copied to the device either way), and the
`*_like` factories (`torch.zeros_like(x)` is made on `x`'s device, so `.to(x.device)` does
nothing).

## Why is it slow

The tensor is first allocated and filled on the CPU, then copied over PCIe to the GPU, and the CPU
copy is thrown away: two allocations, a host fill and a blocking transfer instead of one kernel on
the device. PyTorch's performance tuning guide says to "create tensors directly on the target
device"; its profiler's pattern matcher flags the same thing as an extra CUDA copy.

A tensor made with `requires_grad=True` and then moved is worse than slow (its `.grad` stays
`None`): TL102 `requires-grad-then-move` reports that case, and this rule leaves it alone.

## Expected gain

No published measurement found. Per call, the fix saves a host allocation, a fill on the CPU and a
copy over PCIe, which from ordinary host memory also makes the host wait. That counts for large
tensors and for tensors made on every step (masks, noise, position indices), and little for a tensor
made once at start-up. `torchlint verify --each script.py` (with `--unsafe-fixes` for the unsafe
fixes) measures the step time and memory before and after the fix on your machine.

## Example

```python
mask = torch.zeros(batch, seq).cuda()
noise = torch.randn(batch, dim).to(device)
```

## Use instead

```python
mask = torch.zeros(batch, seq, device="cuda")
noise = torch.randn(batch, dim, device=device)
```

## Fix safety

Safe for deterministic factories: the values are the same, only where they are made changes.
Unsafe for `linspace` and `logspace`, and for `arange` over floats (a float literal, a division):
the CPU computes `start + i * step` in double and rounds once, CUDA in float32, so
`torch.arange(0.0, 1.01, 0.1)` holds other values on each (pytorch#47043); a range of integers is
exact. Unsafe when the factory already names a device (`torch.linspace(..., device=a.device).to(b)`):
the values were computed on that device, and another may round them differently. A
`dtype` given to `.to()` moves into the factory (safe for `zeros`, `ones`, `empty` and `eye`,
whose values are exact in every dtype; unsafe otherwise, since rounding
once differs from rounding twice). Unsafe for random factories (`rand`, `randn`, `randint`,
`randperm`, ...): the CPU and CUDA generators produce different numbers for the same seed. Unsafe
for `.cuda(x)` with a non-literal `x`. No fix when the factory takes `**kwargs` (it may already
carry `device`), when both the factory and `.to()` give a dtype, when `.to()` has arguments the
factory does not take (`memory_format`, `copy`), when the factory is given a `generator=` (a CPU
generator cannot drive a factory on the GPU: it raises), or when a comment sits between the factory
and the move (the rewrite would drop it). Across statements the fix adds `device=` to the factory and deletes
the statement that moves it, with the same tiers; no fix when a comment sits above that
statement. Methods between the factory and the move stay, and now run on the device:
`torch.zeros(n, device="cuda").float()`. That is safe for casts, views and fills with a value,
and for a scaling by a number literal (one IEEE operation rounds the same everywhere). It is unsafe
for fills with random numbers, which the device's generator draws differently, and for a scaling by
a name, which may hold a CPU tensor that would then meet a CUDA one. There is no fix
when the move also converts the dtype: the two conversions would swap order. A typed constructor
becomes `torch.empty(<sizes>, dtype=<its dtype>, device=...)`, with the same tiers (`torch.empty`
counts as deterministic, as above). There is no fix when its one argument may be data, or when it was
imported bare (`from torch import LongTensor`). A `.type_as(t)` stays, as the cast, and the factory
gets `device=t.device`, with the same tiers: the same values cast to the same dtype round the same
on every device.

## Options

- `device-names` (list of strings): more variable names to treat as devices, besides names bound
  to a device in the file and names like `device`, `dev`, `*_device`.

## References

- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#create-tensors-directly-on-the-target-device
- https://github.com/pytorch/pytorch/blob/main/torch/profiler/_pattern_matcher.py
- https://pytorch.org/docs/stable/generated/torch.Tensor.is_leaf.html
- https://lightning.ai/docs/pytorch/stable/advanced/speed.html
"""

from __future__ import annotations

from torchlint.analysis.calls import related, where
from torchlint.analysis.devices import DETERMINISTIC_FACTORIES, EXACT_FACTORIES, RANDOM_FACTORIES
from torchlint.analysis.syntax import find_keyword, is_literal
from torchlint.fixes import set_keyword
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex
from torchlint.analysis.devices import mentions_cuda
from torchlint.rules._factories import (LEGACY_CONSTRUCTORS, MOVE_AFTER_CALL, NO_HOST_FILL, ast_helper_factory_moves,
                                        ast_moved_calls, ast_rebound_moves, bound_factory_move, chained_factory_move,
                                        create_on_device, creates_non_leaf, factory_move, helper_factory_move,
                                        legacy_move, rebound_move_in, same_values_on_any_device, shown_chain, type_as_move,
                                        ast_type_as_calls)


class MoveAfterCreate(Rule):
    code = "TL201"
    name = "move-after-create"
    kind = "performance"
    summary = "A factory-made tensor moved right away instead of created on the device (`device=`)"
    fix_applicability = "safe"
    options = {"device-names": (list, [], "More variable names to treat as devices")}

    @classmethod
    def applies(cls, text: str) -> bool:
        return MOVE_AFTER_CALL.search(text) is not None or rebound_move_in(text)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        factories = (DETERMINISTIC_FACTORIES | RANDOM_FACTORIES) - NO_HOST_FILL
        names = index.rule_option(cls.name, "device-names", cls.options["device-names"][1])  # None: not known
        legacy = [name.split(".")[-1] for name in LEGACY_CONSTRUCTORS]
        return bool(ast_moved_calls(index, *factories, *legacy, extra_names=names, through_methods=True)) \
            or ast_rebound_moves(index, *factories, extra_names=names) or ast_helper_factory_moves(index, names) \
            or bool(ast_type_as_calls(index, *factories))

    def visit_Call(self, node: cst.Call) -> None:
        names = tuple(self.option("device-names"))
        found = factory_move(self.ctx, node, names)
        chained = chained_factory_move(self.ctx, node, names) if found is None else None
        if found is None and chained is None:
            if not self._legacy(node, names) and not self._from_helper(node, names) and not self._type_as(node):
                self._bound_then_moved(node)
            return
        factory_call, factory, move = (chained.factory_call, chained.factory, chained.move) if chained else found
        methods = chained.methods if chained else ()
        if creates_non_leaf(self.ctx, factory_call) or factory in NO_HOST_FILL:
            return  # TL102 requires-grad-then-move; or a tensor the move does not make faster
        if chained:
            made = f"torch.{factory}(...)"
            if chained.scaling:
                made = "(" + chained.scaling.format(made) + ")"
            made += shown_chain(chained.chain)
        else:
            made = f"torch.{factory}(...)" if node.func.value is factory_call else f"Variable(torch.{factory}(...))"
        shown = f"{made}.{move.method}(...)"
        advice = "create it on the device with `device=`"
        if find_keyword(factory_call, "generator") is not None:  # a CPU generator cannot drive a GPU factory
            advice += " and a generator made on that device (`torch.Generator(device=...)`)"
        self.report(factory_call, f"`{shown}` {_makes(factory, methods)} the tensor on the CPU, then copies it; {advice}",
                    create_on_device(self, node, factory_call, factory, move, methods=methods,
                                     exact_between=not chained or not chained.scaling or chained.scaled_by_literal))

    def _legacy(self, node: cst.Call, names: tuple[str, ...]) -> bool:
        """``torch.LongTensor(n).random_(0, k).to(device)``: a legacy constructor allocates on the
        host; the fix spells it ``torch.empty(n, dtype=torch.int64, device=device)`` and keeps the
        fill (unsafe for random fills, as for random factories; no fix when its argument may be
        data rather than sizes)."""
        found = legacy_move(self.ctx, node, names)
        if found is None:
            return False
        shown = f"{found.name.split('.')[-1]}(...){shown_chain(found.chain)}.{found.move.method}(...)"
        dtype = LEGACY_CONSTRUCTORS[found.name]
        modern = f"torch.empty(...{', dtype=torch.' + dtype if dtype else ''}, device=...)"
        fix = None if found.modern is None else create_on_device(self, node, found.constructor, "empty", found.move,
                                                                 methods=found.methods, modern=found.modern)
        self.report(found.constructor, f"`torch.{shown}`: the legacy constructor makes the tensor on the CPU, then "
                                       f"it is copied; create it on the device: `{modern}`", fix)
        return True

    def _from_helper(self, node: cst.Call, names: tuple[str, ...]) -> bool:
        """``self.prepare_noise_schedule().to(device)`` where the project's function returns
        ``torch.linspace(...)`` made on the CPU: reported at the call, pointing to the factory; no
        fix (``device=`` belongs in the helper, whose other callers may want the CPU tensor)."""
        found = helper_factory_move(self.ctx, node, names)
        if found is None:
            return False
        call, factory, move = found
        callee = self.ctx.code_for(call.func).strip()
        self.report(call, f"`{callee}(...)` returns a tensor that `torch.{factory.name}(...)` fills on the CPU "
                          f"({where(factory.effect)}), then `.{move.method}(...)` copies it to the device; create it "
                          "there with `device=` in the function",
                    related=(related(factory.effect, f"`torch.{factory.name}(...)` makes the tensor on the CPU here"),))
        return True

    def _type_as(self, node: cst.Call) -> bool:
        """``torch.arange(n).type_as(x)``: made on the CPU, then copied to ``x``'s device (and cast to
        its dtype). The fix creates it there, ``torch.arange(n, device=x.device).type_as(x)``, and
        keeps the cast: safe for deterministic factories (the cast of the same values rounds the same
        on every device), unsafe for random ones."""
        found = type_as_move(self.ctx, node)
        if found is None:
            return False
        factory_call, factory, target = found
        if factory in NO_HOST_FILL or creates_non_leaf(self.ctx, factory_call):
            return True
        if self.ctx.programs.is_script and not mentions_cuda(self.ctx.code):
            return True  # a script that never uses CUDA: `type_as` only casts (nlp-tutorial's Transformer)
        written = self.ctx.code_for(target).strip()
        fix = None
        if all(find_keyword(factory_call, k) is None for k in ("generator", "pin_memory")):
            device = cst.Attribute(target, cst.Name("device"))
            fix = self.fix("Create the tensor on the device", self.replace(
                factory_call, set_keyword(factory_call, "device", device)),
                applicability="safe" if factory in DETERMINISTIC_FACTORIES
                and same_values_on_any_device(factory_call, factory) else "unsafe")
        self.report(factory_call, f"`torch.{factory}(...).type_as({written})` {_makes(factory)} the tensor on the CPU, then copies "
                                  f"it to the device of `{written}`; create it there with `device={written}.device`",
                    fix)
        return True

    def _bound_then_moved(self, node: cst.Call) -> None:
        """``z = torch.randn(n, d)`` ... ``z = z.to(device)``: the same host fill and copy, across
        statements; reported at the factory, fixed by creating there and dropping the move."""
        found = bound_factory_move(self.ctx, node, tuple(self.option("device-names")))
        if found is None:
            return
        factory_call, factory, move, _, moved = found
        grad = find_keyword(factory_call, "requires_grad")
        if factory in NO_HOST_FILL or grad is not None and not is_literal(grad.value, False) \
                or find_keyword(factory_call, "device") is not None:
            return  # nothing to save; TL102's non-leaf; or made on a device on purpose
        name = node.func.value.value
        self.report(factory_call, f"`{name} = torch.{factory}(...)` is filled on the CPU, then copied to the device by "
                                  f"`{name} = {name}.{move.method}(...)`; create it there with `device=`",
                    self._create_there(factory_call, factory, move, moved))

    def _create_there(self, factory_call: cst.Call, factory: str, move, moved: cst.SimpleStatementLine):
        """``device=`` (and the move's dtype) on the factory, and the move statement gone: safe as
        create_on_device is, for a deterministic factory and a device that means the same there."""
        if not move.understood or any(a.star == "**" for a in factory_call.args) \
                or any(find_keyword(factory_call, k) is not None for k in ("pin_memory", "generator")):
            return None
        new = set_keyword(factory_call, "device", move.device)
        safe = factory in DETERMINISTIC_FACTORIES and move.certain
        if move.dtype is not None:
            if find_keyword(factory_call, "dtype") is not None:
                return None
            new = set_keyword(new, "dtype", move.dtype)
            safe = safe and factory in EXACT_FACTORIES
        fix = self.fix_builder("Create the tensor on the device", "safe" if safe else "unsafe")
        return fix.remove_statement(moved, [(factory_call, new)]).build()


def _makes(factory: str, methods: tuple = ()) -> str:
    """What the factory does on the CPU: ``torch.empty`` only allocates (unless a method then
    fills it); the others fill."""
    return "allocates" if factory in ("empty", "empty_strided") and not methods else "fills"
