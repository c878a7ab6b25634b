"""What a name means: the one model of the bindings of a file.

Imports (``import torch.nn as nn`` makes ``nn`` mean ``torch.nn``), assignments (``=``, annotated,
augmented, ``:=``, unpacking and starred targets), ``for`` and ``with`` targets, parameters,
``def`` and ``class``: every rule that asks what a name holds, how often it is bound, or what a
file defines asks this module. A light stand-in for LibCST's scope analysis, which costs more than
a whole lint: names are matched as written (dotted for attributes such as ``self.loader``), and
scopes are functions and the module.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from torchlint.analysis.syntax import (STAR_MODULES, ast_dotted_name, dotted_name, function_parameters, literal_value,
                                       same_literal, small_statements, statements)
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst

if TYPE_CHECKING:
    from torchlint.analysis.index import SyntaxIndex

# How a binding binds: "assign" (=), "annotated" (x: T = v, or without a value), "augmented" (+=),
# "walrus" (:=), "for", "with", "param", "def", "class".
KINDS = ("assign", "annotated", "augmented", "walrus", "for", "with", "param", "def", "class")


@dataclass(frozen=True)
class Binding:
    """One name bound by one statement: its value when it is assigned one value as a whole
    (None for ``for``/``with`` targets, unpacking, parameters, ``+=``, definitions)."""

    name: str  # plain (`loader`) or dotted (`self.loader`)
    value: cst.BaseExpression | None
    kind: str
    scope: cst.CSTNode  # the function, class or module the binding belongs to


@dataclass
class ScopeNames:
    """The plain names one function (or the module) binds, with their values, and how many times
    each name is written in it; nested functions and classes are scopes of their own."""

    assigned: dict[str, list[cst.BaseExpression | None]] = field(default_factory=dict)
    references: dict[str, int] = field(default_factory=dict)


class Imports:
    """Local name -> qualified name, from every import statement in the file (later ones win):
    ``import torch.nn as nn`` maps ``nn`` to ``torch.nn``; ``from torch.nn import DataParallel as DP``
    maps ``DP`` to ``torch.nn.DataParallel``. Relative and star imports are not resolved here."""

    def __init__(self, module: cst.Module):
        self.aliases: dict[str, str] = {}
        self.star = False  # a `from m import *`
        for small in small_statements(module):
            if type(small) is cst.Import:
                for alias in small.names:
                    full = dotted_name(alias.name)
                    if alias.asname is not None and type(alias.asname.name) is cst.Name:
                        self.aliases[alias.asname.name.value] = full
                    else:
                        head = full.split(".")[0]
                        self.aliases[head] = head
            elif type(small) is cst.ImportFrom and not small.relative and small.module is not None:
                if type(small.names) is cst.ImportStar:
                    self.star = True
                    continue
                base = dotted_name(small.module)
                for alias in small.names:
                    name = dotted_name(alias.name)
                    local = (alias.asname.name.value
                             if alias.asname is not None and type(alias.asname.name) is cst.Name
                             else name)
                    self.aliases[local] = f"{base}.{name}"

    def qualified_name(self, expr: cst.BaseExpression) -> str | None:
        name = dotted_name(expr)
        if name is None:
            return None
        head, dot, rest = name.partition(".")
        target = self.aliases.get(head)
        if target is None:
            # `from utils import *` where utils imports torch: the only way `torch` reaches a file
            # that never imports it (STAR_MODULES)
            target = head if self.star and head in STAR_MODULES else None
            if target is None:
                return None
        return target + dot + rest


class Bindings:
    """Every binding of a file, collected in one walk the first time a question needs them."""

    def __init__(self, module: cst.Module):
        self.module = module
        self.imports = Imports(module)

    def qualified_name(self, expr: cst.BaseExpression) -> str | None:
        return self.imports.qualified_name(expr)

    @cached_property
    def _collected(self) -> _Collector:
        collector = _Collector(self.module)
        walk(self.module, collector.on_visit, collector.on_leave)
        return collector

    @cached_property
    def _values(self) -> dict[str, list[cst.BaseExpression | None]]:
        values: dict[str, list[cst.BaseExpression | None]] = {}
        for binding in self._collected.bindings:
            if binding.kind in ("assign", "walrus", "for", "with") or binding.kind == "annotated" \
                    and binding.value is not None:
                values.setdefault(binding.name, []).append(binding.value)
        return values

    def values(self, name: str | None) -> list[cst.BaseExpression | None]:
        """Every value the file assigns to a (dotted) name, in any scope: ``=``, annotated with a
        value, ``:=``; None for ``for``/``with`` targets and unpacking. Augmented assignment
        changes a value rather than binds a new one, and is left out."""
        return self._values.get(name or "", [])

    def assigned(self) -> list[str]:
        """The (dotted) names the file assigns a value to, in any scope (see ``values``)."""
        return list(self._values)

    def value_of(self, name: str | None) -> cst.BaseExpression | None:
        """The value of a name assigned exactly once in the file, else None."""
        values = self.values(name)
        return values[0] if len(values) == 1 else None

    def literal(self, name: str) -> tuple[bool, object]:
        """(True, value) when every binding of the plain ``name`` in the file assigns it the same
        literal (``NUM_WORKERS = 0``, twice or once), else (False, None): a name also bound another
        way (imported, ``+=``, a ``for`` target, a definition) may hold anything. Parameters are not
        bindings here: a caller asking about a name inside a function checks that the function
        does not take it as a parameter."""
        values = self.values(name)
        if "." in name or not values or self.count(name) != len(values) or any(v is None for v in values):
            return False, None
        known = [literal_value(value) for value in values]
        if not all(ok for ok, _ in known) or any(not same_literal(v, known[0][1]) for _, v in known):
            return False, None
        return known[0]

    @cached_property
    def _counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for binding in self._collected.bindings:
            if "." not in binding.name and binding.kind != "param":
                counts[binding.name] = counts.get(binding.name, 0) + 1
        for name, modules in self._collected.imported.items():
            counts[name] = counts.get(name, 0) + len(modules)
        return counts

    def count(self, name: str) -> int:
        """How many different things a plain name is bound to in the file: every binding counts
        (assignments, targets, ``:=``, definitions; parameters bind a function's own name and do not
        count, see ``scope``), and imports once per module they name
        (``import torch`` and ``import torch.nn`` both bind ``torch`` to torch). A name bound more
        than once may not mean what its import says everywhere."""
        return self._counts.get(name, 0)

    def ambiguous(self, expr: cst.BaseExpression) -> bool:
        """Is the name a dotted expression starts with bound to more than one thing in the file
        (``load`` imported from torch in one branch and from elsewhere in another, or assigned
        too)? Its qualified name then says what it may mean, not what it means."""
        name = dotted_name(expr)
        return name is not None and self.count(name.split(".")[0]) > 1

    def is_bound(self, name: str) -> bool:
        return name in self._counts

    def scope(self, node: cst.Module | cst.FunctionDef) -> ScopeNames:
        """The names a function (or the module) binds and writes, nested scopes left out."""
        return self._collected.scopes.get(id(node), ScopeNames())

    def values_at(self, name: str, scopes: list[cst.CSTNode]) -> tuple[list[cst.BaseExpression | None], bool]:
        """What a plain name holds at a place: the values assigned to it in the innermost
        function that binds it (or the module), None for a binding without one (a parameter, a
        ``for`` target), with whether that function takes it as a parameter. ``scopes`` are the enclosing functions and classes, innermost first (class
        bodies do not enclose their methods' names)."""
        for scope in scopes:
            if type(scope) is cst.FunctionDef:
                assigned = self.scope(scope).assigned.get(name)
                parameter = name in function_parameters(scope)
                if assigned is not None or parameter:
                    return assigned or [], parameter
        return self.scope(self.module).assigned.get(name, []), False

    @cached_property
    def definitions(self) -> dict[str, list[cst.FunctionDef | cst.ClassDef]]:
        """Every function and class the file defines (nested ones too), by name, in file order."""
        found: dict[str, list[cst.FunctionDef | cst.ClassDef]] = {}
        for node in self._collected.definitions:
            found.setdefault(node.name.value, []).append(node)
        return found

    def defined(self, name: str | None, kind: type | None = None) -> list:
        """The file's functions or classes (``kind``, or both) named ``name``."""
        return [node for node in self.definitions.get(name or "", []) if kind is None or isinstance(node, kind)]

    def derived_classes(self, is_root: Callable[[str | None], bool]) -> frozenset[str]:
        """Names of the classes in the file with a base whose qualified name ``is_root`` accepts, or
        that derive from such a class of the file."""
        classes = [node for node in statements(self.module.body) if type(node) is cst.ClassDef]
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for node in classes:
                if node.name.value in found:
                    continue
                for base in node.bases:
                    if base.keyword is None and (is_root(self.qualified_name(base.value))
                                                 or dotted_name(base.value) in found):
                        found.add(node.name.value)
                        changed = True
                        break
        return frozenset(found)


def ast_values(index: SyntaxIndex) -> dict[str, list[ast.AST]]:
    """The precheck twin of ``Bindings.values``: (dotted) name -> every value the file assigns to
    it as a whole (``=``, annotated with a value, ``:=``), in any scope."""
    def compute() -> dict[str, list[ast.AST]]:
        values: dict[str, list[ast.AST]] = {}
        for node in index.nodes(ast.Assign, ast.AnnAssign, ast.NamedExpr):
            if node.value is not None:
                for target in node.targets if type(node) is ast.Assign else (node.target,):
                    name = ast_dotted_name(target)
                    if name is not None:
                        values.setdefault(name, []).append(node.value)
        return values
    return index.memo("values", compute)


class _Collector:
    """The walk behind ``Bindings``: bindings with their scopes, references per scope, imports
    per local name, definitions."""

    def __init__(self, module: cst.Module):
        self.bindings: list[Binding] = []
        self.scopes: dict[int, ScopeNames] = {id(module): ScopeNames()}
        self.imported: dict[str, set[str]] = {}
        self.definitions: list[cst.FunctionDef | cst.ClassDef] = []
        self.stack: list[cst.CSTNode] = [module]  # the enclosing scopes (module, functions, classes)
        self.module = module
        self.skip_names: set[int] = set()  # Name nodes that are not references (attributes, keywords)

    # scopes -----------------------------------------------------------------------------------
    def _scope_names(self) -> ScopeNames | None:
        """The names of the innermost scope, when it is one that ``Bindings.scope`` answers for
        (class bodies are not)."""
        return self.scopes.get(id(self.stack[-1]))

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression | None, kind: str) -> None:
        if type(target) in (cst.Tuple, cst.List):
            for element in target.elements:
                self._bind(element.value, None, kind)
            return
        if type(target) is cst.StarredElement:
            self._bind(target.value, None, kind)
            return
        name = dotted_name(target)
        if name is None:
            return
        self.bindings.append(Binding(name, value, kind, self.stack[-1]))
        scope = self._scope_names()
        if scope is not None and type(target) is cst.Name:
            scope.assigned.setdefault(name, []).append(value)

    def on_visit(self, node: cst.CSTNode) -> bool:
        kind = type(node)
        if kind is cst.Name:
            if id(node) not in self.skip_names:
                scope = self._scope_names()
                if scope is not None:
                    scope.references[node.value] = scope.references.get(node.value, 0) + 1
        elif kind is cst.Attribute:
            self.skip_names.add(id(node.attr))  # `x.attr`: the attribute's name is not a variable
        elif kind is cst.Arg:
            if node.keyword is not None:
                self.skip_names.add(id(node.keyword))  # `f(x=...)`: the keyword is not a reference
        elif kind is cst.Assign:
            for target in node.targets:
                self._bind(target.target, node.value, "assign")
        elif kind is cst.AnnAssign:
            self._bind(node.target, node.value, "annotated")
        elif kind is cst.AugAssign:
            self._bind(node.target, None, "augmented")
        elif kind is cst.NamedExpr:
            self._bind(node.target, node.value, "walrus")
        elif kind is cst.For:
            self._bind(node.target, None, "for")
        elif kind is cst.WithItem:
            if node.asname is not None:
                self._bind(node.asname.name, None, "with")
        elif kind is cst.FunctionDef or kind is cst.ClassDef:
            self._bind(node.name, None, "def" if kind is cst.FunctionDef else "class")
            self.definitions.append(node)
            self.stack.append(node)
            if kind is cst.FunctionDef:
                self.scopes[id(node)] = ScopeNames()
                params = node.params
                for param in (*params.params, *params.posonly_params, *params.kwonly_params,
                              *(p for p in (params.star_arg, params.star_kwarg) if type(p) is cst.Param)):
                    self._bind(param.name, None, "param")
        elif kind is cst.Import:
            for alias in node.names:
                full = dotted_name(alias.name)
                if alias.asname is not None and type(alias.asname.name) is cst.Name:
                    self.imported.setdefault(alias.asname.name.value, set()).add(full)
                else:
                    head = full.split(".")[0]
                    self.imported.setdefault(head, set()).add(head)
        elif kind is cst.ImportFrom:
            if type(node.names) is not cst.ImportStar:
                base = "." * len(node.relative) + (dotted_name(node.module) if node.module is not None else "")
                for alias in node.names:
                    name = dotted_name(alias.name)
                    local = alias.asname.name.value if alias.asname is not None and isinstance(
                        alias.asname.name, cst.Name) else name
                    self.imported.setdefault(local, set()).add(f"{base}.{name}")
        return True

    def on_leave(self, node: cst.CSTNode) -> None:
        if type(node) is cst.FunctionDef or type(node) is cst.ClassDef:
            self.stack.pop()


