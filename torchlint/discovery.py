"""Which files to lint: directories recursively (``.py``, ``.pyi``, ``.ipynb``), ``.gitignore``
and the ``exclude`` setting respected; files named explicitly are always checked."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

SOURCE_SUFFIXES = (".py", ".pyi", ".ipynb")


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern
    negated: bool
    directory_only: bool


def _translate(pattern: str) -> str:
    """A gitignore glob (without ``!`` and trailing ``/``) as a regex over a relative path."""
    anchored = "/" in pattern.rstrip("/")
    pattern = pattern.lstrip("/")
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("/.*")
            i += 3
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            close = pattern.find("]", i + 1)
            if close == -1:
                out.append(re.escape(pattern[i]))
                i += 1
            else:
                body = pattern[i + 1:close].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = close + 1
        elif pattern[i] == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    body = "".join(out)
    return ("^" if anchored else "^(?:.*/)?") + body + "$"


class GitIgnore:
    """The patterns of one ``.gitignore`` file, matched relative to its folder."""

    def __init__(self, folder: Path, lines: list[str]):
        self.folder = folder
        self.patterns: list[_Pattern] = []
        for line in lines:
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip() or line.startswith("#"):
                continue
            line = line.rstrip() if not line.endswith("\\ ") else line
            negated = line.startswith("!")
            if negated:
                line = line[1:]
            directory_only = line.endswith("/")
            line = line.rstrip("/")
            if line:
                self.patterns.append(_Pattern(re.compile(_translate(line)), negated, directory_only))

    @classmethod
    def load(cls, folder: Path) -> "GitIgnore | None":
        try:
            lines = (folder / ".gitignore").read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return None
        return cls(folder, lines)

    def match(self, path: Path, is_dir: bool) -> bool | None:
        """True ignored, False re-included, None no opinion."""
        try:
            relative = path.relative_to(self.folder).as_posix()
        except ValueError:
            return None
        verdict = None
        for pattern in self.patterns:
            if pattern.directory_only and not is_dir:
                continue
            if pattern.regex.match(relative):
                verdict = not pattern.negated
        return verdict


def _repository_root(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def _inherited_ignores(folder: Path) -> list[GitIgnore]:
    """.gitignore files of the folders above ``folder``, up to the repository root."""
    root = _repository_root(folder)
    if root is None:
        return []
    chain = []
    for parent in reversed((folder, *folder.parents)):
        if parent == root or root in parent.parents:
            ignore = GitIgnore.load(parent)
            if ignore is not None and parent != folder:
                chain.append(ignore)
    return chain


def _ignored(path: Path, is_dir: bool, ignores: list[GitIgnore]) -> bool:
    verdict = False
    for ignore in ignores:
        found = ignore.match(path, is_dir)
        if found is not None:
            verdict = found
    return verdict


def discover(paths: list[Path], settings, on_error) -> list[Path]:
    """Files to lint, sorted and without duplicates. ``on_error(message)`` gets unreadable paths."""
    found: dict[Path, None] = {}
    for given in paths:
        if not given.exists():
            on_error(f"{given}: a broken symbolic link or a symlink loop" if given.is_symlink() else
                     f"{given}: no such file or directory")
            continue
        if given.is_file():
            found[given] = None  # named explicitly: always checked
            continue
        if not given.is_dir():
            on_error(f"{given}: not a file or directory")
            continue
        base = given.resolve()
        ignores = _inherited_ignores(base) if settings.respect_gitignore else []
        _walk(given, base, ignores, settings, found, on_error, seen=set())
    return sorted(found, key=lambda p: p.as_posix())


def _walk(folder: Path, resolved: Path, ignores: list[GitIgnore], settings, found: dict, on_error, seen: set) -> None:
    key = resolved
    if key in seen:  # symlink loop
        return
    seen.add(key)
    if settings.respect_gitignore:
        own = GitIgnore.load(resolved)
        if own is not None:
            ignores = ignores + [own]
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as error:
        on_error(f"{folder}: cannot list directory ({error.strerror or error})")
        return
    for entry in entries:
        path = Path(entry.path)
        try:
            is_dir = entry.is_dir()
        except OSError:
            continue
        if settings.is_excluded(path):
            continue
        real = resolved / entry.name
        if ignores and _ignored(real, is_dir, ignores):
            continue
        if is_dir:
            try:
                target = real.resolve()
            except (OSError, RuntimeError):
                on_error(f"{path}: cannot resolve (symlink loop?)")
                continue
            if target in seen or (entry.is_symlink() and (target == resolved or target in resolved.parents)):
                continue
            _walk(path, target, ignores, settings, found, on_error, seen)
        elif entry.name.endswith(SOURCE_SUFFIXES):
            try:
                if entry.is_file():
                    found[path] = None
            except OSError:
                continue
