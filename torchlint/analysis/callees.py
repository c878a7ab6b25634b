"""What a call runs, within one file: the file's functions (nested ones first), methods through
``self`` and the file's base classes, and the module classes whose instances a name holds
(``model = Net().to(device)``, ``DDP(model)``, ``torch.compile(model)``), with the submodules each
module class builds (``self.blocks = nn.ModuleList([Block() ...])``).

A name is followed through the values the file assigns it; an imported class or a value the file
does not build is unknown (the project's summaries will follow calls across files).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property

from torchlint.analysis.bindings import Bindings, ast_values
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.modules import Modules, ast_module_classes
from torchlint.analysis.syntax import ast_dotted_name, dotted_name, positional_args
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst

# Calls that hand back the module they are called on, or wrap the module they are given.
MODULE_MOVES = frozenset({"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "train", "eval",
                          "requires_grad_", "to_empty", "share_memory"})
MODULE_WRAPPERS = frozenset({"DistributedDataParallel", "DataParallel", "FullyShardedDataParallel", "DDP", "FSDP",
                             "compile"})
MAX_DEPTH = 6  # how many names deep a value is followed


@dataclass
class Definitions:
    """The file's functions and classes, with what owns each function."""

    owner: dict[int, cst.ClassDef] = field(default_factory=dict)  # method -> its class
    outer: dict[int, cst.FunctionDef] = field(default_factory=dict)  # nested function -> its function
    functions: dict[str, list[cst.FunctionDef]] = field(default_factory=dict)  # not methods
    classes: dict[str, list[cst.ClassDef]] = field(default_factory=dict)
    order: dict[int, int] = field(default_factory=dict)  # definition -> its place in the file


def definitions_of(module: cst.Module) -> Definitions:
    found = Definitions()
    stack: list[cst.CSTNode] = []

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) in (cst.FunctionDef, cst.ClassDef):
            found.order[id(node)] = len(found.order)
            parent = stack[-1] if stack else None
            if type(node) is cst.ClassDef:
                found.classes.setdefault(node.name.value, []).append(node)
            elif type(parent) is cst.ClassDef:
                found.owner[id(node)] = parent
            else:
                found.functions.setdefault(node.name.value, []).append(node)
                if type(parent) is cst.FunctionDef:
                    found.outer[id(node)] = parent
            stack.append(node)
        return True

    def on_leave(node: cst.CSTNode) -> None:
        if type(node) in (cst.FunctionDef, cst.ClassDef):
            stack.pop()

    walk(module, on_visit, on_leave)
    return found


