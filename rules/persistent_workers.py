"""
## What it does

Finds a `torch.utils.data.DataLoader` with worker processes (`num_workers` > 0) that is iterated
once per epoch and does not pass `persistent_workers`.

## Why is it slow

By default the DataLoader starts its worker processes each time it is iterated, at the start of
every epoch, and shuts them down at the end. Each start pickles the dataset (and the
`collate_fn`, the sampler's iterator state) to every worker, re-imports the script in each worker
under the spawn and forkserver start methods, and refills the prefetch queue from empty: the first
batches of every epoch wait for it, and with large datasets or many workers this can take
seconds per epoch. `persistent_workers=True` keeps the workers alive between epochs. Lightning's
speed guide recommends it, especially with `strategy="ddp_spawn"`.

## Expected gain

A fixed saving per epoch (starting the workers, refilling their queue), which matters when epochs
are short or workers start slowly (spawn, forkserver, a large dataset to pickle). One report lost
about 10 s per epoch on Windows and saw no difference on Linux
(https://github.com/boreshkinai/delta-interpolator/pull/3); on the zoo's ResNet-20 on an H200 both
fixes measured within noise (bench/results/verify-zoo-gpu.md). A pause once per epoch hardly moves
the median step time `torchlint verify --each --unsafe-fixes` reports: compare epoch times instead.

## Example

```python
loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=8)
for epoch in range(epochs):
    for x, y in loader:
        train_step(x, y)
```

## Use instead

```python
loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=8, persistent_workers=True)
for epoch in range(epochs):
    for x, y in loader:
        train_step(x, y)
```

## Fix safety

Unsafe. Workers that live across epochs keep their own copy of the dataset: a change made to the
dataset in the main process between epochs (a new epoch number, a curriculum step, a resampled
index) no longer reaches them, and a `worker_init_fn` that seeds per-epoch randomness runs once
instead of every epoch. The workers also hold their memory between epochs, next to those of the
validation loader. The rule only reports a loader that is visibly iterated more than once: returned by a
LightningModule's or DataModule's `train_dataloader`/`val_dataloader`, or assigned to a name
that an epoch loop iterates (a loop inside another loop, two loops, or a call inside a loop that
is passed the loader; for a loader assigned to a local name, only in that function: a loader made
per call for one pass is gone before the next call). It stays silent for a loader that is one long
pass (its sampler sets `num_samples`, or is an infinite sampler), for a target torch older than
1.7 (which has no `persistent_workers`), when the file assigns an attribute of the dataset or
calls a method on it inside a loop, when the loader is created inside a loop (a new loader each
epoch gains nothing), when the file reloads its loaders every epoch
(`reload_dataloaders_every_n_epochs`), and when `persistent_workers=` is already written or may
come in through `**kwargs`.

For `num_workers=N` with a literal N > 0 the fix writes `persistent_workers=True`; for a name such
as `num_workers=args.workers` it writes `persistent_workers=args.workers > 0`, since
`persistent_workers=True` with zero workers raises an error. Any other expression gets no fix.

## References

- https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader
- https://lightning.ai/docs/pytorch/stable/advanced/speed.html#persistent-workers
- https://github.com/pytorch/pytorch/pull/35795
- https://github.com/boreshkinai/delta-interpolator/pull/3
"""

from __future__ import annotations

import ast

from torchlint.analysis.data import (ast_dataloader_argument, ast_dataloader_calls, dataloader_argument,
                                    is_dataloader_call, workers_of)
from torchlint.analysis.index import span
from torchlint.analysis.loops import AST_FUNCTIONS, ast_loop_lines, loop_types
from torchlint.analysis.syntax import (ast_dotted_name, ast_find_keyword, contains, dotted_name, find_keyword,
                                       has_star_args)
from torchlint.analysis.walk import Visitor, visit
from torchlint.fixes import parse_expression, set_keyword
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

# Lightning hooks whose loader the Trainer iterates every epoch (unless told to reload them).
EPOCH_HOOKS = frozenset({"train_dataloader", "val_dataloader"})


