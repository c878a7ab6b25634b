"""``torchlint lsp``: a language server over stdio (pygls, the optional extra ``torchlint[lsp]``).

Diagnostics are published when a Python document is opened or saved, and shortly after it stops
changing. Code actions: one quick fix per finding that has a fix (unsafe ones say so in the
title), "Disable CODE for this line" (adds or extends a ``# noqa`` comment), and the source action
``source.fixAll.torchlint`` that applies what ``torchlint --fix`` would. Settings are the
workspace's own torchlint configuration for the document's path, overridden by the client's
(``initializationOptions`` and ``workspace/didChangeConfiguration``): ``select``, ``ignore``,
``unsafeFixes``, ``targetTorch``. A buffer that does not parse gives TL000, and the server keeps
answering.
"""

from __future__ import annotations

import asyncio
import io
import logging
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from lsprotocol import types
from lsprotocol.converters import get_converter
from pygls.lsp.server import LanguageServer

from torchlint import __version__
from torchlint.config import ConfigError, Settings, resolve_settings
from torchlint.diagnostics import Diagnostic, SourceText
from torchlint.engine import SYNTAX_ERROR, FixError, fix_source, lint_source
from torchlint.output import lsp_diagnostic, lsp_range
from torchlint.suppression import NOQA

FIX_ALL_KIND = "source.fixAll.torchlint"
DEBOUNCE_SECONDS = 0.3
PYTHON_SUFFIXES = (".py", ".pyi")
CLIENT_KEYS = ("select", "ignore", "unsafeFixes", "targetTorch")

log = logging.getLogger("torchlint.lsp")
_converter = get_converter()


@dataclass
class LintedDocument:
    """One version of an open document and what torchlint found in it."""

    version: int | None
    text: str
    path: str
    settings: Settings | None  # None: excluded, or the configuration has an error
    diagnostics: list[Diagnostic] = field(default_factory=list)
    lsp: list[dict] = field(default_factory=list)  # the same, in LSP shape and the client's units
    fixed: str | None = None  # the text after `--fix`, computed on the first fix-all request


