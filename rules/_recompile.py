"""What the torch.compile rules about compiling again share (TLC002 compile-in-loop, TLC003
compile-recompile, TLC004 compile-dynamic-shapes): what a loop binds, which values change on
every iteration of a loop (a step counter, a learning rate, a tensor that grows), and which
parameters of a compiled function are lengths.

Dynamo specializes compiled code on the Python numbers and the tensor shapes it sees: a new value
fails the guards and compiles again. Measured on torch 2.13 (CPU, a counting backend, 12 calls
with 12 values): with the default `dynamic=None` it compiles twice (the second compile treats the
value as symbolic: "automatic dynamic shapes"), with `dynamic=False` it compiles 8 times and then
stops compiling that function (the recompile limit), with `dynamic=True`, a 0-d tensor instead
of the number, or a dimension marked with `torch._dynamo.mark_dynamic`, it compiles once.
"""

from __future__ import annotations

import re
from functools import cached_property

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.syntax import dotted_name, string_value
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst

COUNTING_ITERABLES = frozenset({"range", "trange", "itertools.count", "tqdm.trange", "tqdm.auto.trange"})
PROGRESS_WRAPPERS = frozenset({"tqdm", "tqdm.tqdm", "tqdm.auto.tqdm", "iter"})
NUMBER_FUNCTIONS = frozenset({"min", "max", "float", "int", "round", "abs"})
# Calls whose arguments are sizes: a number passed to them is a length, not a value.
SIZED_CALLS = frozenset({"view", "reshape", "expand", "repeat", "narrow", "split", "chunk", "new_zeros", "new_ones",
                         "new_empty", "new_full", "zeros", "ones", "empty", "full", "arange", "rand", "randn",
                         "randint", "tril", "triu", "unflatten", "roll", "topk"})
SCHEDULER = re.compile(r"sched", re.IGNORECASE)


def bound_in(node: cst.CSTNode) -> set[str]:
    """The names (plain and dotted: ``self.model``) a statement or loop binds anywhere inside it:
    assignment targets, ``for`` and ``with`` targets, ``:=``, definitions, imports."""
    return set(bindings_in(node))


def bindings_in(node: cst.CSTNode) -> list[str]:
    """The names bound inside a statement or loop, once for each binding (see ``bound_in``)."""
    found: list[str] = []

    def bind(target: cst.BaseExpression) -> None:
        name = dotted_name(target)
        if name is not None:
            found.append(name)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                bind(element.value)
        elif isinstance(target, cst.StarredElement):
            bind(target.value)

    def on_visit(item: cst.CSTNode) -> bool:
        if isinstance(item, cst.Assign):
            for target in item.targets:
                bind(target.target)
        elif isinstance(item, (cst.AnnAssign, cst.AugAssign)):
            bind(item.target)
        elif isinstance(item, (cst.For, cst.CompFor)):
            bind(item.target)
        elif isinstance(item, cst.WithItem) and item.asname is not None:
            bind(item.asname.name)
        elif isinstance(item, cst.NamedExpr):
            bind(item.target)
        elif isinstance(item, (cst.FunctionDef, cst.ClassDef)):
            found.append(item.name.value)
            return False
        elif isinstance(item, (cst.Import, cst.ImportFrom)) and not isinstance(item.names, cst.ImportStar):
            for alias in item.names:
                name = dotted_name(alias.asname.name if alias.asname is not None else alias.name)
                if name is not None:
                    found.append(name if alias.asname is not None else name.split(".")[0])
        return True

    walk(node, on_visit)
    return found


def read_names(expr: cst.BaseExpression) -> set[str]:
    """The names an expression reads, with each dotted prefix: ``model.module`` reads ``model`` and
    ``model.module``."""
    found: set[str] = set()

    def on_visit(node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.Name, cst.Attribute)):
            name = dotted_name(node)
            if name is not None:
                parts = name.split(".")
                found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
                return False
        return True

    walk(expr, on_visit)
    return found


