"""Data loading: ``DataLoader`` calls and the parameters their arguments bind, samplers and
datasets, and the distributed wrappers that decide how data is split."""

from __future__ import annotations

import ast
from collections.abc import Collection

import libcst as cst

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.syntax import (ast_find_keyword, ast_has_star_args, find_argument, has_star_args,
                                       literal_value, same_literal)

DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
# DataLoader's parameters that may be passed by position, in order (the rest are keyword-only).
DATALOADER_POSITIONAL = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers",
                         "collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn",
                         "multiprocessing_context", "generator")
DISTRIBUTED_SAMPLERS = frozenset({"torch.utils.data.DistributedSampler",
                                  "torch.utils.data.distributed.DistributedSampler"})
DISTRIBUTED_DATA_PARALLEL = frozenset({"torch.nn.parallel.DistributedDataParallel",
                                       "torch.nn.parallel.distributed.DistributedDataParallel"})
ITERABLE_DATASETS = frozenset({"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset",
                               "torch.utils.data.IterDataPipe", "torch.utils.data.datapipes.datapipe.IterDataPipe"})
IN_MEMORY_DATASETS = frozenset({"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"})


def is_dataloader_call(node: cst.CSTNode, bindings: Bindings) -> bool:
    return isinstance(node, cst.Call) and bindings.qualified_name(node.func) in DATALOADERS


def dataloader_argument(call: cst.Call, name: str) -> cst.Arg | None:
    """The argument a DataLoader call binds to parameter ``name``, by keyword or by position
    (``num_workers`` is the sixth positional argument)."""
    index = DATALOADER_POSITIONAL.index(name) if name in DATALOADER_POSITIONAL else None
    return find_argument(call, name, index)


def known_value(expr: cst.BaseExpression, bindings: Bindings, parameters: Collection[str] = ()) -> tuple[bool, object]:
    """(True, value) for an argument whose value is known: a literal, or a plain name that every
    binding in the file assigns that literal and that is not one of ``parameters`` (the enclosing
    functions' parameters, which hide it); else (False, None)."""
    known = literal_value(expr)
    if known[0] or not isinstance(expr, cst.Name) or expr.value in parameters:
        return known
    return bindings.literal(expr.value)


def without_workers(call: cst.Call, bindings: Bindings, parameters: Collection[str] = ()) -> bool:
    """Does a DataLoader call load its batches in the main process, provably: ``num_workers``
    absent (its default is 0), a literal 0, or a name only ever assigned 0 (see ``known_value``)?
    ``*args``/``**kwargs`` may carry it, and ``args.workers``, a parameter or a name assigned
    other values may be more than 0: those are not known to be 0."""
    if has_star_args(call):
        return False
    workers = dataloader_argument(call, "num_workers")
    if workers is None:
        return True
    known, value = known_value(workers.value, bindings, parameters)
    return known and same_literal(value, 0)


def ast_dataloader_calls(index: SyntaxIndex) -> list[ast.Call]:
    """``DataLoader(...)`` calls without ``*args``/``**kwargs`` (the DataLoader rules' shape)."""
    return [call for call in index.calls_of(DATALOADERS) if not ast_has_star_args(call)]


def ast_dataloader_argument(call: ast.Call, name: str) -> ast.expr | None:
    """The argument a DataLoader call binds to ``name``: by keyword, or at its place."""
    found = ast_find_keyword(call, name)
    if found is not None:
        return found.value
    position = DATALOADER_POSITIONAL.index(name)
    return call.args[position] if len(call.args) > position else None
