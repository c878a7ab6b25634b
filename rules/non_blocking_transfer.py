"""
## What it does

Finds batches from a `DataLoader(..., pin_memory=True)` copied to the GPU without
`non_blocking=True`: `for x, y in loader: x = x.to(device)` or `x.cuda()`, including the tensors
of a batch taken apart in the loop (`inputs = batch["input_ids"].to(device)`,
`{k: v.to(device) for k, v in batch.items()}`).

## Why is it slow

With `pin_memory=True` the loader's worker threads place each batch in page-locked memory, from
which the GPU can copy by DMA while the host goes on. A plain `.to(device)` throws that away: it
waits until the copy is done before Python may queue the next operation, so the host stalls on
every tensor of every batch. With `non_blocking=True` the host queues the copy and moves on, and
CUDA's stream order makes the kernels that read the tensor wait for it. PyTorch's tuning guide
and its pinned-memory tutorial recommend the pair, and the guides beside this one describe it
as the way to overlap loading with compute.

## Expected gain

At most the time the host waits for the batch's copies: small when they are short next to the step.
The pinned-memory tutorial measures faster transfers with `non_blocking=True` and says the benefit
depends on the number and size of the tensors and on the hardware, with no single figure. On the
zoo's ResNet-20 on an H200, four of five such fixes measured within noise and one 0.81x of the step
time (bench/results/verify-zoo-gpu.md): weak evidence. `torchlint verify --each script.py` measures
the step time before and after on your machine.

## Example

```python
loader = DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)
for images, labels in loader:
    images, labels = images.to(device), labels.to(device)
```

## Use instead

```python
loader = DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)
for images, labels in loader:
    images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
```

## Fix safety

Safe when the target is known to be a CUDA device (`.cuda()`, `"cuda:0"`, a name bound to
`torch.device("cuda")` or to `"cuda" if torch.cuda.is_available() else "cpu"`): a host-to-GPU copy
is ordered before every kernel that reads its result. Unsafe when the device is not known: a
non-blocking copy to other devices (MPS) may be read before it lands. Copies to the CPU are never
reported (reading a non-blocking device-to-host copy before a synchronization gives wrong values).
The rule also stays silent when the loader's `pin_memory` is not literally `True` (from pageable
memory the copy is staged synchronously anyway), when the call already passes `non_blocking`, and
when the source tensor is written in place later in the loop (a pinned source changed after a
non-blocking copy was queued corrupts the copy).

## References

- https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html
- https://github.com/pytorch/tutorials/pull/3261
- https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers
- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html
"""

from __future__ import annotations

from functools import cache

from torchlint.analysis.data import dataloader_argument, is_dataloader_call
from torchlint.analysis.devices import ast_may_move
from torchlint.analysis.loops import ITERATION_WRAPPERS, ast_loop_lines, iterated_name
from torchlint.analysis.syntax import ast_find_keyword, ast_is_literal, dotted_name, is_literal, root_names, target_names
from torchlint.analysis.walk import Visitor, visit
from torchlint.fixes import set_keyword
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex


