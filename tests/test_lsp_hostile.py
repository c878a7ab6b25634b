"""Issue 17: what a bad client must never do to the language server. Each test speaks raw bytes to
a real `torchlint lsp` process: a bad frame gets a JSON-RPC error, and the next message is answered."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("pygls")

from torchlint.lsp import DEBOUNCE_SECONDS, _debounce_seconds  # noqa: E402 - pygls first

TIMEOUT = 30  # seconds to wait for an answer: generous for a loaded machine, finite for a hung server


class Server:
    def __init__(self, cwd: Path):
        self.process = subprocess.Popen([sys.executable, "-m", "torchlint", "lsp"], cwd=cwd, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.messages: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                elif not line.strip():
                    break
            self.messages.put(json.loads(stream.read(length)))

    def send_raw(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def send(self, message: dict) -> None:
        body = json.dumps(message).encode()
        self.send_raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def request(self, message_id, method: str, params: dict) -> None:
        self.send({"jsonrpc": "2.0", "id": message_id, "method": method, "params": params})

    def answer(self, message_id) -> dict:
        """The response to ``message_id`` (notifications and other responses are skipped)."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                message = self.messages.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if "method" not in message and message.get("id") == message_id:
                return message
        raise AssertionError(f"no answer to {message_id!r} within {TIMEOUT} s (server alive: {self.alive()})")

    def alive(self) -> bool:
        return self.process.poll() is None

    def initialize(self) -> None:
        self.request(1, "initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        assert "result" in self.answer(1)
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})

    def close(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait(timeout=TIMEOUT)


@pytest.fixture
def server(tmp_path):
    started = Server(tmp_path)
    yield started
    started.close()


def still_answers(server: Server, message_id: int = 99) -> None:
    server.request(message_id, "shutdown", None)
    assert server.answer(message_id).get("result", "missing") is None
    assert server.alive()


def test_a_huge_content_length_gets_an_error_and_the_server_goes_on(server):
    server.initialize()
    server.send_raw(b"Content-Length: 99999999999999\r\n\r\n{}")
    error = server.answer(None)["error"]
    assert error["code"] == -32600 and "over this server's limit" in error["message"]
    still_answers(server)


@pytest.mark.parametrize("header", [b"Content-Length: abc\r\n\r\n", b"Content-Length: -5\r\n\r\n",
                                    b"Content-Type: application/json\r\n\r\n"])
def test_a_content_length_that_is_not_a_length_gets_an_error_and_later_messages_are_read(server, header):
    server.initialize()
    server.send_raw(header + b'{"jsonrpc": "2.0", "id": 5, "method": "shutdown"}')
    assert server.answer(None)["error"]["code"] == -32600
    still_answers(server)


def test_a_short_content_length_is_a_parse_error_and_the_rest_of_the_body_is_skipped(server):
    server.initialize()
    body = b'{"jsonrpc": "2.0", "id": 5, "method": "shutdown"}'
    server.send_raw(b"Content-Length: %d\r\n\r\n" % (len(body) - 10) + body)
    assert server.answer(None)["error"]["code"] == -32700
    still_answers(server)


def test_a_code_action_with_a_negative_line_is_answered(server, tmp_path):
    server.initialize()
    uri = (tmp_path / "train.py").as_uri()
    server.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": "import torch\nx = torch.zeros(3).cuda()\n"}}})
    server.request(7, "textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": {"start": {"line": -1, "character": 0}, "end": {"line": -1, "character": 0}},
        "context": {"diagnostics": []}})
    assert server.answer(7)["error"]["code"] == -32602
    still_answers(server)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_code_action_on_a_fifo_named_py_does_not_block(server, tmp_path):
    server.initialize()
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    server.request(7, "textDocument/codeAction", {
        "textDocument": {"uri": fifo.as_uri()}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
        "context": {"diagnostics": []}})
    assert server.answer(7)["result"] == []
    still_answers(server)


