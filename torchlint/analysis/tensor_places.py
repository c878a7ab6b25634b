"""Where a tensor a function makes lives: on the host (the CPU) or anywhere (a device), as the value
walk (value_facts.py) reads it and the calls (callgraph.py) carry it; ``Operand.device`` holds it.

Reading a tensor made on the CPU on the host (``torch.tensor([1, 2]).item()``) waits for no
device. What is known, and nothing more:

- a factory (``torch.zeros``, ``torch.eye``, ``torch.tensor``...) without ``device=`` makes its
  tensor on the default device: the CPU unless the program sets another
  (``torch.set_default_device``, ``torch.set_default_tensor_type``; a rule that trusts "cpu"
  asks whether the code it reaches says ``DEFAULT_DEVICE_WORD``). A factory of a shape
  (``SHAPE_FACTORIES``) does so whatever its arguments; one of data (``torch.tensor(x)``,
  ``torch.as_tensor(x)``, ``torch.full(s, x)``) only when the data are Python values or tensors on
  the CPU (``torch.tensor(t)`` copies ``t`` on its device); a ``*_like`` factory makes it where its
  first argument lives;
- ``device=`` written out: "cpu", ``"cpu:0"``, ``torch.device("cpu")`` or None (the default)
  is the CPU; a parameter of the function ("param:k"), on whatever the call passes, or its default
  where it passes none; ``x.device`` ("of:k" for a parameter ``x``), where ``x`` lives;
- operations on tensors keep their operands' places (the union of operands keeps each), and the
  in-place random fills (``t.bernoulli_(p)``) return their receiver;
- ``.to(...)``, ``.cuda()``, ``.type(...)``, a call nothing resolves, a ``torch.cuda``
  function or one given ``device=`` may move a tensor anywhere: its places are forgotten ("" for a
  tensor, "moved" for a parameter or a call's result, read as their places forgotten).
"""

from __future__ import annotations

import ast

from torchlint.analysis.devices import DTYPES
from torchlint.analysis.module_index import dotted
from torchlint.analysis.summaries import PARAMETER, RESULT, TENSOR, UNKNOWN_VALUE, Operand, operand

HOST = "cpu"
MOVED = "moved"
DEFAULT_DEVICE_WORD = "set_default_"  # torch.set_default_device(...), torch.set_default_tensor_type(...)
SHAPE_FACTORIES = frozenset({"zeros", "ones", "empty", "eye", "rand", "randn", "randint", "randperm"})
RANDOM_FILLS = frozenset({"bernoulli_", "uniform_", "normal_", "log_normal_", "exponential_", "geometric_",
                          "cauchy_", "random_"})
MOVING_METHODS = frozenset({"to", "cuda", "type", "type_as"})
HOST_NEUTRAL = frozenset({"detach", "clone", "float", "double", "long", "int", "half", "squeeze", "flatten", "view",
                          "reshape"})  # methods that leave a host copy on the host


def on_host(op: Operand) -> bool:
    """A tensor made on the CPU."""
    return op.kind == TENSOR and op.device == HOST


def host_literal(text: str | None) -> bool:
    """A device written as a constant (its ``repr``) that is the CPU: ``'cpu'``, ``'cpu:0'``, None."""
    if text == "None":
        return True
    return text is not None and text[:1] in "'\"" and text[1:-1].split(":")[0] == "cpu"


def places_of(ops: tuple[Operand, ...]) -> tuple[str, ...]:
    """Where a tensor made on the device of a value with these operands may live: "cpu" for one
    on the CPU, "of:k" for the parameter ``k`` as passed, the place of a tensor placed by a
    parameter, "" otherwise."""
    found = []
    for op in ops or UNKNOWN_VALUE:
        if op.kind == TENSOR:
            found.append(op.device)
        else:
            found.append(f"of:{op.index}" if op.kind == PARAMETER and not op.device else "")
    return tuple(dict.fromkeys(found))


def moves(node: ast.Call, method: str, qualify) -> bool:
    """Does a tensor method of ``MOVING_METHODS`` change the device: not ``.to(torch.int32)``,
    ``.type(torch.float16)`` (a dtype alone)."""
    if method not in ("to", "type"):
        return True
    return not all(type(a) is not ast.Starred and (qualify(dotted(a)) or "")[6:] in DTYPES and
                   (qualify(dotted(a)) or "").startswith("torch.") for a in node.args) or \
        any(k.arg not in ("dtype", "non_blocking", "copy", "memory_format") for k in node.keywords)


