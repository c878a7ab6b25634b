"""``torchlint lsp``: a language server over stdio (pygls, the optional extra ``torchlint[lsp]``).

Diagnostics are published when a Python document is opened or saved, and shortly after it stops
changing. Code actions: one quick fix per finding that has a fix (unsafe ones say so in the
title), "Disable CODE for this line" (adds or extends a ``# noqa`` comment), and the source action
``source.fixAll.torchlint`` that applies what ``torchlint --fix`` would. Settings are the
workspace's own torchlint configuration for the document's path, overridden by the client's
(``initializationOptions`` and ``workspace/didChangeConfiguration``): ``select``, ``ignore``,
``unsafeFixes``, ``targetTorch``. A buffer that does not parse gives TL000, and the server keeps
answering: linting and code actions run in a thread of their own, off the message loop, and
findings for a text that changed meanwhile are dropped for the newer text's. Messages are read by
torchlint/lsp_io.py, which answers a bad frame with a JSON-RPC error and goes on; a file the client
has not opened is read only when it is a regular file of bounded size.

Jupyter notebooks (LSP 3.17 notebook documents, as VS Code sends them): the code cells are linted
together as one module, as ``torchlint`` lints an ``.ipynb`` file (torchlint/notebook.py), and
each cell gets its own findings. A fix that reaches into another cell (TL501's helper goes after
the imports of the first) edits that cell's document; fix-all applies ``--fix`` to the whole
notebook.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.uris import to_fs_path

from torchlint import __version__
from torchlint.config import ConfigError, Settings, resolve_settings
from torchlint.diagnostics import Diagnostic, SourceText
from torchlint.engine import SYNTAX_ERROR, FixError, fix_source, lint_source
from torchlint.fileio import SourceDecodeError, decode_source, read_regular_file
from torchlint.lsp_edits import (changed_text, client_encoding, converter, from_client, noqa_edit, replacement,
                                 text_edit, workspace_edit)
from torchlint.lsp_io import MAX_MESSAGE_BYTES, serve_stdio
from torchlint.notebook import CodeCell, code_cell, fix_cells, lint_cells
from torchlint.output import lsp_diagnostic
from torchlint.parsing import StatementCache
from torchlint.rule import plugin_problems
from torchlint.runner import tune_gc
from torchlint.warm_up import warm_up

FIX_ALL_KIND = "source.fixAll.torchlint"
FIX_ALL_TITLE = "torchlint: fix all auto-fixable problems"
DEBOUNCE_SECONDS = 0.3
DEBOUNCE_VARIABLE = "TORCHLINT_LSP_DEBOUNCE"  # seconds; a slow machine, or a test, may want another pause
PYTHON_SUFFIXES = (".py", ".pyi")
CLIENT_KEYS = ("select", "ignore", "unsafeFixes", "targetTorch", "targetGpu")
NOTEBOOK_SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[types.NotebookDocumentFilterWithNotebook(
        notebook="jupyter-notebook", cells=[types.NotebookCellLanguage(language="python")])],
    save=True)

log = logging.getLogger("torchlint.lsp")


@dataclass
class LintedDocument:
    """One version of an open document (a file, or a notebook cell) and what torchlint found in it."""

    uri: str
    version: int | None
    text: str
    path: str
    settings: Settings | None  # None: excluded, or the configuration has an error
    diagnostics: list[Diagnostic] = field(default_factory=list)
    lsp: list[dict] = field(default_factory=list)  # the same, in LSP shape and the client's units
    # What `--fix` changes, as (document, new text); computed on the first fix-all request.
    fixed: list[tuple[LintedDocument, str]] | None = None
    # A cell's notebook: fix-all and edits in other cells go through it.
    notebook: LintedNotebook | None = field(default=None, repr=False, compare=False)

    def fix(self, statements: dict[str, StatementCache]) -> list[tuple[LintedDocument, str]]:
        """What ``--fix`` changes in this file (a cell's fixes are its notebook's). The first round
        starts from this version's findings, and the rounds parse through the document's statements."""
        fixed = fix_source(self.text, self.path, self.settings, found=self.diagnostics,
                           statements=statements.get(self.uri))
        return [(self, fixed.source)] if fixed.source != self.text else []

    def document_of(self, cell: int | None) -> LintedDocument:
        """Where an edit of one of this document's fixes lands: here, or in a cell (by index) of its notebook."""
        return self if cell is None else self.notebook.cells[cell]


