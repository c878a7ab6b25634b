"""
## What it does

Finds a `torch.utils.data.DataLoader` (under any import alias) that loads its batches in the
training process: no `num_workers` argument (keyword, or the sixth positional argument), or
`num_workers=0`.

## Why is it slow

With `num_workers=0` the training process reads, decodes, augments and collates every sample
itself, one batch after the other, and the GPU waits while it does. Worker processes prepare the
next batches in parallel with the training step, so loading overlaps with compute. The PyTorch
tuning guide lists this first ("enable async data loading and augmentation"), and Lightning warns
at run time about every loader with `num_workers <= min(2, os.cpu_count())`.

## Expected gain

No published figure that holds in general: workers take the loading off the training thread, which
saves up to all of the loading time when loading is slower than the step, and nothing when the step
is much slower than loading. `torchlint verify --profile script.py` charges the step's wait for the
next batch to the line that builds the loader, which shows what workers could save; `torchlint
verify --each --unsafe-fixes script.py` measures the fix. Lightning's speed guide advises raising
`num_workers` until the speed stops improving.

## Example

```python
loader = DataLoader(dataset, batch_size=64, shuffle=True)
```

## Use instead

```python
import os

loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=min(8, os.cpu_count() or 1))
```
then tune the number: raise it until the step time stops falling. Each worker holds a copy of
the dataset object and every DDP process starts its own workers, so more is not always better.

## Fix safety

Unsafe. The fix writes `num_workers=min(8, os.cpu_count() or 1)`: one worker per CPU core up to
eight, a start that suits most machines without flooding a large server (and `import os` first
among the file's imports, as isort places the standard library, when the file lacks it). It
changes how the program runs:

- workers are separate processes: the dataset, `collate_fn` and `worker_init_fn` must be
  picklable, global state changed in the main process is not seen by workers, and random
  augmentations draw from per-worker generators, so the batches differ from a run without workers;
- each worker uses memory, and containers with a small `/dev/shm` crash with "bus error";
- where workers are started with spawn or forkserver (macOS, Windows, Linux from Python 3.14), each
  worker re-imports the main script. The fix is therefore withheld in a script that runs code at
  import time without an `if __name__ == "__main__":` guard (and in notebooks), where each worker
  would start the training again.

The rule stays silent where workers do not help or would be wrong: a `TensorDataset`, a list, a
dataset class of the file whose `__getitem__` calls nothing (it only indexes data already in
memory, which costs less than sending the batches between processes) or a function of the file
that returns one of these, an
`IterableDataset` defined in the file that does not split its stream with `get_worker_info()`
(every worker would yield every sample), a call with `*args`/`**kwargs` that may carry
`num_workers`, a loader bound to a name that nothing in the file reads, in a function, a script
or a notebook (it loads no batch), and a dataset class of the file whose `__getitem__` or
`__iter__` moves the sample to the GPU (`.cuda()`, `.to(device)`): worker processes cannot start
CUDA once the training process has, so workers would make the script fail.

## References

- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#enable-async-data-loading-and-augmentation
- https://pytorch.org/docs/stable/data.html#single-and-multi-process-data-loading
- https://pytorch.org/docs/stable/data.html#torch.utils.data.get_worker_info
- https://lightning.ai/docs/pytorch/stable/advanced/speed.html#dataloaders
- https://github.com/pytorch/pytorch/blob/main/torch/profiler/_pattern_matcher.py
"""

from __future__ import annotations

import ast

from functools import cache

from torchlint.analysis.data import (IN_MEMORY_DATASETS, ITERABLE_DATASETS, ast_dataloader_argument,
                                    ast_dataloader_calls, dataloader_argument, is_dataloader_call, without_workers)
from torchlint.analysis.devices import mentions_cuda
from torchlint.analysis.syntax import (ast_is_literal, dotted_name, has_star_args, is_main_guard, names_in,
                                       returns_of)
from torchlint.analysis.walk import Visitor, visit
from torchlint.fixes import parse_expression, replace_arg_value, set_keyword
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

WORKERS = "min(8, {os}.cpu_count() or 1)"
IN_MEMORY_BUILDERS = frozenset({"list", "tuple", "range", "zip"})


# Top-level statements that run nothing of the script when a worker re-imports it.
@cache
def definition_types() -> tuple[type, ...]:
    return (cst.Import, cst.ImportFrom, cst.FunctionDef, cst.ClassDef, cst.Pass)


