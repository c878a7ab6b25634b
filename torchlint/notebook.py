"""Jupyter notebooks: lint and fix the code cells of an ``.ipynb`` file as one module, so an import
in cell 0 counts for a loop in cell 3, and report every finding against its own cell.

The code cells are joined in order, each followed by a boundary comment line, and linted as one
Python text; positions map back to (cell, line, column), with ``Diagnostic.cell`` the index in the
notebook's ``cells`` list. IPython syntax is not Python, so before linting each line magic
(``%time f()``), shell escape (``!pip install x``, ``files = !ls``) and help line (``obj?``,
``?obj``) is replaced by a placeholder of the same length (``...#`` then the rest of the line: an
expression statement, so a magic alone in a block keeps the block valid, and every offset on other
lines stays put). A cell whose body is not Python (``%%bash``, ``%%html``...) takes no part; one
whose cell magic runs Python (``%%time``, ``%%capture``...) has only that first line replaced.

``--fix`` edits the joined text, splits it back at the boundary lines, puts the IPython lines back
as they were, and rewrites only the ``source`` value of the cells that changed, in the notebook's
own JSON style: outputs, metadata, untouched cells and the key order stay byte for byte.

The language server lints the cells of an open notebook the same way, from the cell texts the
editor sends (``code_cell``, ``lint_cells``, ``fix_cells``), with no JSON text in between.
"""

from __future__ import annotations

import difflib
import io
import json
import re
import tokenize
from bisect import bisect_right
from dataclasses import dataclass, field, replace

from torchlint.diagnostics import Diagnostic, Edit, FileResult, Fix, SourceText
from torchlint.engine import FixError, FixResult, fix_source, lint_source, syntax_error
from torchlint.parsing import StatementCache

NOTEBOOK_SUFFIX = ".ipynb"
# Cell magics whose body is Python: the body is linted, the magic line masked.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "python", "python3", "pypy"})
_BOUNDARY = "# torchlint: notebook cell boundary"
_HELP = re.compile(r"^\s*(?:\?{1,2}[\w.*]+|[\w.*\[\]]+\?{1,2})\s*$")
_MAGIC_ASSIGNMENT = re.compile(r"^[\w.,\s()\[\]*]+=\s*[!%]")  # no `^\s*`: the class has \s (quadratic)
_WHITESPACE = re.compile(r"[ \t\n\r]*")


class NotebookError(Exception):
    """The file is not a notebook torchlint can read (reported as TL000)."""

    def __init__(self, message: str, position: tuple[int, int] = (0, 0)):
        super().__init__(message)
        self.position = position  # 0-based line and column in the JSON text


def is_notebook(path: str) -> bool:
    return str(path).endswith(NOTEBOOK_SUFFIX)


# --- IPython syntax --------------------------------------------------------------------------

def _placeholder(content: str) -> str:
    """A Python expression statement (plus comment) exactly as long as ``content``."""
    n = len(content)
    if n >= 4:
        return "...#" + content[4:]
    return ("0", "0#", "...")[n - 1] if n else ""


def _is_ipython_line(line: str) -> bool:
    stripped = line.strip()
    return (stripped.startswith(("%", "!", "?")) and not stripped.startswith("!=")) or bool(
        _HELP.match(line) or _MAGIC_ASSIGNMENT.match(line))


def _statement_starts(text: str) -> tuple[set[int], int]:
    """0-based lines on which a logical line (a statement) begins, and the last line the tokenizer
    got to (text it cannot tokenize further, e.g. a bracket never closed, is not judged)."""
    starts: set[int] = set()
    depth = 0
    at_start = True
    reached = -1
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            reached = tok.start[0] - 1
            if tok.type in (tokenize.NEWLINE, tokenize.NL):
                at_start = depth == 0 if tok.type == tokenize.NL else True
                continue
            if tok.type in (tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
                            tokenize.ENDMARKER):
                continue
            if at_start and depth == 0:
                starts.add(tok.start[0] - 1)
            at_start = False
            if tok.type == tokenize.OP and tok.string in "([{":
                depth += 1
            elif tok.type == tokenize.OP and tok.string in ")]}":
                depth = max(depth - 1, 0)
    except (tokenize.TokenError, SyntaxError):
        pass
    return starts, reached