@dataclass
class LintedNotebook:
    """One version of an open notebook: its code cells linted as one module, each cell's findings
    in a LintedDocument of its own."""

    key: tuple  # (URI, version, text) of every cell: what was linted
    path: str
    settings: Settings | None
    cells: list[LintedDocument]  # by index in the notebook, markdown cells too (they get no findings)
    code_cells: list[CodeCell] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)  # all the cells' findings
    fixed: list[tuple[LintedDocument, str]] | None = None

    def fix(self, statements: dict[str, StatementCache]) -> list[tuple[LintedDocument, str]]:
        """What ``--fix`` changes in the notebook's cells (``statements`` is for files)."""
        _, _, changed = fix_cells(self.code_cells, self.path, self.settings)
        return [(self.cells[index], text) for index, text in changed.items()]


class TorchlintProtocol(LanguageServerProtocol):
    """pygls's protocol, with notebook cell edits made whole before pygls applies them."""

    @lsp_method(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def lsp_notebook_document__did_change(self, params: types.DidChangeNotebookDocumentParams):
        """VS Code sends a cell's edits as ranges whatever sync the server asks for, and pygls, with
        full sync, would take a range's text for the whole cell: apply the ranges here, with lines
        split as LSP (and the diagnostics) split them, and hand pygls the cell's new text."""
        encoding = client_encoding(self.workspace.position_encoding)
        for content in (params.change.cells and params.change.cells.text_content) or []:
            text = self.workspace.get_text_document(content.document.uri).source
            for change in content.changes:
                text = changed_text(text, change, encoding)
            content.changes = [types.TextDocumentContentChangeWholeDocument(text=text)]
        return (yield from super().lsp_notebook_document__did_change(params))


def _debounce_seconds(value: str | None) -> float:
    """The pause after the last change before a document is linted: ``TORCHLINT_LSP_DEBOUNCE``
    (seconds, 0 or more) when it is set to one, else 0.3 s."""
    if value is None:
        return DEBOUNCE_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        log.warning("%s=%r is not a number of seconds; using %s", DEBOUNCE_VARIABLE, value, DEBOUNCE_SECONDS)
        return DEBOUNCE_SECONDS
    return seconds


class TorchlintServer(LanguageServer):
    def start_io(self, stdin=None, stdout=None) -> None:
        """Serve over stdio with a reader that no bad message can stop (torchlint/lsp_io.py)."""
        import sys

        serve_stdio(self, stdin or sys.stdin.buffer, stdout or sys.stdout.buffer)

    def __init__(self):
        # Full sync: the client sends the whole text, so lines are split the way Python (and the
        # diagnostics) split them, not the way an incremental update would.
        super().__init__("torchlint", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Full,
                         notebook_document_sync=NOTEBOOK_SYNC, protocol_cls=TorchlintProtocol)
        self.client_settings: dict = {}
        self.linted: dict[str, LintedDocument] = {}
        self.linted_notebooks: dict[str, LintedNotebook] = {}
        self.statements: dict[str, StatementCache] = {}  # per document: an edit re-parses only what changed
        self.pending: dict[str, asyncio.Task] = {}
        # Linting runs here, one document at a time, never on the message loop.
        self.lint_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torchlint-lint")
        self.reported_errors: set[str] = set()
        self.debounce = _debounce_seconds(os.environ.get(DEBOUNCE_VARIABLE))

    # --- settings ---------------------------------------------------------------------------

    def update_client_settings(self, raw) -> None:
        settings = _unwrap(raw)
        unknown = sorted(set(settings) - set(CLIENT_KEYS))
        if unknown:
            log.warning("ignoring unknown client settings: %s", ", ".join(unknown))
        self.client_settings = {key: settings[key] for key in CLIENT_KEYS if key in settings}
        self.linted.clear()
        self.linted_notebooks.clear()
        self.reported_errors.clear()

    def settings_for(self, path: str) -> Settings | None:
        client = self.client_settings
        try:
            settings = resolve_settings(
                Path(path), select=_selectors(client.get("select"), "select"),
                ignore=_selectors(client.get("ignore"), "ignore"),
                unsafe_fixes=_flag(client.get("unsafeFixes")),
                target_torch=None if client.get("targetTorch") in (None, "") else str(client["targetTorch"]),
                target_gpu=None if client.get("targetGpu") in (None, "") else str(client["targetGpu"]))
        except ConfigError as error:
            self.report_once(f"torchlint: {error}")
            return None
        for problem in plugin_problems():  # a broken plugin is skipped; say so once
            self.report_once(f"torchlint: {problem}")
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
        """The findings for the document's current text (cached per version); a notebook cell's
        come from linting its whole notebook."""
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        if notebook is not None:
            return next((cell for cell in self.lint_notebook(notebook.uri).cells if cell.uri == uri), None)
        document = self.workspace.get_text_document(uri)
        if not _is_python(document):
            return None
        text = document.source if self.is_open(uri) else _closed_file_text(uri, document)
        if text is None:
            return None
        cached = self.linted.get(uri)
        if cached is not None and cached.version == document.version and cached.text == text:
            return cached
        path = document.path if uri.startswith("file:") else str(Path.cwd() / (document.filename or "untitled.py"))
        linted = LintedDocument(uri, document.version, text, path, self.settings_for(path))
        if linted.settings is not None:
            statements = self.statements.setdefault(uri, StatementCache())
            linted.diagnostics = self.guarded_lint(
                path, lambda: lint_source(linted.text, path, linted.settings, statements=statements))
            text = SourceText(linted.text)
            encoding = client_encoding(self.workspace.position_encoding)
            linted.lsp = [lsp_diagnostic(d, text, encoding=encoding) for d in linted.diagnostics]
        self.linted[uri] = linted
        return linted

    def lint_notebook(self, uri: str) -> LintedNotebook | None:
        """The findings for an open notebook's cells (cached while no cell changes); None if ``uri``
        is not an open notebook."""
        notebook = self.workspace.get_notebook_document(notebook_uri=uri)
        if notebook is None:
            return None
        documents = [self.workspace.get_text_document(cell.document) for cell in notebook.cells]
        key = tuple((cell.document, document.version, document.source)
                    for cell, document in zip(notebook.cells, documents))
        cached = self.linted_notebooks.get(uri)
        if cached is not None and cached.key == key:
            return cached
        path = to_fs_path(uri) if uri.startswith("file:") else str(Path.cwd() / "untitled.ipynb")
        settings = self.settings_for(path)
        linted = LintedNotebook(key, path, settings, [])
        linted.cells = [LintedDocument(cell.document, document.version, document.source, path, settings,
                                       notebook=linted) for cell, document in zip(notebook.cells, documents)]
        if settings is not None:
            for index, (cell, document) in enumerate(zip(notebook.cells, documents)):
                is_python = cell.kind == types.NotebookCellKind.Code and _is_python(document)
                code = code_cell(index, document.source) if is_python else None
                if code is not None:  # None: a `%%bash` cell
                    linted.code_cells.append(code)
            statements = self.statements.setdefault(uri, StatementCache())  # for the cells' joined text
            linted.diagnostics = self.guarded_lint(
                path, lambda: lint_cells(linted.code_cells, path, settings, statements))
            texts = [SourceText(cell.text) for cell in linted.cells]
            encoding = client_encoding(self.workspace.position_encoding)
            for diag in linted.diagnostics:
                cell = linted.cells[diag.cell]
                cell.diagnostics.append(diag)
                cell.lsp.append(lsp_diagnostic(diag, texts[diag.cell], encoding=encoding, cell_text=texts.__getitem__))
        self.linted_notebooks[uri] = linted
        return linted

    def guarded_lint(self, path: str, lint) -> list[Diagnostic]:
        """What ``lint()`` finds; nothing, and a message to the user, if a rule's bug breaks it."""
        try:
            return lint()
        except Exception as error:  # noqa: BLE001 - a rule's bug must not take the server down
            log.exception("linting %s failed", path)
            self.report_once(f"torchlint: internal error while linting {path}: {error!r}. Please report it.")
            return []

    def linted_documents(self, uri: str) -> list[LintedDocument | None]:
        """A document's findings, or those of every cell of a notebook."""
        notebook = self.lint_notebook(uri)
        return notebook.cells if notebook is not None else [self.lint(uri)]

    def is_open(self, uri: str) -> bool:
        return unquote(uri) in self.workspace.text_documents  # pygls keys its documents so

    def current(self, linted: LintedDocument) -> bool:
        """Is this still the open document's text (no newer edit, not closed)?"""
        document = self.workspace.text_documents.get(unquote(linted.uri))
        return document is not None and document.version == linted.version and document.source == linted.text

    async def off_the_loop(self, work, *args):
        """Run ``work`` in the lint thread: the message loop goes on answering meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(self.lint_thread, work, *args)

    async def publish(self, uri: str) -> None:
        """Publish a document's findings, or those of every cell of a notebook (an empty list for
        a cell with none, so that what it showed before goes). Linting runs off the message loop;
        findings for a text that has changed meanwhile are dropped (the newer text's lint follows)."""
        for linted in await self.off_the_loop(self.linted_documents, uri):
            if linted is not None and self.current(linted):
                self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
                    uri=linted.uri, version=linted.version,
                    diagnostics=[converter.structure(d, types.Diagnostic) for d in linted.lsp]))

    def clear(self, uris) -> None:
        for uri in uris:
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def forget(self, uri: str) -> None:
        """A document or notebook was closed: drop what is pending or cached for it."""
        self.cancel_pending(uri)
        self.linted.pop(uri, None)
        self.linted_notebooks.pop(uri, None)
        self.statements.pop(uri, None)

    def cancel_pending(self, uri: str) -> None:
        pending = self.pending.pop(uri, None)
        if pending is not None:
            pending.cancel()

    def publish_soon(self, uri: str) -> None:
        """Publish once the document has stopped changing for ``self.debounce`` seconds."""
        self.cancel_pending(uri)
        delay = self.debounce

        async def later() -> None:
            await asyncio.sleep(delay)
            await self.publish(uri)

        self.pending[uri] = asyncio.ensure_future(later())

    def publish_now(self, uri: str) -> None:
        self.cancel_pending(uri)
        self.pending[uri] = asyncio.ensure_future(self.publish(uri))

    # --- code actions -----------------------------------------------------------------------

    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        linted = self.lint(uri)
        if linted is None or linted.settings is None:
            return []
        text = SourceText(linted.text)
        encoding = client_encoding(self.workspace.position_encoding)
        start = from_client(text, params.range.start, encoding)
        end = from_client(text, params.range.end, encoding)
        versioned = self.versioned_edits()
        actions: list[types.CodeAction] = []
        for diag, shown in zip(linted.diagnostics, linted.lsp):
            # Every finding on the requested lines: editors ask at the cursor, wherever it is.
            if diag.line > end[0] or diag.end_line < start[0] or diag.code == SYNTAX_ERROR[0]:
                continue
            lsp_diag = converter.structure(shown, types.Diagnostic)
            if diag.fix is not None:
                fix = shown["data"]["fix"]
                unsafe = diag.fix.applicability != "safe"
                actions.append(types.CodeAction(
                    title=f"{fix['title']}{' (unsafe)' if unsafe else ''}", kind=types.CodeActionKind.QuickFix,
                    diagnostics=[lsp_diag], is_preferred=not unsafe,
                    edit=workspace_edit([(linted.document_of(e.get("cell")), text_edit(e["range"], e["newText"]))
                                          for e in fix["edits"]], versioned)))
            noqa = noqa_edit(linted.text, diag, encoding)
            if noqa is not None:
                actions.append(types.CodeAction(
                    title=f"Disable {diag.code} for this line", kind=types.CodeActionKind.QuickFix,
                    diagnostics=[lsp_diag], edit=workspace_edit([(linted, noqa)], versioned)))
        # Fix-all costs a round of --fix. It is left out where the request's kinds leave it out, and
        # where no kinds are asked for (a lightbulb, at every cursor move) it comes without its edit,
        # which the client asks for when it is chosen (codeAction/resolve), if the client can.
        only = params.context.only
        owner = linted.notebook or linted
        if _wanted(FIX_ALL_KIND, only) and _fixable(owner):
            if not only and owner.fixed is None and self.resolves_edits():
                actions.append(types.CodeAction(title=FIX_ALL_TITLE, kind=FIX_ALL_KIND, data={"uri": uri}))
            elif fix_all := self.fix_all(linted, encoding):
                actions.append(types.CodeAction(title=FIX_ALL_TITLE, kind=FIX_ALL_KIND,
                                                edit=workspace_edit(fix_all, versioned)))
        return [action for action in actions if _wanted(action.kind, only)]

    def resolve_code_action(self, action: types.CodeAction) -> types.CodeAction:
        """The edit of a fix-all offered without it: for the document's text now."""
        uri = action.data.get("uri") if isinstance(action.data, dict) else None
        linted = self.lint(uri) if action.kind == FIX_ALL_KIND and isinstance(uri, str) else None
        if linted is not None and linted.settings is not None:
            encoding = client_encoding(self.workspace.position_encoding)
            action.edit = workspace_edit(self.fix_all(linted, encoding), self.versioned_edits())
        return action

    def versioned_edits(self) -> bool:
        """Does the client take versioned edits (``documentChanges``)?"""
        capabilities = self.client_capabilities.workspace
        return bool(capabilities and capabilities.workspace_edit and capabilities.workspace_edit.document_changes)

    def resolves_edits(self) -> bool:
        """Does the client ask for a code action's edit when the action is chosen?"""
        code_action = self.client_capabilities.text_document and self.client_capabilities.text_document.code_action
        support = code_action and code_action.resolve_support
        return bool(support and "edit" in support.properties)

    def fix_all(self, linted: LintedDocument, encoding: str) -> list[tuple[LintedDocument, types.TextEdit]]:
        """What ``--fix`` would change, as one edit per document it changes: the file, or for a
        notebook cell, any cell of the notebook (the fixes are those of the whole notebook)."""
        owner = linted.notebook or linted
        if not _fixable(owner):
            return []
        if owner.fixed is None:  # editors ask for code actions at every cursor move: once per version
            try:
                owner.fixed = owner.fix(self.statements)
            except FixError as error:
                self.report_once(str(error))
                owner.fixed = []
        return [(document, replacement(document.text, fixed, encoding)) for document, fixed in owner.fixed]


