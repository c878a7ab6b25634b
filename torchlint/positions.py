"""Positions: where the nodes a rule reported or edited are in the text, and the text edits a
fix's node edits become. LibCST computes positions by rendering the module, so only the innermost
statement that holds each reported or edited node is rendered, from the line CPython's tree gives
it and with its block's indentation (the whole module is the fallback)."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from libcst._nodes.internal import CodegenState
from libcst.metadata import PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

from torchlint.analysis.walk import Visitor, flat, visit
from torchlint.context import RuleContext
from torchlint.diagnostics import Diagnostic, Edit, Fix, SourceText
from torchlint.fixes import NodeEdit
from torchlint.lazy import libcst as cst


def resolve_reports(ctx: RuleContext, module: cst.Module, source: str,
                    statement_lines: list[int] | None) -> list[Diagnostic]:
    """Turn node-anchored reports into positioned diagnostics with offset edits."""
    text = SourceText(source)
    nodes = [r.node for r in ctx.reports] + [e.node for r in ctx.reports if r.fix for e in r.fix.edits]
    nodes += [first_decorator for node in nodes if (first_decorator := _first_decorator(node)) is not None]
    found = _positions_by_statement(module, nodes, text, statement_lines) if statement_lines is not None else None
    positions, indents = found if found is not None else (_positions(module, {id(node) for node in nodes}), {})
    replaced = [e.node for r in ctx.reports if r.fix for e in r.fix.edits if not isinstance(e.text, str)]
    unknown = [node for node in replaced if id(node) not in indents]  # each node's blocks are its statement's
    if unknown:
        indents.update(_block_indents(module, unknown))
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
                                      *start, *end, fix, related=tuple(report.related)))
    return diagnostics


class _Positioned(Exception):
    """Every node asked for has its position: the rest of the module need not be rendered."""


class _PositionsUntil(PositionProvidingCodegenState):
    """LibCST's position-recording render, which stops once the nodes in ``wanted`` are done."""

    wanted: set[int]

    def after_codegen(self, node: cst.CSTNode) -> None:
        super().after_codegen(node)  # the node's render, and so its position, is complete
        if id(node) in self.wanted:
            self.wanted.discard(id(node))
            if not self.wanted:
                raise _Positioned


def _positions(module: cst.Module, wanted: set[int]) -> dict:
    """PositionProvider's positions (line 1-based, column 0-based) of at least the nodes whose ids
    are ``wanted``: LibCST renders the module to find them, and the render stops after the last."""
    provider = PositionProvider()
    state = _PositionsUntil(default_indent=module.default_indent, default_newline=module.default_newline,
                            provider=provider)
    state.wanted = set(wanted)
    try:
        module._codegen(state)
    except Exception as error:  # noqa: BLE001 - see below
        # on the way out, an enclosing node's position record looks up a child that was never
        # rendered, and its KeyError replaces the stop: a KeyError caused by the stop is one too
        while error is not None and not isinstance(error, _Positioned):
            error = error.__context__
        if error is None:
            raise
    return provider._computed


def _positions_by_statement(module: cst.Module, wanted: list[cst.CSTNode], text: SourceText,
                            statement_lines: list[int]) -> tuple[dict, dict[int, list[str]]] | None:
    """The positions of the ``wanted`` nodes, rendering only the innermost statement that holds
    each (a line of simple statements, or a compound statement), from the line where CPython's
    tree starts it, with its block's indentation: a few lines for a finding in a large function.
    With them, each node's block indentation (its statement's, as _block_indents would find it;
    left out inside a ``match``, whose cases add their own).
    None when a wanted node is outside every statement, the two trees do not pair their statements,
    or a rendered statement is not the source's text at that line: then the module is rendered as
    a whole."""
    statements = _statements(module, statement_lines)
    if statements is None:
        return None
    nodes, ends, _ = flat(module)
    starts = [flat(statement.node)[2] for statement in statements]
    chosen: dict[int, _Statement] = {}
    indents: dict[int, list[str]] = {}
    for node in wanted:
        found_nodes, _, index = flat(node)
        if found_nodes is not nodes:
            return None  # not a node of this module's tree
        position = bisect_right(starts, index) - 1
        while position >= 0 and ends[starts[position]] <= index:
            position -= 1  # a statement before the node's own, not around it
        if position < 0:
            return None
        chosen[position] = statements[position]
        if type(statements[position].node) is not cst.Match:  # in a case, the case's indent counts too
            indents[id(node)] = list(statements[position].indents)
    provider = PositionProvider()
    for position in sorted(chosen):
        statement = chosen[position]
        state = PositionProvidingCodegenState(default_indent=module.default_indent,
                                              default_newline=module.default_newline, provider=provider,
                                              line=statement.line)
        state.indent_tokens = list(statement.indents)
        statement.node._codegen(state)
        rendered = "".join(state.tokens)
        if statement.line < 1 or statement.line > len(text.line_starts):
            return None
        start = text.offset(statement.line - 1, 0)
        written = text.text[start:start + len(rendered)]
        if written != rendered and not (start + len(written) == len(text.text) and rendered.startswith(written)
                                        and not rendered[len(written):].strip()):
            return None  # (at the end of a file without a final newline, the render adds one)
    return provider._computed, indents