def methods_of(cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    """The methods a class body defines, by name (the last definition wins, as in Python)."""
    return {statement.name.value: statement for statement in cls.body.body if type(statement) is cst.FunctionDef}


def self_attribute(expr: cst.BaseExpression | None) -> str | None:
    """``blocks`` for ``self.blocks`` (and for ``self.blocks.h``, ``self.blocks[0]``)."""
    while type(expr) in (cst.Attribute, cst.Subscript):
        if type(expr) is cst.Attribute and type(expr.value) is cst.Name and expr.value.value == "self":
            return expr.attr.value
        expr = expr.value
    return None


class Callees:
    """The file's definitions, and what a name or an attribute of ``self`` runs when called."""

    def __init__(self, module: cst.Module, bindings: Bindings):
        self.module = module
        self.bindings = bindings
        self.definitions = definitions_of(module)
        self.module_classes = Modules(module, bindings).classes

    def display_name(self, function: cst.FunctionDef) -> str:
        """``Net.forward`` for a method, ``step`` for a function."""
        owner = self.owner(function)
        return f"{owner.name.value}.{function.name.value}" if owner is not None else function.name.value

    def owner(self, function: cst.FunctionDef) -> cst.ClassDef | None:
        return self.definitions.owner.get(id(function))

    def functions_named(self, name: str, scopes: list[cst.CSTNode]) -> list[cst.FunctionDef]:
        """The functions (not methods) of the file a name calls from inside ``scopes`` (the
        enclosing functions and classes): one nested in an enclosing function, else a module-level
        one."""
        candidates = self.definitions.functions.get(name, [])
        enclosing = [node for node in scopes if type(node) is cst.FunctionDef]
        nested = [f for f in candidates if any(self.definitions.outer.get(id(f)) is outer for outer in enclosing)]
        return nested or [f for f in candidates if id(f) not in self.definitions.outer]

    def method(self, cls: cst.ClassDef, name: str, seen: frozenset[int] = frozenset()) -> cst.FunctionDef | None:
        """``cls``'s method ``name``, its own or inherited from a class of the file."""
        found = methods_of(cls).get(name)
        if found is not None or id(cls) in seen:
            return found
        for base in self.bases(cls):
            found = self.method(base, name, seen | {id(cls)})
            if found is not None:
                return found
        return None

    def bases(self, cls: cst.ClassDef) -> list[cst.ClassDef]:
        """The classes of the file ``cls`` derives from directly."""
        return [parent for base in cls.bases
                for parent in self.definitions.classes.get(dotted_name(base.value) or "", [])]

    def instance_classes(self, expr: cst.BaseExpression, scopes: list[cst.CSTNode],
                         followed: frozenset[str] = frozenset()) -> list[cst.ClassDef]:
        """The module classes of the file whose instance ``expr`` may hold: ``Net(...)``,
        ``Net(...).to(device)``, ``DDP(model)``, ``torch.compile(model)``, ``self`` in a method of a
        module class, or a name assigned such a value (``followed``: the names on the way here)."""
        if len(followed) > MAX_DEPTH:
            return []
        if type(expr) is cst.Call:
            func = expr.func
            name = dotted_name(func)
            if name is not None and name in self.module_classes:
                return list(self.definitions.classes.get(name, []))
            if type(func) is cst.Attribute and func.attr.value in MODULE_MOVES:
                return self.instance_classes(func.value, scopes, followed)
            qualified = self.bindings.qualified_name(func) or name or ""
            first = positional_args(expr)
            if qualified.rsplit(".", 1)[-1] in MODULE_WRAPPERS and first:
                return self.instance_classes(first[0].value, scopes, followed)
            return []
        name = dotted_name(expr)
        if name == "self":
            owner = next((n for n in reversed(scopes) if type(n) is cst.ClassDef), None)
            return [owner] if owner is not None and owner.name.value in self.module_classes else []
        if name is None or name in followed:
            return []
        found: list[cst.ClassDef] = []
        for value in self._values_seen_from(name, scopes):
            if value is not None:
                found += [cls for cls in self.instance_classes(value, scopes, followed | {name}) if cls not in found]
        return found

    def _values_seen_from(self, name: str, scopes: list[cst.CSTNode]) -> list[cst.BaseExpression | None]:
        """The values a name may hold inside ``scopes``: those its innermost enclosing function (or
        the module) assigns it, when one does; else every value the file assigns it (a dotted name,
        a global set elsewhere)."""
        if "." not in name:
            for scope in [*reversed([s for s in scopes if type(s) is cst.FunctionDef]), self.module]:
                assigned = self.bindings.scope(scope).assigned.get(name)
                if assigned:
                    return assigned
        return self.bindings.values(name)

    def submodules(self, cls: cst.ClassDef) -> dict[str, list[cst.ClassDef]]:
        """The attributes of a module class that hold modules of the file's classes, built in its
        methods (``self.attn = Attention(...)``, ``self.blocks = nn.ModuleList([Block() ...])``,
        ``self.layers.append(Layer())``)."""
        return self._submodules.get(id(cls), {})

    @cached_property
    def _submodules(self) -> dict[int, dict[str, list[cst.ClassDef]]]:
        return {id(cls): self._attributes_built(cls) for classes in self.definitions.classes.values()
                for cls in classes if cls.name.value in self.module_classes}

    def _attributes_built(self, cls: cst.ClassDef) -> dict[str, list[cst.ClassDef]]:
        built: dict[str, list[cst.ClassDef]] = {}

        def on_visit(node: cst.CSTNode) -> bool:
            target, value = None, None
            if type(node) is cst.Assign and len(node.targets) == 1:
                target, value = node.targets[0].target, node.value
            elif type(node) is cst.AnnAssign and node.value is not None:
                target, value = node.target, node.value
            elif type(node) is cst.Call and type(node.func) is cst.Attribute \
                    and node.func.attr.value in ("append", "extend", "add_module", "insert"):
                target, value = node.func.value, node
            attribute = self_attribute(target)
            if attribute is not None:
                built.setdefault(attribute, []).extend(c for c in self._classes_built(value) if c is not cls)
            return True

        walk(cls.body, on_visit)
        return {name: classes for name, classes in built.items() if classes}

    def _classes_built(self, value: cst.CSTNode) -> list[cst.ClassDef]:
        """The file's module classes whose constructors an expression calls."""
        called: list[cst.ClassDef] = []

        def on_visit(node: cst.CSTNode) -> bool:
            if type(node) is cst.Call and dotted_name(node.func) in self.module_classes:
                called.extend(self.definitions.classes.get(dotted_name(node.func), []))
            return True

        walk(value, on_visit)
        return called

    def scopes_of(self, function: cst.FunctionDef) -> list[cst.CSTNode]:
        """The classes and functions around a function, outermost first, and the function itself:
        what ``self`` and nested names resolve against inside it."""
        chain: list[cst.CSTNode] = [function]
        node: cst.CSTNode | None = function
        while node is not None:
            node = self.definitions.owner.get(id(node)) or self.definitions.outer.get(id(node))
            if node is not None:
                chain.append(node)
        return list(reversed(chain))


# --- the precheck twin ----------------------------------------------------------------------------------

def ast_may_hold_instance(index: SyntaxIndex, expr: ast.AST, followed: frozenset[str] = frozenset()) -> bool:
    """Can ``Callees.instance_classes`` find a module class of the file for ``expr``: a call of
    one, moved or wrapped, ``self``, or a name the file assigns such a value?"""
    classes = ast_module_classes(index)
    if not classes or len(followed) > MAX_DEPTH:
        return False
    if isinstance(expr, ast.Call):
        func = expr.func
        name = ast_dotted_name(func)
        if name in classes:
            return True
        if isinstance(func, ast.Attribute) and func.attr in MODULE_MOVES:
            return ast_may_hold_instance(index, func.value, followed)
        first = [arg for arg in expr.args if not isinstance(arg, ast.Starred)]
        called = index.qualified_names(func) | {name or ""}
        return bool(first) and any(qualified.rsplit(".", 1)[-1] in MODULE_WRAPPERS for qualified in called) \
            and ast_may_hold_instance(index, first[0], followed)
    name = ast_dotted_name(expr)
    if name == "self":
        return True
    if name is None or name in followed:
        return False
    return any(ast_may_hold_instance(index, value, followed | {name}) for value in ast_values(index).get(name, ()))
