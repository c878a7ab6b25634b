"""The project's own modules: which file an import names, each file's summary loaded once, and
which files a file's answers depend on.

An import resolves as Ruff resolves first-party modules: a relative import against the file's
package; an absolute one against, in order, the file's own folder (a script's folder is on
``sys.path``), its package root (the folder above the topmost folder with an ``__init__.py``),
the project root and the configured ``src`` roots; the first ``a/b.py`` or ``a/b/__init__.py``
found wins. Only files under the project root count: anything else (torch, numpy, a module not
found) is unknown.

Each file is read, hashed, parsed and indexed when first asked for (kept by path and content
hash). A summary parsed from the disk keeps the CPython trees of its functions until they are
summarized; so that a run over a large project (torch's own sources) does not keep the trees of
every module it ever consulted, at most ``RETAINED_SOURCE`` bytes of such modules keep them, the
least recently asked for letting go first (their index stays; a function asked for later is
parsed again, alone, from the file's lines). The file being linted is given as text
(``use_source``); when the disk holds that text, it is kept as if read from there, so that the
files linted after it that import it do not parse it again. ``refresh()`` drops the files changed
on disk since (the language server calls it when files change). With ``cache_dir``, complete local summaries are kept on disk as JSON, keyed by path and
content hash, so that a later run does not parse unchanged helpers; an unreadable, corrupt or
stale entry is a miss.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

from torchlint.analysis.callgraph import Summaries
from torchlint.analysis.function_facts import definition_summarizer, summarize_module
from torchlint.analysis.module_index import SourceLines
from torchlint.analysis.summaries import SUMMARY_VERSION, ModuleSummary
from torchlint.fileio import SourceDecodeError, decode_source


# The words ``mentions`` answers for: what a helper must contain to do what some rule looks for.
WORDS = ("empty_cache", "append", "+=", "backward", "item(", "cpu(", "numpy(", "print(", "format(", "synchronize",
         "float(", "add_scalar", "Conv", "conv1d", "conv2d", "conv3d", "conv_transpose", "torchvision",
         "DataParallel", "set_default_", "use_deterministic_algorithms(", "cudnn.deterministic =",
         "cudnn.benchmark =")
# `import a.b, c as d`, `from ..a import b, c`, `from a import *` and `from a import (b,\n c)` at the
# start of a line (statements in blocks too)
_IMPORT_TEXT = re.compile(r"^[ \t]*(?:import[ \t]+(?P<plain>[\w., \t]+)|from[ \t]+(?P<dots>\.*)(?P<module>[\w.]*)"
                          r"[ \t]+import[ \t]*(?:\((?P<grouped>[^)]*)\)|(?P<names>[\w., \t*]+)))", re.MULTILINE)
_COMMENT = re.compile(r"#[^\n]*")
# Source bytes of parsed modules kept loaded: a CPython tree takes about 35 bytes per byte of source,
# and a function asked for after its module let its trees go is parsed again alone (milliseconds).
RETAINED_SOURCE = 500_000


class ProjectModules:
    """The modules of one project (``root``), for ``callgraph.Summaries``."""

    def __init__(self, root: Path, src: Sequence[Path] = (), cache_dir: Path | None = None):
        self.root = os.path.realpath(root)
        self.src = [os.path.realpath(os.path.join(self.root, folder)) for folder in src]
        self.cache = SummaryCache(Path(cache_dir) / f"summaries-{SUMMARY_VERSION}") if cache_dir is not None else None
        self._loaded: dict[str, tuple[str, ModuleSummary | None, tuple[int, int] | None]] = {}
        self._by_content: dict[tuple[str, str], ModuleSummary | None] = {}
        self._found: dict[tuple[str, str], str | None] = {}
        self._package_roots: dict[str, str] = {}
        self._texts: dict[str, tuple[frozenset[str], list[tuple[str, int, str]]]] = {}
        self._given: tuple = ("", None, None)  # the last text given to _text_index, and its index
        self._unreached: set[tuple[str, str]] = set()
        self._reached: set[tuple[str, str]] = set()  # (file, word) known to reach the word
        self._imports: dict[tuple[str, str, int], str | None] = {}  # (folder, module, level) -> file
        self._digests: dict[str, str] = {}  # every file summarized, by the hash of the content it was read with
        self._retained: dict[str, int] = {}  # loaded files that hold trees -> their size, least recently used first
        self._text: tuple = ("", "", None)  # the last file a released function was parsed again from

    @cached_property
    def summaries(self) -> Summaries:
        return Summaries(self)

    # -- files

    def summary(self, path: str) -> ModuleSummary | None:
        """A file's summary, loaded on first request; None for a file that is not the
        project's, cannot be read or does not parse."""
        loaded = self._loaded.get(path)
        if loaded is None:
            loaded = self._loaded[path] = self._load(path)
            if loaded[0]:
                self._digests[path] = loaded[0]
            if loaded[1] is not None and loaded[1].holds_trees():
                self._retain(path)
        elif path in self._retained:
            self._retained[path] = self._retained.pop(path)  # now the most recently used
        return loaded[1]

    def _retain(self, path: str) -> None:
        """Count a loaded file whose summary holds trees; past ``RETAINED_SOURCE``, the least
        recently used others let their trees go (their index stays)."""
        stamp = self._loaded[path][2]
        self._retained[path] = stamp[1] if stamp else 0
        total = sum(self._retained.values())
        for oldest in list(self._retained):
            if total <= RETAINED_SOURCE or oldest == path:
                break
            total -= self._retained.pop(oldest)
            digest, summary, _ = self._loaded[oldest]
            summary.release_trees(lambda oldest=oldest, digest=digest: self._reparsed(oldest, digest),
                                  lambda first, last, oldest=oldest, digest=digest:
                                  self._definition(oldest, digest, first, last))

    def _definition(self, path: str, digest: str, first: int, last: int):
        """A function of a file whose trees were let go, parsed alone from the file's text (see
        ModuleSummary.release_trees); None when the file no longer holds the text summarized."""
        if self._text[:2] != (path, digest):
            try:
                raw = Path(path).read_bytes()
                text = SourceLines(decode_source(raw)[0]) if hashlib.sha256(raw).hexdigest() == digest else None
            except (OSError, SourceDecodeError):
                text = None
            self._text = (path, digest, text)  # functions are often restored one after another in one file
        return definition_summarizer(self._text[2], first, last) if self._text[2] is not None else None

    def _reparsed(self, path: str, digest: str) -> ModuleSummary | None:
        summary = _reparse(path, digest)
        if summary is not None and path in self._loaded:
            self._retain(path)  # it holds trees again
        return summary

    def use_source(self, path: str, source: str, tree: ast.Module | None = None) -> ModuleSummary | None:
        """Summarize a file from the text given (the file being linted, an editor's unsaved
        buffer) instead of the disk; forgets what depended on its former text."""
        path = os.path.abspath(path)
        on_disk = _disk_copy(path, source) if _inside(os.path.realpath(path), self.root) else None
        if on_disk is not None:  # the saved file (the command line's case): kept as if read from disk
            digest, stamp = on_disk
        else:
            digest, stamp = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest(), None
        loaded = self._loaded.get(path)
        if loaded is not None and loaded[0] == digest:
            return loaded[1]
        summary = self._summarize(path, digest, source, tree, store=False)
        if loaded is not None:
            self.summaries.clear()
        self._loaded[path] = (digest, summary, stamp)
        self._retained.pop(path, None)  # only a text read from disk counts: another is released after the lint
        if stamp is not None:
            self._digests[path] = digest
            if summary is not None and summary.holds_trees():
                self._retain(path)
        return summary

    def release(self, path: str) -> None:
        """Forget a text given with ``use_source`` that differs from the file on disk (the file is
        linted; its tree need not stay in memory): a later question about it reads the file from
        disk. The disk's own text stays, as any file read (``_retain`` bounds its trees)."""
        path = os.path.abspath(path)
        loaded = self._loaded.get(path)
        if loaded is not None and loaded[2] is None:
            del self._loaded[path]
            self._retained.pop(path, None)
            self._by_content.pop((path, loaded[0]), None)
            self.summaries.clear()

    def refresh(self) -> list[str]:
        """Drop the files that changed on disk since they were read (and every transitive
        summary); returns their paths."""
        changed = [path for path, (_, _, stamp) in self._loaded.items() if stamp is not None and _stamp(path) != stamp]
        self._texts.clear()  # the text-level gates (``mentions``) read the files anew: cheap
        self._given = ("", None, None)
        self._unreached.clear()
        self._reached.clear()
        self._imports.clear()
        for path in changed:
            del self._loaded[path]
            self._retained.pop(path, None)
        if changed:
            self.summaries.clear()
        return changed

    def dependencies(self, path: str | Path) -> list[tuple[Path, str]]:
        """The project files (other than ``path``) whose content the answers given so far about
        ``path`` depend on, transitively, with the sha256 of the content they were read with:
        a findings cache entry stays valid while each still hashes the same."""
        path = os.path.abspath(path)
        found = []
        for other in sorted(self.summaries.consulted(path) - {path}):
            loaded = self._loaded.get(other)
            digest = loaded[0] if loaded is not None else self._digests.get(other)
            if digest:
                found.append((Path(other), digest))
        return found

    def _load(self, path: str) -> tuple[str, ModuleSummary | None, tuple[int, int] | None]:
        stamp = _stamp(path)
        if stamp is None or not _inside(os.path.realpath(path), self.root):
            return "", None, None
        try:
            raw = Path(path).read_bytes()
            digest = hashlib.sha256(raw).hexdigest()
            source = decode_source(raw)[0]
        except (OSError, SourceDecodeError):
            return "", None, None
        return digest, self._summarize(path, digest, source, None), stamp

    def _summarize(self, path: str, digest: str, source: str, tree: ast.Module | None,
                   store: bool = True) -> ModuleSummary | None:
        """The summary of a file's text: from memory, the disk cache, or the tree. Storing it on
        disk summarizes every function (a hit then needs no parse); the file being linted
        (``store`` False) keeps its functions summarized only when asked."""
        key = (path, digest)
        if key in self._by_content:
            return self._by_content[key]
        summary = self.cache.get(path, digest) if self.cache is not None else None
        if summary is None:
            try:
                tree = tree if tree is not None else ast.parse(source)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self._by_content[key] = None
                return None
            summary = summarize_module(tree, source, path)
            if store and self.cache is not None:
                self.cache.put(path, digest, summary)
        self._by_content[key] = summary
        return summary

    # -- imports

    def mentions(self, path: str, word: str, source: str | None = None, imported_only: bool = False) -> bool:
        """Could a call in ``path`` reach code that contains ``word`` (one of ``WORDS``)? True when
        the file's text, or that of a project module it imports (transitively, by the imports its
        text names), contains it: a cheap gate before asking summaries, reading text only. With
        ``imported_only``, the file's own text does not count."""
        assert word in WORDS, word
        path = os.path.abspath(path)
        if source is None and not imported_only and (path, word) in self._unreached:
            return False
        if source is None and not imported_only and (path, word) in self._reached:
            return True
        seen: set[str] = set()
        parents: dict[str, str] = {}  # how the search came to each file: the chain that reaches the word
        stack = [(path, source, None)]
        while stack:
            current, text, parent = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            if parent is not None:
                parents[current] = parent
            if current != path and (current, word) in self._unreached:
                continue  # explored before: nothing it reaches holds the word
            words, imports = self._text_index(current, text)
            if current != path and (current, word) in self._reached \
                    or word in words and (current != path or not imported_only):
                while current is not None:  # every file on the way reaches it too
                    if current != path or source is None and not imported_only:
                        self._reached.add((current, word))
                    current = parents.get(current)
                return True
            for module, level, names in imports:
                found = self.resolve_import(current, module, level)
                targets = [found]
                if names and (found is None or os.path.basename(found) == "__init__.py"):
                    # `from pkg import a`: `a` may be a module of the package (a module has none)
                    targets += [self.resolve_import(current, f"{module}.{name}" if module else name, level)
                                for name in _taken(names)]
                for target in targets:
                    if target is not None and target not in seen:
                        stack.append((os.path.abspath(target), None, current))
        # every file explored reaches only files explored: none of them reaches the word (the
        # linted text itself, given as `source`, may differ from its file: it is not remembered)
        self._unreached.update((other, word) for other in seen if other != path or source is None and not imported_only)
        return False

    def _text_index(self, path: str, text: str | None) -> tuple[frozenset[str], list[tuple[str, int, str]]]:
        """Which of ``WORDS`` a file's text holds, and the modules its import statements name (by a
        regular expression over the text: no parse), each with its level and, for a ``from``
        import, the text of the names it takes (read only when the module is a package: see
        ``_taken``); kept per path for the text given or read."""
        if text is None:
            cached = self._texts.get(path)
            if cached is not None:
                return cached
            try:
                text = decode_source(Path(path).read_bytes())[0]
            except (OSError, SourceDecodeError):
                text = ""
        elif self._given[0] == path and self._given[1] is text:
            return self._given[2]  # the linted text, asked again for another word
        imports: list[tuple[str, int, str]] = []
        for match in _IMPORT_TEXT.finditer(text):
            plain = match.group("plain")
            if plain:
                # `import a.b.c` binds `a`: names read through it start at the package `a`
                for name in plain.split(","):
                    if name.strip():
                        module = name.split()[0]
                        imports += [(module, 0, ""), *((parent, 0, "") for parent in _parents(module))]
            else:
                imports.append((match.group("module") or "", len(match.group("dots") or ""),
                                match.group("names") or match.group("grouped")))
        result = (frozenset(word for word in WORDS if word in text), list(dict.fromkeys(imports)))
        self._texts[path] = result
        self._given = (path, text, result)
        return result

    def resolve_import(self, path: str, module: str, level: int = 0) -> str | None:
        """The project file that ``import module`` (``level`` dots for a relative import) in
        file ``path`` names, or None."""
        folder = os.path.dirname(path)
        key = (folder, module, level)
        if key not in self._imports:
            self._imports[key] = self._resolve_import(folder, module, level)
        return self._imports[key]

    def _resolve_import(self, folder: str, module: str, level: int) -> str | None:
        if level:
            for _ in range(level - 1):
                folder = os.path.dirname(folder)
            bases = [folder]
        else:
            bases = list(dict.fromkeys([folder, self._package_root(folder), self.root, *self.src,
                                        *_namespace_roots(folder, module, self.root)]))
        for base in bases:
            found = self._find(base, module)
            if found is not None:
                return found
        return None

    def _find(self, base: str, module: str) -> str | None:
        key = (base, module)
        if key not in self._found:
            stem = os.path.join(base, *module.split(".")) if module else base
            candidates = [os.path.join(stem, "__init__.py")] if not module else [stem + ".py",
                                                                                  os.path.join(stem, "__init__.py")]
            self._found[key] = next((c for c in candidates if os.path.isfile(c)
                                     and _inside(os.path.realpath(c), self.root)), None)
        return self._found[key]

    def _package_root(self, folder: str) -> str:
        """The folder above the topmost package that holds ``folder`` (itself when it is no package)."""
        found = self._package_roots.get(folder)
        if found is None:
            found = folder
            while os.path.isfile(os.path.join(found, "__init__.py")) and os.path.dirname(found) != found:
                found = os.path.dirname(found)
            self._package_roots[folder] = found
        return found