class PersistentWorkers(Rule):
    code = "TL603"
    name = "persistent-workers"
    kind = "performance"
    summary = "`DataLoader` with workers that are restarted every epoch (no `persistent_workers=True`)"
    fix_applicability = "unsafe"
    triggers = ("DataLoader",)
    torch_versions = ">=1.7"  # persistent_workers came in torch 1.7

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a loader with workers, outside loops, returned by an epoch hook or assigned to a name (the
        # two ways _iterated_repeatedly sees it iterated again)
        calls = [call for call in ast_dataloader_calls(index) if ast_find_keyword(call, "persistent_workers") is None
                 and _ast_may_have_workers(ast_dataloader_argument(call, "num_workers"))]
        if not calls:
            return False
        loops = ast_loop_lines(index)
        hooks = [function for function in index.nodes(*AST_FUNCTIONS) if function.name in EPOCH_HOOKS]
        kept = {id(node.value) for node in index.nodes(ast.Assign) if len(node.targets) == 1
                and ast_dotted_name(node.targets[0]) is not None}
        kept.update(id(node.value) for node in index.nodes(ast.AnnAssign) if ast_dotted_name(node.target) is not None)
        kept.update(id(node.value) for node in index.nodes(ast.Return)
                    if any(span(hook)[0] <= node.lineno <= hook.end_lineno for hook in hooks))
        return any(id(call) in kept and not loops[call.lineno] for call in calls) \
            and not ("reload_dataloaders_every" in index.source and "reload_dataloaders_every" in index.code)

    def visit_Call(self, node: cst.Call) -> None:
        if not is_dataloader_call(node, self.ctx.bindings) or has_star_args(node) \
                or find_keyword(node, "persistent_workers") is not None:
            return
        workers = dataloader_argument(node, "num_workers")
        if workers is None or self.ctx.enclosing(*loop_types()) or "reload_dataloaders_every" in self.ctx.code:
            return
        known, count = workers_of(node, self.ctx.bindings, self.ctx.parameters_around())  # `num_workers = 0` too
        if known and not (type(count) is int and count > 0):
            return
        dataset = dataloader_argument(node, "dataset")
        if dataset is not None and self._changed_in_a_loop(dataset.value) or self._one_long_pass(node) \
                or not self._iterated_repeatedly():
            return
        if known:
            value, shown = cst.Name("True"), "True"
        elif type(workers.value) in (cst.Name, cst.Attribute):
            shown = f"{self.ctx.code_for(workers.value)} > 0"
            value = parse_expression(shown)
        else:
            value, shown = None, "True"  # only valid with workers, and we cannot tell
        fix = None if value is None else self.fix(
            "Keep the workers alive between epochs", self.replace(node, set_keyword(node, "persistent_workers", value)))
        condition = "" if value is not None else " when `num_workers` > 0"
        self.report(node, "`DataLoader` starts new worker processes every time it is iterated (every epoch); pass "
                          f"`persistent_workers={shown}`{condition} to keep them", fix)

    def _one_long_pass(self, node: cst.Call) -> bool:
        """A sampler that sets the number of samples itself (``RandomSampler(ds, num_samples=n)``,
        an infinite sampler): the loader is one long pass, started once."""
        sampler = dataloader_argument(node, "sampler")
        value = sampler.value if sampler is not None else None
        if type(value) in (cst.Name, cst.Attribute):
            value = self.ctx.bindings.value_of(dotted_name(value))
        return type(value) is cst.Call and (find_keyword(value, "num_samples") is not None
                                                or "infinite" in (dotted_name(value.func) or "").lower())

    def _iterated_repeatedly(self) -> bool:
        """Is the loader iterated more than once, so that restarting its workers costs anything?
        It is returned by Lightning's ``train_dataloader``/``val_dataloader`` (iterated every
        epoch), or the name it is assigned to is iterated by a loop inside another loop, by two
        loops, or passed to a call inside a loop (``train_one_epoch(model, loader)``)."""
        function = self.ctx.enclosing_function()
        if type(self.ctx.parent) is cst.Return and function is not None \
                and function.name.value in EPOCH_HOOKS:
            return True
        name = self.ctx.bound_name()
        if name is None or self.ctx.bindings.value_of(name) is not self.ctx.ancestors[-1]:
            return False
        loops = self.ctx.loops.loops_over(name)
        nested, passed = self._loop_uses()
        if "." not in name and function is not None:
            # a local name is seen only in its function: a loader made per call for one pass is
            # gone before the next call, however often the function runs
            loops = [loop for loop in loops if contains(function, loop)]
            passed = passed.get(id(function), set())
        else:
            passed = set().union(*passed.values()) if passed else set()
        return len(loops) > 1 or any(id(loop) in nested for loop in loops) or name in passed

    def _loop_uses(self) -> tuple[set[int], dict[int, set[str]]]:
        """(ids of the for loops nested in another loop of their function, the dotted names passed
        as arguments to calls inside loops, by the id of the function they are in (0: the module))."""
        if not hasattr(self, "_uses"):
            nested: set[int] = set()
            passed: dict[int, set[str]] = {}

            class Uses(Visitor):
                def __init__(self) -> None:
                    self.depth = [0]
                    self.functions = [0]
                    self.iterables: list[cst.BaseExpression] = []  # what the loops around iterate

                def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
                    self.depth.append(0)
                    self.functions.append(id(node))

                def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
                    self.depth.pop()
                    self.functions.pop()

                def visit_For(self, node: cst.For) -> None:
                    if self.depth[-1]:
                        nested.add(id(node))
                    self.depth[-1] += 1
                    self.iterables.append(node.iter)

                def leave_For(self, node: cst.For) -> None:
                    self.depth[-1] -= 1
                    self.iterables.pop()

                def visit_While(self, node: cst.While) -> None:
                    self.depth[-1] += 1

                def leave_While(self, node: cst.While) -> None:
                    self.depth[-1] -= 1

                def visit_Call(self, node: cst.Call) -> None:
                    # a wrapper of what the loop iterates (`for x in tqdm(loader)`) runs once, as the loop starts
                    if self.depth[-1] and not (self.iterables and contains(self.iterables[-1], node)):
                        passed.setdefault(self.functions[-1], set()).update(
                            dotted_name(a.value) for a in node.args if dotted_name(a.value))

            visit(self.ctx.module, Uses())
            self._uses = (nested, passed)
        return self._uses

    def _changed_in_a_loop(self, dataset: cst.BaseExpression) -> bool:
        """Is an attribute of the dataset assigned, or a method of it called, inside a loop
        anywhere in the file (``train_set.set_epoch(epoch)``, ``ds.difficulty = d``)? The
        loader's own ``.dataset`` counts too."""
        names = {dotted_name(dataset)}
        loader = self.ctx.bound_name()
        if loader is not None:
            names.add(f"{loader}.dataset")
        names.discard(None)
        return bool(names & self._mutated_in_loops())

    def _mutated_in_loops(self) -> set[str]:
        if not hasattr(self, "_mutated"):
            mutated: set[str] = set()

            class Mutations(Visitor):
                depth = 0

                def visit_For(self, node: cst.For) -> None:
                    self.depth += 1

                def leave_For(self, node: cst.For) -> None:
                    self.depth -= 1

                def visit_While(self, node: cst.While) -> None:
                    self.depth += 1

                def leave_While(self, node: cst.While) -> None:
                    self.depth -= 1

                def visit_Call(self, node: cst.Call) -> None:
                    if self.depth and type(node.func) is cst.Attribute:
                        mutated.add(dotted_name(node.func.value))

                def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
                    if self.depth and type(node.target) is cst.Attribute:
                        mutated.add(dotted_name(node.target.value))

                def visit_AugAssign(self, node: cst.AugAssign) -> None:
                    if self.depth and type(node.target) is cst.Attribute:
                        mutated.add(dotted_name(node.target.value))

            visit(self.ctx.module, Mutations())
            self._mutated = mutated
        return self._mutated


def _ast_may_have_workers(workers: ast.expr | None) -> bool:
    """Is ``num_workers`` given, and not a number (or None, True, False) that ``literal_value``
    reads as other than an int above 0?"""
    if workers is None:
        return False
    if isinstance(workers, ast.UnaryOp) and isinstance(workers.op, ast.USub):
        workers = workers.operand  # `-1`: at most 0 when it is a number
        return not (isinstance(workers, ast.Constant) and type(workers.value) in (int, float))
    return not (isinstance(workers, ast.Constant) and type(workers.value) in (bool, int, float, type(None))) \
        or type(workers.value) is int and workers.value > 0
