"""
## What it does

Finds a tensor made by a factory (`torch.zeros`, `torch.ones`, `torch.empty`, `torch.full`,
`torch.arange`, `torch.eye`, `torch.tensor`, `torch.rand`, `torch.randn`, `torch.randint`,
`torch.linspace`, the `*_like` factories, ...) that is moved to a device right away:
`torch.zeros(n).cuda()`, `torch.tensor(x).to(device)`, `torch.randn(b, d).to("cuda:1")`.

## Why is it slow

The tensor is first allocated and filled on the CPU, then copied over PCIe to the GPU, and the CPU
copy is thrown away: two allocations, a host fill and a blocking transfer instead of one kernel on
the device. PyTorch's performance tuning guide says to "create tensors directly on the target
device"; its profiler's pattern matcher flags the same thing as an extra CUDA copy.

A tensor made with `requires_grad=True` and then moved is worse than slow (its `.grad` stays
`None`): TL102 `requires-grad-then-move` reports that case, and this rule leaves it alone.

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
Unsafe when the factory already names a device (`torch.linspace(..., device=a.device).to(b)`):
the values were computed on that device, and another may round them differently. A
`dtype` given to `.to()` moves into the factory (safe for `zeros`, `ones`, `empty`, `eye` and
their `*_like` forms, whose values are exact in every dtype; unsafe otherwise, since rounding
once differs from rounding twice). Unsafe for random factories (`rand`, `randn`, `randint`,
`randperm`, ...): the CPU and CUDA generators produce different numbers for the same seed. Unsafe
for `.cuda(x)` with a non-literal `x`. No fix when the factory takes `**kwargs` (it may already
carry `device`), when both the factory and `.to()` give a dtype, or when `.to()` has arguments the
factory does not take (`memory_format`, `copy`).

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

import ast
import re

import libcst as cst

from torchlint.matching import (DETERMINISTIC_FACTORIES, EXACT_FACTORIES, DeviceMove, is_literal, keyword_arg,
                                RANDOM_FACTORIES, set_keyword, tensor_factory)
from torchlint.precheck import SyntaxIndex, callee
from torchlint.rule import FixSpec, Rule, RuleContext

PARAMETER = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
# A move of a call's result: `)`, maybe whitespace or comments, then `.to(` or `.cuda(`.
# A comment runs to the end of its line (`#[^\n]*\n`): a comment that could end anywhere would let
# the pattern split a line of `#`s every possible way, in time exponential in its length.
MOVE_AFTER_CALL = re.compile(r"\)(?:\s|#[^\n]*\n)*\.\s*(?:cuda|to)\s*\(")


def moved_calls(index: SyntaxIndex, *names: str) -> list[ast.Call]:
    """The calls of ``names`` whose result is moved right away (``torch.zeros(3).cuda()``): the
    precheck of factory_move."""
    wanted = index.names(names)
    return [call.func.value for call in index.calls("cuda", "to") if isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Call) and callee(call.func.value) in wanted and index.may_move(call)]


def factory_move(ctx: RuleContext, node: cst.Call, extra_names: tuple[str, ...] = ()
                 ) -> tuple[cst.Call, str, DeviceMove] | None:
    """For ``torch.<factory>(...).cuda()`` / ``.to(<device>)``: the factory call, the factory's
    name and the move; None for anything else (a move to the CPU included)."""
    move = node.func
    if not (isinstance(move, cst.Attribute) and move.attr.value in ("cuda", "to") and isinstance(move.value, cst.Call)):
        return None
    factory = tensor_factory(move.value, ctx.imports)
    if factory is None:
        return None
    target = ctx.device_move(node, extra_names)
    if target is None or target.to_cpu:
        return None
    return move.value, factory, target


def creates_non_leaf(ctx: RuleContext, factory_call: cst.Call) -> bool:
    """At the move call (ctx's current node): the factory asks for ``requires_grad=True`` and the
    moved copy is kept as it is, not wrapped in ``nn.Parameter`` (which makes a new leaf) nor
    detached."""
    grad = keyword_arg(factory_call, "requires_grad")
    if grad is None or not is_literal(grad.value, True):
        return False
    consumer = ctx.parent
    if isinstance(consumer, cst.Arg) and len(ctx.ancestors) > 2:
        outer = ctx.ancestors[-3]
        if isinstance(outer, cst.Call) and ctx.qualified_name(outer.func) in PARAMETER:
            return False
    if isinstance(consumer, cst.Attribute) and consumer.attr.value in ("detach", "detach_", "data"):
        return False
    return True


def create_on_device(rule: Rule, node: cst.Call, factory_call: cst.Call, factory: str,
                     move: DeviceMove) -> FixSpec | None:
    """The fix that gives the factory the move's device (and dtype) and drops the move: safe for
    deterministic factories, unsafe for random ones and for ``.cuda(x)`` with a variable ``x``."""
    if not move.understood or any(a.star == "**" for a in factory_call.args) \
            or keyword_arg(factory_call, "pin_memory") is not None:
        return None  # the factory may already carry `device`, or the move does more than move
    # a factory that already names a device computed its values there: another device may round
    # differently (`linspace`, `arange` on floats)
    safe = factory in DETERMINISTIC_FACTORIES and move.certain and keyword_arg(factory_call, "device") is None
    new = set_keyword(factory_call, "device", move.device)
    if move.dtype is not None:
        if keyword_arg(factory_call, "dtype") is not None:
            return None  # two conversions: their order matters
        new = set_keyword(new, "dtype", move.dtype)
        safe = safe and factory in EXACT_FACTORIES
    new = new.with_changes(lpar=node.lpar, rpar=node.rpar)
    return rule.fix("Create the tensor on the device", rule.replace(node, new),
                    applicability="safe" if safe else "unsafe")


class MoveAfterCreate(Rule):
    code = "TL201"
    name = "move-after-create"
    kind = "performance"
    summary = "A factory-made tensor moved right away instead of created on the device (`device=`)"
    fix_applicability = "safe"
    triggers = (".cuda(", ".to(")
    options = {"device-names": (list, [], "More variable names to treat as devices")}

    @classmethod
    def applies(cls, text: str) -> bool:
        return MOVE_AFTER_CALL.search(text) is not None

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return bool(moved_calls(index, *DETERMINISTIC_FACTORIES, *RANDOM_FACTORIES))

    def visit_Call(self, node: cst.Call) -> None:
        found = factory_move(self.ctx, node, tuple(self.option("device-names")))
        if found is None:
            return
        factory_call, factory, move = found
        if creates_non_leaf(self.ctx, factory_call):
            return  # TL102 requires-grad-then-move
        shown = f"torch.{factory}(...).{move.method}(...)"
        self.report(factory_call, f"`{shown}` fills the tensor on the CPU, then copies it; create it on the device "
                                  "with `device=`", create_on_device(self, node, factory_call, factory, move))