@cache
def comprehension_types() -> tuple[type, ...]:
    return (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


class NonBlockingTransfer(Rule):
    code = "TL203"
    name = "non-blocking-transfer"
    kind = "performance"
    summary = "A batch from a pinned-memory loader copied to the GPU without `non_blocking=True`"
    fix_applicability = "safe"
    triggers = ("pin_memory",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a loader with `pin_memory=True`, and a move without non_blocking= inside a loop
        pinned = any(ast_is_literal(pin.value if pin is not None else call.args[7] if len(call.args) > 7 else None, True)
                     for call in index.calls("DataLoader") for pin in [ast_find_keyword(call, "pin_memory")])
        loops = ast_loop_lines(index)
        return pinned and any(loops[call.lineno] and ast_may_move(index, call)
                              and ast_find_keyword(call, "non_blocking") is None for call in index.calls("cuda", "to"))

    def visit_Call(self, node: cst.Call) -> None:
        move = self.ctx.devices.move(node)
        if move is None or move.method == "cpu" or move.to_cpu or move.non_blocking is not None \
                or any(a.star for a in node.args):
            return
        kind = "cuda" if move.method == "cuda" else self.ctx.devices.kind(move.device)
        if kind not in ("cuda", None):
            return  # another accelerator: non-blocking copies there need a synchronization
        source = node.func.value
        loop = self._pinned_batch_loop(root_names(source))
        if loop is None or self._written_in_place(loop, source, node):
            return
        shown = self.ctx.code_for(node.func.value)
        self.report(node, f"`{shown}` comes from a loader with `pin_memory=True` but is copied with a blocking "
                          f"`.{move.method}()`; add `non_blocking=True` so the copy overlaps with GPU work",
                    self.fix("Copy with `non_blocking=True`",
                             self.replace(node, set_keyword(node, "non_blocking", cst.Name("True"))),
                             applicability="safe" if kind == "cuda" else "unsafe"))

    def _pinned_batch_loop(self, names: set[str]) -> cst.For | None:
        """The enclosing for loop over a pinned loader whose batch ``names`` come from."""
        for loop in self.ctx.loops.enclosing_loops():
            if not isinstance(loop, cst.For) or not self._pinned(iterated_name(loop, self.ctx.bindings)):
                continue
            if names & self._batch_names(loop):
                return loop
        return None

    def _pinned(self, loader: str | None, depth: int = 0) -> bool:
        """Every value the file assigns to ``loader`` is a ``DataLoader(..., pin_memory=True)``
        (or a progress bar around one: ``pbar = tqdm(loader)``)."""
        values = self.ctx.bindings.values(loader)
        if not values or depth > 3:
            return False
        for value in values:
            wrapped = _wrapped_iterable(value, self.ctx.bindings)
            if wrapped is not None:
                if not self._pinned(wrapped, depth + 1):
                    return False
            elif not (is_dataloader_call(value, self.ctx.bindings) and not any(a.star == "**" for a in value.args)
                      and is_literal(getattr(dataloader_argument(value, "pin_memory"), "value", None), True)):
                return False
        return True

    def _batch_names(self, loop: cst.For) -> set[str]:
        """Names holding (parts of) the batch at the current node: the loop's targets, names
        assigned from them earlier in the loop, and comprehension variables drawn from them."""
        names = target_names(loop.target)
        position = next(i for i, node in enumerate(self.ctx.ancestors) if node is loop)
        # statements of the loop body before the one holding the current node, in order
        current = self.ctx.ancestors[position + 2] if len(self.ctx.ancestors) > position + 2 else None
        body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
        for statement in body:
            if statement is current:
                break
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Assign) and root_names(small.value) & names:
                        for target in small.targets:
                            names |= target_names(target.target)
        for node in self.ctx.ancestors[position:]:
            if isinstance(node, comprehension_types()):
                clause = node.for_in
                while clause is not None:
                    if root_names(clause.iter) & names:
                        names |= target_names(clause.target)
                    clause = clause.inner_for_in
        return names

    def _written_in_place(self, loop: cst.For, source: cst.BaseExpression, node: cst.Call) -> bool:
        """The source tensor is changed in place in the loop, and the copy is not rebound to it."""
        assign = self.ctx.ancestors[-2] if len(self.ctx.ancestors) > 1 else None
        source_names = root_names(source)
        if isinstance(assign, cst.Assign) and assign.value is node and all(
                target_names(t.target) & source_names for t in assign.targets):
            return False  # `x = x.to(device)`: the CPU tensor is no longer reachable by that name
        finder = _InPlaceWrites(source_names)
        visit(loop.body, finder)
        return finder.found


def _wrapped_iterable(value: cst.BaseExpression | None, bindings) -> str | None:
    """``loader`` for ``tqdm(loader)``, ``enumerate(loader)``: the name an iteration wrapper wraps."""
    if not isinstance(value, cst.Call) or not value.args or value.args[0].keyword is not None or value.args[0].star:
        return None
    wrapper = dotted_name(value.func) in ITERATION_WRAPPERS or bindings.qualified_name(value.func) in ITERATION_WRAPPERS
    return dotted_name(value.args[0].value) if wrapper else None


class _InPlaceWrites(Visitor):
    """``x += ...``, ``x[...] = ...``, ``x.add_(...)`` on one of names."""

    def __init__(self, names: set[str]):
        self.names = names
        self.found = False

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if root_names(node.target) & self.names:
            self.found = True

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, (cst.Subscript, cst.Attribute)) and root_names(node.target) & self.names:
            self.found = True

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value.endswith("_") and not func.attr.value.endswith("__") \
                and root_names(func.value) & self.names:
            self.found = True
