"""
## What it does

Finds two mistakes in how a DistributedDataParallel (DDP) script feeds its data:

- a `DataLoader` without a `sampler` (or `batch_sampler`) that a training loop iterates, in a file
  that wraps a model in `DistributedDataParallel`;
- a loader whose sampler is a `DistributedSampler`, iterated once per epoch by an outer loop that
  never calls `sampler.set_epoch(epoch)`.

## Why is it wrong

DDP runs one process per GPU, and each process iterates its own DataLoader. Without a
`DistributedSampler`, every process reads the whole dataset: an epoch does the work of
`world_size` epochs, each GPU sees the same samples (with `shuffle=False`, in the same order, so
the gradients are averaged over copies of one batch), and the effective batch size is not what it
seems. `DistributedSampler` gives each process its own share of the indices.

The sampler shuffles with a seed derived from its epoch number, which only changes when
`set_epoch` is called. Without it, every epoch visits the data in the same order, a documented
pitfall: "calling the `set_epoch()` method at the beginning of each epoch before creating the
DataLoader iterator is necessary to make shuffling work properly across multiple epochs".

## Example

```python
from torch.utils.data import DistributedSampler

sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=64, sampler=sampler)
for epoch in range(epochs):
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
```

## Use instead

```python
from torch.utils.data import DistributedSampler

sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=64, sampler=sampler)
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
```

## Fix safety

Inserting `sampler.set_epoch(epoch)` as the first statement of the epoch loop is what the
sampler's documentation requires, and it is unsafe in this project's sense: it repairs a bug and so
changes what the run computes. With epochs counted from 0, the first epoch's order is unchanged;
every later epoch gets its own shuffle, as intended, so the data order (and the losses) differ
from the second epoch on. `torchlint verify --unsafe-fixes` judges it by whether the run still
trains. When the sampler is `None` on
some runs (`DistributedSampler(ds) if distributed else None`), the call is guarded with
`if sampler is not None:`. No fix when the epoch loop is a `while` loop or does not bind a plain
name, or when the sampler is created inside the epoch loop. The rule is silent when the epoch loop
(or a function of the file that it calls) already calls `set_epoch`, and for a sampler built with
`shuffle=False`.

A missing `DistributedSampler` is reported without a fix: the sampler needs the process group
when it is created, `shuffle=True` must move from the loader to the sampler, and an iterable
dataset must be sharded by rank in its own code. The message says what to write. Loaders that
only evaluate (no `backward` in the loop) are not reported, nor are loaders passed through
`accelerator.prepare(...)` or rebound otherwise, nor datasets of the file that derive from
`IterableDataset`.

## References

- https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
- https://pytorch.org/tutorials/beginner/ddp_series_multigpu.html
- https://pytorch.org/docs/stable/notes/ddp.html
"""

from __future__ import annotations

from torchlint.analysis.data import (DISTRIBUTED_DATA_PARALLEL, DISTRIBUTED_SAMPLERS, ITERABLE_DATASETS,
                                    dataloader_argument, is_dataloader_call)
from torchlint.analysis.loops import ITERATION_WRAPPERS, iterated_value
from torchlint.analysis.syntax import (ast_find_keyword, ast_has_star_args, contains, dotted_name, find_keyword,
                                       has_star_args, is_literal)
from torchlint.analysis.walk import Visitor, visit
from torchlint.fixes import block_indentation
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex
from torchlint.rules._distributed import is_sampler_helper