@dataclass
class _Statement:
    """A statement LibCST renders on its own, the line its render starts on (its leading blank and
    comment lines included), and the indentation of the blocks around it."""

    node: cst.CSTNode
    line: int
    indents: tuple[str, ...]


class _Misaligned(Exception):
    """CPython's statements and LibCST's do not pair up."""


def _statements(module: cst.Module, lines: list[int]) -> list[_Statement] | None:
    """Every line of simple statements and every compound statement (but an ``elif``, which renders
    only as part of its ``if``), in the order of the text, each paired with the first line that
    CPython gives the same statement (``lines``: see engine._statement_lines; a line of ``a; b``
    is two statements there). None when the two trees do not pair up."""
    found: list[_Statement] = []
    position = 0

    def take(count: int) -> int:
        nonlocal position
        if position + count > len(lines):
            raise _Misaligned
        first = lines[position]
        position += count
        return first

    def block(statements, indents: tuple[str, ...]) -> None:
        for statement in statements:
            leading = len(statement.leading_lines)
            decorators = getattr(statement, "decorators", ())
            if decorators:
                leading += len(decorators[0].leading_lines)
            if isinstance(statement, cst.SimpleStatementLine):
                found.append(_Statement(statement, take(len(statement.body)) - leading, indents))
            else:
                found.append(_Statement(statement, take(1) - leading, indents))
                compound(statement, indents)

    def suite(body: cst.BaseSuite, indents: tuple[str, ...]) -> None:
        if isinstance(body, cst.IndentedBlock):
            block(body.body, indents + (module.default_indent if body.indent is None else body.indent,))
        else:
            take(len(body.body))  # `if x: a; b`: statements on the header's line

    def compound(statement: cst.CSTNode, indents: tuple[str, ...]) -> None:
        if not isinstance(statement, cst.Match):
            suite(statement.body, indents)
        for handler in getattr(statement, "handlers", ()):
            suite(handler.body, indents)
        orelse = getattr(statement, "orelse", None)
        while isinstance(orelse, cst.If):  # `elif`: a statement of its own for CPython
            take(1)
            suite(orelse.body, indents)
            orelse = orelse.orelse
        if orelse is not None:
            suite(orelse.body, indents)
        final = getattr(statement, "finalbody", None)
        if final is not None:
            suite(final.body, indents)
        if isinstance(statement, cst.Match):  # its cases are indented, and their blocks within them
            cases = indents + (module.default_indent if statement.indent is None else statement.indent,)
            for case in statement.cases:
                suite(case.body, cases)

    try:
        block(module.body, ())
    except _Misaligned:
        return None
    return found if position == len(lines) else None


class _IndentFinder(Visitor):
    """The block indentation around each of some nodes: a node rendered on its own loses it, and
    a call that spans lines inside a function would come out flush left."""

    def __init__(self, module: cst.Module, targets: list[cst.CSTNode]):
        self.default = module.default_indent
        self.targets = {id(node) for node in targets}
        self.stack: list[str] = []
        self.cases: list[str] = []  # the indentation of the cases of each `match` around
        self.found: dict[int, list[str]] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        if id(node) in self.targets:
            self.found[id(node)] = list(self.stack)
        if type(node) is cst.IndentedBlock:
            self.stack.append(self.default if node.indent is None else node.indent)
        elif type(node) is cst.Match:
            self.cases.append(self.default if node.indent is None else node.indent)
        elif type(node) is cst.MatchCase:  # a case is indented within its `match`, its block within it
            self.stack.append(self.cases[-1])
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if type(original_node) in (cst.IndentedBlock, cst.MatchCase):
            self.stack.pop()
        elif type(original_node) is cst.Match:
            self.cases.pop()


def _block_indents(module: cst.Module, nodes: list[cst.CSTNode]) -> dict[int, list[str]]:
    finder = _IndentFinder(module, nodes)
    visit(module, finder)
    return finder.found


def render(node: cst.CSTNode, module: cst.Module, indent_tokens: list[str]) -> str:
    state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
    state.indent_tokens = list(indent_tokens)
    node._codegen(state)
    return "".join(state.tokens)


def _first_decorator(node: cst.CSTNode) -> cst.Decorator | None:
    decorators = getattr(node, "decorators", None)
    return decorators[0] if decorators else None


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
    # a decorated definition's span starts at `def`/`class`: its lines start at its first decorator
    first_decorator = _first_decorator(edit.node)
    first_line = (positions[first_decorator] if first_decorator is not None else span).start.line
    if edit.where == "line_before":
        line_start = text.line_starts[first_line - 1]
        return Edit(line_start, line_start, new)
    if edit.where == "lines":  # the node's whole lines, its leading lines (a statement's) included
        first = first_line - 1 - len(getattr(edit.node, "leading_lines", ()))
        line = span.end.line  # 0-based index of the next line
        end = text.line_starts[line] if line < len(text.line_starts) else len(text.text)
        return Edit(text.line_starts[first], end, new)
    if edit.where == "line_after":
        line = span.end.line  # 0-based index of the next line
        offset = text.line_starts[line] if line < len(text.line_starts) else len(text.text)
        if offset == len(text.text) and not text.text.endswith(("\n", "\r")):
            new = module.default_newline + new
        return Edit(offset, offset, new)
    raise ValueError(f"unknown edit kind {edit.where}")