def ast_scope_bindings(index: SyntaxIndex, scope: ast.Module | ast.FunctionDef | ast.AsyncFunctionDef
                       ) -> dict[str, list[ast.expr | None]]:
    """The precheck twin of ``Bindings.scope(scope).assigned``: the plain names a function (or the
    module) binds, with the value of each binding (None for one without: a parameter, a ``for`` or
    ``with`` target, an unpacked or augmented target, a ``def`` or ``class``). Nested functions and
    class bodies bind in scopes of their own; lambdas and comprehensions do not."""
    def compute() -> dict[str, list[ast.expr | None]]:
        found: dict[str, list[ast.expr | None]] = {}

        def bind(target: ast.AST, value: ast.expr | None) -> None:
            if isinstance(target, ast.Name):
                found.setdefault(target.id, []).append(value)
            elif isinstance(target, (ast.Tuple, ast.List)):
                for element in target.elts:
                    bind(element, None)
            elif isinstance(target, ast.Starred):
                bind(target.value, None)

        stack: list[ast.AST] = list(ast.iter_child_nodes(scope))  # a function's decorators and defaults too
        if not isinstance(scope, ast.Module):
            arguments = scope.args
            for parameter in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg,
                              arguments.kwarg):
                if parameter is not None:
                    found.setdefault(parameter.arg, []).append(None)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.setdefault(node.name, []).append(None)
                continue
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    bind(target, node.value)
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)):
                bind(node.target, node.value)
            elif isinstance(node, ast.AugAssign):
                bind(node.target, None)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                bind(node.target, None)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                bind(node.optional_vars, None)
            stack.extend(ast.iter_child_nodes(node))
        return found
    return index.memo(("scope_bindings", id(scope)), compute)
