"""`torchlint lsp` end to end: a real server process, real JSON-RPC, driven by pytest-lsp with the
capabilities that Neovim 0.11 (UTF-8 positions, plain `changes` edits) and VS Code (UTF-16,
versioned `documentChanges`) announce; VS Code's also sync notebooks (LSP 3.17), which the recorded
capabilities predate."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

from conftest import GUIDE_RULES_CONFIG, LEAK, LEAK_FIXED, ROOT, run_torchlint
from torchlint.lsp import DEBOUNCE_SECONDS, DEBOUNCE_VARIABLE

pytestmark = pytest.mark.asyncio(loop_scope="module")

DATA_PARALLEL = "import torch.nn as nn\n\nmodel = nn.DataParallel(nn.Linear(2, 2))\n"
ZERO_GRAD = "for b in loader:\n    opt.zero_grad()\n    loss.backward()\n"


def _recording_client() -> LanguageClient:
    """pytest-lsp's test client, also keeping every publishDiagnostics (with its version)."""
    client = LanguageClient(converter_factory=default_converter)
    client.published = []

    def publish(client_: LanguageClient, params: types.PublishDiagnosticsParams) -> None:
        client_.diagnostics[params.uri] = params.diagnostics
        client_.published.append(params)

    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: publish})
    return client


SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "torchlint", "lsp"], client_factory=_recording_client)
# A server that waits ten minutes after a change: whatever it publishes within a test's wait was
# published by something else than the pause (an open, a save).
PATIENT_SERVER = ClientServerConfig(server_command=SERVER.server_command, client_factory=_recording_client,
                                    server_env={**os.environ, DEBOUNCE_VARIABLE: "600"})


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("workspace")
    (root / "pyproject.toml").write_text(GUIDE_RULES_CONFIG + "per-file-ignores = { 'scripts/*.py' = ['TL101'] }\n")
    (root / "scripts").mkdir()
    return root


@pytest_lsp.fixture(config=SERVER, scope="module")
async def neovim(lsp_client: LanguageClient, workspace: Path):
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("neovim@v0.11.0"), root_uri=workspace.as_uri(),
        initialization_options={"settings": {"targetTorch": "1.13"}}))
    yield
    await lsp_client.shutdown_session()


async def _vscode_session(client: LanguageClient, workspace: Path):
    capabilities = client_capabilities("visual-studio-code")
    capabilities.notebook_document = types.NotebookDocumentClientCapabilities(
        synchronization=types.NotebookDocumentSyncClientCapabilities())
    result = await client.initialize_session(types.InitializeParams(
        capabilities=capabilities, root_uri=workspace.as_uri()))
    client.server_capabilities = result.capabilities


@pytest_lsp.fixture(config=SERVER, scope="module")
async def vscode(lsp_client: LanguageClient, workspace: Path):
    await _vscode_session(lsp_client, workspace)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=PATIENT_SERVER, scope="module")
async def patient(lsp_client: LanguageClient, workspace: Path):
    """VS Code, talking to a server whose pause after a change is ten minutes."""
    await _vscode_session(lsp_client, workspace)
    yield
    await lsp_client.shutdown_session()


# --- helpers -------------------------------------------------------------------------------------

_versions = iter(range(1, 10**6))