class DataloaderNumWorkers(Rule):
    code = "TL601"
    name = "dataloader-num-workers"
    kind = "performance"
    summary = "`DataLoader` without `num_workers`: every batch is loaded in the training process"
    fix_applicability = "unsafe"
    triggers = ("DataLoader",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return any((workers := ast_dataloader_argument(call, "num_workers")) is None or ast_is_literal(workers, 0)
                   or isinstance(workers, ast.Name) for call in ast_dataloader_calls(index))  # `num_workers = 0` too

    def visit_Call(self, node: cst.Call) -> None:
        if not is_dataloader_call(node, self.ctx.bindings) or has_star_args(node):
            return
        workers = dataloader_argument(node, "num_workers")
        if not without_workers(node, self.ctx.bindings, self.ctx.parameters_around()):  # `num_workers = 0` too
            return
        dataset = dataloader_argument(node, "dataset")
        if dataset is None or self._workers_do_not_help(dataset.value) or self._never_read():
            return
        loads = "`DataLoader(..., num_workers=0)`" if workers is not None else "`DataLoader` without `num_workers`"
        waits = "while the GPU waits" if mentions_cuda(self.ctx.code) else "between the steps"
        self.report(node, f"{loads} loads every batch in the training process {waits}; "
                          "pass `num_workers=min(8, os.cpu_count() or 1)` and tune it", self._fix(node, workers))

    def _never_read(self) -> bool:
        """Is the loader bound to a name that nothing in the file reads, in a function or in a
        script or notebook (which no other module imports it from)? It then loads no batch at all
        (a `test_loader` made beside the train and validation loaders, and never used)."""
        name = self.ctx.bound_name()
        function = self.ctx.enclosing_function()
        if name is None or "." in name or not (function is not None or self.ctx.path.endswith(".ipynb")
                                               or self.ctx.programs.is_script):
            return False
        names = _NameCounter(name)
        visit(function or self.ctx.module, names)
        return names.count == 1  # the assignment's target only

    def _workers_do_not_help(self, dataset: cst.BaseExpression) -> bool:
        """An in-memory dataset, or an iterable dataset of this file that every worker would
        replay in full (when the dataset's origin is unknown and the file has such a class, the
        rule stays silent too)."""
        value = self.ctx.bindings.value_of(dotted_name(dataset)) if isinstance(dataset, (cst.Name, cst.Attribute)) else dataset
        if isinstance(value, (cst.List, cst.Tuple, cst.ListComp)):
            return True
        if isinstance(value, cst.Call):
            return self._in_memory(value) or dotted_name(value.func) in self._unsharded_iterable_classes() \
                or dotted_name(value.func) in self._device_classes()
        return bool(self._unsharded_iterable_classes())

    def _in_memory(self, call: cst.Call, depth: int = 1) -> bool:
        """``TensorDataset(...)``, ``list(...)``, a class of the file that only indexes memory, or
        a function of the file that returns one of those (``make_dataset(...)``)."""
        name = dotted_name(call.func)
        if self.ctx.qualified_name(call.func) in IN_MEMORY_DATASETS or name in IN_MEMORY_BUILDERS \
                or name in self._indexing_classes():
            return True
        functions = self.ctx.bindings.defined(name, cst.FunctionDef)
        if len(functions) != 1 or depth == 0:
            return False
        returned = [r.value for r in returns_of(functions[0])]
        return bool(returned) and all(isinstance(v, cst.Call) and self._in_memory(v, depth - 1) for v in returned)

    def _indexing_classes(self) -> set[str]:
        """Classes of this file whose ``__getitem__`` calls nothing: it only indexes or slices data
        the dataset already holds in memory (``return self.data[index]``)."""
        if not hasattr(self, "_indexing"):
            self._indexing = set()
            for nodes in self.ctx.bindings.definitions.values():
                for node in (n for n in nodes if isinstance(n, cst.ClassDef)):
                    for item in node.body.body:
                        if isinstance(item, cst.FunctionDef) and item.name.value == "__getitem__" \
                                and not _calls_any(item.body, None):
                            self._indexing.add(node.name.value)
        return self._indexing

    def _device_classes(self) -> set[str]:
        """Classes of this file whose ``__getitem__`` or ``__iter__`` moves the sample to the GPU
        (``.cuda()``, ``.to(device)``): a worker process cannot start CUDA once the parent has
        ("Cannot re-initialize CUDA in forked subprocess"), so workers would break the script."""
        if not hasattr(self, "_on_device"):
            self._on_device = set()
            for nodes in self.ctx.bindings.definitions.values():
                for node in (n for n in nodes if isinstance(n, cst.ClassDef)):
                    if any(isinstance(item, cst.FunctionDef) and item.name.value in ("__getitem__", "__iter__")
                           and self.ctx.devices.moves_to_cuda(item.body) for item in node.body.body):
                        self._on_device.add(node.name.value)
        return self._on_device

    def _unsharded_iterable_classes(self) -> set[str]:
        """Classes of this file deriving from IterableDataset that never call get_worker_info()."""
        if not hasattr(self, "_unsharded"):
            classes = [n for nodes in self.ctx.bindings.definitions.values() for n in nodes if isinstance(n, cst.ClassDef)]
            iterable: dict[str, cst.ClassDef] = {}
            changed = True
            while changed:
                changed = False
                for node in classes:
                    if node.name.value not in iterable and any(
                            self.ctx.qualified_name(b.value) in ITERABLE_DATASETS or dotted_name(b.value) in iterable
                            for b in node.bases):
                        iterable[node.name.value] = node
                        changed = True
            self._unsharded = {name for name, node in iterable.items()
                               if "get_worker_info" not in names_in(node)}
        return self._unsharded

    def _fix(self, node: cst.Call, workers: cst.Arg | None):
        if not self._safe_to_reimport() or self.ctx.path.endswith(".ipynb"):
            return None
        fix = self.fix_builder("Load batches in worker processes (`num_workers=min(8, os.cpu_count() or 1)`)")
        os_name = fix.ensure_import("os")
        if os_name is None:
            return None
        value = parse_expression(WORKERS.format(os=os_name))
        new = replace_arg_value(node, workers, value) if workers is not None else set_keyword(node, "num_workers", value)
        return fix.replace(node, new).build()

    def _safe_to_reimport(self) -> bool:
        """Would a worker started by spawn/forkserver, which re-imports the main script, run
        nothing but definitions? True with a `__main__` guard, or when the top level only
        imports, defines and assigns values that call nothing defined in the file."""
        body = self.ctx.module.body
        if any(is_main_guard(statement) for statement in body):
            return True
        defined = {s.name.value for s in body if isinstance(s, (cst.FunctionDef, cst.ClassDef))}
        return all(_runs_nothing(statement, defined) for statement in body)


def _runs_nothing(statement: cst.CSTNode, defined: set[str]) -> bool:
    """Does a top-level statement only import, define or assign (calling nothing defined in the
    file)? `if`/`try` blocks count when everything in them does (`try: import x`)."""
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        return True
    if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        return all(_small_runs_nothing(small, defined) for small in statement.body)
    if isinstance(statement, cst.If):
        parts = [statement.body, statement.orelse]
    elif isinstance(statement, (cst.Try, cst.TryStar)):
        parts = [statement.body, *statement.handlers, statement.orelse, statement.finalbody]
    elif isinstance(statement, (cst.IndentedBlock, cst.Else, cst.Finally, cst.ExceptHandler, cst.ExceptStarHandler)):
        parts = list(statement.body) if isinstance(statement, cst.IndentedBlock) else [statement.body]
    else:
        return False  # for, while, with at the top level run the script
    return all(part is None or _runs_nothing(part, defined) for part in parts)


def _small_runs_nothing(small: cst.BaseSmallStatement, defined: set[str]) -> bool:
    if isinstance(small, definition_types()):
        return True
    if isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString)):
        return True  # a docstring
    return isinstance(small, (cst.Assign, cst.AnnAssign)) and not _calls_any(small, defined)


class _CallFinder(Visitor):
    def __init__(self, names: set[str] | None):
        self.names = names
        self.found = False

    def visit_Call(self, call: cst.Call) -> None:
        if self.names is None or (dotted_name(call.func) or "").split(".")[0] in self.names:
            self.found = True


def _calls_any(node: cst.CSTNode, names: set[str] | None) -> bool:
    """Does the subtree call one of ``names`` (any function, for None)?"""
    finder = _CallFinder(names)
    visit(node, finder)
    return finder.found


class _NameCounter(Visitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name:
            self.count += 1
