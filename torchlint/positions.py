"""Positions: where the nodes a rule reported or edited are in the text, and the text edits a
fix's node edits become. LibCST computes positions by rendering the module, so only the module
statements that hold a reported or edited node are rendered, each from the line CPython's tree
gives it (the whole module is the fallback)."""

from __future__ import annotations

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

from torchlint.analysis.walk import visit, walk
from torchlint.context import RuleContext
from torchlint.diagnostics import Diagnostic, Edit, Fix, SourceText
from torchlint.fixes import NodeEdit


def resolve_reports(ctx: RuleContext, module: cst.Module, source: str, first_lines: list[int] | None) -> list[Diagnostic]:
    """Turn node-anchored reports into positioned diagnostics with offset edits."""
    text = SourceText(source)
    wanted = {id(r.node) for r in ctx.reports} | {id(e.node) for r in ctx.reports if r.fix for e in r.fix.edits}
    positions = first_lines is not None and _positions_by_statement(module, wanted, text, first_lines) \
        or _positions(module, wanted)
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


def _positions_by_statement(module: cst.Module, wanted: set[int], text: SourceText,
                            first_lines: list[int]) -> dict | None:
    """The positions of the ``wanted`` nodes, rendering only the module's statements that hold
    them, each from the line where CPython's tree starts it (a fraction of the module, for a few
    findings in a large file). None when a wanted node is outside the statements, or a rendered
    statement is not the source's text at that line: then the module is rendered as a whole."""
    starts = _render_starts(module, first_lines)
    if starts is None:
        return None
    holders, missing = [], set(wanted)
    for index, statement in enumerate(module.body):
        found: set[int] = set()
        walk(statement, lambda node: found.add(id(node)) if id(node) in missing else None)
        if found:
            holders.append(index)
            missing -= found
        if not missing:
            break
    if missing:
        return None
    provider = PositionProvider()
    for index in holders:
        state = PositionProvidingCodegenState(default_indent=module.default_indent,
                                              default_newline=module.default_newline, provider=provider,
                                              line=starts[index])
        module.body[index]._codegen(state)
        rendered = "".join(state.tokens)
        start = text.offset(starts[index] - 1, 0)
        if text.text[start:start + len(rendered)] != rendered:
            return None
    return provider._computed


def _render_starts(module: cst.Module, first_lines: list[int]) -> list[int] | None:
    """The line where LibCST's render of each module statement starts: CPython's line for it,
    less the blank and comment lines LibCST keeps in front of it. None if the two trees do not
    split the module alike (CPython counts each statement of ``a; b`` on its own)."""
    starts, position = [], 0
    for statement in module.body:
        if position >= len(first_lines):
            return None
        leading = len(statement.leading_lines)
        decorators = getattr(statement, "decorators", ())
        if decorators:
            leading += len(decorators[0].leading_lines)
        starts.append(first_lines[position] - leading)
        position += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
    return starts if position == len(first_lines) else None


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
    visit(module, finder)
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
