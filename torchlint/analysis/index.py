"""CPython's syntax tree, indexed once for the prechecks.

The engine builds CPython's tree of every file whose text passes some rule's ``applies`` (it
measures the file's nesting with it before LibCST sees it), and LibCST's parse costs about ten
times as much. So each rule may state, as ``Rule.precheck(index)``, the shapes it reports in terms
of that tree: a file where no selected rule's shapes occur is never given to LibCST.

A precheck is a necessary condition, never a sufficient one: it may say yes to a file the rule
ends up silent on, and must never say no to one it would fire on. So a callee is matched by the
last part of its name (``torch.nn.Conv2d`` by ``Conv2d``, whatever the import spelling, with
``from ... import X as Y`` aliases followed), and "inside" means inside by lines.

This module is the index itself; the questions prechecks ask of it live beside their LibCST
answers (``loops.ast_training_loop_lines``, ``devices.ast_may_move``, ...), under ``ast_`` names.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Callable, Iterable
from typing import Any

from torchlint.analysis.syntax import STAR_MODULES, ast_callee, ast_dotted_name, ast_first_line, code_text
from torchlint.analysis.versions import at_least

_FIELDS: dict[type, tuple[str, ...]] = {}
_BLOCK_OWNERS = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor,
                 ast.While, ast.With, ast.AsyncWith, ast.Try, ast.ExceptHandler, ast.match_case,
                 *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))


def _by_type(tree: ast.AST) -> dict[type, list[ast.AST]]:
    """Every node of the tree by type: ``ast.walk`` without its generators (two and a half times
    faster), leaving out the expression contexts (``Load``/``Store``) that no precheck reads."""
    found: dict[type, list[ast.AST]] = {}
    stack: list = [tree]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        node = pop()
        kind = type(node)
        fields = _FIELDS.get(kind)
        if fields is None:
            if not issubclass(kind, ast.AST):
                continue  # a name in a list of names (`global a, b`), or None (`{**d}`'s key)
            fields = _FIELDS[kind] = tuple(name for name in kind._fields if name != "ctx")
        nodes = found.get(kind)
        if nodes is None:
            found[kind] = [node]
        else:
            nodes.append(node)
        for name in fields:
            value = getattr(node, name, None)
            if value.__class__ is list:
                extend(value)
            elif isinstance(value, ast.AST):
                push(value)
    return found


# What binds names of its own (a scope) and what repeats (a loop), on CPython's tree.
AST_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
AST_LOOPS = (ast.For, ast.AsyncFor, ast.While)


class CallPlace:
    """Where a call is, by one walk of the tree: ``scope``, the innermost function, lambda or class
    whose span holds it (a definition's decorators are outside that span; None at module level);
    ``loop``, the innermost loop around it inside that scope; ``loops``, every loop around it in
    the file, the outermost first; ``functions``, every function whose lines hold it (decorators
    included), the outermost first."""

    __slots__ = ("scope", "loop", "loops", "functions")

    def __init__(self, scope, loop, loops, functions):
        self.scope, self.loop, self.loops, self.functions = scope, loop, loops, functions


def _call_places(statement: ast.stmt) -> dict[int, CallPlace]:
    """The places of the calls in one statement of the module."""
    found: dict[int, CallPlace] = {}
    # (node, its scope, its innermost loop in that scope, the loops around it, the functions around it)
    stack: list[tuple[ast.AST, Any, Any, tuple, tuple]] = [(statement, None, None, (), ())]
    scopes, loop_types, function_types = frozenset(AST_SCOPES), frozenset(AST_LOOPS), _FUNCTION_TYPES
    while stack:
        node, scope, loop, loops, functions = stack.pop()
        kind = type(node)
        is_scope, is_loop = kind in scopes, kind in loop_types
        decorators = {id(d) for d in node.decorator_list} if is_scope and kind is not ast.Lambda else ()
        inner_functions = functions + (node,) if kind in function_types else functions
        inner_loops = loops + (node,) if is_loop else loops
        for child in _children(node):
            if id(child) in decorators:
                place = (scope, loop, loops, inner_functions)
            elif is_scope:
                place = (node, None, inner_loops, inner_functions)
            else:
                place = (scope, node if is_loop else loop, inner_loops, inner_functions)
            if type(child) is ast.Call:
                found[id(child)] = CallPlace(*place)
            stack.append((child, *place))
    return found


_FUNCTION_TYPES = frozenset({ast.FunctionDef, ast.AsyncFunctionDef})


def _children(node: ast.AST) -> list[ast.AST]:
    """``ast.iter_child_nodes`` as a list, read through the same field table as ``_by_type``
    (expression contexts left out: they hold nothing)."""
    kind = type(node)
    fields = _FIELDS.get(kind)
    if fields is None:
        fields = _FIELDS[kind] = tuple(name for name in kind._fields if name != "ctx")
    children = []
    for name in fields:
        value = getattr(node, name, None)
        if value.__class__ is list:
            children += [item for item in value if isinstance(item, ast.AST)]
        elif isinstance(value, ast.AST):
            children.append(value)
    return children


def _start(statement: ast.stmt) -> tuple[int, int]:
    """Where a statement starts: its first decorator's ``@``, or its first token (statements that
    share a line, ``a(); b()``, start at their own columns)."""
    decorators = getattr(statement, "decorator_list", ())
    if decorators:
        return decorators[0].lineno, decorators[0].col_offset - 1
    return statement.lineno, statement.col_offset


def span(node: ast.AST) -> tuple[int, int]:
    """The lines a node covers, its decorators included."""
    return ast_first_line(node), node.end_lineno


def last_parts(qualified: Iterable[str]) -> frozenset[str]:
    """``{"torch.nn.Conv2d"}`` -> ``{"Conv2d"}``: how a precheck matches what a rule qualifies."""
    return frozenset(name.rsplit(".", 1)[-1] for name in qualified)


class SyntaxIndex:
    """One walk over CPython's tree: its nodes by type, and the file's ``from ... import ... as``
    aliases, with a memo for the answers the ``ast_`` questions compute once per file."""

    def __init__(self, tree: ast.Module, source: str, target_torch: tuple[int, ...] = (0,),
                 path: str | None = None, project: Any = None, settings: Any = None):
        self.tree = tree
        self.source = source
        self.path = path  # the file, and the project's modules (analysis/project.py) when known:
        self.project = project  # prechecks then see what a call of the project's own function does
        self.target_torch = target_torch  # the oldest torch by default: every version-gated shape counts
        self.settings = settings  # the run's settings (config.Settings), when known: for rules' options
        self._by_type = _by_type(tree)
        # CPython ends a line at "\n", "\r\n" or a lone "\r"
        self._line_count = source.count("\n") + source.count("\r") - source.count("\r\n") + 1
        self._calls_by_callee: dict[str | None, list[ast.Call]] | None = None
        self._memo: dict[Any, Any] = {}
        self._aliases: dict[str, set[str]] = {}  # local name -> last parts of what it may name
        for node in self._by_type.get(ast.ImportFrom, ()):
            for alias in node.names:
                if alias.asname:
                    self._aliases.setdefault(alias.asname, set()).add(alias.name.rsplit(".", 1)[-1])

    def torch_at_least(self, version: str) -> bool:
        """The torch the code may target is ``version`` or newer (by default the oldest torch is
        assumed, so that a precheck allows every version-gated shape)."""
        return at_least(self.target_torch, version)

    def rule_option(self, rule: str, option: str, default: Any) -> Any:
        """A rule's option as the run sets it (``Rule.option``); None when the index knows no settings,
        so that a precheck that reads it allows any value."""
        return None if self.settings is None else self.settings.rule_option(rule, option, default)

    def project_summaries(self) -> Any:
        """The summaries of the project's modules (callgraph.Summaries), with this file's text
        among them; None when the index knows no project."""
        if self.project is None or self.path is None:
            return None
        self.memo("project-source", lambda: self.project.use_source(self.path, self.source, self.tree) or True)
        return self.project.summaries

    def project_mentions(self, word: str) -> bool:
        """Could a call in the file reach project code that contains ``word`` (see
        ProjectModules.mentions)? Always True when the index knows no project: a precheck may only
        say no when it is sure."""
        if self.project is None or self.path is None:
            return True
        return self.memo(("mentions", word), lambda: self.project.mentions(self.path, word, self.source))

    def place(self, call: ast.Call) -> CallPlace:
        """Where a call of the tree is (CallPlace): the calls of the module's statement that holds
        it are placed by one walk of that statement, on first use."""
        body = self.tree.body
        starts = self.memo("statement starts", lambda: [_start(statement) for statement in body])
        statement = body[bisect.bisect_right(starts, (call.lineno, call.col_offset)) - 1]
        return self.memo(("call places", id(statement)), lambda: _call_places(statement))[id(call)]

    def memoized(self, key: Any) -> bool:
        """Has ``memo`` computed ``key`` for this file?"""
        return key in self._memo

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """``compute()``, once per file for each ``key``."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def nodes(self, *types: type) -> list:
        if len(types) == 1:
            return self._by_type.get(types[0], [])
        return [node for kind in types for node in self._by_type.get(kind, ())]

    def names(self, names: Iterable[str]) -> frozenset[str]:
        """``names`` and the local aliases of any of them."""
        wanted = set(names)
        return frozenset(wanted | {local for local, named in self._aliases.items() if named & wanted})

    def calls(self, *names: str) -> list[ast.Call]:
        """The calls of anything whose name ends in one of ``names``."""
        if self._calls_by_callee is None:
            self._calls_by_callee = {}
            for call in self.nodes(ast.Call):
                self._calls_by_callee.setdefault(ast_callee(call), []).append(call)
        return [call for name in self.names(names) for call in self._calls_by_callee.get(name, ())]

    def calls_of(self, qualified: Iterable[str]) -> list[ast.Call]:
        """The calls that may call one of the ``qualified`` names a rule matches
        (``torch.nn.DataParallel``): the precheck twin of comparing ``ctx.qualified_name``."""
        return self.calls(*last_parts(qualified))

    def blocks(self) -> list[list[ast.stmt]]:
        """Every block of two or more statements (bodies, ``else`` and ``finally`` parts)."""
        def compute() -> list[list[ast.stmt]]:
            return [block for node in self.nodes(*_BLOCK_OWNERS) for field in ("body", "orelse", "finalbody")
                    if isinstance(block := getattr(node, field, None), list) and len(block) > 1]
        return self.memo("blocks", compute)

    @property
    def code_words(self) -> str:
        """The words the file's code says, one per line: names, attributes, keywords, imports,
        definitions and the strings that are values. Comments and string statements (docstrings)
        are left out, as ``syntax.code_text`` blanks them: the precheck twin of searching that
        text for a word."""
        def compute() -> str:
            statements = [node.value for node in self.nodes(ast.Expr)
                          if isinstance(node.value, (ast.Constant, ast.JoinedStr))]
            skipped = {id(part) for statement in statements for part in ast.walk(statement)}
            words = [node.id for node in self.nodes(ast.Name)]
            words += [node.attr for node in self.nodes(ast.Attribute)]
            words += [node.arg for node in self.nodes(ast.keyword, ast.arg) if node.arg]
            words += [node.name for node in self.nodes(ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)]
            words += [name for node in self.nodes(ast.alias) for name in (node.name, node.asname) if name]
            words += [node.value for node in self.nodes(ast.Constant)
                      if isinstance(node.value, str) and id(node) not in skipped]
            return "\n".join(words)
        return self.memo("code_words", compute)

    @property
    def source_lines(self) -> list[str]:
        """The source's lines as CPython numbers them: ``source_lines[node.lineno - 1]``."""
        return self.memo("source_lines", lambda: re.split(r"\r\n|\r|\n", self.source))

    @property
    def code(self) -> str:
        """The source without its comments and docstrings (syntax.code_text), as
        ``RuleContext.code`` reads it: for prechecks that decide from the presence of a word."""
        return self.memo("code", lambda: code_text(self.source))

    @property
    def imported(self) -> frozenset[str]:
        """The names import statements bind, anywhere in the file (``import a.b`` binds ``a``)."""
        def compute() -> frozenset[str]:
            return frozenset((alias.asname or alias.name.partition(".")[0])
                             for node in self.nodes(ast.Import, ast.ImportFrom) for alias in node.names)
        return self.memo("imported", compute)

    def imported_from(self, package: str) -> frozenset[str]:
        """The names import statements bind to ``package`` or something in it (``import torch``,
        ``import torch._dynamo as dynamo``, ``from torch import compile``)."""
        def compute() -> frozenset[str]:
            names = set()
            for node in self.nodes(ast.Import):
                names.update(alias.asname or alias.name.partition(".")[0] for alias in node.names
                             if alias.name == package or alias.name.startswith(package + "."))
            for node in self.nodes(ast.ImportFrom):
                module = node.module or ""
                if not node.level and (module == package or module.startswith(package + ".")):
                    names.update(alias.asname or alias.name for alias in node.names)
            return frozenset(names)
        return self.memo(("imported_from", package), compute)

    @property
    def import_aliases(self) -> dict[str, frozenset[str]]:
        """The precheck twin of ``bindings.Imports``: local name -> every qualified name an import
        statement anywhere in the file gives it (``Imports`` keeps the last one)."""
        def compute() -> dict[str, frozenset[str]]:
            found: dict[str, set[str]] = {}
            for node in self.nodes(ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name.partition(".")[0]
                    found.setdefault(local, set()).add(alias.name if alias.asname else local)
            star = False
            for node in self.nodes(ast.ImportFrom):
                if node.level or not node.module:
                    continue
                for alias in node.names:
                    if alias.name != "*":
                        found.setdefault(alias.asname or alias.name, set()).add(f"{node.module}.{alias.name}")
                    else:
                        star = True
            for name in STAR_MODULES if star else ():  # as Imports reads `torch` after `from helpers import *`
                found.setdefault(name, {name})
            return {local: frozenset(names) for local, names in found.items()}
        return self.memo("import_aliases", compute)

    def qualified_names(self, expr: ast.AST) -> frozenset[str]:
        """The precheck twin of ``Bindings.qualified_name``: what a dotted name may name through the
        file's imports (``amp.autocast`` after ``from torch.cuda import amp``); empty when nothing
        imported starts it."""
        name = ast_dotted_name(expr)
        if name is None:
            return frozenset()
        head, dot, rest = name.partition(".")
        return frozenset(target + dot + rest for target in self.import_aliases.get(head, ()))

    def surely_qualified_name(self, expr: ast.AST) -> str | None:
        """The one name ``Bindings.qualified_name`` can give ``expr``: every import of the file
        that binds its head agrees, and one of them is a statement of the module's body (which
        ``Imports`` surely reads); else None. For a precheck that says no when a name is surely
        one thing (``torch.no_grad``)."""
        names = self.qualified_names(expr)
        if len(names) != 1:
            return None
        head = ast_dotted_name(expr).partition(".")[0]
        bound = (alias.asname or (alias.name.partition(".")[0] if type(statement) is ast.Import else alias.name)
                 for statement in self.tree.body if type(statement) is ast.Import
                 or type(statement) is ast.ImportFrom and not statement.level and statement.module
                 for alias in statement.names)
        return next(iter(names)) if head in bound else None

    def may_be_imported(self, func: ast.AST) -> bool:
        """Can ``func`` (``torch.profiler.profile``, ``profile``) name something an import brought,
        as ``Bindings.qualified_name`` requires? Not ``self.profiler.profile``."""
        name = ast_dotted_name(func)
        return name is not None and name.partition(".")[0] in self.imported

    def is_call(self, node: ast.AST, *names: str) -> bool:
        return isinstance(node, ast.Call) and ast_callee(node) in self.names(names)

    def classes_deriving(self, *names: str) -> list[ast.ClassDef]:
        """Classes with a base whose name ends in one of ``names``, and the classes of the file
        that derive from those."""
        roots, found = self.names(names), []
        classes = self.nodes(ast.ClassDef)
        changed = True
        while changed:
            changed = False
            for node in classes:
                if node in found:
                    continue
                bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", None) for b in node.bases}
                if bases & roots or bases & {c.name for c in found}:
                    found.append(node)
                    changed = True
        return found

    def scope_of(self, node: ast.AST) -> str | None:
        """The qualified name of the function a node is in (``Trainer.fit``, ``outer.inner``), as the
        summaries name it; None at module level or in a class body."""
        return self.memo("scope-by-line", self._scope_by_line)[node.lineno]

    def _scope_by_line(self) -> list[str | None]:
        names: list[str | None] = [None] * (self._line_count + 2)
        for start, end, name in self._scopes():  # outer before inner: the innermost is written last
            names[start:end + 1] = [name] * (end + 1 - start)
        return names

    def _scopes(self) -> list[tuple[int, int, str | None]]:
        found: list[tuple[int, int, str | None]] = []

        def walk(body, prefix: str, in_function: bool) -> None:
            for node in body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}{node.name}"
                    function = not isinstance(node, ast.ClassDef)
                    qualname = name if function or in_function else None
                    found.append((span(node)[0], node.end_lineno, qualname if function else
                                  (prefix[:-1] or None) if in_function else None))
                    walk(node.body, name + ".", function or in_function)
                else:
                    for field in ("body", "orelse", "finalbody", "handlers"):
                        walk(getattr(node, field, ()) or (), prefix, in_function)

        walk(self.tree.body, "", False)
        return found

    def lines(self, containers: Iterable[ast.AST]) -> bytearray:
        """A mask of the lines the containers cover: ``mask[node.lineno]`` says whether a node
        starts inside one of them."""
        mask = bytearray(self._line_count + 2)
        for container in containers:
            start, end = span(container)
            mask[start:end + 1] = b"\1" * (end + 1 - start)
        return mask
