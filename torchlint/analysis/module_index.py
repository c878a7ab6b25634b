"""A file's index from CPython's tree: what each module-level name means (imports, classes,
functions, names bound once to ``C(...)`` or to a dotted name), read without entering function
bodies, and the helpers that read names and positions for the function walker."""

from __future__ import annotations

import ast
import bisect
import re

from torchlint.analysis.summaries import ClassSummary, Effect, Import, ModuleSummary, Scope

_NEWLINE = re.compile(r"\r\n|\r|\n")
_SNIPPET = 60


class SourceLines:
    """Positions and snippets of CPython tree nodes: ``ast`` counts columns in UTF-8 bytes,
    summaries in code points."""

    def __init__(self, source: str):
        self.source = source
        self.ascii = source.isascii()
        self._lines: list[str] | None = None
        self._walrus: list[int] | None = None

    def walrus(self, first: int, last: int) -> bool:
        """Does a line from ``first`` to ``last`` hold a ``:=`` (which binds a name inside an
        expression)?"""
        if self._walrus is None:
            self._walrus = [number for number, line in enumerate(self.lines, 1) if ":=" in line] \
                if ":=" in self.source else []
        found = bisect.bisect_left(self._walrus, first)
        return found < len(self._walrus) and self._walrus[found] <= last

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            source = self.source
            self._lines = source.split("\n") if "\r" not in source else _NEWLINE.split(source)
        return self._lines

    def column(self, line: int, byte_column: int) -> int:
        if self.ascii:
            return byte_column
        text = self.lines[line - 1] if line - 1 < len(self.lines) else ""
        return len(text.encode("utf-8")[:byte_column].decode("utf-8", "replace"))

    def snippet(self, node: ast.AST) -> str:
        """The node's code on one line, shortened for a message."""
        lines = self.lines[node.lineno - 1:node.end_lineno]
        if not lines:
            return ""
        start, end = self.column(node.lineno, node.col_offset), self.column(node.end_lineno, node.end_col_offset)
        if len(lines) == 1:
            text = lines[0][start:end]
        else:
            text = "\n".join([lines[0][start:], *lines[1:-1], lines[-1][:end]])
        text = " ".join(text.split())
        return text if len(text) <= _SNIPPET else text[:_SNIPPET - 3] + "..."

    def effect(self, path: str, node: ast.AST, what: str | None = None) -> Effect:
        return Effect(path, node.lineno, self.column(node.lineno, node.col_offset), node.end_lineno,
                      self.column(node.end_lineno, node.end_col_offset), self.snippet(node) if what is None else what)


def definition_at(text: SourceLines, first: int, end: int) -> ast.AST | None:
    """The function defined on lines ``first`` to ``end`` of the file (decorators included), parsed
    alone with the positions it has in the whole file (blank lines before it, and an ``if 1:`` on
    the line above an indented one); None when those lines are not one function definition."""
    lines = text.lines[first - 1:end]
    indented = bool(lines) and lines[0][:1] in (" ", "\t")
    padding = first - 1 - indented
    if not lines or padding < 0:
        return None
    try:
        tree = ast.parse("\n" * padding + "\n".join(["if 1:", *lines] if indented else lines) + "\n")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    statements = tree.body[0].body if indented and len(tree.body) == 1 and type(tree.body[0]) is ast.If \
        else tree.body
    if len(statements) != 1 or type(statements[0]) not in FUNCTION_DEFS:
        return None
    return statements[0]


def dotted(expr: ast.AST) -> str | None:
    """``a.b.c`` for a chain of names, else None."""
    parts = []
    while type(expr) is ast.Attribute:
        parts.append(expr.attr)
        expr = expr.value
    if type(expr) is not ast.Name:
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


def import_bindings(node: ast.Import | ast.ImportFrom) -> list[tuple[str, Import | None]]:
    """The names an import statement binds, and what each names (None for ``*``)."""
    if isinstance(node, ast.Import):
        return [(alias.asname, Import(alias.name)) if alias.asname else
                (alias.name.split(".", 1)[0], Import(alias.name.split(".", 1)[0])) for alias in node.names]
    return [("*", None) if alias.name == "*" else
            (alias.asname or alias.name, Import(node.module or "", alias.name, node.level)) for alias in node.names]