def loop_counters(loop: cst.CSTNode, bindings: Bindings) -> set[str]:
    """The names a loop counts with: ``i`` in ``for i in range(n)`` or ``for i, batch in
    enumerate(loader)`` (through ``tqdm``), and names the body steps by a number (``step += 1``)."""
    found: set[str] = set()
    if isinstance(loop, cst.For):
        iterated = loop.iter
        while isinstance(iterated, cst.Call) and iterated.args and _named(iterated.func, bindings) in PROGRESS_WRAPPERS:
            iterated = iterated.args[0].value
        if isinstance(iterated, cst.Call):
            called = _named(iterated.func, bindings)
            if called in COUNTING_ITERABLES and isinstance(loop.target, cst.Name):
                found.add(loop.target.value)
            elif called == "enumerate" and isinstance(loop.target, cst.Tuple) and loop.target.elements \
                    and isinstance(loop.target.elements[0].value, cst.Name):
                found.add(loop.target.elements[0].value.value)

    def on_visit(node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name) \
                and isinstance(node.value, (cst.Integer, cst.Float)) and _starts_as_number(node.target.value, bindings):
            found.add(node.target.value)
        return True

    walk(loop.body, on_visit)
    return found


def _starts_as_number(name: str, bindings: Bindings) -> bool:
    """Is ``name`` assigned a number literal in the file (``step = 0``), so that ``step += 1``
    counts, rather than steps a tensor in place (``input_pos += 1``)?"""
    return any(isinstance(value, (cst.Integer, cst.Float)) or isinstance(value, cst.UnaryOperation)
               and isinstance(value.expression, (cst.Integer, cst.Float)) for value in bindings.values(name))


def _named(func: cst.BaseExpression, bindings: Bindings) -> str | None:
    return bindings.qualified_name(func) or dotted_name(func)


class ChangingValues:
    """The values that change on every iteration of a loop: its counters, and names the body
    assigns from them by arithmetic (``frac = step / total``, ``lr = base_lr * 0.5 ** step``)."""

    def __init__(self, loop: cst.CSTNode, bindings: Bindings):
        self.loop = loop
        self.bindings = bindings
        self.counters = loop_counters(loop, bindings)
        self._assigned: dict[str, list[cst.BaseExpression]] = {}

        def on_visit(node: cst.CSTNode) -> bool:
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return False
            if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                self._assigned.setdefault(node.targets[0].target.value, []).append(node.value)
            return True

        walk(loop.body, on_visit)

    def number(self, expr: cst.BaseExpression, seen: frozenset[str] = frozenset()) -> str | None:
        """The counter a Python number changes with (``step`` for ``step / total``), or None."""
        if isinstance(expr, cst.Name):
            if expr.value in self.counters:
                return expr.value
            if expr.value in seen:
                return None
            for value in self._assigned.get(expr.value, []):
                found = self.number(value, seen | {expr.value})
                if found is not None:
                    return found
            return None
        if isinstance(expr, cst.BinaryOperation):
            return self.number(expr.left, seen) or self.number(expr.right, seen)
        if isinstance(expr, cst.UnaryOperation):
            return self.number(expr.expression, seen)
        if isinstance(expr, cst.Call) and (_named(expr.func, self.bindings) or "").startswith(("math.",)) \
                or isinstance(expr, cst.Call) and _named(expr.func, self.bindings) in NUMBER_FUNCTIONS:
            return next((found for arg in expr.args for found in [self.number(arg.value, seen)] if found), None)
        if self._steps_learning_rate and _is_learning_rate(expr):
            return "the learning rate"
        return None

    @cached_property
    def _steps_learning_rate(self) -> bool:
        """Does the loop change the learning rate: a scheduler's ``step()``, or ``group["lr"] = ...``?"""
        changes = False

        def on_visit(node: cst.CSTNode) -> bool:
            nonlocal changes
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "step" \
                    and SCHEDULER.search(dotted_name(node.func.value) or ""):
                changes = True
            elif isinstance(node, cst.Assign) and any(_is_learning_rate(t.target) for t in node.targets):
                changes = True
            return True

        walk(self.loop.body, on_visit)
        return changes

    def growing(self, expr: cst.BaseExpression) -> str | None:
        """How a tensor argument changes length every iteration: ``idx`` reassigned by
        ``torch.cat((idx, ...))`` in the loop, or a slice by a counter (``x[:, :i]``). None when
        it does not, as far as the loop shows."""
        if isinstance(expr, cst.Subscript):
            for element in expr.slice:
                if isinstance(element.slice, cst.Slice):
                    for bound in (element.slice.lower, element.slice.upper):
                        counter = self.number(bound) if bound is not None else None
                        if counter is not None:
                            return f"it is sliced by `{counter}`"
            return None
        if isinstance(expr, cst.IfExp):
            return self.growing(expr.body) or self.growing(expr.orelse)
        if isinstance(expr, cst.Name):
            for value in self._assigned.get(expr.value, []):
                if self._concatenates(value, expr.value):
                    return "it grows by `torch.cat` every iteration"
                if value is not expr:
                    found = self.growing(value) if not isinstance(value, cst.Name) else None
                    if found is not None:
                        return found
        return None

    def _concatenates(self, value: cst.BaseExpression, name: str) -> bool:
        if not isinstance(value, cst.Call) or _named(value.func, self.bindings) not in ("torch.cat", "torch.concat",
                                                                                        "torch.concatenate"):
            return False
        first = value.args[0].value if value.args else None
        return isinstance(first, (cst.Tuple, cst.List)) and any(
            isinstance(element.value, cst.Name) and element.value.value == name for element in first.elements)