def moved(ops: tuple[Operand, ...]) -> tuple[Operand, ...]:
    """The operands of a value that may have been moved to another device."""
    if all(not op.device and op.kind not in (PARAMETER, RESULT) for op in ops):
        return ops
    return tuple(dict.fromkeys(
        operand(op.kind, op.index, op.name, op.graph, MOVED) if op.kind in (PARAMETER, RESULT)
        else operand(op.kind, op.index, op.name, op.graph) if op.device else op for op in ops))


def moving_function(name: str, node: ast.Call) -> bool:
    """A torch function (not a factory) that may put its result on another device: one of
    ``torch.cuda``, ``torch.Tensor``, ``torch.distributed``, or one given ``device=`` (or ``**``)."""
    return name.startswith(("torch.cuda.", "torch.Tensor.", "torch.distributed.")) or any(
        k.arg in ("device", None) for k in node.keywords)


# Functions that make a tensor on the CPU whatever their arguments: it shares a NumPy array's memory.
HOST_FACTORIES = frozenset({"torch.from_numpy"})


def factory_places(walker, node: ast.Call, name: str, positional: list, keywords: list) -> tuple[str, ...]:
    """Where ``torch.<name>(...)`` makes its tensor (see the module's docstring); ``walker``: the
    function's walk (value_facts.WalkerState), whose names say what a device argument is."""
    if f"torch.{name}" in HOST_FACTORIES:
        return (HOST,)
    device = next((k.value for k in node.keywords if k.arg == "device"), None)
    if device is not None:
        return _device_places(walker, device, 1)
    if any(k.arg is None for k in node.keywords) or any(type(a) is ast.Starred for a in node.args):
        return ("",)
    if name.endswith("_like"):
        return places_of(positional[0]) if positional else ("",)
    if name in SHAPE_FACTORIES or all(on_host(op) for ops in (*positional, *keywords) for op in ops):
        return (HOST,)
    return ("",)


def _device_places(walker, expr: ast.AST, depth: int) -> tuple[str, ...]:
    kind = type(expr)
    if kind is ast.Constant:
        return (HOST if host_literal(repr(expr.value)) else "",)
    if kind is ast.Call and walker._qualify(dotted(expr.func)) == "torch.device" and len(expr.args) == 1 \
            and not expr.keywords and type(expr.args[0]) is ast.Constant:
        return (HOST if host_literal(repr(expr.args[0].value)) else "",)
    if kind is ast.Attribute and expr.attr == "device" and type(expr.value) is ast.Name:
        name = expr.value.id  # bound where it is read, and never again: what the walk holds now
        if _stores(walker, name) == (0 if name in walker.parameter_index else 1):
            return places_of(walker.env.get(name, UNKNOWN_VALUE))
    elif kind is ast.Name:
        stores = _stores(walker, expr.id)
        index = walker.parameter_index.get(expr.id)
        if index is not None:
            return (f"param:{index}" if stores == 0 and expr.id != walker.self_name else "",)
        value = walker.bound_values.get(expr.id)
        if stores == 1 and depth and value is not None:
            return _device_places(walker, value, depth - 1)
    return ("",)


def _stores(walker, name: str) -> int:
    """How many times the function's own code binds ``name`` (a nested function's count too: a
    bound cannot be fewer; 2 for a name declared ``global`` or ``nonlocal``), counted in one walk
    of the function, the first time a device is read from a name."""
    counts = getattr(walker, "store_counts", None)  # kept on the walk of that one function
    if counts is None:
        counts, declared = {}, set()
        for node in ast.walk(walker.node):
            if type(node) is ast.Name and type(node.ctx) is not ast.Load:
                counts[node.id] = counts.get(node.id, 0) + 1
            elif type(node) in (ast.Global, ast.Nonlocal):
                declared.update(node.names)
        counts.update(dict.fromkeys(declared, 2))
        walker.store_counts = counts
    return counts.get(name, 0)


def already_on_host(expr: ast.AST) -> bool:
    """Is the value already copied to the host (``t.cpu()``, ``t.detach().cpu().float()``)?"""
    while type(expr) is ast.Call and type(expr.func) is ast.Attribute:
        if expr.func.attr == "cpu":
            return True
        if expr.func.attr not in HOST_NEUTRAL:
            return False
        expr = expr.func.value
    return False