# --- helpers ---------------------------------------------------------------------------------

def _unwrap(raw) -> dict:
    """Client settings as sent: flat, or under `settings` or `torchlint` (VS Code style)."""
    for _ in range(3):
        if isinstance(raw, dict) and len(raw) == 1 and next(iter(raw)) in ("settings", "torchlint"):
            raw = next(iter(raw.values()))
        elif isinstance(raw, dict) and isinstance(raw.get("torchlint"), dict):
            raw = raw["torchlint"]
    return dict(raw) if isinstance(raw, dict) else {}


def _fixable(owner: LintedDocument | LintedNotebook) -> bool:
    """Has the document (or notebook) a finding whose fix ``--fix`` applies with its settings?"""
    return any(d.fix is not None and d.fix.applies(owner.settings.unsafe_fixes) for d in owner.diagnostics)


def _wanted(kind: str, only: list[str] | None) -> bool:
    """Does a code action request that asks only for the kinds ``only`` (None: any) want ``kind``?"""
    return not only or any(kind == asked or kind.startswith(f"{asked}.") for asked in only)


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


def _closed_file_text(uri: str, document) -> str | None:
    """The text of a file the client has not opened (a code action may name one): read only when it
    is a regular file of a bounded size, so that no path (a FIFO, a device) can block the server."""
    if not uri.startswith("file:"):
        return None
    raw = read_regular_file(document.path, MAX_MESSAGE_BYTES)
    try:
        return decode_source(raw)[0] if raw is not None else None
    except SourceDecodeError:
        return None