async def published(client: LanguageClient, uri: str, after: int = 0, timeout: float = 10) -> types.PublishDiagnosticsParams:
    """The first diagnostics published for ``uri`` since the client had received ``after`` of them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for params in client.published[after:]:
            if params.uri == uri:
                return params
        await asyncio.sleep(0.01)
    raise AssertionError(f"no diagnostics published for {uri}")


async def open_document(client: LanguageClient, path: Path, text: str) -> tuple[str, types.PublishDiagnosticsParams]:
    uri = path.as_uri()
    before = len(client.published)
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=uri, language_id="python", version=next(_versions), text=text)))
    return uri, await published(client, uri, before)


def change(client: LanguageClient, uri: str, text: str) -> int:
    version = next(_versions)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))
    return version


def close(client: LanguageClient, uri: str) -> None:
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))


async def code_actions(client: LanguageClient, uri: str, line: int, only: list[str] | None = None):
    return await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(types.Position(line, 0), types.Position(line, 0)),
        context=types.CodeActionContext(diagnostics=[], only=only)))


def edits_of(action: types.CodeAction, uri: str) -> list[types.TextEdit]:
    edit = action.edit
    if edit.document_changes:
        (change_,) = edit.document_changes
        assert change_.text_document.uri == uri
        return list(change_.edits)
    return list(edit.changes[uri])


def apply(text: str, edits: list[types.TextEdit], encoding: str) -> str:
    """Apply LSP edits whose characters count ``encoding`` code units."""
    lines = text.splitlines(keepends=True) + [""]

    def offset(position: types.Position) -> int:
        line = lines[position.line]
        units = col = 0
        while col < len(line) and units < position.character:
            units += len(line[col].encode(encoding.replace("utf-16", "utf-16-le"))) // (2 if encoding == "utf-16" else 1)
            col += 1
        return sum(len(previous) for previous in lines[:position.line]) + col

    for edit in sorted(edits, key=lambda e: offset(e.range.start), reverse=True):
        text = text[:offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end):]
    return text


def codes(params: types.PublishDiagnosticsParams) -> list[str]:
    return [d.code for d in params.diagnostics]


# A Jupyter notebook: the imports in cell 0 are what make cells 2 and 3 findings; cell 1 is markdown.
NOTEBOOK = ["import torch\nimport torch.nn as nn", "# Model ✨",
            "%time x = 1\n!pip install x\ns = '😀é'; y = torch.zeros(3).cuda()",
            "model = nn.DataParallel(nn.Linear(2, 2))\nfor x in batches:\n    model(x).sum().backward()"]


@dataclass
class OpenNotebook:
    uri: str
    cell_uris: list[str]
    texts: dict[str, str]  # by cell URI
    versions: dict[str, int]


async def open_notebook(client: LanguageClient, path: Path, cells: list[str]):
    """Open a notebook as VS Code does (a cell starting with `# ` is markdown), and the diagnostics
    then published for each cell, by URI."""
    notebook = OpenNotebook(path.as_uri(), [f"vscode-notebook-cell:{path.as_posix()}#W{i}sZmlsZQ%3D%3D"
                                            for i in range(len(cells))], {}, {})
    markdown = [text.startswith("# ") for text in cells]
    kinds = [types.NotebookCellKind.Markup if is_markdown else types.NotebookCellKind.Code for is_markdown in markdown]
    for uri, text in zip(notebook.cell_uris, cells):
        notebook.texts[uri], notebook.versions[uri] = text, next(_versions)
    before = len(client.published)
    client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
        notebook_document=types.NotebookDocument(
            uri=notebook.uri, notebook_type="jupyter-notebook", version=next(_versions),
            cells=[types.NotebookCell(kind, uri) for kind, uri in zip(kinds, notebook.cell_uris)]),
        cell_text_documents=[types.TextDocumentItem(uri=uri, language_id="markdown" if is_markdown else "python",
                                                    version=notebook.versions[uri], text=notebook.texts[uri])
                             for uri, is_markdown in zip(notebook.cell_uris, markdown)]))
    return notebook, {uri: await published(client, uri, before) for uri in notebook.cell_uris}


def change_cell(client: LanguageClient, notebook: OpenNotebook, uri: str,
                change: types.TextDocumentContentChangeEvent) -> int:
    notebook.versions[uri] = next(_versions)
    client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
        notebook_document=types.VersionedNotebookDocumentIdentifier(uri=notebook.uri, version=next(_versions)),
        change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(text_content=[
            types.NotebookDocumentCellContentChanges(
                document=types.VersionedTextDocumentIdentifier(uri=uri, version=notebook.versions[uri]),
                changes=[change])]))))
    return notebook.versions[uri]


def close_notebook(client: LanguageClient, notebook: OpenNotebook) -> None:
    client.notebook_document_did_close(types.DidCloseNotebookDocumentParams(
        notebook_document=types.NotebookDocumentIdentifier(uri=notebook.uri),
        cell_text_documents=[types.TextDocumentIdentifier(uri=uri) for uri in notebook.cell_uris]))


def cell_edits(action: types.CodeAction) -> dict[str, tuple[int, list[types.TextEdit]]]:
    """A versioned workspace edit's edits, by the cell they are for."""
    return {change_.text_document.uri: (change_.text_document.version, list(change_.edits))
            for change_ in action.edit.document_changes}


# --- tests ---------------------------------------------------------------------------------------

