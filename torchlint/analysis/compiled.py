"""Compiled code: what ``torch.compile`` compiles in a file, and which of the file's functions the
compiled code reaches.

A compile site is ``@torch.compile`` (or ``@torch.compile(...)``, ``@torch._dynamo.optimize(...)``)
on a function or method, ``torch.compile(target, ...)`` wherever it is called (assigned, passed,
called at once), or ``model.compile(...)`` on an instance of one of the file's ``nn.Module``
classes. Its target is a function of the file, a method (``torch.compile(self.prefill)``), or an
instance of a module class of the file, whose ``forward`` is then what runs compiled.

From each entry the compiled region follows the calls Dynamo traces into: the file's own functions
called by name, methods called on ``self`` (the class's own or a base's of the file), ``super()``
methods, the ``forward`` of module instances called by name, and the ``forward`` of the submodules
a class builds in its methods (``self.blocks = nn.ModuleList([Block(...) ...])``) once compiled
code reads that attribute. Functions marked ``@torch.compiler.disable`` are not followed: Dynamo
runs them as they are. Code under ``if not torch.compiler.is_compiling():`` is not traced.

Only one file is read: a model class imported from another module is not followed (the project's
summaries will take it across files).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cached_property
from weakref import WeakKeyDictionary

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.callees import Callees, ast_may_hold_instance, self_attribute
from torchlint.analysis.loops import ast_loop_lines
from torchlint.analysis.syntax import (ast_dotted_name, ast_find_keyword, contains, dotted_name,
                                       find_keyword, literal_value, positional_args)
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst

COMPILE_FUNCTIONS = frozenset({"torch.compile", "torch._dynamo.optimize"})
DISABLE_DECORATORS = frozenset({"torch.compiler.disable", "torch._dynamo.disable", "torch._disable_dynamo",
                                "torch._dynamo.eval_frame.disable"})
# Dynamo's options that decide how shapes and numbers specialize, as a file sets them.
DYNAMIC_SETTINGS = ("automatic_dynamic_shapes", "assume_static_by_default")
# Tests that hold while Dynamo traces (`torch.compiler.is_compiling()`, transformers'
# `is_torchdynamo_compiling()`), matched by the last part of the name.
COMPILING_TESTS = frozenset({"is_compiling", "is_dynamo_compiling", "is_torchdynamo_compiling"})


@dataclass(frozen=True, eq=False)
class CompileSite:
    """One place that compiles: the compile call (or the decorator), how messages name it, the
    call whose keywords are its options, and the functions that run compiled from it."""

    node: cst.CSTNode
    label: str  # "@torch.compile", "torch.compile(model)", "model.compile()"
    options: cst.Call | None
    entries: tuple[cst.FunctionDef, ...]

    def option(self, name: str) -> tuple[bool, object]:
        """(True, value) for an option given as a literal (``mode="reduce-overhead"``); (True,
        ``...``) for one given as an expression that cannot be read; (False, None) when absent."""
        arg = find_keyword(self.options, name) if self.options is not None else None
        if arg is None:
            return False, None
        known, value = literal_value(arg.value)
        return True, value if known else ...

    @property
    def mode(self) -> str | None:
        given, value = self.option("mode")
        return value if given and isinstance(value, str) else None

    @property
    def dynamic(self) -> object:
        """``dynamic=``: True, False, None (not given: Dynamo's automatic dynamic shapes), or ``...``
        (an expression)."""
        return self.option("dynamic")[1]


@dataclass(frozen=True, eq=False)
class Region:
    """A function that runs compiled, the site that compiles it, and the functions through which
    the site reaches it (the entry first, the function itself last)."""

    function: cst.FunctionDef
    site: CompileSite
    via: tuple[str, ...]

    @property
    def is_entry(self) -> bool:
        return len(self.via) == 1


def is_compiling_test(test: cst.BaseExpression, bindings: Bindings) -> bool | None:
    """True for a test that holds while Dynamo traces (``torch.compiler.is_compiling()``), False for
    its negation, None for any other test."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = is_compiling_test(test.expression, bindings)
        return None if inner is None else not inner
    if type(test) is cst.Call and not test.args:
        name = bindings.qualified_name(test.func) or dotted_name(test.func) or ""
        if name.rsplit(".", 1)[-1] in COMPILING_TESTS:
            return True
    return None


def untraced_branch(parent: cst.CSTNode, child: cst.CSTNode, bindings: Bindings) -> bool:
    """Is ``child`` a branch of the ``if`` ``parent`` that Dynamo never traces: the body of ``if not
    is_compiling():`` (or of an ``and`` holding that test), the ``else`` of ``if is_compiling():``?"""
    if type(parent) not in (cst.If, cst.IfExp) or child is parent.test:
        return False
    tests = _conjuncts(parent.test)
    in_body = child is parent.body
    for test in tests:
        holds_when_compiling = is_compiling_test(test, bindings)
        if holds_when_compiling is False and in_body:
            return True
        if holds_when_compiling is True and not in_body and len(tests) == 1:
            return True
    return False


def _conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        return _conjuncts(test.left) + _conjuncts(test.right)
    return [test]


class CompiledCode:
    """The compile sites of a file and the regions they reach (see the module's docstring)."""

    def __init__(self, module: cst.Module, bindings: Bindings, source: str):
        self.module = module
        self.source = source  # the module's text (rendering the module again costs as much as parsing it)
        self.bindings = bindings
        self.callees = Callees(module, bindings)
        self.sites: list[CompileSite] = []
        self._compiled_names: dict[str, CompileSite] = {}
        self._collect_sites()
        self._regions: dict[int, list[Region]] = {}
        self._by_site: dict[int, list[Region]] = {}
        for site in self.sites:
            for entry in site.entries:
                self._reach(site, entry)

    # --- the answers ----------------------------------------------------------------------------------
    def regions(self) -> list[Region]:
        """Every function that runs compiled, once (as the first site reaches it), in file order."""
        return self._in_file_order(regions[0] for regions in self._regions.values())

    def regions_of(self, site: CompileSite) -> list[Region]:
        """The functions a site runs compiled, in file order."""
        return self._in_file_order(self._by_site.get(id(site), []))

    def _in_file_order(self, regions) -> list[Region]:
        return sorted(regions, key=lambda region: self.callees.definitions.order[id(region.function)])

    def compiled_callable(self, func: cst.BaseExpression) -> CompileSite | None:
        """The site that compiled what a call calls: a name bound to ``torch.compile(...)``, a function
        decorated with ``@torch.compile``, or a module on which ``.compile()`` is called."""
        name = dotted_name(func)
        return self._compiled_names.get(name) if name is not None else None

    def display_name(self, function: cst.FunctionDef) -> str:
        return self.callees.display_name(function)

    def owner(self, function: cst.FunctionDef) -> cst.ClassDef | None:
        return self.callees.owner(function)

    @cached_property
    def configures_dynamic(self) -> bool:
        """Does the file set Dynamo's dynamic-shape options (``automatic_dynamic_shapes``,
        ``assume_static_by_default``): a program that decided how shapes and numbers specialize?"""
        return any(word in self.source for word in DYNAMIC_SETTINGS)

    @cached_property
    def marks_dynamic(self) -> bool:
        """Does the file mark shapes dynamic anywhere: ``torch._dynamo.mark_dynamic`` (or
        ``maybe_mark_dynamic``, ``mark_unbacked``), a compile site with ``dynamic=`` other than
        ``False``/``None``, or a setting of Dynamo's shape options?"""
        if any(site.dynamic not in (None, False) for site in self.sites) or self.configures_dynamic:
            return True
        return any(word in self.source for word in ("mark_dynamic", "mark_unbacked"))

    def eager_branches(self, function: cst.FunctionDef) -> frozenset[int]:
        """The branches of a function's ``if`` statements that compile the function itself
        (``if _compile: return torch.compile(create_block_mask)(..., _compile=False)``): the eager
        entry that dispatches to the compiled function, never traced by it."""
        own = [site.node for site in self.sites if function in site.entries]
        if not own:
            return frozenset()
        found: set[int] = set()

        def on_visit(node: cst.CSTNode) -> bool:
            if type(node) in (cst.FunctionDef, cst.ClassDef):
                return False
            if type(node) is cst.If:
                for branch in (node.body, node.orelse):
                    if branch is not None and any(contains(branch, site) for site in own):
                        found.add(id(branch))
            return True

        walk(function.body, on_visit)
        return frozenset(found)

    # --- compile sites --------------------------------------------------------------------------------
    def _collect_sites(self) -> None:
        stack: list[cst.CSTNode] = []

        def on_visit(node: cst.CSTNode) -> bool:
            if type(node) is cst.FunctionDef:
                self._decorator_sites(node)
            elif type(node) is cst.Call:
                site = self._call_site(node, stack)
                if site is not None:
                    self.sites.append(site)
                    bound = self._bound_name(stack, node)
                    if bound is not None:
                        self._compiled_names.setdefault(bound, site)
            stack.append(node)
            return True

        walk(self.module, on_visit, lambda node: stack.pop())

    def _decorator_sites(self, function: cst.FunctionDef) -> None:
        for decorator in function.decorators:
            expr = decorator.decorator
            call = expr if type(expr) is cst.Call else None
            name = self.bindings.qualified_name(call.func if call is not None else expr)
            if name not in COMPILE_FUNCTIONS:
                continue
            site = CompileSite(decorator, "@" + (dotted_name(call.func if call else expr) or "torch.compile"),
                               call, (function,))
            self.sites.append(site)
            owner = self.callees.owner(function)
            self._compiled_names.setdefault(function.name.value if owner is None else f"self.{function.name.value}",
                                            site)

    def _call_site(self, call: cst.Call, stack: list[cst.CSTNode]) -> CompileSite | None:
        name = self.bindings.qualified_name(call.func)
        if name in COMPILE_FUNCTIONS:
            # `torch.compile(mode=...)` and `torch._dynamo.optimize(backend)` make decorators: the call
            # of what they return is the site (below)
            target = find_keyword(call, "model") or next(iter(positional_args(call)), None)
            if target is None or name != "torch.compile":
                return None
            label = f"{dotted_name(call.func) or 'torch.compile'}({self.module.code_for_node(target.value)})"
            return CompileSite(call, _short(label), call, self._targets(target.value, stack))
        # torch._dynamo.optimize("inductor")(fn)
        if type(call.func) is cst.Call and self.bindings.qualified_name(call.func.func) in COMPILE_FUNCTIONS \
                and positional_args(call):
            target = positional_args(call)[0].value
            label = f"{self.module.code_for_node(call.func)}({self.module.code_for_node(target)})"
            return CompileSite(call, _short(label), call.func, self._targets(target, stack))
        # model.compile(...): nn.Module.compile
        if type(call.func) is cst.Attribute and call.func.attr.value == "compile":
            classes = self.callees.instance_classes(call.func.value, stack)
            if classes:
                receiver = dotted_name(call.func.value) or self.module.code_for_node(call.func.value)
                entries = tuple(f for cls in classes for f in [self.callees.method(cls, "forward")] if f is not None)
                site = CompileSite(call, _short(f"{receiver}.compile()"), call, entries)
                if dotted_name(call.func.value) is not None:
                    self._compiled_names.setdefault(receiver, site)
                return site
        return None

    def _bound_name(self, stack: list[cst.CSTNode], call: cst.Call) -> str | None:
        """The dotted name a compile call is assigned to (``fn = torch.compile(f)``)."""
        parent = stack[-1] if stack else None
        if type(parent) is cst.Assign and parent.value is call and len(parent.targets) == 1:
            return dotted_name(parent.targets[0].target)
        if type(parent) is cst.AnnAssign and parent.value is call:
            return dotted_name(parent.target)
        return None

    def _targets(self, target: cst.BaseExpression, stack: list[cst.CSTNode]) -> tuple[cst.FunctionDef, ...]:
        """The functions that run compiled when ``target`` is compiled: a function of the file, a
        method (``self.prefill``, ``model.forward``), or the ``forward`` of a module instance."""
        if type(target) is cst.Name:
            functions = self.callees.functions_named(target.value, stack)
            if functions:
                return tuple(functions)
        if type(target) is cst.Attribute:
            receiver = self.callees.instance_classes(target.value, stack)
            methods = [m for cls in receiver for m in [self.callees.method(cls, target.attr.value)] if m is not None]
            if methods:
                return tuple(methods)
        classes = self.callees.instance_classes(target, stack)
        return tuple(f for cls in classes for f in [self.callees.method(cls, "forward")] if f is not None)

    # --- reaching -----------------------------------------------------------------------------------------
    def _reach(self, site: CompileSite, entry: cst.FunctionDef) -> None:
        work = [(entry, (self.display_name(entry),))]
        seen: set[int] = set()
        while work:
            function, via = work.pop()
            if id(function) in seen or self._disabled(function):
                continue
            seen.add(id(function))
            region = Region(function, site, via)
            self._regions.setdefault(id(function), []).append(region)
            self._by_site.setdefault(id(site), []).append(region)
            for callee in self._callees(function):
                if id(callee) not in seen:
                    work.append((callee, via + (self.display_name(callee),)))

    def _disabled(self, function: cst.FunctionDef) -> bool:
        for decorator in function.decorators:
            expr = decorator.decorator
            if self.bindings.qualified_name(expr.func if type(expr) is cst.Call else expr) in DISABLE_DECORATORS:
                return True
        return False

    def _callees(self, function: cst.FunctionDef) -> list[cst.FunctionDef]:
        """The file's functions that a function's traced code calls (see the module's docstring)."""
        owner = self.callees.owner(function)
        submodules = self.callees.submodules(owner) if owner is not None else {}
        scopes = self.callees.scopes_of(function)
        eager = self.eager_branches(function)
        found: list[cst.FunctionDef] = []

        def add(*functions: cst.FunctionDef | None) -> None:
            found.extend(f for f in functions if f is not None and f not in found)

        def on_visit(node: cst.CSTNode) -> bool:
            if type(node) in (cst.FunctionDef, cst.ClassDef) or id(node) in eager:
                return False
            if type(node) is cst.Call:
                add(*self._called(node, owner, scopes))
            elif type(node) is cst.Attribute:
                add(*(self.callees.method(cls, "forward") for cls in submodules.get(self_attribute(node) or "", [])))
            elif type(node) in (cst.If, cst.IfExp):
                branches = [b for b in (node.body, node.orelse) if b is not None]
                traced = [b for b in branches if not untraced_branch(node, b, self.bindings)]
                if len(traced) < len(branches):  # a branch Dynamo never traces calls nothing compiled
                    for part in (node.test, *traced):
                        walk(part, on_visit)
                    return False
            return True

        walk(function.body, on_visit)
        return found

    def _called(self, call: cst.Call, owner: cst.ClassDef | None, scopes: list[cst.CSTNode]) -> list:
        """The file's functions a call runs: a function by name, a method on ``self`` or
        ``super()``, the ``forward`` of a module instance, a method of one."""
        func = call.func
        if type(func) is cst.Name:
            if func.value in self.callees.module_classes:
                return []  # building a module, not running one
            return self.callees.functions_named(func.value, scopes) or [
                self.callees.method(cls, "forward") for cls in self.callees.instance_classes(func, scopes)]
        if type(func) is not cst.Attribute:
            return []
        receiver, name = func.value, func.attr.value
        if owner is not None and dotted_name(receiver) == "self":
            return [self.callees.method(owner, name)]
        if owner is not None and type(receiver) is cst.Call and dotted_name(receiver.func) == "super":
            return [self.callees.method(base, name) for base in self.callees.bases(owner)]
        return [self.callees.method(cls, name) for cls in self.callees.instance_classes(receiver, scopes)]


def _short(label: str, limit: int = 60) -> str:
    label = " ".join(label.split())
    return label if len(label) <= limit else label[: limit - 4] + "...)"


_CACHE: WeakKeyDictionary[Bindings, CompiledCode] = WeakKeyDictionary()


def compiled_code(module: cst.Module, bindings: Bindings, source: str) -> CompiledCode:
    """The file's compiled code, computed once per file (keyed by the file's ``Bindings``, which
    every rule of the file shares) for the rules that ask."""
    found = _CACHE.get(bindings)
    if found is None or found.module is not module:
        found = _CACHE[bindings] = CompiledCode(module, bindings, source)
    return found


# --- the precheck twin ----------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class AstSite:
    """The precheck twin of ``CompileSite``: a place ``CompiledCode`` may take for a compile site."""

    node: ast.AST  # the compile call, or the decorator
    options: ast.Call | None  # the call whose keywords are its options
    may_run: bool  # may it have entries: functions of the file it runs compiled
    names: tuple[str, ...]  # the dotted names it may bind (``compiled_callable`` finds it by them)


def ast_compile_sites(index: SyntaxIndex) -> list[AstSite]:
    """Every place ``CompiledCode._collect_sites`` may take for a compile site: a decorator that
    may name ``torch.compile`` or Dynamo's ``optimize``, ``torch.compile(target)``,
    ``optimize(...)(target)`` (``torch.compile(...)(target)``), and ``x.compile()`` on what may hold
    an instance of a module class of the file. What a site runs is found as ``_targets`` finds it:
    a function of the file by name, or the method or ``forward`` of a module class of the file."""
    def compute() -> list[AstSite]:
        # `import torch.compile as tc` names it too: `index.calls` follows only `from ... import ... as`
        renamed = [local for local, named in index.import_aliases.items() if not named.isdisjoint(COMPILE_FUNCTIONS)]
        calls = index.calls("compile", "optimize", *renamed)
        decorated = [function for function in index.nodes(ast.FunctionDef, ast.AsyncFunctionDef)
                     if function.decorator_list]
        if not calls and not decorated:
            return []  # (a call of `optimize(...)`'s result is a call of `optimize` too)
        def compiles(func: ast.AST, names: frozenset[str] = COMPILE_FUNCTIONS) -> bool:
            return not names.isdisjoint(index.qualified_names(func))

        def runs(target: ast.AST) -> bool:
            if isinstance(target, ast.Name) and target.id in _ast_functions(index):
                return True
            return isinstance(target, ast.Attribute) and ast_may_hold_instance(index, target.value) \
                or ast_may_hold_instance(index, target)

        def site(call: ast.Call, options: ast.Call, may_run: bool, *names: str | None) -> AstSite:
            return AstSite(call, options, may_run, tuple(name for name in (_ast_bound(index, call), *names) if name))

        found: list[AstSite] = []
        for function in decorated:
            for decorator in function.decorator_list:
                call = decorator if isinstance(decorator, ast.Call) else None
                if compiles(decorator if call is None else call.func):
                    found.append(AstSite(decorator, call, True, (function.name, f"self.{function.name}")))
        for call in calls:
            func = call.func
            keyword = ast_find_keyword(call, "model")
            positional = [arg for arg in call.args if not isinstance(arg, ast.Starred)]
            target = keyword.value if keyword is not None else positional[0] if positional else None
            if target is not None and compiles(func, frozenset({"torch.compile"})):
                found.append(site(call, call, runs(target)))
            if isinstance(func, ast.Attribute) and func.attr == "compile" and ast_may_hold_instance(index, func.value):
                found.append(site(call, call, True, ast_dotted_name(func.value)))
        for call in index.nodes(ast.Call) if calls else ():
            if type(call.func) is ast.Call and compiles(call.func.func):
                positional = [arg for arg in call.args if not isinstance(arg, ast.Starred)]
                if positional:
                    found.append(site(call, call.func, runs(positional[0])))
        return found
    return index.memo("compile_sites", compute)


def _ast_functions(index: SyntaxIndex) -> frozenset[str]:
    """The names of the file's functions that are not methods: what ``Callees.functions_named`` may find."""
    def compute() -> frozenset[str]:
        methods = {id(node) for cls in index.nodes(ast.ClassDef) for node in cls.body}
        return frozenset(function.name for function in index.nodes(ast.FunctionDef, ast.AsyncFunctionDef)
                         if id(function) not in methods)
    return index.memo("plain_functions", compute)


def _ast_bound(index: SyntaxIndex, call: ast.Call) -> str | None:
    """The dotted name a call is assigned to (``fn = torch.compile(f)``), as ``_bound_name`` reads it."""
    for node in index.nodes(ast.Assign):
        if node.value is call:
            return ast_dotted_name(node.targets[0]) if len(node.targets) == 1 else None
    for node in index.nodes(ast.AnnAssign):
        if node.value is call:
            return ast_dotted_name(node.target)
    return None


def ast_may_run_compiled(index: SyntaxIndex) -> bool:
    """Can ``CompiledCode.regions`` find a function of the file that runs compiled?"""
    return any(site.may_run for site in ast_compile_sites(index))


def ast_compiled_callables(index: SyntaxIndex) -> frozenset[str]:
    """The precheck twin of ``CompiledCode.compiled_callable``: the dotted names a call may call a
    compiled function by."""
    return index.memo("compiled_callables",
                      lambda: frozenset(name for site in ast_compile_sites(index) for name in site.names))


def ast_compiled_calls_in_loops(index: SyntaxIndex) -> list[ast.Call]:
    """The calls TLC003 and TLC004 look at: a call of a compiled callable by name, inside a loop,
    with an argument other than ``*args``/``**kwargs``."""
    def compute() -> list[ast.Call]:
        names = ast_compiled_callables(index)
        if not names:
            return []
        loops = ast_loop_lines(index)
        return [call for call in index.nodes(ast.Call) if loops[call.lineno] and ast_dotted_name(call.func) in names
                and (any(not isinstance(arg, ast.Starred) for arg in call.args)
                     or any(keyword.arg is not None for keyword in call.keywords))]
    return index.memo("compiled_calls_in_loops", compute)


def ast_configures_dynamic(index: SyntaxIndex) -> bool:
    """The precheck twin of ``CompiledCode.configures_dynamic``: exactly it (it reads the text)."""
    return any(word in index.source for word in DYNAMIC_SETTINGS)


def ast_marks_dynamic_by_text(index: SyntaxIndex) -> bool:
    """Does ``CompiledCode.marks_dynamic`` hold from the file's text alone (a setting of Dynamo's
    shape options, ``mark_dynamic``, ``mark_unbacked``)? It may hold through a site's ``dynamic=``
    too, which this leaves to LibCST."""
    return ast_configures_dynamic(index) or any(word in index.source for word in ("mark_dynamic", "mark_unbacked"))
