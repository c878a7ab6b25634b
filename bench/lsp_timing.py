"""How long the language server takes on one file, measured from a client's side: open to the
first diagnostics, a one-line edit to the diagnostics of the edited text, and then the fix-all code
action (`source.fixAll`, what an editor asks for on save) to its answer.

    .venv/bin/python bench/lsp_timing.py FILE [--repeat N]

The client speaks LSP's JSON-RPC over the server's stdin and stdout, as an editor does (what the
pygls-based clients of tests/test_lsp.py send, without their test harness). An edit's diagnostics
come after the server's debounce (torchlint.lsp.DEBOUNCE_SECONDS, the pause it waits for the
typing to stop); "after the pause" subtracts it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from torchlint.lsp import DEBOUNCE_SECONDS


class Client:
    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "torchlint", "lsp"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def send(self, message: dict) -> None:
        body = json.dumps(message).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def receive(self) -> dict:
        length = 0
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("the server closed its output")
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
            elif not line.strip():
                return json.loads(self.process.stdout.read(length))

    def diagnostics_for(self, uri: str, version: int) -> list:
        while True:
            message = self.receive()
            params = message.get("params") or {}
            if message.get("method") == "textDocument/publishDiagnostics" and params.get("uri") == uri \
                    and params.get("version") == version:
                return params["diagnostics"]

    def start(self) -> None:
        self.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"processId": None, "rootUri": None, "capabilities": {}}})
        while self.receive().get("id") != 1:
            pass
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})

    def stop(self) -> None:
        self.send({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
        self.send({"jsonrpc": "2.0", "method": "exit"})
        self.process.wait(timeout=30)


def one_run(path: Path) -> tuple[float, float, float, int]:
    """(seconds from didOpen to diagnostics, from a one-line didChange to its diagnostics, from the
    edited text's first fix-all code action request to its answer, findings)."""
    text = path.read_text(encoding="utf-8")
    uri = path.resolve().as_uri()
    client = Client()
    client.start()
    began = time.perf_counter()
    client.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": text}}})
    found = client.diagnostics_for(uri, 1)
    opened = time.perf_counter() - began
    lines = text.splitlines(keepends=True)
    middle = len(lines) // 2
    lines[middle] = lines[middle].rstrip("\n") + "  # edited\n"
    began = time.perf_counter()
    client.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
        "textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": "".join(lines)}]}})
    client.diagnostics_for(uri, 2)
    edited = time.perf_counter() - began
    began = time.perf_counter()
    client.send({"jsonrpc": "2.0", "id": 3, "method": "textDocument/codeAction", "params": {
        "textDocument": {"uri": uri}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
        "context": {"diagnostics": [], "only": ["source.fixAll"]}}})
    while client.receive().get("id") != 3:
        pass
    fixed_all = time.perf_counter() - began
    client.stop()
    return opened, edited, fixed_all, len(found)


def measure(path: Path, repeat: int) -> dict:
    runs = [one_run(path) for _ in range(repeat)]
    opened = statistics.median(r[0] for r in runs)
    edited = statistics.median(r[1] for r in runs)
    return {"open_s": opened, "edit_s": edited, "edit_after_pause_s": edited - DEBOUNCE_SECONDS,
            "fix_all_s": statistics.median(r[2] for r in runs), "findings": runs[0][3],
            "open_runs": [r[0] for r in runs], "edit_runs": [r[1] for r in runs], "fix_all_runs": [r[2] for r in runs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    result = measure(args.file, args.repeat)
    print(f"open: {result['open_s']:.2f} s; one-line edit: {result['edit_s']:.2f} s "
          f"({result['edit_after_pause_s']:.2f} s after the {DEBOUNCE_SECONDS} s pause); "
          f"fix all: {result['fix_all_s']:.2f} s; {result['findings']} findings")


if __name__ == "__main__":
    main()
