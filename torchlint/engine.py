"""The engine: prefilter, parse once, run every enabled rule in one batched traversal, resolve
positions and fixes only for what was reported, apply fixes to a fixpoint."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import MetadataWrapper, PositionProvider

from torchlint.diagnostics import Diagnostic, Edit, Fix, Severity, SourceText, apply_edits
from torchlint.matching import ImportMap
from torchlint.rule import NodeEdit, Report, Rule, RuleContext
from torchlint.suppression import apply_noqa, skip_file
from torchlint.walk import walk

SYNTAX_ERROR = ("TL000", "syntax-error")
MAX_FIX_ROUNDS = 10


class _Dispatcher:
    """Calls every rule's ``visit_<Node>``/``leave_<Node>`` in one walk and keeps the ancestor
    stack that the shared helpers read."""

    def __init__(self, ctx: RuleContext, rules: list[Rule]):
        self.ctx = ctx
        self.visits: dict[type, list] = {}
        self.leaves: dict[type, list] = {}
        for rule in rules:
            for attr in dir(type(rule)):
                if attr.startswith(("visit_", "leave_")):
                    node_type = getattr(cst, attr[6:], None)
                    if node_type is None:
                        raise RuntimeError(f"{type(rule).__name__}.{attr}: no LibCST node named {attr[6:]}")
                    table = self.visits if attr.startswith("visit_") else self.leaves
                    table.setdefault(node_type, []).append(getattr(rule, attr))

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.ctx.ancestors.append(node)
        for visit in self.visits.get(type(node), ()):
            visit(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        for leave in self.leaves.get(type(original_node), ()):
            leave(original_node)
        self.ctx.ancestors.pop()


def syntax_error(path: str, error: cst.ParserSyntaxError | str, line: int = 0, col: int = 0) -> Diagnostic:
    if isinstance(error, cst.ParserSyntaxError):
        message = f"SyntaxError: {error.message}"
        line, col = max(error.raw_line - 1, 0), max(error.raw_column, 0)
    else:
        message = error
    return Diagnostic(path, *SYNTAX_ERROR, message, Severity.ERROR, line, col, line, col)


def _python_syntax_error(source: str) -> SyntaxError | None:
    try:
        compile(source, "<file>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        return error
    except (ValueError, RecursionError, MemoryError):
        return None
    return None


def _parse_failure(path: str, source: str, error: Exception) -> Diagnostic:
    """TL000 with CPython's message and position when it has one (LibCST's are vaguer)."""
    python_error = _python_syntax_error(source)
    if python_error is not None and python_error.lineno:
        line = python_error.lineno - 1
        col = max((python_error.offset or 1) - 1, 0)
        return syntax_error(path, f"SyntaxError: {python_error.msg}", line, col)
    if isinstance(error, RecursionError):
        return syntax_error(path, "the file nests too deeply to be parsed")
    return syntax_error(path, error)


def _syntax_check(source: str, path: str) -> list[Diagnostic]:
    """A file no rule needs to parse still gets its syntax errors reported (TL000): CPython's own
    parser is far cheaper than LibCST's, and LibCST confirms (it knows newer grammars)."""
    if _python_syntax_error(source) is None:
        return []
    try:
        cst.parse_module(source)
    except (cst.ParserSyntaxError, RecursionError) as error:
        return [_parse_failure(path, source, error)]
    return []


def lint_source(source: str, path: str, settings, rules: tuple[type[Rule], ...] | None = None) -> list[Diagnostic]:
    """Diagnostics for one Python source text, sorted, noqa applied."""
    if skip_file(source):
        return []
    rules = settings.rules_for(path) if rules is None else rules
    candidates = [rule for rule in rules if rule.applies(source)]
    if not candidates:
        return _syntax_check(source, path)
    try:
        module = cst.parse_module(source)
    except (cst.ParserSyntaxError, RecursionError) as error:
        return [_parse_failure(path, source, error)]
    ctx = RuleContext(path=path, source=source, module=module, settings=settings, imports=ImportMap(module))
    dispatcher = _Dispatcher(ctx, [rule(ctx) for rule in candidates])
    walk(module, dispatcher.on_visit, dispatcher.on_leave)
    if not ctx.reports:
        return []
    diagnostics = _resolve(ctx, module, source)
    return sorted(apply_noqa(source, diagnostics), key=lambda d: d.sort_key)


def _resolve(ctx: RuleContext, module: cst.Module, source: str) -> list[Diagnostic]:
    """Turn node-anchored reports into positioned diagnostics with offset edits."""
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    text = SourceText(source)
    replaced = [e.node for r in ctx.reports if r.fix for e in r.fix.edits if not isinstance(e.text, str)]
    indents = _block_indents(module, replaced) if replaced else {}
    diagnostics = []
    seen = set()
    for report in ctx.reports:
        span = positions[report.node]
        start = (span.start.line - 1, span.start.column)
        end = (span.end.line - 1, span.end.column)
        key = (report.rule.code, start, end)
        if key in seen:  # a rule may reach one node twice (nested loops); report it once
            continue
        seen.add(key)
        fix = None
        if report.fix is not None:
            edits = tuple(_edit(edit, positions, text, module, indents) for edit in report.fix.edits)
            fix = Fix(report.fix.title, report.fix.applicability, edits)
        rule = report.rule
        diagnostics.append(Diagnostic(ctx.path, rule.code, rule.name, report.message, report.severity or rule.severity,
                                      *start, *end, fix))
    return diagnostics