def parameter_uses(function: cst.FunctionDef, name: str) -> tuple[bool, bool]:
    """(is ``name`` read in the function, is it read as a length: a slice bound or a size given to
    ``view``, ``torch.zeros``...)."""
    read = as_length = False

    def on_visit(node: cst.CSTNode) -> bool:
        nonlocal read, as_length
        if isinstance(node, cst.Name) and node.value == name:
            read = True
        elif isinstance(node, cst.Slice) and any(b is not None and name in read_names(b)
                                                 for b in (node.lower, node.upper, node.step)):
            as_length = True
        elif isinstance(node, cst.Call):
            called = dotted_name(node.func) or ""
            if called.rsplit(".", 1)[-1] in SIZED_CALLS and any(name in read_names(a.value) for a in node.args):
                as_length = True
        return True

    walk(function.body, on_visit)
    return read, as_length


def bound_parameter(function: cst.FunctionDef, call: cst.Call, arg: cst.Arg, skip_self: bool) -> str | None:
    """The parameter of ``function`` that ``arg`` of ``call`` binds, or None when that cannot be
    told (``*args``, ``**kwargs``)."""
    if arg.keyword is not None:
        return arg.keyword.value
    params = function.params
    positional = [p.name.value for p in (*params.posonly_params, *params.params)]
    if skip_self and positional:
        positional = positional[1:]
    index = [a for a in call.args if a.keyword is None].index(arg)
    if any(a.star for a in call.args[: call.args.index(arg) + 1]):
        return None
    return positional[index] if index < len(positional) else None


def _is_learning_rate(expr: cst.BaseExpression) -> bool:
    """``optimizer.param_groups[0]["lr"]``, ``group["lr"]``, ``scheduler.get_last_lr()[0]``."""
    if not isinstance(expr, cst.Subscript):
        return False
    if any(isinstance(e.slice, cst.Index) and string_value(e.slice.value) == "lr" for e in expr.slice):
        return True
    value = expr.value
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
        and value.func.attr.value == "get_last_lr"