def mask_ipython(source: str) -> tuple[str, dict[int, str]] | None:
    """``source`` with its IPython lines replaced by same-length placeholders, and the original
    lines by 0-based line number; None for a cell whose body is not Python (``%%bash``)."""
    lines = source.splitlines(keepends=True)
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    candidates: set[int] = set()
    if first is not None and lines[first].lstrip().startswith("%%"):
        magic = lines[first].lstrip()[2:].split(None, 1)
        if not magic or magic[0] not in PYTHON_CELL_MAGICS:
            return None
        candidates.add(first)
    candidates |= {i for i, line in enumerate(lines) if _is_ipython_line(line)}
    if not candidates:
        return source, {}
    for i in sorted(candidates):  # a magic continued with a backslash takes its next lines along
        while i in candidates and lines[i].rstrip("\r\n").endswith("\\") and i + 1 < len(lines):
            candidates.add(i + 1)
            i += 1

    def masked_text(chosen: set[int]) -> str:
        out = []
        indent = 0
        for i, line in enumerate(lines):
            if i not in chosen:
                out.append(line)
                continue
            body = line.rstrip("\r\n")
            own = len(body) - len(body.lstrip())
            # The continuation lines of a magic sit at its indentation, or the block would break.
            indent = (indent if own >= indent else 0) if _continues_masked(i, chosen, lines) else own
            out.append(body[:indent] + _placeholder(body[indent:]) + line[len(body):])
        return "".join(out)

    # A candidate inside a string or a bracket (a continued `% b` of a modulo) is Python after
    # all: keep only those where a statement begins once the others are masked.
    for _ in range(3):
        starts, reached = _statement_starts(masked_text(candidates))
        stray = {i for i in candidates
                 if i <= reached and i not in starts and not _continues_masked(i, candidates, lines)}
        if not stray:
            break
        candidates -= stray
    return masked_text(candidates), {i: lines[i] for i in sorted(candidates)}


def _continues_masked(i: int, candidates: set[int], lines: list[str]) -> bool:
    return i > 0 and i - 1 in candidates and lines[i - 1].rstrip("\r\n").endswith("\\")


# --- the notebook's JSON, read with the spans of each cell's `source` -----------------------

def _skip(text: str, i: int) -> int:
    return _WHITESPACE.match(text, i).end()


def _members(text: str, i: int, decoder: json.JSONDecoder) -> dict[str, tuple[int, int]]:
    """The spans of an object's member values; ``text[i]`` is its ``{``."""
    spans: dict[str, tuple[int, int]] = {}
    i = _skip(text, i + 1)
    if text[i] == "}":
        return spans
    while True:
        key, i = json.decoder.scanstring(text, i + 1)
        i = _skip(text, _skip(text, i) + 1)  # past the colon
        _, end = decoder.raw_decode(text, i)
        spans[key] = (i, end)
        i = _skip(text, end)
        if text[i] == "}":
            return spans
        i = _skip(text, i + 1)  # past the comma


def _elements(text: str, i: int, decoder: json.JSONDecoder) -> list[tuple[int, int]]:
    spans = []
    i = _skip(text, i + 1)
    if text[i] == "]":
        return spans
    while True:
        _, end = decoder.raw_decode(text, i)
        spans.append((i, end))
        i = _skip(text, end)
        if text[i] == "]":
            return spans
        i = _skip(text, i + 1)


@dataclass
class CodeCell:
    index: int  # in the notebook's `cells` list
    source: str  # the cell's text as in the file
    masked: str  # what is linted: IPython lines replaced
    ipython_lines: dict[int, str]  # 0-based line -> original line
    span: tuple[int, int] | None = None  # where the `source` value sits in the JSON text (a file's cells)


def code_cell(index: int, source: str, span: tuple[int, int] | None = None) -> CodeCell | None:
    """A code cell ready to be linted; None for one whose body is not Python (``%%bash``)."""
    masked = mask_ipython(source)
    return None if masked is None else CodeCell(index, source, *masked, span)


@dataclass
class Notebook:
    text: str  # the JSON text
    cell_count: int
    cells: list[CodeCell]
    python: bool = True  # False: a notebook for another language, not linted
    ensure_ascii: bool = False
    indent_unit: str = " "

    def cell_texts(self) -> list[str]:
        """The text of every cell by index ('' for cells that are not linted)."""
        texts = [""] * self.cell_count
        for cell in self.cells:
            texts[cell.index] = cell.source
        return texts


