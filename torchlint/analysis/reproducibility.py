"""Reproducibility settings: the process-wide switches that trade speed for results that repeat
bit for bit (cuDNN's ``deterministic`` flag, torch's deterministic-algorithms mode). A file that
sets them has chosen reproducibility; advice to let cuDNN pick the fastest algorithm
(``cudnn.benchmark``) contradicts that choice."""

from __future__ import annotations

import ast

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.syntax import ast_find_keyword, ast_is_literal, find_argument, literal_value
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst

DETERMINISTIC_FLAGS = frozenset({"torch.backends.cudnn.deterministic"})
DETERMINISTIC_SWITCHES = frozenset({"torch.use_deterministic_algorithms"})


def deterministic_value(node: cst.CSTNode, bindings: Bindings) -> tuple[bool, object] | None:
    """For a node that sets deterministic mode, ``torch.backends.cudnn.deterministic = v`` (an
    assignment, any import spelling) or ``torch.use_deterministic_algorithms(v)`` (a call, ``v``
    by position or as ``mode=``): ``(True, v)`` when ``v`` is a literal, ``(False, None)`` when it
    is not (``args.deterministic``). None for any other node."""
    if isinstance(node, cst.Assign):
        if any(bindings.qualified_name(target.target) in DETERMINISTIC_FLAGS for target in node.targets):
            return literal_value(node.value)
        return None
    if isinstance(node, cst.Call) and bindings.qualified_name(node.func) in DETERMINISTIC_SWITCHES:
        if any(a.star for a in node.args):
            return False, None
        mode = find_argument(node, "mode", 0)
        return literal_value(mode.value) if mode is not None else (False, None)
    return None


def deterministic_settings(module: cst.Module, bindings: Bindings) -> list[cst.CSTNode]:
    """Every assignment and call of the file that sets deterministic mode, whatever the value: a
    file that writes any of them has decided about reproducibility."""
    found: list[cst.CSTNode] = []
    walk(module, lambda node: found.append(node) if isinstance(node, (cst.Assign, cst.Call))
         and deterministic_value(node, bindings) is not None else None)
    return found


def ast_switches_deterministic_on(index: SyntaxIndex) -> bool:
    """Could the file switch deterministic mode on with a literal ``True``
    (``cudnn.deterministic = True``, ``use_deterministic_algorithms(True)``)? The precheck twin of
    ``deterministic_value``, matched by the last part of the names."""
    for node in index.nodes(ast.Assign):
        if ast_is_literal(node.value, True) and any(
                isinstance(target, ast.Attribute) and target.attr == "deterministic" for target in node.targets):
            return True
    for call in index.calls_of(DETERMINISTIC_SWITCHES):
        mode = ast_find_keyword(call, "mode")
        mode = mode.value if mode is not None else call.args[0] if call.args else None
        if ast_is_literal(mode, True):
            return True
    return False
