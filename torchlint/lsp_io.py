"""The language server's transport: JSON-RPC messages over a byte stream, framed as LSP frames
them (``Content-Length: N``, a blank line, N bytes of JSON), read so that no message can stop the
server.

pygls's own reader gives up on the first bad frame: a ``Content-Length`` of 99999999999999 makes it
allocate that much and die; a length that is not a number, or shorter than the body, leaves it
reading the rest of the body as headers and deaf to every later message; a request whose
parameters do not fit the protocol's types is dropped without an answer. Here a bad frame gets a
JSON-RPC error (``id: null``) and the reader finds the next frame by its ``Content-Length`` header;
a request that cannot be understood is answered with an error for its id.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a frame that claims more is refused (a 64 MB buffer is not source code)
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
HEADER = re.compile(rb"content-length\s*:", re.IGNORECASE)
ANY_HEADER = re.compile(rb"[A-Za-z][A-Za-z0-9-]*:[ \t]")

log = logging.getLogger("torchlint.lsp")


class Frame:
    """One frame read from the stream: its body, or why it has none."""

    __slots__ = ("body", "error")

    def __init__(self, body: bytes | None = None, error: str | None = None):
        self.body = body
        self.error = error


class MessageReader:
    """Reads frames with ``readline()`` and ``read(n)`` (awaitables); None at the end of the stream."""

    def __init__(self, readline: Callable[[], Awaitable[bytes]], read: Callable[[int], Awaitable[bytes]],
                 max_bytes: int = MAX_MESSAGE_BYTES):
        self.readline = readline
        self.read = read
        self.max_bytes = max_bytes

    async def next(self) -> Frame | None:
        length: int | None = None
        error: str | None = None
        in_headers = False
        while True:
            line = await self.readline()
            if not line:
                return None
            if not in_headers:
                # Between frames only a header starts one: anything else is what is left of a bad
                # frame (a body without a newline runs into the next header, so look inside the line).
                found = HEADER.search(line)
                if found is not None:
                    line = line[found.start():]
                elif not ANY_HEADER.match(line):
                    continue
                in_headers = True
            if not line.strip():  # the blank line that ends the headers
                if error is not None:
                    return Frame(error=error)
                if length is None:
                    return Frame(error="a message without a Content-Length header")
                body = await self.read(length)
                if len(body) < length:
                    return None  # the stream ended inside the body
                return Frame(body)
            name, _, value = line.partition(b":")
            if name.strip().lower() != b"content-length":
                continue  # Content-Type, or a header this server does not know
            value = value.strip()
            if not value.isdigit():
                error = f"Content-Length {value[:40].decode('latin-1')!r} is not a number of bytes"
            elif int(value) > self.max_bytes:
                error = f"Content-Length {int(value)} is over this server's limit of {self.max_bytes} bytes"
            else:
                length = int(value)


def error_message(message_id, code: int, text: str) -> dict:
    return {"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": text}}


def handle_frame(frame: Frame, protocol, send: Callable[[dict], None]) -> None:
    """Give a frame's message to pygls's protocol; answer what it cannot take with an error."""
    if frame.error is not None:
        log.warning("bad message frame: %s", frame.error)
        send(error_message(None, INVALID_REQUEST, frame.error))
        return
    try:  # one parse on the common path: a frame that reads is handed on as it is
        message = json.loads(frame.body, object_hook=protocol.structure_message)
    except Exception as error:  # noqa: BLE001 - not JSON, or parameters that do not fit the protocol's types
        _refuse(frame.body, error, send)
        return
    if message is None or isinstance(message, (list, str, int, float, bool)):
        send(error_message(None, INVALID_REQUEST, "a JSON-RPC message is an object"))
        return
    protocol.handle_message(message)


def _refuse(body: bytes, error: Exception, send: Callable[[dict], None]) -> None:
    """Answer a frame that pygls's protocol could not read: a parse error, or an error for the
    request's id when only its parameters were wrong (a request waits for its answer)."""
    try:
        raw = json.loads(body)
    except ValueError as parse_error:
        log.warning("a message that is not JSON: %s", parse_error)
        send(error_message(None, PARSE_ERROR, f"the message is not JSON: {parse_error}"))
        return
    if not isinstance(raw, dict):
        send(error_message(None, INVALID_REQUEST, "a JSON-RPC message is an object"))
        return
    log.warning("cannot read %s: %s", raw.get("method", "a message"), error)
    if "id" in raw and "method" in raw:
        send(error_message(raw["id"], INVALID_PARAMS, f"invalid parameters for {raw['method']}: {error}"))


def write_message(writer, data: dict) -> None:
    body = json.dumps(data).encode("utf-8")
    writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)


def serve_stdio(server, stdin, stdout) -> None:
    """Run ``server`` (a pygls LanguageServer) on a pair of byte streams until the client exits or
    the input ends: pygls's ``start_io``, with this module's reader."""
    import asyncio
    import threading

    from pygls.io_ import StdinAsyncReader, StdoutWriter

    server._stop_event = threading.Event()
    reader = StdinAsyncReader(stdin, server.thread_pool)
    writer = StdoutWriter(stdout)
    server.protocol.set_writer(writer)
    frames = MessageReader(reader.readline, reader.readexactly)

    async def run() -> None:
        while not server._stop_event.is_set():
            frame = await frames.next()
            if frame is None:
                break
            try:
                handle_frame(frame, server.protocol, lambda data: write_message(writer, data))
            except BrokenPipeError:
                raise
            except Exception:  # noqa: BLE001 - one message must not stop the server
                log.exception("cannot handle a message")

    try:
        asyncio.run(run())
    except BrokenPipeError:
        log.error("the client has gone; stopping")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()