class DdpSampler(Rule):
    code = "TL502"
    name = "ddp-sampler"
    kind = "correctness"
    summary = "DDP training without a `DistributedSampler`, or a distributed sampler without `set_epoch(epoch)`"
    fix_applicability = "unsafe"
    triggers = ("DistributedDataParallel", "DistributedSampler")

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a loader in a file that wraps a model in DDP, or a loader given a DistributedSampler
        loaders = index.calls("DataLoader")
        if index.calls("DistributedDataParallel") and any(not ast_has_star_args(call) for call in loaders):
            return True
        return bool(index.calls("DistributedSampler")) and any(
            ast_find_keyword(call, "sampler") is not None or len(call.args) > 3 for call in loaders)

    # --- a DDP script whose training loader has no sampler ---------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        if is_dataloader_call(node, self.ctx.bindings):
            self._check_sampler(node)
        else:
            self._check_passed_loader(node)

    def _check_sampler(self, node: cst.Call) -> None:
        if has_star_args(node) or dataloader_argument(node, "sampler") or dataloader_argument(node, "batch_sampler") \
                or not self._wraps_in_ddp():
            return
        dataset = dataloader_argument(node, "dataset")
        if dataset is None or self._iterable_dataset(dataset.value):
            return
        if not any(self.ctx.loops.backpropagated_names(loop) is not None
                   for loop in self.ctx.loops.iterating_loops(self.ctx.bound_name())):
            return
        data = self.ctx.code_for(dataset.value)
        shuffle = dataloader_argument(node, "shuffle")
        drop = " (and drop `shuffle=` from the loader)" if shuffle is not None else ""
        self.report(node, "this DataLoader feeds a DistributedDataParallel training loop without a "
                          "`DistributedSampler`, so every process trains on the whole dataset; pass "
                          f"`sampler=DistributedSampler({data})`{drop} and call `sampler.set_epoch(epoch)` "
                          "at the start of each epoch")

    def _wraps_in_ddp(self) -> bool:
        if not hasattr(self, "_ddp"):
            bindings = self.ctx.bindings

            class Wraps(Visitor):
                found = False

                def visit_Call(self, call: cst.Call) -> None:
                    if bindings.qualified_name(call.func) in DISTRIBUTED_DATA_PARALLEL:
                        self.found = True

            finder = Wraps()
            if "DistributedDataParallel" in self.ctx.code:
                visit(self.ctx.module, finder)
            self._ddp = finder.found
        return self._ddp

    def _iterable_dataset(self, dataset: cst.BaseExpression) -> bool:
        """A dataset built from a class of this file that derives from IterableDataset: it must be
        sharded by rank in its own code, not by a sampler."""
        value = self.ctx.bindings.value_of(dotted_name(dataset)) if type(dataset) in (cst.Name, cst.Attribute) else dataset
        if type(value) is not cst.Call:
            return False
        return any(self.ctx.qualified_name(base.value) in ITERABLE_DATASETS
                   for cls in self.ctx.bindings.defined(dotted_name(value.func), cst.ClassDef) for base in cls.bases)

    # --- an epoch loop without set_epoch ----------------------------------------------------------
    def visit_For(self, node: cst.For) -> None:
        iterated = iterated_value(node, self.ctx.bindings)
        loader = dotted_name(iterated)
        if loader is not None:
            self._check_epoch_loop(iterated, loader, passed=False)

    def _check_passed_loader(self, node: cst.Call) -> None:
        """``for epoch in ...: train_one_epoch(model, loader, ...)`` with a function of this file."""
        callee = dotted_name(node.func)
        if callee is None or callee in ITERATION_WRAPPERS or not self.ctx.bindings.defined(callee, cst.FunctionDef) \
                or "set_epoch" in self.ctx.code:
            return
        for arg in node.args:
            name = dotted_name(arg.value)
            if name is not None:
                self._check_epoch_loop(arg.value, name, passed=True)

    def _check_epoch_loop(self, anchor: cst.BaseExpression, loader: str, passed: bool) -> None:
        sampler = self._distributed_sampler(loader)
        if sampler is None:
            return
        target, conditional, created = sampler
        loops = self.ctx.loops.enclosing_loops()
        if not loops:
            return
        epoch_loop = loops[0]
        if self._calls_set_epoch(epoch_loop):
            return
        fix = None
        epoch = epoch_loop.target if type(epoch_loop) is cst.For else None
        if type(epoch) is cst.Name and type(epoch_loop.body) is cst.IndentedBlock \
                and not any(contains(epoch_loop, node) for node in created):
            fix = self._insert_set_epoch(epoch_loop, target, epoch.value, conditional)
        shown = f"{target}.set_epoch({epoch.value if type(epoch) is cst.Name else 'epoch'})"
        how = "is passed to a function each epoch" if passed else "is iterated each epoch"
        self.report(anchor, f"`{loader}` {how}, but its DistributedSampler never gets `set_epoch`, so every "
                            f"epoch sees the data in the same order; call `{shown}` at the start of each epoch", fix)

    def _distributed_sampler(self, loader: str) -> tuple[str, bool, list[cst.CSTNode]] | None:
        """For a loader built with a shuffling DistributedSampler: what to call ``set_epoch`` on,
        whether the sampler may be None, and the calls that build the loader and the sampler."""
        call = self.ctx.bindings.value_of(loader)
        if not is_dataloader_call(call, self.ctx.bindings):
            return None
        sampler_arg = dataloader_argument(call, "sampler")
        if sampler_arg is None:
            return None
        value = sampler_arg.value
        if self._is_distributed_sampler(value):
            return f"{loader}.sampler", False, [call]
        name = dotted_name(value)
        bound = self.ctx.bindings.value_of(name)
        if self._is_distributed_sampler(bound):
            return name, False, [call, bound]
        if type(bound) is cst.IfExp:
            branches = (bound.body, bound.orelse)
            if any(self._is_distributed_sampler(b) for b in branches) and any(is_literal(b, None) for b in branches):
                return name, True, [call, bound]
        return None

    def _is_distributed_sampler(self, expr: cst.BaseExpression | None) -> bool:
        if is_sampler_helper(expr):
            return True  # the one TL501's fix writes
        if type(expr) is not cst.Call or self.ctx.qualified_name(expr.func) not in DISTRIBUTED_SAMPLERS:
            return False
        shuffle = find_keyword(expr, "shuffle")
        return shuffle is None or not is_literal(shuffle.value, False)

    def _calls_set_epoch(self, loop: cst.CSTNode) -> bool:
        """The loop calls ``.set_epoch(`` itself, or calls a function of this file that does."""
        code = self.ctx.code_for(loop)
        if ".set_epoch(" in code:
            return True
        return any(f"{name}(" in code and any(".set_epoch(" in self.ctx.code_for(function)
                                              for function in self.ctx.bindings.defined(name, cst.FunctionDef))
                   for name in self.ctx.bindings.definitions)

    def _insert_set_epoch(self, loop: cst.For, target: str, epoch: str, conditional: bool):
        indent = block_indentation(self.ctx, loop.body)
        step = self.ctx.module.default_indent if loop.body.indent is None else loop.body.indent
        call = f"{target}.set_epoch({epoch})"
        text = f"{indent}if {target} is not None:\n{indent}{step}{call}\n" if conditional else f"{indent}{call}\n"
        return self.fix(f"Call `{call}` at the start of each epoch",
                        self.insert_after(loop.body.header, text))  # before the body's leading comments
