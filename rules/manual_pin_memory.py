"""
## What it does

Finds batches pinned by hand in the loop over a `DataLoader` that does not pin them itself:
`for x, y in loader: x = x.pin_memory().to(device, non_blocking=True)`, with a loader made in the
file without `pin_memory=True`. The pinned value must be the batch or a part taken out of it
(`batch["image"]`, `x, y = batch`, the values of a dict batch in a comprehension), and it must
then be copied to a CUDA device (or to a device the file may set to CUDA).

## Why is it slow

`Tensor.pin_memory()` copies the tensor into page-locked memory. Called in the loop, that copy
runs on the training thread every step, before the copy to the GPU can start: the host spends the
time of two copies where one would do. PyTorch's pinned-memory tutorial measures
`t.pin_memory().to("cuda", non_blocking=True)` as slower than a plain `t.to("cuda")`, up to
twice as slow. A loader with `pin_memory=True` and worker processes pins each batch in its own
pinning thread while the model computes on the previous one, so the training thread only queues
the non-blocking copy. With `num_workers=0` the loader pins on the training thread too; there the
manual pinning buys nothing over a plain copy, and the finding says so.

## Expected gain

The time of one host copy of the batch per step, on the training thread: the pinned-memory tutorial
finds the manual pin-then-copy up to twice as slow as a plain copy
(https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html). It grows with the batch's bytes
(images, audio), and is small for batches of a few token ids. No published measurement of the fix
itself found; `torchlint verify --each --unsafe-fixes script.py` measures the step time before and
after on your machine.

## Example

```python
loader = DataLoader(dataset, batch_size=64, num_workers=4)
for x, y in loader:
    x = x.pin_memory().to("cuda", non_blocking=True)
    y = y.pin_memory().to("cuda", non_blocking=True)
```

## Use instead

```python
loader = DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)
for x, y in loader:
    x = x.to("cuda", non_blocking=True)
    y = y.to("cuda", non_blocking=True)
```

## Fix safety

Unsafe. The fix, offered when the loop iterates one `DataLoader(...)` call with workers
(`num_workers` not known to be 0) and no `pin_memory=` argument, adds `pin_memory=True` to that call
and removes the `.pin_memory()` calls on the batch in the loop. The values are the same, but every
other loop over that loader now gets pinned batches too (pinned memory is taken from the
operating system's page-locked pool, so pinning batches that never go to the GPU wastes it), the
loader pins through its own rules (tensors inside lists, tuples, dicts and named tuples, and
objects with a `pin_memory()` method), and its pinning thread works on the current CUDA device
(in a DDP script that never calls `torch.cuda.set_device`, that is GPU 0 in every process).

The rule stays silent when the loader already pins (`pin_memory=True`), when its `pin_memory=` is
not a literal or may come through `**kwargs`, when the loop does not iterate a `DataLoader` made
in the file (a generator, a hand-made batch sampler, nanoGPT's `get_batch`), when the pinned
tensor is computed from the batch (`batch.float().pin_memory()`: the loader's pinning would not
reach it), and when the copy goes to the CPU or to a device the file never sets to CUDA.

## References

- https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html
- https://pytorch.org/docs/stable/data.html#memory-pinning
- https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cache

from torchlint.analysis.data import (ast_dataloader_calls, batch_parts, dataloader_argument, is_batch_part,
                                    loader_calls, pins_memory, without_workers)
from torchlint.analysis.devices import mentions_cuda
from torchlint.analysis.loops import ast_loop_lines
from torchlint.analysis.syntax import dotted_name, function_parameters, method_call, target_names
from torchlint.analysis.walk import Visitor, visit
from torchlint.fixes import set_keyword
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex


@cache
def comprehension_types() -> tuple[type, ...]:
    return (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


DICT_VIEWS = ("items", "values")


@dataclass
class _Loop:
    """The pinning calls found in one loop over an unpinned loader."""

    loaders: list[cst.Call]
    pins: list[cst.Call] = field(default_factory=list)


class ManualPinMemory(Rule):
    code = "TL206"
    name = "manual-pin-memory"
    kind = "performance"
    summary = "Batches pinned by hand (`.pin_memory()`) every step instead of by the loader (`pin_memory=True`)"
    fix_applicability = "unsafe"
    triggers = (".pin_memory()",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        loops = ast_loop_lines(index)
        return any(loops[call.lineno] and not call.args and not call.keywords
                   and isinstance(call.func, ast.Attribute) for call in index.calls("pin_memory")) \
            and bool(ast_dataloader_calls(index))

    def __init__(self, ctx):
        super().__init__(ctx)
        self.loops: dict[int, _Loop] = {}

    def visit_Call(self, node: cst.Call) -> None:
        if method_call(node, "pin_memory") is None or node.args or not self._copied_to_cuda(node):
            return
        found = self._loader_loop(node)
        if found is not None:
            loop, loaders = found
            self.loops.setdefault(id(loop), _Loop(loaders)).pins.append(node)

    def leave_For(self, original_node: cst.For) -> None:
        found = self.loops.pop(id(original_node), None)
        if found is None:
            return
        function = self.ctx.enclosing_function()
        parameters = function_parameters(function) if function is not None else ()
        workers = any(not without_workers(call, self.ctx.bindings, parameters) for call in found.loaders)
        fix = self._fix(found) if workers else None
        for pin in found.pins:
            shown = self.ctx.code_for(pin.func.value)
            if workers:
                message = (f"`{shown}.pin_memory()` pins the batch on the training thread every step; pass "
                           "`pin_memory=True` to the loader, whose pinning thread does it while the model computes")
            else:
                message = (f"`{shown}.pin_memory()` pins the batch on the training thread every step, an extra copy "
                           "that makes the transfer slower than a plain `.to(device)`; drop it, or give the loader "
                           "workers and `pin_memory=True`")
            self.report(pin, message, fix)

    # ----------------------------------------------------------------------------------------------
    def _copied_to_cuda(self, pin: cst.Call) -> bool:
        """Is the pinned value copied to a CUDA device (or one that may be): chained
        (``x.pin_memory().to(device)``) or through the name it is assigned to in the loop?"""
        ancestors = self.ctx.ancestors
        moves = []
        if len(ancestors) > 2 and isinstance(ancestors[-2], cst.Attribute) and isinstance(ancestors[-3], cst.Call) \
                and ancestors[-3].func is ancestors[-2]:
            moves.append(self.ctx.devices.move(ancestors[-3]))
        elif isinstance(ancestors[-2], cst.Assign) and len(ancestors[-2].targets) == 1 \
                and isinstance(ancestors[-2].targets[0].target, cst.Name):
            loops = self.ctx.loops.enclosing_loops()
            if loops:
                moves += self._moves_of(ancestors[-2].targets[0].target.value, loops[0])
        return any(move is not None and self._to_cuda(move) for move in moves)

    def _moves_of(self, name: str, loop: cst.CSTNode) -> list:
        devices = self.ctx.devices
        found = []

        class Moves(Visitor):
            def visit_Call(self, node: cst.Call) -> None:
                if isinstance(node.func, cst.Attribute) and dotted_name(node.func.value) == name:
                    found.append(devices.move(node))

        visit(loop.body, Moves())
        return found

    def _to_cuda(self, move) -> bool:
        if move.method == "cuda":
            return True
        if move.to_cpu or move.method == "cpu":
            return False
        kind = self.ctx.devices.kind(move.device)
        return kind == "cuda" or kind is None and mentions_cuda(self.ctx.code)

    def _loader_loop(self, pin: cst.Call) -> tuple[cst.For, list[cst.Call]] | None:
        """The enclosing for loop whose batch ``pin`` pins, with the ``DataLoader`` calls it
        iterates, when none of them pins."""
        ancestors = self.ctx.ancestors
        function = self.ctx.enclosing_function()
        parameters = set(function_parameters(function)) if function is not None else set()
        for loop in self.ctx.loops.enclosing_loops():
            if not isinstance(loop, cst.For) or not isinstance(loop.body, cst.IndentedBlock):
                continue
            position = next(i for i, node in enumerate(ancestors) if node is loop)
            statement = ancestors[position + 2] if len(ancestors) > position + 2 else None
            names = batch_parts(loop, statement)
            for node in ancestors[position:]:
                if isinstance(node, comprehension_types()):
                    clause = node.for_in
                    while clause is not None:
                        iterated = clause.iter
                        if method_call(iterated, *DICT_VIEWS) and not iterated.args:
                            iterated = iterated.func.value
                        if is_batch_part(iterated, names):
                            names |= target_names(clause.target)
                        clause = clause.inner_for_in
            if not is_batch_part(pin.func.value, names):
                continue
            iterated = dotted_name(loop.iter) or ""
            if iterated.split(".")[0] in parameters:
                return None  # the loader comes from the caller
            loaders = loader_calls(loop.iter, self.ctx.bindings)
            if not loaders or any(pins_memory(call) is not False for call in loaders):
                return None
            return loop, loaders
        return None

    def _fix(self, found: _Loop):
        if len(found.loaders) != 1 or dataloader_argument(found.loaders[0], "pin_memory") is not None:
            return None
        loader = found.loaders[0]
        edits = [self.replace(loader, set_keyword(loader, "pin_memory", cst.Name("True")))]
        edits += [self.replace(pin, pin.func.value) for pin in found.pins]
        return self.fix("Pin in the loader (`pin_memory=True`)", *edits)