async def test_open_publishes_diagnostics_in_the_clients_encoding(neovim: LanguageClient, workspace: Path):
    text = "import torch\n\nx = '😀é'; y = torch.zeros(3).cuda()\n"
    uri, params = await open_document(neovim, workspace / "open.py", text)
    (diagnostic,) = params.diagnostics
    assert diagnostic.code == "TL201" and diagnostic.source == "torchlint"
    # Neovim 0.11 asks for UTF-8: the emoji is 4 units, é 2.
    assert diagnostic.range.start == types.Position(2, len("x = '😀é'; y = ".encode()))
    assert diagnostic.data["fix"]["applicability"] == "safe"
    assert params.version is not None
    close(neovim, uri)


async def test_changes_are_debounced(neovim: LanguageClient, workspace: Path):
    uri, params = await open_document(neovim, workspace / "debounce.py", LEAK)
    assert codes(params) == ["TL101"]
    before = len(neovim.published)
    for text in ("x = 1\n", DATA_PARALLEL + "y = (\n", LEAK_FIXED):  # typed in quick succession
        last = change(neovim, uri, text)
    params = await published(neovim, uri, before)
    assert params.version == last and codes(params) == []
    await asyncio.sleep(2 * DEBOUNCE_SECONDS)
    assert [p.version for p in neovim.published[before:] if p.uri == uri] == [last]
    close(neovim, uri)


async def test_edits_that_keep_statements_lint_as_a_fresh_open(neovim: LanguageClient, workspace: Path):
    """After an edit the server parses only the statements that changed (torchlint/parsing.py); a
    statement it keeps is still read in the edited file's context: without the import above it,
    ``nn.DataParallel`` is no longer torch's."""
    uri, params = await open_document(neovim, workspace / "kept.py", DATA_PARALLEL)
    assert [(d.code, d.range.start.line) for d in params.diagnostics] == [("TL501", 2)]
    edits = [("# a comment above\n" + DATA_PARALLEL, [("TL501", 3)]),
             (DATA_PARALLEL.replace("import torch.nn as nn\n", "nn = object()\n"), []),
             (DATA_PARALLEL + "\nother = nn.DataParallel(nn.Linear(2, 2))\n", [("TL501", 2), ("TL501", 4)]),
             (DATA_PARALLEL, [("TL501", 2)])]
    for text, expected in edits:
        before = len(neovim.published)
        version = change(neovim, uri, text)
        params = await published(neovim, uri, before)
        assert params.version == version
        assert [(d.code, d.range.start.line) for d in params.diagnostics] == expected
    close(neovim, uri)


async def test_fix_all_after_an_edit_is_what_fix_writes(neovim: LanguageClient, workspace: Path):
    """fixAll starts from the findings the server published for the version and re-parses only the
    statements each round changes (torchlint/parsing.py): the text is still ``--fix``'s."""
    from torchlint.config import resolve_settings
    from torchlint.engine import fix_source

    path = workspace / "fix_all.py"
    example = (ROOT / "fixtures" / "examples" / "train.py").read_text()
    uri, params = await open_document(neovim, path, example)
    assert len(params.diagnostics) >= 3
    edited = example.replace("losses = []\n", "losses = []  # kept per epoch\n")
    before = len(neovim.published)
    change(neovim, uri, edited)
    await published(neovim, uri, before)
    (fix_all,) = await code_actions(neovim, uri, 0, only=["source.fixAll"])
    settings = resolve_settings(path, target_torch="1.13")
    assert apply(edited, edits_of(fix_all, uri), "utf-8") == fix_source(edited, str(path), settings).source
    close(neovim, uri)


async def test_save_publishes_without_waiting_for_the_pause(patient: LanguageClient, workspace: Path):
    uri, params = await open_document(patient, workspace / "saved.py", LEAK)
    assert codes(params) == ["TL101"]
    before = len(patient.published)
    last = change(patient, uri, LEAK_FIXED)
    patient.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))
    params = await published(patient, uri, before)  # the pause is ten minutes: this is the save's
    assert params.version == last and codes(params) == []
    close(patient, uri)

    # A notebook: without the import in cell 0, `nn.DataParallel` in cell 3 is no longer torch's.
    notebook, _ = await open_notebook(patient, workspace / "saved.ipynb", NOTEBOOK)
    imports, _, magics, model = notebook.cell_uris
    before = len(patient.published)
    change_cell(patient, notebook, imports, types.TextDocumentContentChangeWholeDocument(text="import torch\n"))
    patient.notebook_document_did_save(types.DidSaveNotebookDocumentParams(
        notebook_document=types.NotebookDocumentIdentifier(uri=notebook.uri)))
    assert codes(await published(patient, model, before)) == []
    assert codes(await published(patient, magics, before)) == ["TL201"]
    close_notebook(patient, notebook)


