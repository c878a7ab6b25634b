"""One run over files: read, lint (or take the cached result), fix, write, collect results."""

from __future__ import annotations

import ctypes
import difflib
import hashlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from torchlint.diagnostics import Diagnostic, Edit, FileResult, Fix, Related, Severity
from torchlint.engine import FixError, collecting_crashes, fix_source, lint_source, syntax_error
from torchlint.fileio import (SourceDecodeError, SourceFile, SourceReadError, WriteError, read_source, signals_held,
                              write_source)
from torchlint.notebook import check_notebook_text, is_notebook


def display_path(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


class Cache:
    """Results keyed by the file's bytes and everything else they depend on (torchlint's version,
    the settings, the selected rules). Files with findings are stored too."""

    def __init__(self, directory: Path, fingerprint: str):
        self.directory = directory / fingerprint
        self.fingerprint = fingerprint

    def _file(self, raw: bytes, path: str) -> Path:
        digest = hashlib.sha256(raw + b"\0" + path.encode()).hexdigest()
        return self.directory / digest[:2] / f"{digest[2:]}.json"

    def get(self, raw: bytes, path: str) -> list[Diagnostic] | None:
        try:
            data = json.loads(self._file(raw, path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        try:
            return [_diagnostic_from_dict(d) for d in data]
        except (KeyError, TypeError, ValueError):
            return None

    def put(self, raw: bytes, path: str, diagnostics: list[Diagnostic]) -> None:
        target = self._file(raw, path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            temp = target.with_suffix(f".{os.getpid()}.tmp")
            temp.write_text(json.dumps([asdict(d) for d in diagnostics]), encoding="utf-8")
            os.replace(temp, target)
            gitignore = self.directory.parent / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("# Automatically created by torchlint.\n*\n", encoding="utf-8")
        except OSError:
            pass  # a cache that cannot be written is only slower

    def forget(self, raw: bytes, path: str) -> None:
        try:
            self._file(raw, path).unlink(missing_ok=True)
        except OSError:
            pass


def _diagnostic_from_dict(data: dict) -> Diagnostic:
    fix = data.get("fix")
    if fix is not None:
        fix = Fix(fix["title"], fix["applicability"], tuple(Edit(**e) for e in fix["edits"]))
    related = tuple(Related(**r) for r in data.get("related", ()))
    return Diagnostic(**{**data, "severity": Severity(data["severity"]), "fix": fix, "related": related})


@dataclass
class Options:
    fix: bool = False
    diff: bool = False
    cache: Cache | None = None


def check_text(source: str, path: str, settings, options: Options, raw: bytes | None = None) -> FileResult:
    """Lint (and fix, per options) one text; writing is the caller's business. A rule that fails
    on the text is in the result's ``crashes``, and the result is not kept in the cache: the next
    run reports the failure again."""
    with collecting_crashes() as crashes:
        result = _check_text(source, path, settings, options, raw)
    if crashes:
        result.crashes = crashes
        if options.cache is not None and raw is not None:
            options.cache.forget(raw, path)
    return result


def _check_text(source: str, path: str, settings, options: Options, raw: bytes | None = None) -> FileResult:
    if is_notebook(path):
        return check_notebook_text(source, path, settings, options, raw)
    result = FileResult(path, source)
    if options.fix or options.diff:
        try:
            fixed = fix_source(source, path, settings)
        except FixError as error:
            result.error = str(error)
            result.diagnostics = lint_source(source, path, settings)
            return result
        result.fixed = fixed.fixed
        if options.diff:
            result.diagnostics = fixed.found
            if fixed.changed:
                result.diff = "".join(difflib.unified_diff(
                    source.splitlines(keepends=True), fixed.source.splitlines(keepends=True),
                    fromfile=path, tofile=path))
        else:
            result.source = fixed.source
            result.diagnostics = fixed.remaining
        return result
    cached = options.cache.get(raw, path) if options.cache is not None and raw is not None else None
    if cached is not None:
        result.diagnostics = cached
        return result
    result.diagnostics = lint_source(source, path, settings)
    if options.cache is not None and raw is not None:
        options.cache.put(raw, path, result.diagnostics)
    return result


def check_file(path: Path, settings, options: Options) -> FileResult:
    shown = display_path(path)
    try:
        source_file: SourceFile = read_source(path)
    except SourceReadError as error:
        return FileResult(shown, "", error=str(error))
    except SourceDecodeError as error:
        return FileResult(shown, "", [syntax_error(shown, f"cannot decode the file: {error}")])
    try:
        result = check_text(source_file.text, shown, settings, options, raw=source_file.raw)
    except Exception as error:  # noqa: BLE001 - a bug met on one file must neither stop the others nor touch it
        return FileResult(shown, source_file.text, error=_internal_error(shown, error))
    if options.fix and not options.diff and result.fixed:
        try:
            write_source(source_file, result.source)
        except WriteError as error:
            result = check_text(source_file.text, shown, settings, Options())
            result.error = str(error)
    return result


def _internal_error(path: str, error: Exception) -> str:
    if os.environ.get("TORCHLINT_DEBUG"):
        traceback.print_exc()
    return (f"{path}: internal error ({error.__class__.__name__}: {error}); the file was left as it was. "
            "Please report it (set TORCHLINT_DEBUG=1 for the traceback)")


# Below this many files a process pool costs more (start-up, imports) than it saves.
PARALLEL_MIN_FILES = 64


_stop = None  # in a worker: the parent's "stop between files" event
_parent = None  # in a worker: the parent's process id


def _start_worker(stop, parent: int) -> None:
    global _stop, _parent
    _stop, _parent = stop, parent
    # Ctrl-C reaches every process of the group; the parent alone handles it and tells the workers
    # to stop between files, so that no write is cut short and no queued batch runs on after it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # the parent held the signals while it forked this process
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
    _die_with(parent)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with(parent: int) -> None:
    """A worker ends when its parent does (``kill -9``): the parent-death signal on Linux, a thread
    that watches the parent elsewhere. SIGTERM's default action ends it; fileio holds the signal
    while a file is written, so that none is left half-done."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    else:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # it died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def _watch_parent(parent: int) -> None:
    """Where there is no parent-death signal: poll, then send SIGTERM to this process. This thread
    never takes the signal itself, so it waits until the main thread has written its file."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)


def _check_batch(batch: list[Path], settings, options: Options) -> list[FileResult]:
    results = []
    for path in batch:
        if _stop.is_set() or os.getppid() != _parent:  # never a new file after Ctrl-C or the parent's death
            break
        results.append(check_file(path, settings, options))
    return results


# CPython's cyclic garbage collector runs a young-generation pass every 700 allocations and
# scans older generations ever more often as the heap grows; a linted file allocates millions of
# nodes (CPython's tree, LibCST's tree), nearly none of them in reference cycles, and the passes
# took about a fifth of a run over pytorch-lightning + timm. A command-line run therefore moves
# what the import of the rules built out of the collector's sight (gc.freeze) and collects the
# young generation every 50,000 allocations instead (memory was unchanged on that corpus).
GC_YOUNG_THRESHOLD = 50_000
_gc_tuned = False


def tune_gc() -> None:
    """For a process that lints file after file (the command line, a worker, the language server):
    see GC_YOUNG_THRESHOLD. What is frozen is what the imports built, which lives as long as the
    process anyway. Tests keep the defaults."""
    import gc

    global _gc_tuned
    if _gc_tuned:
        return
    _gc_tuned = True
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, GC_YOUNG_THRESHOLD), middle, old)


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0  # check_file says what is wrong with it


def check_files(files: list[Path], settings, options: Options, jobs: int = 0) -> list[FileResult]:
    """Every file, in order; across processes when there are many (``jobs`` 0: one per core)."""
    workers = jobs or (os.cpu_count() or 1)
    # The largest files first: a process's peak memory is then the largest file's (with what stays
    # loaded), not that plus the fragments earlier files left in the heap (torch's sources in one
    # process: 423 -> 303 MB).
    largest_first = sorted(files, key=_size, reverse=True)
    if workers <= 1 or len(files) < (PARALLEL_MIN_FILES if not jobs else 2):
        done = {id(path): check_file(path, settings, options) for path in largest_first}
        return [done[id(path)] for path in files]
    import concurrent.futures
    import multiprocessing

    # Interleaved batches spread large and small files evenly; fork shares the loaded rules.
    batches = [largest_first[i::workers * 4] for i in range(workers * 4)]
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    stop = context.Event()
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_start_worker,
                                                initargs=(stop, os.getpid())) as pool:
        try:
            with signals_held():  # a worker forked now sees no Ctrl-C before it ignores it
                done = pool.map(_check_batch, batches, [settings] * len(batches), [options] * len(batches))
            by_path = {result_path: result for batch in done for result_path, result in
                       ((r.path, r) for r in batch)}
        except KeyboardInterrupt:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return [by_path[display_path(path)] for path in files]