class _IndentFinder(cst.CSTVisitor):
    """The block indentation around each of some nodes: a node rendered on its own loses it, and
    a call that spans lines inside a function would come out flush left."""

    def __init__(self, module: cst.Module, targets: list[cst.CSTNode]):
        self.default = module.default_indent
        self.targets = {id(node) for node in targets}
        self.stack: list[str] = []
        self.found: dict[int, list[str]] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        if id(node) in self.targets:
            self.found[id(node)] = list(self.stack)
        if isinstance(node, cst.IndentedBlock):
            self.stack.append(self.default if node.indent is None else node.indent)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if isinstance(original_node, cst.IndentedBlock):
            self.stack.pop()


def _block_indents(module: cst.Module, nodes: list[cst.CSTNode]) -> dict[int, list[str]]:
    finder = _IndentFinder(module, nodes)
    module.visit(finder)
    return finder.found


def render(node: cst.CSTNode, module: cst.Module, indent_tokens: list[str]) -> str:
    state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
    state.indent_tokens = list(indent_tokens)
    node._codegen(state)
    return "".join(state.tokens)


def _edit(edit: NodeEdit, positions, text: SourceText, module: cst.Module, indents: dict) -> Edit:
    span = positions[edit.node]
    start = text.offset(span.start.line - 1, span.start.column)
    end = text.offset(span.end.line - 1, span.end.column)
    if isinstance(edit.text, str):  # rules write "\n"; the file may use "\r\n"
        new = edit.text.replace("\n", module.default_newline) if module.default_newline != "\n" else edit.text
    else:
        new = render(edit.text, module, indents.get(id(edit.node), []))
    if edit.where == "replace":
        return Edit(start, end, new)
    if edit.where == "before":
        return Edit(start, start, new)
    if edit.where == "after":
        return Edit(end, end, new)
    if edit.where == "line_before":
        line_start = text.line_starts[span.start.line - 1]
        return Edit(line_start, line_start, new)
    if edit.where == "line_after":
        line = span.end.line  # 0-based index of the next line
        offset = text.line_starts[line] if line < len(text.line_starts) else len(text.text)
        if offset == len(text.text) and not text.text.endswith(("\n", "\r")):
            new = module.default_newline + new
        return Edit(offset, offset, new)
    raise ValueError(f"unknown edit kind {edit.where}")


@dataclass
class FixResult:
    source: str
    fixed: list[Diagnostic] = field(default_factory=list)
    remaining: list[Diagnostic] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.fixed)


class FixError(Exception):
    """A round of fixes produced text that does not parse: nothing is written."""


def select_edits(diagnostics: list[Diagnostic], unsafe_fixes: bool) -> tuple[list[Diagnostic], list[Edit]]:
    """Fixes whose edits overlap none taken before them (in source order); the rest wait for the
    next round, after a re-lint."""
    taken: list[Diagnostic] = []
    edits: list[Edit] = []
    for diag in diagnostics:
        if diag.fix is None or not diag.fix.applies(unsafe_fixes):
            continue
        if any(_overlaps(new, old) for new in diag.fix.edits for old in edits):
            continue
        taken.append(diag)
        edits.extend(diag.fix.edits)
    return taken, edits


def _overlaps(a: Edit, b: Edit) -> bool:
    if a.start == a.end or b.start == b.end:  # insertions: the same point, or inside the other
        return b.start <= a.start <= b.end if a.start == a.end else a.start <= b.start <= a.end
    return a.start < b.end and b.start < a.end


def parses(source: str) -> bool:
    try:
        cst.parse_module(source)
    except (cst.ParserSyntaxError, RecursionError):
        return False
    return True


def fix_source(source: str, path: str, settings, rules: tuple[type[Rule], ...] | None = None) -> FixResult:
    """Apply fixes round after round until none applies (bounded); the result always parses."""
    result = FixResult(source)
    diagnostics = lint_source(source, path, settings, rules)
    for _ in range(MAX_FIX_ROUNDS):
        taken, edits = select_edits(diagnostics, settings.unsafe_fixes)
        if not taken or any(d.code == SYNTAX_ERROR[0] for d in diagnostics):
            break
        candidate = apply_edits(result.source, edits)
        if not parses(candidate):
            raise FixError(f"{path}: fixes {', '.join(sorted({d.code for d in taken}))} produced code that "
                           "does not parse; nothing was written. Please report this as a torchlint bug.")
        result.source = candidate
        result.fixed.extend(taken)
        diagnostics = lint_source(candidate, path, settings, rules)
    result.remaining = diagnostics
    return result