async def test_unparsable_buffer_gives_tl000_and_the_server_keeps_answering(neovim: LanguageClient, workspace: Path):
    uri, params = await open_document(neovim, workspace / "broken.py", "def f(:\n    pass\n")
    assert codes(params) == ["TL000"]
    assert params.diagnostics[0].severity == types.DiagnosticSeverity.Error
    assert not await code_actions(neovim, uri, 0)
    before = len(neovim.published)
    change(neovim, uri, LEAK)
    assert codes(await published(neovim, uri, before)) == ["TL101"]
    close(neovim, uri)


async def test_quick_fix_disable_and_fix_all(neovim: LanguageClient, workspace: Path):
    text = DATA_PARALLEL + LEAK.replace("import torch\n", "")
    uri, params = await open_document(neovim, workspace / "actions.py", text)
    assert codes(params) == ["TL501", "TL101"]

    actions = await code_actions(neovim, uri, 8)  # losses.append(loss)
    titles = [a.title for a in actions]
    assert titles == ["Detach the value before keeping it", "Disable TL101 for this line",
                      "torchlint: fix all auto-fixable problems"]
    quick_fix, disable, fix_all = actions
    assert quick_fix.kind == types.CodeActionKind.QuickFix and quick_fix.is_preferred
    assert quick_fix.diagnostics[0].code == "TL101"
    assert apply(text, edits_of(quick_fix, uri), "utf-8") == text.replace("append(loss)", "append(loss.detach())")
    assert apply(text, edits_of(disable, uri), "utf-8") == text.replace(
        "losses.append(loss)\n", "losses.append(loss)  # noqa: TL101\n")
    assert fix_all.kind == "source.fixAll.torchlint"
    # Asked for without kinds (a lightbulb), fix-all comes without its edit: a round of --fix, run
    # when the action is chosen (codeAction/resolve), which Neovim 0.11 and VS Code support.
    assert fix_all.edit is None and fix_all.data is not None
    fix_all = await neovim.code_action_resolve_async(fix_all)
    # Fix all applies the safe fixes only, like --fix: DataParallel stays.
    assert apply(text, edits_of(fix_all, uri), "utf-8") == text.replace("append(loss)", "append(loss.detach())")

    unsafe = await code_actions(neovim, uri, 2)
    assert unsafe[0].title.endswith("(unsafe)") and not unsafe[0].is_preferred
    assert "DistributedDataParallel(nn.Linear(2, 2).to(gpu)" in apply(text, edits_of(unsafe[0], uri), "utf-8")

    only = await code_actions(neovim, uri, 0, only=["source.fixAll"])
    assert [a.kind for a in only] == ["source.fixAll.torchlint"]
    assert [a.title for a in await code_actions(neovim, uri, 8, only=["quickfix"])] == titles[:2]
    close(neovim, uri)


async def test_disable_merges_with_an_existing_noqa_comment(neovim: LanguageClient, workspace: Path):
    text = "import torch\n\nx = torch.zeros(3).cuda()  # keep  # noqa: TL999\ny = torch.ones(2).to(dev)  # comment\n"
    uri, params = await open_document(neovim, workspace / "noqa.py", text)
    assert codes(params) == ["TL201", "TL201"]
    first = (await code_actions(neovim, uri, 2))[1]
    assert first.title == "Disable TL201 for this line"
    assert apply(text, edits_of(first, uri), "utf-8").splitlines()[2] == \
        "x = torch.zeros(3).cuda()  # keep  # noqa: TL999, TL201"
    second = (await code_actions(neovim, uri, 3))[1]
    fixed = apply(text, edits_of(second, uri), "utf-8")
    assert fixed.splitlines()[3] == "y = torch.ones(2).to(dev)  # comment  # noqa: TL201"
    before = len(neovim.published)
    change(neovim, uri, apply(fixed, edits_of(first, uri), "utf-8"))
    assert codes(await published(neovim, uri, before)) == []  # both lines are silenced
    close(neovim, uri)