def test_a_code_action_on_a_file_the_client_has_not_opened_reads_it_from_disk(server, tmp_path):
    server.initialize()
    script = tmp_path / "train.py"
    script.write_text("import torch\nx = torch.zeros(3).cuda()\n", encoding="utf-8")
    server.request(7, "textDocument/codeAction", {
        "textDocument": {"uri": script.as_uri()}, "range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 0}},
        "context": {"diagnostics": []}})
    titles = [action["title"] for action in server.answer(7)["result"]]
    assert "Disable TL201 for this line" in titles
    still_answers(server)


def test_linting_runs_off_the_message_loop(monkeypatch):
    """Issue 16: while a lint runs, the message loop goes on (no race on speed: the lint here waits
    until the loop has shown that it still runs; a lint on the loop would hold it and never see that)."""
    import asyncio

    from torchlint.lsp import create_server

    server = create_server()
    linting, loop_ran = threading.Event(), threading.Event()

    def lint_that_waits(uri):
        linting.set()
        loop_ran.wait(TIMEOUT)
        return []

    monkeypatch.setattr(server, "linted_documents", lint_that_waits)

    async def scenario() -> bool:
        publishing = asyncio.ensure_future(server.publish("file:///train.py"))
        await asyncio.sleep(0)  # the publish task starts and hands the lint to its thread
        await asyncio.get_running_loop().run_in_executor(None, linting.wait, TIMEOUT)
        still_linting = not publishing.done()
        loop_ran.set()
        await publishing
        return still_linting

    assert asyncio.run(scenario())
    server.lint_thread.shutdown()


@pytest.mark.parametrize("value, seconds", [
    (None, DEBOUNCE_SECONDS), ("0", 0.0), ("1.5", 1.5), ("600", 600.0),
    ("soon", DEBOUNCE_SECONDS), ("-1", DEBOUNCE_SECONDS), ("nan", DEBOUNCE_SECONDS), ("inf", DEBOUNCE_SECONDS),
])
def test_the_pause_after_a_change_comes_from_the_environment(value, seconds):
    assert _debounce_seconds(value) == seconds


def test_fix_all_is_computed_only_for_requests_that_may_want_it():
    """A round of --fix is the costly part of a code action request: a request that asks only for
    quick fixes (an editor's lightbulb at the cursor, with ``only``) does not pay for it."""
    from torchlint.lsp import FIX_ALL_KIND, _wanted

    assert _wanted(FIX_ALL_KIND, None) and _wanted(FIX_ALL_KIND, [])
    assert _wanted(FIX_ALL_KIND, ["source"]) and _wanted(FIX_ALL_KIND, ["source.fixAll"])
    assert not _wanted(FIX_ALL_KIND, ["quickfix"]) and not _wanted(FIX_ALL_KIND, ["source.organizeImports"])
    assert not _wanted(FIX_ALL_KIND, ["source.fix"])  # a prefix of the name is not a parent kind


def test_a_client_that_cannot_resolve_code_actions_gets_fix_all_with_its_edit(server, tmp_path):
    """A client that does not announce codeAction/resolve for edits (this one announces nothing)
    gets fix-all's edit with the action, as before resolve existed."""
    server.initialize()
    script = tmp_path / "train.py"
    script.write_text("import torch\nx = torch.zeros(3).cuda()\n", encoding="utf-8")
    server.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": script.as_uri(), "languageId": "python", "version": 1, "text": script.read_text()}}})
    server.request(7, "textDocument/codeAction", {
        "textDocument": {"uri": script.as_uri()}, "range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 0}},
        "context": {"diagnostics": []}})
    (fix_all,) = [action for action in server.answer(7)["result"] if action["kind"] == "source.fixAll.torchlint"]
    (edit,) = fix_all["edit"]["changes"][script.as_uri()]
    assert edit["newText"] == ", device=\"cuda\""
    still_answers(server)