def _is_python(document) -> bool:
    return document.language_id == "python" or str(document.uri).endswith(PYTHON_SUFFIXES)


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
        for notebook in list(ls.workspace.notebook_documents.values()):
            ls.publish_now(notebook.uri)
        for uri in list(ls.workspace.text_documents):
            if ls.workspace.get_notebook_document(cell_uri=uri) is None:  # a cell goes with its notebook
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
        ls.forget(params.text_document.uri)
        ls.clear([params.text_document.uri])

    # pygls keeps the notebook and its cells' text in its workspace before these run.
    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def did_open_notebook(ls: TorchlintServer, params: types.DidOpenNotebookDocumentParams) -> None:
        ls.publish_now(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def did_change_notebook(ls: TorchlintServer, params: types.DidChangeNotebookDocumentParams) -> None:
        structure = params.change.cells and params.change.cells.structure
        if structure and structure.did_close:  # cells deleted: what they showed goes with them
            ls.clear([cell.uri for cell in structure.did_close])
        ls.publish_soon(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    def did_save_notebook(ls: TorchlintServer, params: types.DidSaveNotebookDocumentParams) -> None:
        ls.publish_now(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def did_close_notebook(ls: TorchlintServer, params: types.DidCloseNotebookDocumentParams) -> None:
        ls.forget(params.notebook_document.uri)
        ls.clear([cell.uri for cell in params.cell_text_documents])

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND], resolve_provider=True))
    async def code_action(ls: TorchlintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return await ls.off_the_loop(ls.code_actions, params)

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def code_action_resolve(ls: TorchlintServer, action: types.CodeAction) -> types.CodeAction:
        return await ls.off_the_loop(ls.resolve_code_action, action)

    return server


def serve() -> None:
    logging.basicConfig(level=logging.WARNING, format="torchlint-lsp: %(levelname)s: %(message)s")
    warm_up()  # a long-lived process loads what a lint needs while it starts, not when the first file opens
    tune_gc()  # every lint allocates millions of short-lived nodes: see runner.GC_YOUNG_THRESHOLD
    create_server().start_io()
