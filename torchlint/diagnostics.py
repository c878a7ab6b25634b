"""What a rule reports: diagnostics, fixes and text edits, and positions in a source text."""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from enum import IntEnum


class Severity(IntEnum):
    """LSP DiagnosticSeverity values."""

    ERROR = 1
    WARNING = 2
    INFORMATION = 3
    HINT = 4


SAFE = "safe"
UNSAFE = "unsafe"
NO_FIX = "none"


@dataclass(frozen=True, order=True)
class Edit:
    """Replace ``source[start:end]`` (character offsets) with ``text``."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Fix:
    title: str
    applicability: str  # SAFE or UNSAFE
    edits: tuple[Edit, ...]

    def applies(self, unsafe_fixes: bool) -> bool:
        return self.applicability == SAFE or unsafe_fixes


@dataclass(frozen=True)
class Related:
    """Another place that explains a finding (LSP ``relatedInformation``): where inside a called
    helper the cost is paid, for a finding reported at the call. Lines and columns as in
    Diagnostic; ``path`` is absolute (the place may be in another file)."""

    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    message: str


@dataclass(frozen=True)
class Diagnostic:
    """One finding. Lines and columns are 0-based; columns count code points."""

    path: str
    code: str
    name: str
    message: str
    severity: Severity
    line: int
    col: int
    end_line: int
    end_col: int
    fix: Fix | None = None
    cell: int | None = None  # notebook cell index, None for .py files
    extra: dict = field(default_factory=dict, compare=False, hash=False)
    related: tuple[Related, ...] = ()

    @property
    def sort_key(self) -> tuple:
        return (self.path, self.cell if self.cell is not None else -1, self.line, self.col, self.code,
                self.end_line, self.end_col, self.message)

    def with_path(self, path: str) -> "Diagnostic":
        return replace(self, path=path)


_NEWLINE = re.compile(r"\r\n|\r|\n")


class SourceText:
    """Offsets <-> (line, column) for one text, splitting lines the way Python (and LibCST) do."""

    def __init__(self, text: str):
        self.text = text
        self.line_starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]

    def offset(self, line: int, col: int) -> int:
        """0-based line and code-point column -> offset."""
        if line >= len(self.line_starts):
            return len(self.text)
        return min(self.line_starts[line] + col, len(self.text))

    def position(self, offset: int) -> tuple[int, int]:
        line = bisect_right(self.line_starts, offset) - 1
        return line, offset - self.line_starts[line]

    def line_text(self, line: int) -> str:
        if line >= len(self.line_starts):
            return ""
        start = self.line_starts[line]
        end = self.line_starts[line + 1] if line + 1 < len(self.line_starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def utf16_col(self, line: int, col: int) -> int:
        """LSP counts columns in UTF-16 code units: characters outside the BMP count twice."""
        prefix = self.line_text(line)[:col]
        return col + sum(1 for ch in prefix if ord(ch) > 0xFFFF)

    def lsp_position(self, offset: int) -> dict:
        line, col = self.position(offset)
        return {"line": line, "character": self.utf16_col(line, col)}


def apply_edits(text: str, edits: list[Edit]) -> str:
    """Apply non-overlapping edits."""
    out = []
    last = 0
    for edit in sorted(edits):
        out.append(text[last:edit.start])
        out.append(edit.text)
        last = edit.end
    out.append(text[last:])
    return "".join(out)


@dataclass
class FileResult:
    """What checking one file gave: its findings, the fixes taken, or why it could not be read."""

    path: str  # as shown to the user
    source: str  # the text the diagnostics' positions refer to (the fixed text after --fix)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    fixed: list[Diagnostic] = field(default_factory=list)
    diff: str = ""
    error: str | None = None  # could not be read or written: exit 2
    cells: list[str] | None = None  # a notebook's cell texts: what diagnostics with a `cell` refer to
    crashes: list[str] = field(default_factory=list)  # rules that failed on the file: exit 2 too

    @property
    def errors(self) -> list[str]:
        """What the run reports as errors for this file (each exits 2)."""
        return ([self.error] if self.error else []) + self.crashes