def _cell_source(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "".join(value)
    raise NotebookError("a cell's `source` is neither a string nor a list of strings")


def parse_notebook(text: str) -> Notebook:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise NotebookError(f"not valid JSON: {error.msg}", (error.lineno - 1, error.colno - 1)) from None
    except (ValueError, RecursionError) as error:
        raise NotebookError(f"not valid JSON: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise NotebookError("not a Jupyter notebook in nbformat 4 (no `cells` list)")
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    language = next((table[key] for table, key in ((metadata.get("kernelspec"), "language"),
                                                   (metadata.get("language_info"), "name"))
                     if isinstance(table, dict) and isinstance(table.get(key), str)), "python")
    decoder = json.JSONDecoder()
    try:
        cells_span = _members(text, _skip(text, 0), decoder)["cells"]
        element_spans = _elements(text, cells_span[0], decoder)
        cell_members = [_members(text, span[0], decoder) if isinstance(cell, dict) else {}
                        for cell, span in zip(data["cells"], element_spans)]
    except (ValueError, IndexError, KeyError) as error:  # json.loads took it, so this is unexpected
        raise NotebookError(f"cannot locate the cells in the JSON text ({error})") from None
    notebook = Notebook(text, len(data["cells"]), [], python=language.lower() == "python",
                        ensure_ascii=all(ord(ch) < 128 for ch in text) and "\\u" in text,
                        indent_unit=_indent_unit(text))
    for index, (cell, members) in enumerate(zip(data["cells"], cell_members)):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code" or "source" not in members:
            continue
        code = code_cell(index, _cell_source(cell["source"]), members["source"])
        if code is not None:
            notebook.cells.append(code)
    return notebook


def _indent_unit(text: str) -> str:
    match = re.search(r"\n([ \t]+)\S", text)
    return match.group(1) if match else " "


# --- one text for the linter, and positions back to cells ------------------------------------

@dataclass
class JoinedCells:
    """The code cells joined into one module, with where each cell starts."""

    text: str
    boundary: str
    starts: list[int] = field(default_factory=list)  # offset of each cell in `text`
    lengths: list[int] = field(default_factory=list)  # its length in `text` (without an added newline)
    added_newline: list[bool] = field(default_factory=list)  # a last line without one gets one

    @classmethod
    def join(cls, texts: list[str]) -> "JoinedCells":
        boundary = _BOUNDARY
        while any(boundary in text for text in texts):  # never mistake a user's line for it
            boundary += "#"
        joined = cls("", boundary)
        parts = []
        offset = 0
        for k, text in enumerate(texts):
            if k:
                parts.append(boundary + "\n")
                offset += len(boundary) + 1
            added = bool(text) and not text.endswith(("\n", "\r"))
            joined.starts.append(offset)
            joined.lengths.append(len(text))
            joined.added_newline.append(added)
            parts.append(text + "\n" if added else text)
            offset += len(parts[-1])
        joined.text = "".join(parts)
        return joined

    def split(self, text: str) -> list[str] | None:
        """The cell texts of a (fixed) joined text; None if the boundaries did not survive."""
        pieces = []
        current: list[str] = []
        for line in text.splitlines(keepends=True):
            if line.rstrip("\r\n") == self.boundary:
                pieces.append("".join(current))
                current = []
            else:
                current.append(line)
        pieces.append("".join(current))
        if len(pieces) != len(self.starts):
            return None
        # A cell that did not end with a newline does not get one, nor blank lines a fix left
        # to separate it from the next statement (the next cell is that).
        return [piece.rstrip("\r\n") if added else piece for piece, added in zip(pieces, self.added_newline)]

    def cell_of(self, offset: int) -> int:
        """The cell holding ``offset``. A cell's boundary line counts as its own, so lines added
        after a cell's last statement stay in it."""
        return max(bisect_right(self.starts, offset) - 1, 0)

    def cell_edit(self, edit: Edit, k: int) -> Edit:
        """An edit of the joined text as an edit of cell ``k``'s own text."""
        base, length = self.starts[k], self.lengths[k]
        start, end, text = edit.start - base, edit.end - base, edit.text
        if self.added_newline[k] and end > length:  # reaches into the newline we added
            start, end = min(start, length), length
            text = "\n" + text if start == length and edit.start - base > length else text
            text = text[:-1] if text.endswith("\n") else text
        return Edit(start, min(end, length), text)


def _to_cell(diag: Diagnostic, joined: JoinedCells, cells: list[CodeCell], text: SourceText) -> Diagnostic:
    """A diagnostic of the joined text, re-expressed against its own cell."""
    k = joined.cell_of(text.offset(diag.line, diag.col))
    cell_text = SourceText(cells[k].masked)
    start_line = text.position(joined.starts[k])[0]
    last_line = len(cell_text.line_starts) - 1
    line = min(max(diag.line - start_line, 0), last_line)
    end_line = min(max(diag.end_line - start_line, line), last_line)
    col = diag.col if line == diag.line - start_line else 0
    end_col = diag.end_col if end_line == diag.end_line - start_line else len(cell_text.line_text(end_line))
    fix = diag.fix
    extra = dict(diag.extra)
    if fix is not None:
        edit_cells = [joined.cell_of(edit.start) for edit in fix.edits]
        fix = Fix(fix.title, fix.applicability,
                  tuple(joined.cell_edit(edit, j) for edit, j in zip(fix.edits, edit_cells)))
        if any(j != k for j in edit_cells):  # e.g. a helper added after the imports of cell 0
            extra["edit_cells"] = [cells[j].index for j in edit_cells]
    return replace(diag, line=line, col=col, end_line=end_line, end_col=end_col, fix=fix,
                   cell=cells[k].index, extra=extra)


def _to_cells(diagnostics: list[Diagnostic], joined: JoinedCells, cells: list[CodeCell]) -> list[Diagnostic]:
    text = SourceText(joined.text)
    return sorted((_to_cell(d, joined, cells, text) for d in diagnostics), key=lambda d: d.sort_key)


def lint_cells(cells: list[CodeCell], path: str, settings,
               statements: StatementCache | None = None) -> list[Diagnostic]:
    """The code cells linted as one module, each finding against its own cell (``cell`` is the
    CodeCell's index); ``statements`` as lint_source takes it (the language server's notebook)."""
    joined = JoinedCells.join([cell.masked for cell in cells])
    return _to_cells(lint_source(joined.text, path, settings, statements=statements), joined, cells)


def fix_cells(cells: list[CodeCell], path: str, settings) -> tuple[FixResult, JoinedCells, dict[int, str]]:
    """``--fix`` on the code cells as one module: the result for the joined text, the joined text,
    and the new text of each cell that changed (by index, IPython lines back as written). A
    FixError when the fixed text cannot be put back into the cells."""
    joined = JoinedCells.join([cell.masked for cell in cells])
    fixed = fix_source(joined.text, path, settings)
    new_cells = joined.split(fixed.source)
    if new_cells is None:
        raise FixError(f"{path}: the fixes moved a notebook cell boundary; nothing was written. "
                       "Please report this as a torchlint bug.")
    changed: dict[int, str] = {}
    for cell, new in zip(cells, new_cells):
        restored = _unmask(new, cell)
        if restored is None:
            raise FixError(f"{path}: a fix touched an IPython line of cell {cell.index + 1}; nothing was written")
        if restored != cell.source:
            changed[cell.index] = restored
    return fixed, joined, changed


# --- writing the fixed cells back ------------------------------------------------------------

def _unmask(fixed: str, cell: CodeCell) -> str | None:
    """Put the IPython lines back in place of their placeholders (in order); None if one went."""
    if not cell.ipython_lines:
        return fixed
    masked_lines = cell.masked.splitlines(keepends=True)
    pending = [(masked_lines[i], original) for i, original in cell.ipython_lines.items()]
    out = []
    for line in fixed.splitlines(keepends=True):
        if pending and line.rstrip("\r\n") == pending[0][0].rstrip("\r\n"):
            original = pending.pop(0)[1]
            out.append(original.rstrip("\r\n") + line[len(line.rstrip("\r\n")):])
        else:
            out.append(line)
    return None if pending else "".join(out)


# between two strings of a list: `", "` (Jupyter's style) or `","` (compact JSON)
SEPARATOR = re.compile(r'(?<!\\)"(,[ \t]*)"')


def _dump_source(text: str, notebook: Notebook, span: tuple[int, int]) -> str:
    """``text`` as a `source` value in the style of the one it replaces."""
    original = notebook.text[span[0]:span[1]]
    dump = lambda value: json.dumps(value, ensure_ascii=notebook.ensure_ascii)  # noqa: E731
    if original.startswith('"'):
        return dump(text)
    lines = text.splitlines(keepends=True)
    if not lines:
        return "[]"
    if original != "[]" and "\n" not in original:  # a one-line list stays one line, its separators too
        separator = SEPARATOR.search(original) or SEPARATOR.search(notebook.text)
        return "[" + (separator.group(1) if separator else ", ").join(dump(line) for line in lines) + "]"
    newline = "\r\n" if "\r\n" in (original if "\n" in original else notebook.text) else "\n"
    line_start = notebook.text.rfind("\n", 0, span[0]) + 1
    key_indent = notebook.text[line_start:span[0]]
    key_indent = key_indent[:len(key_indent) - len(key_indent.lstrip())]
    if original == "[]":
        item_indent, closing = key_indent + notebook.indent_unit, key_indent
    else:
        first = _skip(original, 1)
        item_indent = original[original.rfind("\n", 0, first) + 1:first]
        closing = original[original.rfind("\n") + 1:-1]
    return f"[{newline}" + f",{newline}".join(item_indent + dump(line) for line in lines) + newline + closing + "]"


def rewrite(notebook: Notebook, new_sources: dict[int, str]) -> str:
    """The notebook's JSON text with the `source` of some cells (by index) replaced."""
    by_index = {cell.index: cell for cell in notebook.cells}
    out = []
    last = 0
    for index in sorted(new_sources, key=lambda i: by_index[i].span[0]):
        span = by_index[index].span
        out.append(notebook.text[last:span[0]])
        out.append(_dump_source(new_sources[index], notebook, span))
        last = span[1]
    out.append(notebook.text[last:])
    return "".join(out)


def _cell_diff(path: str, index: int, before: str, after: str) -> str:
    lines = lambda text: (text if text.endswith("\n") else text + "\n").splitlines(keepends=True)  # noqa: E731
    name = f"{path}:cell {index + 1}"
    return "".join(difflib.unified_diff(lines(before), lines(after), fromfile=name, tofile=name))


# --- the entry point the runner calls --------------------------------------------------------

def check_notebook_text(text: str, path: str, settings, options, raw: bytes | None = None):
    """Lint (and fix, per options) one notebook's JSON text; a FileResult whose ``source`` is the
    (fixed) JSON text and ``cells`` the text of each cell."""
    try:
        notebook = parse_notebook(text)
    except NotebookError as error:
        return FileResult(path, text, [syntax_error(path, f"cannot read the notebook: {error}", *error.position)])
    result = FileResult(path, text, cells=notebook.cell_texts())
    if not notebook.python or not notebook.cells:
        return result
    if not (options.fix or options.diff):
        cached = options.cache.get(raw, path) if options.cache is not None and raw is not None else None
        if cached is not None:
            result.diagnostics = cached
            return result
        result.diagnostics = lint_cells(notebook.cells, path, settings)
        if options.cache is not None and raw is not None:
            options.cache.put(raw, path, result.diagnostics)
        return result

    try:
        fixed, joined, changed = fix_cells(notebook.cells, path, settings)
    except FixError as error:
        result.error = str(error)
        result.diagnostics = lint_cells(notebook.cells, path, settings)
        return result
    result.fixed = _to_cells(fixed.fixed, joined, notebook.cells)
    new_text = rewrite(notebook, changed) if changed else text
    if options.diff:
        result.diagnostics = lint_cells(notebook.cells, path, settings)
        result.diff = "".join(_cell_diff(path, cell.index, cell.source, changed[cell.index])
                              for cell in notebook.cells if cell.index in changed)
        return result
    fixed_notebook = parse_notebook(new_text)  # what is written must read back as a notebook
    if [changed.get(c.index, c.source) for c in notebook.cells] != [c.source for c in fixed_notebook.cells]:
        raise RuntimeError(f"{path}: the rewritten notebook does not read back as written")
    result.source = new_text
    result.cells = fixed_notebook.cell_texts()
    fixed_joined = JoinedCells.join([cell.masked for cell in fixed_notebook.cells])
    remaining = fixed.remaining if fixed_joined.text == fixed.source else lint_source(fixed_joined.text, path, settings)
    result.diagnostics = _to_cells(remaining, fixed_joined, fixed_notebook.cells)
    return result