async def test_noqa_goes_to_the_end_of_a_logical_line_that_a_comment_cannot_split(
        neovim: LanguageClient, workspace: Path):
    text = "import torch\n\nx = torch.zeros(3).cuda() + \\\n    1\n"
    uri, params = await open_document(neovim, workspace / "continued.py", text)
    assert codes(params) == ["TL201"]
    disable = (await code_actions(neovim, uri, 2))[1]
    fixed = apply(text, edits_of(disable, uri), "utf-8")
    assert fixed.endswith("\\\n    1  # noqa: TL201\n")
    before = len(neovim.published)
    change(neovim, uri, fixed)
    assert codes(await published(neovim, uri, before)) == []
    close(neovim, uri)


async def test_settings_from_config_initialization_options_and_client(neovim: LanguageClient, workspace: Path):
    # pyproject: per-file-ignores silence TL101 under scripts/.
    uri, params = await open_document(neovim, workspace / "scripts" / "run.py", LEAK)
    assert codes(params) == []
    close(neovim, uri)
    # initializationOptions: targetTorch 1.13, where a bare zero_grad() writes zeros.
    uri, params = await open_document(neovim, workspace / "zero.py", ZERO_GRAD + DATA_PARALLEL)
    assert codes(params) == ["TL301", "TL501"]
    try:
        before = len(neovim.published)
        neovim.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            settings={"torchlint": {"select": ["TL5"], "unsafeFixes": True}}))
        assert codes(await published(neovim, uri, before)) == ["TL501"]
        (fix_all,) = await code_actions(neovim, uri, 0, only=["source.fixAll"])
        assert "DistributedDataParallel(nn.Linear(2, 2).to(gpu)" in apply(ZERO_GRAD + DATA_PARALLEL,
                                                                          edits_of(fix_all, uri), "utf-8")
        before = len(neovim.published)
        neovim.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            settings={"torchlint": {"select": "nope"}}))
        assert codes(await published(neovim, uri, before)) == []
        assert any("unknown rule selector `nope`" in m.message for m in neovim.messages)
    finally:
        before = len(neovim.published)
        neovim.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            settings={"torchlint": {"targetTorch": "1.13"}}))
        assert codes(await published(neovim, uri, before)) == ["TL301", "TL501"]
    close(neovim, uri)


async def test_close_clears_diagnostics(neovim: LanguageClient, workspace: Path):
    uri, params = await open_document(neovim, workspace / "closing.py", LEAK)
    assert codes(params) == ["TL101"]
    before = len(neovim.published)
    close(neovim, uri)
    assert codes(await published(neovim, uri, before)) == []


async def test_utf16_client_gets_utf16_positions_and_versioned_edits(vscode: LanguageClient, workspace: Path):
    text = "import torch\n\nx = '😀é'; y = torch.zeros(3).cuda()\n"
    uri, params = await open_document(vscode, workspace / "utf16.py", text)
    (diagnostic,) = params.diagnostics
    assert diagnostic.range.start == types.Position(2, len("x = '😀é'; y = ") + 1)  # the emoji is 2 units
    actions = await code_actions(vscode, uri, 2)
    assert actions[0].edit.document_changes[0].text_document.version == params.version
    assert apply(text, edits_of(actions[0], uri), "utf-16") == text.replace(
        "torch.zeros(3).cuda()", 'torch.zeros(3, device="cuda")')
    close(vscode, uri)


async def test_notebook_cells_are_linted_together_and_reported_per_cell(vscode: LanguageClient, workspace: Path):
    sync = vscode.server_capabilities.notebook_document_sync
    assert sync.notebook_selector[0].notebook == "jupyter-notebook" and sync.save
    notebook, found = await open_notebook(vscode, workspace / "train.ipynb", NOTEBOOK)
    imports, markdown, magics, model = notebook.cell_uris
    # Cell 0's imports resolve `torch` and `nn` in cells 2 and 3; the magics are no syntax error;
    # cells with nothing to show get an empty list.
    assert [codes(found[uri]) for uri in notebook.cell_uris] == [[], [], ["TL201"], ["TL501"]]
    (moved,) = found[magics].diagnostics
    assert moved.range.start == types.Position(2, len("s = '😀é'; y = ") + 1)  # UTF-16: the emoji is 2 units
    assert found[magics].version == notebook.versions[magics]
    assert found[model].diagnostics[0].range.start == types.Position(0, len("model = "))
    close_notebook(vscode, notebook)


