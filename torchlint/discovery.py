"""Which files to lint: directories recursively (``.py``, ``.pyi``, ``.ipynb``), ``.gitignore``
and the ``exclude`` setting respected; files named explicitly are always checked."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

SOURCE_SUFFIXES = (".py", ".pyi", ".ipynb")


class InvalidPattern(ValueError):
    """A .gitignore pattern that git matches nothing with (an unclosed ``[``, an unknown
    ``[:class:]``, a trailing backslash): skipped with a warning."""


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern
    negated: bool
    directory_only: bool
    basename: bool  # no slash but a trailing one: matched against the last part of the path only


# What git's wildmatch (wildmatch.c) calls character classes, as regex ranges (ASCII, as git's ctype).
_CHARACTER_CLASSES = {
    "alnum": "0-9A-Za-z", "alpha": "A-Za-z", "blank": " \\t", "cntrl": "\\x00-\\x1f\\x7f", "digit": "0-9",
    "graph": "!-~", "lower": "a-z", "print": " -~", "punct": "!-/:-@\\[-`{-~", "space": "\\t-\\r ",
    "upper": "A-Z", "xdigit": "0-9A-Fa-f",
}
_STAR = object()  # `*` in a part of a pattern: any run of characters but `/`
_ANY_DEPTH = "**"  # a whole part `**`: any number of folders


def _bracket(pattern: str, i: int) -> tuple[str, int]:
    """The regex of the ``[...]`` that starts at ``pattern[i]``, and the index after it, read the
    way git's wildmatch reads it: ``!`` or ``^`` negates, a ``]`` first is literal, ``a-z`` is a
    range after a single character (so ``[z-a]`` holds only ``z``), ``[:alpha:]`` a class. It
    never matches ``/``."""
    i += 1
    negated = i < len(pattern) and pattern[i] in "!^"
    i += negated
    items: list[str] = []
    previous = None  # the last single character, which a `-` may start a range from
    first = True
    while True:
        if i >= len(pattern):
            raise InvalidPattern("a `[` is never closed")
        ch = pattern[i]
        if ch == "]" and not first:
            break
        first = False
        if ch == "\\":
            i += 1
            if i >= len(pattern):
                raise InvalidPattern("it ends with a backslash inside `[...]`")
            previous = pattern[i]
            items.append(re.escape(previous))
        elif ch == "-" and previous is not None and i + 1 < len(pattern) and pattern[i + 1] != "]":
            i += 1
            high = pattern[i]
            if high == "\\":
                i += 1
                if i >= len(pattern):
                    raise InvalidPattern("it ends with a backslash inside `[...]`")
                high = pattern[i]
            if previous <= high:
                items.append(f"{re.escape(previous)}-{re.escape(high)}")
            previous = None
        elif ch == "[" and pattern.startswith(":", i + 1) and (end := pattern.find("]", i + 2)) != -1 \
                and pattern[end - 1] == ":" and end - 1 >= i + 2:
            name = pattern[i + 2:end - 1]
            if name not in _CHARACTER_CLASSES:
                raise InvalidPattern(f"`[:{name}:]` is not a character class")
            items.append(_CHARACTER_CLASSES[name])
            previous = None
            i = end
        else:
            previous = ch
            items.append(re.escape(ch))
        i += 1
    body = "".join(items)
    return (f"[^/{body}]" if negated else f"(?!/)[{body}]"), i + 1


def _part_items(part: str) -> list:
    """One part of a pattern (no `/`) as regex pieces, one per character matched, and _STAR."""
    items: list = []
    i = 0
    while i < len(part):
        ch = part[i]
        if ch == "*":
            if not items or items[-1] is not _STAR:
                items.append(_STAR)
            i += 1
        elif ch == "?":
            items.append("[^/]")
            i += 1
        elif ch == "[":
            piece, i = _bracket(part, i)
            items.append(piece)
        elif ch == "\\":
            if i + 1 == len(part):
                raise InvalidPattern("it ends with a backslash")
            items.append(re.escape(part[i + 1]))
            i += 2
        else:
            items.append(re.escape(ch))
            i += 1
    return items


class _Atomic:
    """Numbered atomic groups, written as a lookahead and a back-reference (Python 3.10 has no
    ``(?>...)``): once the group matched, the engine never comes back to try it another way."""

    def __init__(self):
        self.count = 0

    def __call__(self, body: str) -> str:
        self.count += 1
        return f"(?=(?P<a{self.count}>{body}))(?P=a{self.count})"


def _part_regex(part: str, atomic: _Atomic) -> str:
    """A regex for one part, in time linear in the text: with ``*x*y*z``, each ``*`` but the last
    takes the shortest run that lets the fixed-length piece after it match, and keeps it. That
    is never wrong (the next ``*`` can take whatever a longer run would have), and it stops the
    backtracking that made ``*a*a*a*a*a*a*a*a*b`` take minutes on a long name."""
    items = _part_items(part)
    pieces: list[list[str]] = [[]]
    for item in items:
        if item is _STAR:
            pieces.append([])
        else:
            pieces[-1].append(item)
    text = ["".join(piece) for piece in pieces]
    if len(text) == 1:
        return text[0]
    middle = "".join(atomic(f"[^/]*?{piece}") for piece in text[1:-1])
    return f"{text[0]}{middle}[^/]*{text[-1]}"


def _translate(pattern: str) -> tuple[str, bool]:
    """A gitignore glob (without ``!`` and trailing ``/``) as a regex, and whether it applies to
    the last part of the path only (no ``/`` in it: it matches at any depth). InvalidPattern for
    one that git matches nothing with."""
    atomic = _Atomic()
    if "/" not in pattern:
        return _part_regex(pattern, atomic), True
    parts = pattern.lstrip("/").split("/")
    parts = [part for k, part in enumerate(parts) if not (part == _ANY_DEPTH and k and parts[k - 1] == _ANY_DEPTH)]
    leading, trailing = parts[0] == _ANY_DEPTH, parts[-1] == _ANY_DEPTH and len(parts) > 1
    runs: list[list[str]] = [[]]
    for part in parts:
        if part == _ANY_DEPTH:
            runs.append([])
        else:
            runs[-1].append(_part_regex(part, atomic))
    runs = [run for run in runs if run]
    out = []
    for k, run in enumerate(runs):
        body = "/".join(run)
        after = "/" if k < len(runs) - 1 or trailing else ""
        if k == 0 and not leading:
            out.append(body + after)
        elif after:  # the first place where it matches, kept (the `**` after it takes the rest)
            out.append(atomic(f"(?:[^/]*/)*?{body}/"))
        else:
            out.append(f"(?:[^/]*/)*{body}")
    if trailing or not runs:
        out.append(".*")
    return "".join(out), False


class GitIgnore:
    """The patterns of one ``.gitignore`` file, matched relative to its folder. ``warnings`` names
    the patterns that were skipped."""

    def __init__(self, folder: Path, lines: list[str]):
        self.folder = folder
        self.patterns: list[_Pattern] = []
        self.warnings: list[str] = []
        for number, line in enumerate(lines, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip() or line.startswith("#"):
                continue
            line = line.rstrip() if not line.endswith("\\ ") else line
            negated = line.startswith("!")
            if negated:
                line = line[1:]
            directory_only = line.endswith("/")
            line = line.rstrip("/")
            if not line:
                continue
            try:
                regex, basename = _translate(line)
            except InvalidPattern as error:
                self.warnings.append(f"{folder / '.gitignore'}:{number}: skipped the pattern `{line[:200]}`: {error} "
                                     "(git matches nothing with it)")
                continue
            self.patterns.append(_Pattern(re.compile(regex), negated, directory_only, basename))

    @classmethod
    def load(cls, folder: Path, warn) -> "GitIgnore | None":
        """The folder's ``.gitignore``, if it has one; ``warn(message)`` gets the patterns skipped."""
        try:
            lines = (folder / ".gitignore").read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return None
        ignore = cls(folder, lines)
        for message in ignore.warnings:
            warn(message)
        return ignore

    def match(self, path: Path, is_dir: bool) -> bool | None:
        """True ignored, False re-included, None no opinion."""
        try:
            relative = path.relative_to(self.folder).as_posix()
        except ValueError:
            return None
        name = relative.rpartition("/")[2]
        verdict = None
        for pattern in self.patterns:
            if pattern.directory_only and not is_dir:
                continue
            if pattern.regex.fullmatch(name if pattern.basename else relative):
                verdict = not pattern.negated
        return verdict


def _repository_root(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def _inherited_ignores(folder: Path, warn) -> list[GitIgnore]:
    """.gitignore files of the folders above ``folder``, up to the repository root."""
    root = _repository_root(folder)
    if root is None:
        return []
    chain = []
    for parent in reversed(folder.parents):
        if parent == root or root in parent.parents:
            ignore = GitIgnore.load(parent, warn)
            if ignore is not None:
                chain.append(ignore)
    return chain


def _ignored(path: Path, is_dir: bool, ignores: list[GitIgnore]) -> bool:
    verdict = False
    for ignore in ignores:
        found = ignore.match(path, is_dir)
        if found is not None:
            verdict = found
    return verdict


def discover(paths: list[Path], settings, on_error, warn=lambda message: None) -> list[Path]:
    """Files to lint, sorted, each file once however many names reach it. ``on_error(message)``
    gets unreadable paths, ``warn(message)`` the .gitignore patterns skipped."""
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
        ignores = _inherited_ignores(base, warn) if settings.respect_gitignore else []
        _walk(given, base, ignores, settings, found, on_error, warn, seen=set())
    return _one_name_each(found)


def _one_name_each(paths) -> list[Path]:
    """The paths, sorted, one per file (device and inode): a file reached through a symbolic or a
    hard link is checked once, or two workers would fix it at the same time. A name that is not a
    symbolic link is preferred."""
    chosen: dict = {}
    for path in sorted(paths, key=lambda p: p.as_posix()):
        try:
            info = path.stat()
        except OSError:  # gone meanwhile: reading it reports that
            chosen[path] = path
            continue
        key = (info.st_dev, info.st_ino)
        if key not in chosen or (chosen[key].is_symlink() and not path.is_symlink()):
            chosen[key] = path
    return sorted(chosen.values(), key=lambda p: p.as_posix())


def _walk(folder: Path, resolved: Path, ignores: list[GitIgnore], settings, found: dict, on_error, warn,
          seen: set) -> None:
    key = resolved
    if key in seen:  # symlink loop
        return
    seen.add(key)
    if settings.respect_gitignore:
        own = GitIgnore.load(resolved, warn)
        if own is not None:
            ignores = ignores + [own]
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as error:
        on_error(f"{folder}: cannot list directory ({error.strerror or error})")
        return
    for entry in entries:
        try:
            is_dir = entry.is_dir()
            link = entry.is_symlink()
        except OSError:
            continue
        if not is_dir and not entry.name.endswith(SOURCE_SUFFIXES):
            continue  # never linted, whatever the excludes say: not worth their matching (torch: 3 entries in 4)
        path = Path(entry.path)
        real = resolved / entry.name
        if settings.is_excluded(path, None if link else real):
            continue
        if ignores and _ignored(real, is_dir, ignores):
            continue
        if is_dir:
            try:
                target = real.resolve()
            except (OSError, RuntimeError):
                on_error(f"{path}: cannot resolve (symlink loop?)")
                continue
            if target in seen or (link and (target == resolved or target in resolved.parents)):
                continue
            _walk(path, target, ignores, settings, found, on_error, warn, seen)
        elif entry.name.endswith(SOURCE_SUFFIXES):
            try:
                if entry.is_file():
                    found[path] = None
            except OSError:
                continue
