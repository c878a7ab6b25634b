"""Data loading: ``DataLoader`` calls and the parameters their arguments bind, samplers and
datasets, and the distributed wrappers that decide how data is split."""

from __future__ import annotations

import ast

import libcst as cst

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.syntax import ast_find_keyword, ast_has_star_args, find_argument

DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
# DataLoader's parameters that may be passed by position, in order (the rest are keyword-only).
DATALOADER_POSITIONAL = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers",
                         "collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn",
                         "multiprocessing_context", "generator")
DISTRIBUTED_SAMPLERS = frozenset({"torch.utils.data.DistributedSampler",
                                  "torch.utils.data.distributed.DistributedSampler"})
DISTRIBUTED_DATA_PARALLEL = frozenset({"torch.nn.parallel.DistributedDataParallel",
                                       "torch.nn.parallel.distributed.DistributedDataParallel"})
# FSDP1, the wrapper class; FSDP2 is the `fully_shard` function (public since torch 2.6).
FULLY_SHARDED_DATA_PARALLEL = frozenset({
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
})
FULLY_SHARD = frozenset({"torch.distributed.fsdp.fully_shard", "torch.distributed._composable.fsdp.fully_shard",
                         "torch.distributed._composable.fsdp.fully_shard.fully_shard"})
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