async def test_notebook_code_actions_edit_the_cells_they_are_for(vscode: LanguageClient, workspace: Path):
    notebook, _ = await open_notebook(vscode, workspace / "actions.ipynb", NOTEBOOK)
    imports, markdown, magics, model = notebook.cell_uris
    texts, versions = notebook.texts, notebook.versions

    quick_fix, disable, fix_all = await code_actions(vscode, magics, 2)
    fix_all = await vscode.code_action_resolve_async(fix_all)
    assert cell_edits(quick_fix).keys() == {magics} and cell_edits(quick_fix)[magics][0] == versions[magics]
    assert apply(texts[magics], cell_edits(quick_fix)[magics][1], "utf-16") == texts[magics].replace(
        "torch.zeros(3).cuda()", 'torch.zeros(3, device="cuda")')
    assert apply(texts[magics], cell_edits(disable)[magics][1], "utf-16").endswith(".cuda()  # noqa: TL201")
    # Fix all: the safe fixes of the whole notebook (here only cell 2's); the magics stay as written.
    assert fix_all.kind == "source.fixAll.torchlint" and cell_edits(fix_all).keys() == {magics}
    assert apply(texts[magics], cell_edits(fix_all)[magics][1], "utf-16") == texts[magics].replace(
        "torch.zeros(3).cuda()", 'torch.zeros(3, device="cuda")')

    # TL501's fix puts the imports it needs among cell 0's: an edit of cell 0, at cell 0's version.
    unsafe = (await code_actions(vscode, model, 0))[0]
    assert unsafe.title.endswith("(unsafe)")
    edits = cell_edits(unsafe)
    assert edits.keys() == {model, imports}
    assert (edits[model][0], edits[imports][0]) == (versions[model], versions[imports])
    fixed_model = apply(texts[model], edits[model][1], "utf-16")
    assert fixed_model.startswith("if not dist.is_initialized()") and fixed_model.endswith(texts[model].replace(
        "nn.DataParallel(nn.Linear(2, 2))",
        "DistributedDataParallel(nn.Linear(2, 2).to(gpu), device_ids=None if gpu is None else [gpu])"))
    assert apply(texts[imports], edits[imports][1], "utf-16").startswith(
        "import os\n\n" + texts[imports] + "\nimport torch.distributed as dist\n")
    close_notebook(vscode, notebook)


async def test_notebook_changes_save_and_close(vscode: LanguageClient, workspace: Path):
    notebook, _ = await open_notebook(vscode, workspace / "edited.ipynb", NOTEBOOK)
    imports, markdown, magics, model = notebook.cell_uris
    # VS Code sends a cell's edits as ranges (in UTF-16 units): delete the emoji.
    before = len(vscode.published)
    version = change_cell(vscode, notebook, magics, types.TextDocumentContentChangePartial(
        range=types.Range(types.Position(2, 5), types.Position(2, 7)), text=""))
    params = await published(vscode, magics, before)
    assert params.version == version
    assert [d.range.start for d in params.diagnostics] == [types.Position(2, len("s = 'é'; y = "))]

    # Without the import in cell 0, `nn.DataParallel` in cell 3 is no longer torch's.
    before = len(vscode.published)
    change_cell(vscode, notebook, imports, types.TextDocumentContentChangeWholeDocument(text="import torch\n"))
    assert codes(await published(vscode, model, before)) == []
    assert codes(await published(vscode, magics, before)) == ["TL201"]

    before = len(vscode.published)
    close_notebook(vscode, notebook)
    assert [codes(await published(vscode, uri, before)) for uri in notebook.cell_uris] == [[], [], [], []]


async def test_without_pygls_the_command_says_what_to_install(tmp_path):
    blocker = tmp_path / "pygls"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('pygls is not installed')\n")
    result = run_torchlint("lsp", env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 2
    # torchlint is not on PyPI: `pip install 'torchlint[lsp]'` would not find it
    assert "pip install 'pygls>=2.0,<3'" in result.stderr.decode()
