"""Loop conditions: does a test hold on every k-th step (``if step % 100 == 0:``), only on the
last iteration of the loop around it (``if i == len(loader) - 1:``), or only in a debugging run
(``if args.debug:``)? Rules ask it of the ``if`` around a call to tell a per-step cost from a
periodic, a final or a chosen one."""

from __future__ import annotations

import ast
from collections.abc import Callable

from torchlint.analysis.syntax import names_in, target_names
from torchlint.analysis.walk import Visitor, visit
from torchlint.lazy import libcst as cst


class _RemainderFinder(Visitor):
    def __init__(self) -> None:
        self.found = False

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        # `step % 100`, not `"%d" % step`
        if type(node.operator) is cst.Modulo and not isinstance(
                node.left, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
            self.found = True


def is_periodic_test(test: cst.BaseExpression) -> bool:
    """A condition that holds every k-th step: it takes a remainder (``step % 100 == 0``)."""
    finder = _RemainderFinder()
    visit(test, finder)
    return finder.found


def is_debug_test(test: cst.BaseExpression) -> bool:
    """A condition that holds only in a debugging run: a flag named for it (``if self.debug_mode:``,
    ``if args.debug and ...:``, ``if DEBUG:``). What such a branch costs is the user's choice."""
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        return is_debug_test(test.left) or is_debug_test(test.right)
    name = test.attr.value if type(test) is cst.Attribute else test.value if type(test) is cst.Name else ""
    return "debug" in name.lower()


def ast_is_periodic_test(test: ast.AST) -> bool:
    """The twin of ``is_periodic_test`` on CPython's tree."""
    return any(type(node) is ast.BinOp and type(node.op) is ast.Mod
               and not (type(node.left) is ast.JoinedStr
                        or type(node.left) is ast.Constant and isinstance(node.left.value, (str, bytes)))
               for node in ast.walk(test))


def is_last_iteration_test(test: cst.BaseExpression, loop: cst.CSTNode) -> bool:
    """A condition that holds only on the last iteration of a ``for`` loop: the loop's index
    compared with the length of what it runs over (``i == len(steps) - 1``,
    ``batch + 1 == len(loader)``, ``i >= len(batches) - 1``)."""
    if type(loop) is not cst.For or type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return False
    comparison = test.comparisons[0]
    if type(comparison.operator) not in (cst.Equal, cst.GreaterThanEqual, cst.LessThanEqual):
        return False
    index = target_names(loop.target)
    sides = (test.left, comparison.comparator)
    return any(_only_names(side, index) and _takes_length(other) for side, other in (sides, sides[::-1]))


def _only_names(expr: cst.BaseExpression, names: set[str]) -> bool:
    """An expression of the loop's index and constants only (``i``, ``i + 1``)."""
    written = names_in(expr)
    return bool(written) and written <= names and not _has_call(expr)


def _takes_length(expr: cst.BaseExpression) -> bool:
    """``len(x) - 1``: an expression that calls ``len``."""
    found = []
    visit(expr, _CallFinder(found, lambda call: type(call.func) is cst.Name and call.func.value == "len"))
    return bool(found)


def _has_call(expr: cst.BaseExpression) -> bool:
    found = []
    visit(expr, _CallFinder(found, lambda call: True))
    return bool(found)


class _CallFinder(Visitor):
    def __init__(self, found: list, wanted: Callable[[cst.Call], bool]) -> None:
        self.found = found
        self.wanted = wanted

    def visit_Call(self, node: cst.Call) -> None:
        if self.wanted(node):
            self.found.append(node)
