"""One run over files: read, lint (or take the cached result), fix, write, collect results."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from torchlint.diagnostics import Diagnostic, Edit, Fix, Severity
from torchlint.engine import FixError, fix_source, lint_source, syntax_error
from torchlint.fileio import SourceDecodeError, SourceFile, SourceReadError, WriteError, read_source, write_source


@dataclass
class FileResult:
    path: str  # as shown to the user
    source: str  # the text the diagnostics' positions refer to (the fixed text after --fix)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    fixed: list[Diagnostic] = field(default_factory=list)
    diff: str = ""
    error: str | None = None  # could not be read or written: exit 2


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


def _diagnostic_from_dict(data: dict) -> Diagnostic:
    fix = data.get("fix")
    if fix is not None:
        fix = Fix(fix["title"], fix["applicability"], tuple(Edit(**e) for e in fix["edits"]))
    return Diagnostic(**{**data, "severity": Severity(data["severity"]), "fix": fix})


@dataclass
class Options:
    fix: bool = False
    diff: bool = False
    cache: Cache | None = None


def check_text(source: str, path: str, settings, options: Options, raw: bytes | None = None) -> FileResult:
    """Lint (and fix, per options) one text; writing is the caller's business."""
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
            result.diagnostics = lint_source(source, path, settings)
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
    result = check_text(source_file.text, shown, settings, options, raw=source_file.raw)
    if options.fix and not options.diff and result.fixed:
        try:
            write_source(source_file, result.source)
        except WriteError as error:
            result.error = str(error)
            result.fixed = []
            result.source = source_file.text
            result.diagnostics = lint_source(source_file.text, shown, settings)
    return result