FUNCTION_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def method_kind(node: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> str:
    if not in_class:
        return "function"
    for decorator in node.decorator_list:
        if dotted(decorator) in ("staticmethod", "classmethod"):
            return decorator.id
    return "method"


class ScopeNames:
    """A scope's bindings as its statements are read: how often each name is bound, its imports,
    and the names bound to ``C(...)`` (a callee named in CapWords, as classes are), to another
    call's result (``logger = make_logger(...)``) or to a dotted name (kept when bound once)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.imports: dict[str, Import] = {}
        self.calls: dict[str, str] = {}
        self.results: dict[str, str] = {}
        self.aliases: dict[str, str] = {}
        self.defined: set[str] = set()

    def bind(self, name: str, value: ast.AST | None = None) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        kind = type(value)
        if kind is ast.Call:
            callee = dotted(value.func)
            if callee is not None and callee.rpartition(".")[2][:1].isupper():  # a class, by its name
                self.calls[name] = callee
            elif callee is not None:
                self.results[name] = callee
        elif kind is ast.Name or kind is ast.Attribute:
            text = dotted(value)
            if text is not None:
                self.aliases[name] = text

    def bind_targets(self, target: ast.AST, value: ast.AST | None = None) -> None:
        kind = type(target)
        if kind is ast.Name:
            self.bind(target.id, value)
        elif kind is ast.Tuple or kind is ast.List:
            for element in target.elts:
                self.bind_targets(element)
        elif kind is ast.Starred:
            self.bind_targets(target.value)

    def bind_import(self, node: ast.Import | ast.ImportFrom, star_imports: list[Import] | None = None) -> None:
        for name, imported in import_bindings(node):
            if imported is None:
                if star_imports is not None:
                    star_imports.append(Import(node.module or "", None, node.level))
                continue
            if name in self.counts and self.imports.get(name) == imported:
                continue  # `import torch` then `import torch.nn.parallel`: the same module bound again
            self.bind(name)
            self.imports[name] = imported

    def define(self, name: str) -> None:
        self.bind(name)
        self.defined.add(name)

    def scope(self, annotated: dict[str, str] | None = None) -> Scope:
        once = {name for name, count in self.counts.items() if count == 1}
        instances = {name: text for name, text in (annotated or {}).items() if name in once}
        instances.update((name, text) for name, text in self.calls.items() if name in once)
        return Scope(imports={name: imp for name, imp in self.imports.items() if name in once},
                     instances=instances,
                     aliases={name: text for name, text in self.aliases.items() if name in once and name != text},
                     results={name: text for name, text in self.results.items() if name in once},
                     nested=frozenset(self.defined & once), locals=frozenset(self.counts))


def compound_bodies(body: list[ast.stmt]):
    """The statements of a block and of the blocks nested in its ``if``/``try``/``with``/loops
    (the same scope), without entering functions or classes."""
    for statement in body:
        yield statement
        kind = type(statement)
        if kind in (ast.If, ast.For, ast.AsyncFor, ast.While):
            yield from compound_bodies(statement.body)
            yield from compound_bodies(statement.orelse)
        elif kind in (ast.With, ast.AsyncWith):
            yield from compound_bodies(statement.body)
        elif kind in (ast.Try, ast.TryStar):
            for block in (statement.body, statement.orelse, statement.finalbody,
                          *(handler.body for handler in statement.handlers)):
                yield from compound_bodies(block)
        elif kind is ast.Match:
            for case in statement.cases:
                yield from compound_bodies(case.body)


def index_class(module: ModuleSummary, node: ast.ClassDef, qualname: str, scope: str | None) -> None:
    """Registers a class, its methods and the classes nested in it."""
    methods: dict[str, str] = {}
    for statement in compound_bodies(node.body):
        if isinstance(statement, FUNCTION_DEFS):
            methods[statement.name] = method_kind(statement, True)
            module.register(f"{qualname}.{statement.name}", statement, qualname)
        elif isinstance(statement, ast.ClassDef):
            index_class(module, statement, f"{qualname}.{statement.name}", scope)
    bases = tuple(text for text in (dotted(base.value if isinstance(base, ast.Subscript) else base)
                                    for base in node.bases) if text is not None)
    module.classes[qualname] = ClassSummary(qualname, node.lineno, bases, methods, scope)


def _literal_names(value: ast.AST) -> tuple[str, ...] | None:
    """``("a", "b")`` for ``["a", "b"]`` or ``("a", "b")``; None for anything else."""
    if type(value) not in (ast.List, ast.Tuple):
        return None
    names = tuple(element.value for element in value.elts
                  if type(element) is ast.Constant and type(element.value) is str)
    return names if len(names) == len(value.elts) else None


def index_module(tree: ast.Module, source: str, path: str, summarizer) -> ModuleSummary:
    """A file's index: its imports, classes and module-level names, read without entering
    function bodies; ``summarizer(module, def, qualname, class, text)`` summarizes a function
    when ``ModuleSummary.function`` first asks for it (with a last argument True, reads its
    bindings alone: ``ModuleSummary.bindings``)."""
    names, star_imports, text = ScopeNames(), [], SourceLines(source)
    module = ModuleSummary(path, Scope(), (), {}, summarizer=lambda module, node, qualname, class_name, *only:
                           summarizer(module, node, qualname, class_name, text, *only))
    for statement in compound_bodies(tree.body):
        kind = type(statement)
        if kind in FUNCTION_DEFS:
            names.define(statement.name)
            module.register(statement.name, statement, None)
        elif kind is ast.ClassDef:
            names.define(statement.name)
            index_class(module, statement, statement.name, None)
        elif kind is ast.Assign:
            for target in statement.targets:
                names.bind_targets(target, statement.value)
                if type(target) is ast.Name and target.id == "__all__":
                    module.exports = _literal_names(statement.value)
        elif kind is ast.AnnAssign:
            names.bind_targets(statement.target, statement.value)
        elif kind is ast.AugAssign or kind is ast.For or kind is ast.AsyncFor:
            names.bind_targets(statement.target)
            if type(statement.target) is ast.Name and statement.target.id == "__all__":
                module.exports = None  # `__all__ += other.__all__`: not all of it is known
        elif kind is ast.With or kind is ast.AsyncWith:
            for item in statement.items:
                if item.optional_vars is not None:
                    names.bind_targets(item.optional_vars)
        elif kind is ast.Import or kind is ast.ImportFrom:
            names.bind_import(statement, star_imports)
    module.scope = names.scope()
    module.star_imports = tuple(star_imports)
    return module