class SummaryCache:
    """Complete local summaries kept on disk as JSON, keyed by path and content hash: an
    unreadable, corrupt or stale entry is a miss, and a cache that cannot be written is only slower."""

    def __init__(self, folder: Path):
        self.folder = folder

    def _entry(self, path: str, digest: str) -> Path:
        key = hashlib.sha256(f"{path}\0{digest}".encode("utf-8", "surrogatepass")).hexdigest()
        return self.folder / key[:2] / f"{key[2:]}.json"

    def get(self, path: str, digest: str) -> ModuleSummary | None:
        try:
            data = json.loads(self._entry(path, digest).read_text(encoding="utf-8"))
            if data["version"] != SUMMARY_VERSION or data["path"] != path or data["sha256"] != digest:
                return None
            return ModuleSummary.from_json(data["summary"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def put(self, path: str, digest: str, summary: ModuleSummary) -> None:
        entry = self._entry(path, digest)
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            temporary = entry.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps({"version": SUMMARY_VERSION, "path": path, "sha256": digest,
                                             "summary": summary.to_json()}), encoding="utf-8")
            os.replace(temporary, entry)
        except OSError:
            pass


def _reparse(path: str, digest: str) -> ModuleSummary | None:
    """A fresh summary, with its trees, of a file whose trees were let go; None when the file no
    longer holds the text it was summarized from."""
    try:
        raw = Path(path).read_bytes()
        if hashlib.sha256(raw).hexdigest() != digest:
            return None
        source = decode_source(raw)[0]
        return summarize_module(ast.parse(source), source, path)
    except (OSError, SourceDecodeError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _disk_copy(path: str, source: str) -> tuple[str, tuple[int, int]] | None:
    """The sha256 and stamp of the file at ``path`` when it holds exactly ``source``, else None."""
    stamp = _stamp(path)
    if stamp is None:
        return None
    try:
        raw = Path(path).read_bytes()
        if decode_source(raw)[0] != source:
            return None
    except (OSError, SourceDecodeError):
        return None
    return hashlib.sha256(raw).hexdigest(), stamp


def _taken(names: str) -> list[str]:
    """The names a ``from`` import takes (``a``, ``b`` of ``(a,  # note\n b as c)``); ``*`` is none."""
    return [name.split()[0] for name in _COMMENT.sub("", names).split(",") if name.strip() and name.strip() != "*"]


def _parents(module: str) -> list[str]:
    """``a`` and ``a.b`` for ``a.b.c``."""
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


def _namespace_roots(folder: str, module: str, root: str) -> list[str]:
    """For ``import pkg.sub.mod`` in a file inside a folder named ``pkg`` (a namespace package, one
    without ``__init__.py``, or a package whose ``__init__.py`` is not in the project): the folder
    above that ``pkg``, innermost first, inside the project's ``root``."""
    first = module.partition(".")[0]
    found = []
    current = folder
    while _inside(current, root) and os.path.dirname(current) != current:
        if os.path.basename(current) == first:
            found.append(os.path.dirname(current))
        current = os.path.dirname(current)
    return found


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
