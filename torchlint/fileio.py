"""Reading and writing source files without losing anything: the declared encoding, a UTF-8
BOM, the newline style and the file mode are kept; writes are atomic and refuse to overwrite a
file that changed since it was read."""

from __future__ import annotations

import codecs
import io
import os
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path


class SourceReadError(Exception):
    """The file cannot be read (missing, a directory, permissions): exit 2."""


class SourceDecodeError(Exception):
    """The file's bytes are not text in its declared encoding: reported as TL000."""


class WriteError(Exception):
    """The fixed text was not written; the original is intact."""


@dataclass(frozen=True)
class SourceFile:
    path: Path
    raw: bytes
    text: str
    encoding: str
    bom: bool

    def encode(self, text: str) -> bytes:
        data = text.encode(self.encoding)
        return codecs.BOM_UTF8 + data if self.bom else data


def decode_source(raw: bytes) -> tuple[str, str, bool]:
    """Python's own rules: a BOM or a coding cookie, else UTF-8. Newlines are kept as they are."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as error:
        raise SourceDecodeError(f"{error}; a coding comment such as `# -*- coding: latin-1 -*-` on one of the "
                                "first two lines must name the file's real encoding") from None
    bom = encoding == "utf-8-sig"
    if bom:
        raw = raw[len(codecs.BOM_UTF8):]
        encoding = "utf-8"
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as error:
        raise SourceDecodeError(f"not valid {encoding} text (byte {raw[error.start:error.start + 1]!r} at offset "
                                f"{error.start}); if it is text in another encoding, declare it with a coding "
                                "comment such as `# -*- coding: latin-1 -*-`") from None
    except LookupError as error:
        raise SourceDecodeError(f"{error}; fix or remove the coding comment") from None
    if "\x00" in text:
        raise SourceDecodeError("it contains NUL bytes, so it is not Python source (a binary file?); exclude it")
    return text, encoding, bom


def read_source(path: Path) -> SourceFile:
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise SourceReadError(f"{path}: is a directory") from None
    except FileNotFoundError:
        raise SourceReadError(f"{path}: no such file") from None
    except PermissionError:
        raise SourceReadError(f"{path}: permission denied") from None
    except OSError as error:
        raise SourceReadError(f"{path}: cannot read ({error.strerror or error})") from None
    text, encoding, bom = decode_source(raw)
    return SourceFile(path, raw, text, encoding, bom)


def write_source(original: SourceFile, text: str) -> None:
    """Atomically replace the file with ``text`` in its original encoding, BOM and mode, unless
    someone else changed it since we read it."""
    path = original.path
    try:
        data = original.encode(text)
    except UnicodeEncodeError as error:
        raise WriteError(f"{path}: the fixed text cannot be written in {original.encoding} ({error})") from None
    try:
        if path.read_bytes() != original.raw:
            raise WriteError(f"{path}: changed on disk while torchlint was working; not overwritten, run again")
        mode = path.stat().st_mode & 0o7777
        # the write replaces the file through its folder, which a read-only file would not stop
        if not mode & 0o222 or not os.access(path, os.W_OK):
            raise WriteError(f"{path}: the file is read-only; not fixed (make it writable to fix it)")
    except OSError as error:
        raise WriteError(f"{path}: cannot check the file before writing ({error.strerror or error})") from None
    target = path.resolve()  # write through a symlink, not over it
    handle = None
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".torchlint.tmp", dir=target.parent)
        handle = temp
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode)
        os.replace(temp, target)
        handle = None
    except OSError as error:
        raise WriteError(f"{path}: cannot write the fixed file ({error.strerror or error}); the original is intact") from None
    finally:
        if handle is not None:
            try:
                os.unlink(handle)
            except OSError:
                pass
