"""`torchlint lsp` end to end: a real server process, real JSON-RPC, driven by pytest-lsp with the
capabilities that Neovim 0.11 (UTF-8 positions, plain `changes` edits) and VS Code (UTF-16,
versioned `documentChanges`) announce."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

from conftest import GUIDE_RULES_CONFIG, LEAK, LEAK_FIXED, run_torchlint

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


@pytest_lsp.fixture(config=SERVER, scope="module")
async def vscode(lsp_client: LanguageClient, workspace: Path):
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), root_uri=workspace.as_uri()))
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


async def test_changes_are_debounced_and_save_publishes_at_once(neovim: LanguageClient, workspace: Path):
    uri, params = await open_document(neovim, workspace / "debounce.py", LEAK)
    assert codes(params) == ["TL101"]
    before = len(neovim.published)
    for text in ("x = 1\n", DATA_PARALLEL + "y = (\n", LEAK_FIXED):  # typed in quick succession
        last = change(neovim, uri, text)
    params = await published(neovim, uri, before)
    assert params.version == last and codes(params) == []
    await asyncio.sleep(0.5)
    assert [p.version for p in neovim.published[before:] if p.uri == uri] == [last]

    before = len(neovim.published)
    change(neovim, uri, LEAK)
    neovim.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))
    started = time.monotonic()
    params = await published(neovim, uri, before)
    assert codes(params) == ["TL101"] and time.monotonic() - started < 0.25  # not waiting for the debounce
    close(neovim, uri)


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
    # Fix all applies the safe fixes only, like --fix: DataParallel stays.
    assert apply(text, edits_of(fix_all, uri), "utf-8") == text.replace("append(loss)", "append(loss.detach())")

    unsafe = await code_actions(neovim, uri, 2)
    assert unsafe[0].title.endswith("(unsafe)") and not unsafe[0].is_preferred
    assert "_distributed_data_parallel" in apply(text, edits_of(unsafe[0], uri), "utf-8")

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
        assert "_distributed_data_parallel(nn.Linear(2, 2))" in apply(ZERO_GRAD + DATA_PARALLEL,
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


async def test_without_pygls_the_command_says_what_to_install(tmp_path):
    blocker = tmp_path / "pygls"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('pygls is not installed')\n")
    result = run_torchlint("lsp", env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 2
    assert "pip install 'torchlint[lsp]'" in result.stderr.decode()
