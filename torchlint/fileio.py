"""Reading and writing source files without losing anything: the declared encoding, a UTF-8
BOM, the newline style, the file's mode, owner, group and hard links are kept; writes are atomic
(in place only where a new file could not keep the owner or the links), wait out interrupts, and
refuse to overwrite a file that changed since it was read."""

from __future__ import annotations

import codecs
import errno
import io
import os
import signal
import stat
import tempfile
import tokenize
from contextlib import contextmanager
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


def read_regular_file(path: str | os.PathLike, max_bytes: int) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of at most ``max_bytes``; None for anything
    else (missing, unreadable, a FIFO or a device, which a plain read would wait on for good)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            return None
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
        return None  # it grew past the bound while being read
    except OSError:
        return None
    finally:
        os.close(fd)


def write_source(original: SourceFile, text: str) -> None:
    """Replace the file's content with ``text`` in its original encoding and BOM, keeping its mode,
    owner and group and its hard links, unless someone else changed it since we read it."""
    path = original.path
    try:
        data = original.encode(text)
    except UnicodeEncodeError as error:
        raise WriteError(f"{path}: the fixed text cannot be written in {original.encoding} ({error})") from None
    target = path.resolve()  # write through a symlink, not over it
    try:
        info = target.stat()
    except OSError as error:
        raise WriteError(f"{path}: cannot check the file before writing ({error.strerror or error})") from None
    # the write replaces the file through its folder, which a read-only file would not stop
    if not info.st_mode & 0o222 or not os.access(target, os.W_OK):
        raise WriteError(f"{path}: the file is read-only; not fixed (make it writable to fix it)")
    with signals_held():
        if info.st_nlink > 1 or not _replace(original, target, data, info):
            _write_in_place(original, target, data)


# Signals that end a process wait while a file is written: a run stopped then (Ctrl-C, a kill,
# the death of a worker's parent) leaves no file half-written and no temporary file behind.
_HELD_SIGNALS = {getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)}


@contextmanager
def signals_held():
    if not hasattr(signal, "pthread_sigmask"):  # Windows
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _check_unchanged(original: SourceFile, current: bytes) -> None:
    """Checked as late as possible, right before the file is replaced: an editor's save while
    torchlint worked (or wrote the new file) must not be lost."""
    if current != original.raw:
        raise WriteError(f"{original.path}: changed on disk while torchlint was working; not overwritten, run again")


def _replace(original: SourceFile, target: Path, data: bytes, info: os.stat_result) -> bool:
    """Atomically replace ``target``: a new file beside it, with its mode, owner and group, renamed
    over it. False, with nothing changed, where the new file cannot be made or cannot be given the
    owner and group (a folder the user cannot write to, another user's file)."""
    path = original.path
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".torchlint.tmp", dir=target.parent)
    except PermissionError:
        return False
    except OSError as error:
        raise WriteError(f"{path}: cannot write the fixed file ({error.strerror or error}); the original is intact") from None
    handle: str | None = temp
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
            made = os.fstat(out.fileno())
        if (made.st_uid, made.st_gid) != (info.st_uid, info.st_gid):
            try:
                os.chown(temp, info.st_uid, info.st_gid)  # before chmod, which chown would clear setuid from
            except PermissionError:
                return False
        os.chmod(temp, stat.S_IMODE(info.st_mode))
        _check_unchanged(original, target.read_bytes())
        os.replace(temp, target)
        handle = None
        return True
    except OSError as error:
        raise WriteError(f"{path}: cannot write the fixed file ({error.strerror or error}); the original is intact") from None
    finally:
        if handle is not None:
            try:
                os.unlink(handle)
            except OSError:
                pass


def _write_in_place(original: SourceFile, target: Path, data: bytes) -> None:
    """Write into the file itself, as Ruff and Black always do: its hard links, owner and group
    stay. Used only where a replacement cannot keep them, since a crash in the middle of it (not
    an interrupt: those wait) would leave the file half-written. The space is reserved first, so
    a full disk stops it before a byte changes."""
    path = original.path
    try:
        with open(target, "r+b") as handle:
            _check_unchanged(original, handle.read())
            if len(data) > len(original.raw) and hasattr(os, "posix_fallocate"):
                try:
                    os.posix_fallocate(handle.fileno(), 0, len(data))
                except OSError as error:
                    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                        raise
            handle.seek(0)
            handle.write(data)
            handle.truncate()
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        raise WriteError(f"{path}: cannot write the fixed file ({error.strerror or error})") from None