class TorchlintServer(LanguageServer):
    def __init__(self):
        # Full sync: the client sends the whole text, so lines are split the way Python (and the
        # diagnostics) split them, not the way an incremental update would.
        super().__init__("torchlint", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Full)
        self.client_settings: dict = {}
        self.linted: dict[str, LintedDocument] = {}
        self.pending: dict[str, asyncio.Task] = {}
        self.reported_errors: set[str] = set()

    # --- settings ---------------------------------------------------------------------------

    def update_client_settings(self, raw) -> None:
        settings = _unwrap(raw)
        unknown = sorted(set(settings) - set(CLIENT_KEYS))
        if unknown:
            log.warning("ignoring unknown client settings: %s", ", ".join(unknown))
        self.client_settings = {key: settings[key] for key in CLIENT_KEYS if key in settings}
        self.linted.clear()
        self.reported_errors.clear()

    def settings_for(self, path: str) -> Settings | None:
        client = self.client_settings
        try:
            settings = resolve_settings(
                Path(path), select=_selectors(client.get("select"), "select"),
                ignore=_selectors(client.get("ignore"), "ignore"),
                unsafe_fixes=_flag(client.get("unsafeFixes")),
                target_torch=None if client.get("targetTorch") in (None, "") else str(client["targetTorch"]))
        except ConfigError as error:
            self.report_once(f"torchlint: {error}")
            return None
        if _excluded(settings, Path(path)):
            return None
        return settings

    def report_once(self, message: str) -> None:
        log.error(message)
        if message not in self.reported_errors:
            self.reported_errors.add(message)
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=message))

    # --- linting ----------------------------------------------------------------------------

    def lint(self, uri: str) -> LintedDocument | None:
        """The findings for the document's current text (cached per version)."""
        document = self.workspace.get_text_document(uri)
        if not _is_python(document):
            return None
        cached = self.linted.get(uri)
        if cached is not None and cached.version == document.version and cached.text == document.source:
            return cached
        path = document.path if uri.startswith("file:") else str(Path.cwd() / (document.filename or "untitled.py"))
        linted = LintedDocument(document.version, document.source, path, self.settings_for(path))
        if linted.settings is not None:
            try:
                linted.diagnostics = lint_source(linted.text, path, linted.settings)
            except Exception as error:  # noqa: BLE001 - a rule's bug must not take the server down
                log.exception("linting %s failed", path)
                self.report_once(f"torchlint: internal error while linting {path}: {error!r}. Please report it.")
            text = SourceText(linted.text)
            encoding = _encoding(self.workspace.position_encoding)
            linted.lsp = [lsp_diagnostic(d, text, encoding=encoding) for d in linted.diagnostics]
        self.linted[uri] = linted
        return linted

    def publish(self, uri: str) -> None:
        linted = self.lint(uri)
        if linted is None:
            return
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=uri, version=linted.version,
            diagnostics=[_converter.structure(d, types.Diagnostic) for d in linted.lsp]))

    def publish_soon(self, uri: str, delay: float = DEBOUNCE_SECONDS) -> None:
        """Publish once the document has stopped changing for ``delay`` seconds."""
        pending = self.pending.pop(uri, None)
        if pending is not None:
            pending.cancel()

        async def later() -> None:
            await asyncio.sleep(delay)
            self.pending.pop(uri, None)
            self.publish(uri)

        self.pending[uri] = asyncio.ensure_future(later())

    def publish_now(self, uri: str) -> None:
        pending = self.pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self.publish(uri)

    # --- code actions -----------------------------------------------------------------------

    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        linted = self.lint(uri)
        if linted is None or linted.settings is None:
            return []
        text = SourceText(linted.text)
        encoding = _encoding(self.workspace.position_encoding)
        start = _from_client(text, params.range.start, encoding)
        end = _from_client(text, params.range.end, encoding)
        document = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=linted.version)
        capabilities = self.client_capabilities.workspace
        versioned = bool(capabilities and capabilities.workspace_edit and capabilities.workspace_edit.document_changes)
        actions: list[types.CodeAction] = []
        for diag, shown in zip(linted.diagnostics, linted.lsp):
            # Every finding on the requested lines: editors ask at the cursor, wherever it is.
            if diag.line > end[0] or diag.end_line < start[0] or diag.code == SYNTAX_ERROR[0]:
                continue
            lsp_diag = _converter.structure(shown, types.Diagnostic)
            if diag.fix is not None:
                fix = shown["data"]["fix"]
                unsafe = diag.fix.applicability != "safe"
                actions.append(types.CodeAction(
                    title=f"{fix['title']}{' (unsafe)' if unsafe else ''}", kind=types.CodeActionKind.QuickFix,
                    diagnostics=[lsp_diag], is_preferred=not unsafe,
                    edit=_workspace_edit(document, [_text_edit(e["range"], e["newText"]) for e in fix["edits"]],
                                         versioned)))
            noqa = _noqa_edit(linted.text, diag, encoding)
            if noqa is not None:
                actions.append(types.CodeAction(
                    title=f"Disable {diag.code} for this line", kind=types.CodeActionKind.QuickFix,
                    diagnostics=[lsp_diag], edit=_workspace_edit(document, [noqa], versioned)))
        fix_all = self.fix_all(linted, text, encoding)
        if fix_all is not None:
            actions.append(types.CodeAction(title="torchlint: fix all auto-fixable problems", kind=FIX_ALL_KIND,
                                            edit=_workspace_edit(document, [fix_all], versioned)))
        only = params.context.only
        if only:
            actions = [a for a in actions if any(a.kind == kind or a.kind.startswith(f"{kind}.") for kind in only)]
        return actions

    def fix_all(self, linted: LintedDocument, text: SourceText, encoding: str) -> types.TextEdit | None:
        """One edit from the first to the last changed character, as ``--fix`` would change it."""
        if not any(d.fix is not None and d.fix.applies(linted.settings.unsafe_fixes) for d in linted.diagnostics):
            return None
        if linted.fixed is None:  # editors ask for code actions at every cursor move: once per version
            try:
                linted.fixed = fix_source(linted.text, linted.path, linted.settings).source
            except FixError as error:
                self.report_once(str(error))
                linted.fixed = linted.text
        before, fixed = linted.text, linted.fixed
        if fixed == before:
            return None
        prefix = 0
        while prefix < min(len(before), len(fixed)) and before[prefix] == fixed[prefix]:
            prefix += 1
        suffix = 0
        while suffix < min(len(before), len(fixed)) - prefix and before[-1 - suffix] == fixed[-1 - suffix]:
            suffix += 1
        start, end = text.position(prefix), text.position(len(before) - suffix)
        return _text_edit(lsp_range(text, *start, *end, encoding), fixed[prefix:len(fixed) - suffix])


