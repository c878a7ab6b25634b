"""Compatibility code: what exists for other library versions (an import guarded by ``try``, a
fallback in an ``except ImportError``, a branch on a version test). Rewriting such code to the
newer spelling removes the support it is there for."""

from __future__ import annotations

import ast
import re

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.syntax import ast_contains, ast_dotted_name, dotted_name, ends_in_exit, names_in
from torchlint.lazy import libcst as cst

IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
COMPATIBILITY_ERRORS = IMPORT_ERRORS | {"AttributeError", "TypeError", "NameError"}
# An `if` test that picks code by library version or by whether an attribute exists.
VERSION_TEST = re.compile(r"version|VERSION|_GREATER|_LESS|_AT_LEAST|_OLDER|_NEWER|\bhasattr\(")
# A flag named for a version (`TORCH_1_13`, `_PT2`, `IS_TORCH_2`): the name says what it tests.
VERSION_FLAG = re.compile(r"^_?(IS_)?(TORCH|PT|PYTORCH|TV|TORCHVISION|LIGHTNING|PL)_?\d")


def _caught_names(handler: cst.ExceptHandler) -> list[str]:
    types = handler.type.elements if isinstance(handler.type, cst.Tuple) else [handler.type]
    return [(dotted_name(t.value if isinstance(t, cst.Element) else t) or "").rsplit(".", 1)[-1] for t in types]


def catches_compatibility_error(handler: cst.ExceptHandler) -> bool:
    """An ``except`` clause that catches what a missing name or a changed signature raises."""
    return handler.type is None or any(name in COMPATIBILITY_ERRORS for name in _caught_names(handler))


def catches_import_error(node: cst.Try) -> bool:
    """A ``try`` whose handlers catch a failed import (bare ``except``, ``ImportError``,
    ``ModuleNotFoundError``, ``Exception``)."""
    return any(handler.type is None or any(name in IMPORT_ERRORS for name in _caught_names(handler))
               for handler in node.handlers)


_TRY_STAR = (ast.TryStar,) if hasattr(ast, "TryStar") else ()


def ast_surely_in_fallback(index: SyntaxIndex, node: ast.AST) -> bool:
    """Is ``Compatibility.in_fallback`` surely True at the node: in an ``except`` handler that
    catches what a missing name raises, or in a branch (not the test) of an ``if`` or conditional
    expression whose test is written as a version test (``_TORCH_GREATER_EQUAL_2_4``,
    ``hasattr(...)``)? Flags computed elsewhere and code after an ``if`` that returns are not
    looked at: a precheck may miss a fallback, not invent one."""
    # the handlers of `except*` are no ExceptHandler in LibCST
    starred = {id(handler) for node in index.nodes(*_TRY_STAR) for handler in node.handlers}
    for handler in index.nodes(ast.ExceptHandler):
        if id(handler) not in starred and ast_contains(handler, node) and (handler.type is None or any(
                (ast_dotted_name(caught) or "").rsplit(".", 1)[-1] in COMPATIBILITY_ERRORS
                for caught in (handler.type.elts if type(handler.type) is ast.Tuple else [handler.type]))):
            return True
    for branch in index.nodes(ast.If, ast.IfExp):
        parts = [branch.body, branch.orelse] if type(branch) is ast.IfExp else [*branch.body, *branch.orelse]
        if any(ast_contains(part, node) for part in parts) and (
                VERSION_TEST.search(ast.get_source_segment(index.source, branch.test) or "")
                or any(type(name) is ast.Name and VERSION_FLAG.match(name.id) for name in ast.walk(branch.test))):
            return True
    return False


class Compatibility:
    """Whether the current place of the walk is code for other versions."""

    def __init__(self, module: cst.Module, bindings: Bindings, ancestors: list[cst.CSTNode]):
        self.module = module
        self.bindings = bindings
        self.ancestors = ancestors

    def is_version_test(self, test: cst.BaseExpression) -> bool:
        """Does an ``if`` test pick code by version or by what exists: written out
        (``torch.__version__ >= ...``, ``hasattr(...)``), or through a flag the file computes
        that way (``TORCH_1_13 = version.parse(torch.__version__) >= ...``; ``if TORCH_1_13:``)?"""
        if VERSION_TEST.search(self.module.code_for_node(test)):
            return True
        return any(VERSION_FLAG.match(name) or any(
            value is not None and VERSION_TEST.search(self.module.code_for_node(value))
            for value in self.bindings.values(name)) for name in names_in(test))

    def in_import_guard(self) -> bool:
        """Inside the body of a ``try`` that catches a failed import (a fallback for other
        versions: rewriting it may remove the very code that keeps them working)."""
        for parent, child in zip(self.ancestors, self.ancestors[1:]):
            if isinstance(parent, cst.Try) and child is parent.body and catches_import_error(parent):
                return True
        return False

    def in_fallback(self) -> bool:
        """Inside code that exists for other library versions: an ``except ImportError`` /
        ``AttributeError`` / ``TypeError`` handler (the fallback when a newer spelling failed), or a
        branch of an ``if`` or conditional expression that tests a version or whether an attribute
        exists (``torch.amp.GradScaler(...) if _TORCH_GREATER_EQUAL_2_4 else torch.cuda.amp.GradScaler()``).
        Code after such an ``if`` whose branch returns or raises is the other branch, written
        without ``else``."""
        for parent, child in zip(self.ancestors, self.ancestors[1:]):
            if isinstance(parent, cst.ExceptHandler) and catches_compatibility_error(parent):
                return True
            if isinstance(parent, (cst.If, cst.IfExp)) and child is not parent.test and self.is_version_test(parent.test):
                return True
            if isinstance(parent, cst.IndentedBlock) and child in parent.body and any(
                    isinstance(earlier, cst.If) and self.is_version_test(earlier.test)
                    and ends_in_exit(earlier.body) for earlier in parent.body[:parent.body.index(child)]):
                return True
        return False
