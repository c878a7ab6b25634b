"""Data loading: ``DataLoader`` calls and the parameters their arguments bind, which loader a loop
iterates and what holds its batch, samplers and datasets, and the distributed wrappers that decide
how data is split."""

from __future__ import annotations

import ast
from collections.abc import Collection
from functools import cached_property

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.flow import argument_for
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.loops import unwrapped_iterable
from torchlint.analysis.syntax import (ast_find_keyword, ast_has_star_args, dotted_name, find_argument,
                                       function_parameters, has_star_args, is_literal, literal_value, same_literal,
                                       target_names)
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst

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
    absent (its default is 0), a literal 0, or a name only ever assigned 0 (see ``workers_of``)?
    ``*args``/``**kwargs`` may carry it, and ``args.workers``, a parameter or a name assigned
    other values may be more than 0: those are not known to be 0."""
    known, value = workers_of(call, bindings, parameters)
    return known and same_literal(value, 0)


def workers_of(call: cst.Call, bindings: Bindings, parameters: Collection[str] = ()) -> tuple[bool, object]:
    """(True, count) when the number of workers of a DataLoader call is known: absent (0), a
    literal, or a name only ever assigned one literal (``num_workers = 0`` then
    ``num_workers=num_workers``; see ``known_value``); else (False, None)."""
    if has_star_args(call):
        return False, None
    workers = dataloader_argument(call, "num_workers")
    return (True, 0) if workers is None else known_value(workers.value, bindings, parameters)


def loader_calls(expr: cst.BaseExpression, bindings: Bindings, depth: int = 0) -> list[cst.Call] | None:
    """The ``DataLoader(...)`` calls a loop over ``expr`` iterates: ``expr`` itself, or every value
    the file assigns to the name (through ``enumerate``/``tqdm`` wrappers, also when the wrapper is
    kept under a name: ``pbar = tqdm(loader)``). None when any of them is something else or unknown
    (a parameter, a ``for`` target, a function's result)."""
    expr = unwrapped_iterable(expr, bindings)
    if is_dataloader_call(expr, bindings):
        return [expr]
    values = bindings.values(dotted_name(expr)) if isinstance(expr, (cst.Name, cst.Attribute)) else []
    if not values or depth > 3 or any(value is None for value in values):
        return None
    found: list[cst.Call] = []
    for value in values:
        calls = loader_calls(value, bindings, depth + 1)
        if calls is None:
            return None
        found += calls
    return found


def handed_to(module: cst.Module, bindings: Bindings, name: str) -> list[tuple[cst.FunctionDef, str]]:
    """The functions of the file that a call hands the value of ``name`` to as a whole
    (``train(model, loader)``: ``def train(net, data)`` receives it as ``data``), with the
    parameter that receives it. Only plain calls of a function the file defines once under that
    name (not methods, not ``loader.dataset``), and the parameter is not rebound in the function."""
    found: list[tuple[cst.FunctionDef, str]] = []

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.Call and type(node.func) is cst.Name and any(
                type(arg.value) is cst.Name and arg.value.value == name for arg in node.args):
            functions = bindings.defined(node.func.value, cst.FunctionDef)
            if len(functions) == 1:
                function = functions[0]
                for parameter in function_parameters(function):
                    argument = argument_for(node, function, parameter)
                    if type(argument) is cst.Name and argument.value == name \
                            and not _rebinds(function, parameter):
                        found.append((function, parameter))
        return True

    walk(module, on_visit)
    return found


def _rebinds(function: cst.FunctionDef, name: str) -> bool:
    """Is ``name`` assigned (or a loop target) in the function's body?"""
    rebound = False

    def on_visit(node: cst.CSTNode) -> bool:
        nonlocal rebound
        if type(node) in (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For):
            targets = node.targets if type(node) is cst.Assign else (node,)
            for target in targets:
                if name in target_names(target.target):
                    rebound = True
        return not rebound

    walk(function.body, on_visit)
    return rebound


def pins_memory(call: cst.Call) -> bool | None:
    """Does a ``DataLoader(...)`` call pin its batches: True for ``pin_memory=True``, False when
    the argument is absent (the default) or ``False``, None when it cannot be told (another value,
    ``**kwargs``)."""
    if any(arg.star == "**" for arg in call.args):
        return None
    argument = dataloader_argument(call, "pin_memory")
    if argument is None or is_literal(argument.value, False):
        return False
    return True if is_literal(argument.value, True) else None


def batch_parts(loop: cst.For, before: cst.CSTNode | None) -> set[str]:
    """The names that hold a loop's batch, or parts taken out of it without computing anything
    (``x, y = batch``, ``images = batch["image"]``, ``inputs = data.x``), at the statement
    ``before`` of the loop's body: the loop's targets and the plain assignments before it."""
    names = target_names(loop.target)
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
    for statement in body:
        if statement is before:
            break
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    bound = set().union(*(target_names(t.target) for t in small.targets))
                    if is_batch_part(small.value, names):
                        names |= bound
                    else:
                        names -= bound  # rebound to something computed
    return names


def is_batch_part(expr: cst.BaseExpression, names: set[str]) -> bool:
    """Is ``expr`` one of ``names``, or an item or attribute taken out of one (``batch[0]``,
    ``batch["x"]``, ``batch.x``)? A call (``batch.float()``) computes a new tensor and is not."""
    if isinstance(expr, (cst.Tuple, cst.List)):
        return bool(expr.elements) and all(is_batch_part(element.value, names) for element in expr.elements)
    while isinstance(expr, (cst.Subscript, cst.Attribute)):
        expr = expr.value
    return isinstance(expr, cst.Name) and expr.value in names


def is_ddp_call(expr: cst.BaseExpression | None, bindings: Bindings) -> bool:
    """``DistributedDataParallel(model, ...)``, under any import spelling."""
    return isinstance(expr, cst.Call) and bindings.qualified_name(expr.func) in DISTRIBUTED_DATA_PARALLEL


class DdpModels:
    """Which names hold a model that the file wraps in ``DistributedDataParallel``."""

    MAX_CALLERS = 2  # how many calls up a parameter is followed

    def __init__(self, module: cst.Module, bindings: Bindings):
        self.module = module
        self.bindings = bindings

    def holds_ddp(self, expr: cst.BaseExpression, scopes: list[cst.CSTNode], depth: int = 0) -> bool:
        """Does a name read inside ``scopes`` (the enclosing functions and classes, innermost
        first) hold a model the file wraps in DDP? A plain name when the function (or the module)
        that binds it assigns it a ``DistributedDataParallel(...)`` call (``model = DDP(model)``,
        under a condition too); a parameter the function does not wrap itself when a call of the
        function in the file passes such a name; a dotted name (``self.model``) when the file
        assigns it such a call anywhere. A model that comes from another module is not known to be
        one."""
        name = dotted_name(expr)
        if name is None:
            return False
        if "." in name:
            return any(is_ddp_call(value, self.bindings) for value in self.bindings.values(name))
        values, parameter = self.bindings.values_at(name, scopes)
        if any(is_ddp_call(value, self.bindings) for value in values):
            return True
        function = next((s for s in scopes if isinstance(s, cst.FunctionDef) and name in function_parameters(s)), None)
        return parameter and function is not None and depth < self.MAX_CALLERS and any(
            (argument := argument_for(call, function, name)) is not None
            and self.holds_ddp(argument, caller_scopes, depth + 1)
            for call, caller_scopes in self._calls.get(function.name.value, ()))

    @cached_property
    def _calls(self) -> dict[str, list[tuple[cst.Call, list[cst.CSTNode]]]]:
        """The calls of each function name in the file (``train(...)``, ``self.train(...)``), with
        the scopes around them, innermost first."""
        found: dict[str, list[tuple[cst.Call, list[cst.CSTNode]]]] = {}
        stack: list[cst.CSTNode] = []

        def on_visit(node: cst.CSTNode) -> bool:
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                stack.append(node)
            elif isinstance(node, cst.Call):
                func = node.func
                name = func.value if isinstance(func, cst.Name) else func.attr.value \
                    if isinstance(func, cst.Attribute) else None
                if name is not None:
                    found.setdefault(name, []).append((node, stack[::-1]))
            return True

        def on_leave(node: cst.CSTNode) -> None:
            if stack and stack[-1] is node:
                stack.pop()

        walk(self.module, on_visit, on_leave)
        return found


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
