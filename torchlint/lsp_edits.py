"""Positions and edits in the language server's client's units: a client position read as a line
and a code-point column, a change applied to a document's text, the one edit between two texts,
edits grouped into a workspace edit, and the edit that adds ``# noqa: CODE`` for a finding."""

from __future__ import annotations

import io
import os
import tokenize
from typing import TYPE_CHECKING

from lsprotocol import types
from lsprotocol.converters import get_converter

from torchlint.diagnostics import Diagnostic, SourceText
from torchlint.output import lsp_range
from torchlint.suppression import NOQA

if TYPE_CHECKING:
    from torchlint.lsp import LintedDocument

converter = get_converter()


def client_encoding(kind) -> str:
    value = getattr(kind, "value", kind) or "utf-16"
    return value if value in ("utf-8", "utf-16", "utf-32") else "utf-16"


def from_client(text: SourceText, position: types.Position, encoding: str) -> tuple[int, int]:
    """A client position (its units) as a 0-based line and code-point column."""
    line = min(position.line, len(text.line_starts) - 1)
    units = 0
    for col, ch in enumerate(text.line_text(line)):
        if units >= position.character:
            return line, col
        units += len(ch.encode("utf-8")) if encoding == "utf-8" else (2 if encoding == "utf-16" and ord(ch) > 0xFFFF else 1)
    return line, len(text.line_text(line))


def text_edit(lsp_range_: dict, new_text: str) -> types.TextEdit:
    return types.TextEdit(range=converter.structure(lsp_range_, types.Range), new_text=new_text)


def replacement(before: str, after: str, encoding: str) -> types.TextEdit:
    """One edit from the first to the last changed character."""
    prefix = len(os.path.commonprefix([before, after]))
    suffix = len(os.path.commonprefix([before[prefix:][::-1], after[prefix:][::-1]]))
    text = SourceText(before)
    start, end = text.position(prefix), text.position(len(before) - suffix)
    return text_edit(lsp_range(text, *start, *end, encoding), after[prefix:len(after) - suffix])


def changed_text(text: str, change: types.TextDocumentContentChangeEvent, encoding: str) -> str:
    """``text`` after one content change: a range's new text, or the whole text."""
    if not isinstance(change, types.TextDocumentContentChangePartial):
        return change.text
    source = SourceText(text)
    start = source.offset(*from_client(source, change.range.start, encoding))
    end = source.offset(*from_client(source, change.range.end, encoding))
    return text[:start] + change.text + text[end:]


def workspace_edit(edits: list[tuple[LintedDocument, types.TextEdit]], versioned: bool) -> types.WorkspaceEdit:
    """The edits, grouped by the document (a file, or a notebook's cells) each one is for.
    Versioned (`documentChanges`: the client rejects it if a buffer changed meanwhile) when the
    client says it supports that, plain `changes` otherwise."""
    by_document: dict[str, tuple[LintedDocument, list[types.TextEdit]]] = {}
    for document, edit in edits:
        by_document.setdefault(document.uri, (document, []))[1].append(edit)
    if versioned:
        return types.WorkspaceEdit(document_changes=[
            types.TextDocumentEdit(text_document=types.OptionalVersionedTextDocumentIdentifier(
                uri=document.uri, version=document.version), edits=document_edits)
            for document, document_edits in by_document.values()])
    return types.WorkspaceEdit(changes={uri: document_edits for uri, (_, document_edits) in by_document.items()})


def noqa_edit(source: str, diag: Diagnostic, encoding: str) -> types.TextEdit | None:
    """Add ``# noqa: CODE`` where it suppresses ``diag``: the line it starts on, or the end of its
    logical line when that line cannot take a comment (a backslash, a multi-line string). An
    existing ``# noqa: ...`` there gets the code appended; another comment is kept before it."""
    line = diag.line
    comments: dict[int, tuple[int, str]] = {}
    try:
        commentable: set[int] = set()
        logical_ends: list[int] = []
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0] - 1] = (tok.start[1], tok.string)
            if tok.type in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
                commentable.add(tok.start[0] - 1)
            if tok.type == tokenize.NEWLINE:
                logical_ends.append(tok.start[0] - 1)
        if line not in commentable:
            line = next((end for end in logical_ends if end >= line), line)
    except (tokenize.TokenError, SyntaxError):
        pass
    text = SourceText(source)
    content = text.line_text(line)
    if line in comments:
        col, comment = comments[line]
        match = NOQA.search(comment)
        if match is not None and not match.group("codes"):
            return None  # a blanket noqa already silences the line
        if match is not None:
            at = col + match.end("codes")
            return text_edit(lsp_range(text, line, at, line, at, encoding), f", {diag.code}")
    end = len(content.rstrip())
    return text_edit(lsp_range(text, line, end, line, len(content), encoding), f"  # noqa: {diag.code}")