# --- helpers ---------------------------------------------------------------------------------

def _unwrap(raw) -> dict:
    """Client settings as sent: flat, or under `settings` or `torchlint` (VS Code style)."""
    for _ in range(3):
        if isinstance(raw, dict) and len(raw) == 1 and next(iter(raw)) in ("settings", "torchlint"):
            raw = next(iter(raw.values()))
        elif isinstance(raw, dict) and isinstance(raw.get("torchlint"), dict):
            raw = raw["torchlint"]
    return dict(raw) if isinstance(raw, dict) else {}


def _selectors(value, key: str) -> list[str] | None:
    if value is None or value == [] or value == "":  # an editor's empty default means "not set"
        return None
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"client settings: `{key}` must be a list of rule selectors, got {value!r}")
    return [v.strip() for v in value if v.strip()]


def _flag(value) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise ConfigError(f"client settings: `unsafeFixes` must be true or false, got {value!r}")


def _excluded(settings: Settings, path: Path) -> bool:
    """The file, or a folder it is in below the project root, matches `exclude`."""
    root = settings.root.resolve()
    for candidate in (path, *path.parents):
        if candidate == root or root not in candidate.parents:
            break
        if settings.is_excluded(candidate):
            return True
    return False


def _is_python(document) -> bool:
    return document.language_id == "python" or str(document.uri).endswith(PYTHON_SUFFIXES)


def _encoding(kind) -> str:
    value = getattr(kind, "value", kind) or "utf-16"
    return value if value in ("utf-8", "utf-16", "utf-32") else "utf-16"


def _from_client(text: SourceText, position: types.Position, encoding: str) -> tuple[int, int]:
    """A client position (its units) as a 0-based line and code-point column."""
    line = min(position.line, len(text.line_starts) - 1)
    units = 0
    for col, ch in enumerate(text.line_text(line)):
        if units >= position.character:
            return line, col
        units += len(ch.encode("utf-8")) if encoding == "utf-8" else (2 if encoding == "utf-16" and ord(ch) > 0xFFFF else 1)
    return line, len(text.line_text(line))


def _text_edit(lsp_range_: dict, new_text: str) -> types.TextEdit:
    return types.TextEdit(range=_converter.structure(lsp_range_, types.Range), new_text=new_text)


def _workspace_edit(document: types.OptionalVersionedTextDocumentIdentifier, edits,
                    versioned: bool) -> types.WorkspaceEdit:
    """Versioned (`documentChanges`: the client rejects it if the buffer changed meanwhile) when
    the client says it supports that, plain `changes` otherwise."""
    if versioned:
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=document, edits=edits)])
    return types.WorkspaceEdit(changes={document.uri: edits})


def _noqa_edit(source: str, diag: Diagnostic, encoding: str) -> types.TextEdit | None:
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
            return _text_edit(lsp_range(text, line, at, line, at, encoding), f", {diag.code}")
    end = len(content.rstrip())
    return _text_edit(lsp_range(text, line, end, line, len(content), encoding), f"  # noqa: {diag.code}")


# --- the server ------------------------------------------------------------------------------

def create_server() -> TorchlintServer:
    server = TorchlintServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: TorchlintServer, params: types.InitializeParams) -> None:
        ls.update_client_settings(params.initialization_options)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: TorchlintServer, params: types.DidChangeConfigurationParams) -> None:
        if params.settings is not None:
            ls.update_client_settings(params.settings)
        for uri in list(ls.workspace.text_documents):
            ls.publish_now(uri)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: TorchlintServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.publish_now(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: TorchlintServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.publish_soon(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: TorchlintServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.publish_now(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: TorchlintServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        pending = ls.pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        ls.linted.pop(uri, None)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND]))
    def code_action(ls: TorchlintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return ls.code_actions(params)

    return server


def serve() -> None:
    logging.basicConfig(level=logging.WARNING, format="torchlint-lsp: %(levelname)s: %(message)s")
    create_server().start_io()
