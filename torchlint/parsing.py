"""LibCST's parse of a module: the whole text at once, or statement by statement, reusing the
statements whose text did not change since the last parse (the language server after an edit, the
rounds of `--fix`).

LibCST's parser takes about 0.1 s per 1,000 lines and has no incremental mode. A module's
top-level statements, though, each start on a line of their own at column 0, and CPython's tree
(which the engine builds first, in a tenth of the time) says on which. ``StatementCache`` cuts the
text there, parses each piece as a module of its own, keeps it by its text, and assembles the
pieces into the module that ``parse_module`` would have built from the whole text:

- the lines between two statements (blank lines, comments) end one piece, so they come back as
  that piece's module footer; they belong to the next statement's ``leading_lines``, and move
  there;
- the first piece holds the module's header, the last its footer and trailing newline;
- a block written with the module's default indent has ``indent=None``: a piece's default is the
  indent of its own first block, so the pieces are assembled only when every piece with a block
  agrees with the first one (the default of the whole text).

Where the text has a shape the assembly does not cover (no statement, a lone carriage return or
a form feed, a statement continued from the line before with a backslash, pieces that disagree on
the indent, a piece that does not parse alone), the whole text is parsed instead. The assembled
module equals the whole parse node for node (``deep_equals``) and renders the same text:
tests/test_parsing.py checks it on every fixture and along random edit sequences, and
bench/incremental_diff.py on every file of the corpora.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from functools import cache
from itertools import pairwise

from torchlint.analysis.syntax import ast_first_line, blanked_code, code_text
from torchlint.diagnostics import SourceText
from torchlint.lazy import libcst as cst

# LibCST validates every node as it is built (CSTNode.__post_init__ calls _validate); for the trees
# its parser builds that is a sixth of the parse and checks nothing the parser has not (LibCST's
# own comment there says so). The parse skips it, while the LibCST in use still validates that way.
@cache
def _validation() -> Callable | None:
    """LibCST's ``CSTNode.__post_init__``, when all it does is validate; read once, on the first
    parse (not at import: see torchlint/lazy.py), before any parse swaps it."""
    post_init = cst.CSTNode.__post_init__
    return post_init if post_init.__code__.co_names == ("_validate",) else None


def _no_validation(node: cst.CSTNode) -> None:
    return None


def parse_module(source: str) -> cst.Module:
    """``cst.parse_module``, without re-validating the nodes the parser builds. Nodes that rules
    and fixes build later are validated as usual."""
    return _parse_all(cst.parse_module, [source])[0]


def _parse_all(parse: Callable[[str], cst.Module], texts: Sequence[str]) -> list[cst.Module]:
    validation = _validation()
    if validation is None:
        return [parse(text) for text in texts]
    cst.CSTNode.__post_init__ = _no_validation
    try:
        return [parse(text) for text in texts]
    finally:
        cst.CSTNode.__post_init__ = validation


def statement_starts(tree: ast.Module) -> list[int]:
    """The lines where the module's top-level statements start (a decorated one at its first
    decorator), once each (``a = 1; b = 2`` is one line)."""
    return sorted({ast_first_line(node) for node in tree.body})


class StatementCache:
    """Parses the texts of one document as they change, re-parsing only the top-level statements
    whose text changed. Keeps the pieces of the last two parses (an edit and its undo)."""

    def __init__(self) -> None:
        self._pieces: dict[str, list[cst.Module]] = {}  # the last parse's, by text, in the order of the places
        self._previous: dict[str, list[cst.Module]] = {}
        self._codes: dict[str, str] = {}  # each piece's code_text, by its text
        self._last: tuple[str, list[str]] | None = None  # the text parsed last, and its pieces
        self.parsed = 0  # pieces parsed, for tests and benchmarks
        self.reused = 0

    def parse(self, source: str, tree: ast.Module | None) -> cst.Module:
        """The module of ``source``, equal to ``parse_module(source)``; ``tree`` is CPython's tree
        of the same text (None: parse the whole text). Raises what ``parse_module`` raises."""
        texts = _pieces(source, tree) if tree is not None else None
        if texts is None:
            return parse_module(source)
        # a node is in one place of one tree: a text that comes twice (two equal statements) has
        # a piece of its own for each place
        known = {text: list({id(piece): piece for piece in (*self._pieces.get(text, ()),
                                                            *self._previous.get(text, ()))}.values())
                 for text in set(texts)}
        pieces: list[cst.Module | None] = [known[text].pop(0) if known[text] else None for text in texts]
        missing = [index for index, piece in enumerate(pieces) if piece is None]
        try:
            for index, piece in zip(missing, _parse_all(cst.parse_module, [texts[index] for index in missing])):
                pieces[index] = piece
        except (cst.ParserSyntaxError, RecursionError):
            return parse_module(source)  # the whole text's error, at its own position
        self.parsed += len(missing)
        self.reused += len(texts) - len(missing)
        self._previous = self._pieces
        self._pieces = {}
        for text, piece in zip(texts, pieces):
            self._pieces.setdefault(text, []).append(piece)
        self._codes = {text: code for text, code in self._codes.items()
                       if text in self._pieces or text in self._previous}
        self._last = (source, texts)
        module = _assemble(pieces)
        return module if module is not None else parse_module(source)

    def code(self, source: str) -> str:
        """``code_text(source)`` (the rules' text without comments and docstrings) for the text
        parsed last, from the code of each of its pieces, kept by the piece's text: a piece is
        tokenized alone as it is parsed alone. The whole text is tokenized when a piece does not
        tokenize alone, or has a line break that Python's ``splitlines`` sees and the tokenizer
        does not."""
        if self._last is None or self._last[0] != source \
                or any(character in source for character in _OTHER_LINE_BREAKS):
            return code_text(source)
        codes = []
        for text in self._last[1]:
            code = self._codes.get(text)
            if code is None:
                code = blanked_code(text)
                if code is None:
                    return code_text(source)
                self._codes[text] = code
            codes.append(code)
        return "".join(codes)


# what str.splitlines breaks lines at besides "\n" and "\r" (code_text splits lines that way)
_OTHER_LINE_BREAKS = "\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def _pieces(source: str, tree: ast.Module) -> list[str] | None:
    """The text cut before each top-level statement but the first (the first piece holds the
    module's header); None where the cut would not reassemble (see the module's docstring)."""
    if not tree.body or "\f" in source or "\r" in source.replace("\r\n", ""):
        return None
    if "\r\n" in source and source.count("\n") != source.count("\r\n"):
        return None  # mixed newlines: a piece's default newline could differ from the module's
    line_starts = SourceText(source).line_starts
    cuts = []
    for line in statement_starts(tree)[1:]:
        if line - 1 >= len(line_starts):
            return None
        cut = line_starts[line - 1]
        if source[:cut].rstrip("\r\n").endswith("\\"):
            return None  # the statement continues the line before it
        cuts.append(cut)
    bounds = [0, *cuts, len(source)]
    return [source[start:end] for start, end in pairwise(bounds)]


def _assemble(pieces: list[cst.Module]) -> cst.Module | None:
    """The module of the pieces' texts joined, or None when the pieces do not assemble into it."""
    if any(len(piece.body) != 1 for piece in pieces) or any(piece.header for piece in pieces[1:]):
        return None
    indented = [piece.default_indent for piece in pieces if _has_block(piece.body[0])]
    default_indent = indented[0] if indented else pieces[0].default_indent
    if any(indent != default_indent for indent in indented):
        return None
    body = [pieces[0].body[0]]
    for before, piece in pairwise(pieces):
        statement = piece.body[0]
        if before.footer:
            statement = statement.with_changes(leading_lines=[*before.footer, *statement.leading_lines])
        body.append(statement)
    first, last = pieces[0], pieces[-1]
    return cst.Module(body=body, header=first.header, footer=last.footer, encoding=first.encoding,
                      default_indent=default_indent, default_newline=first.default_newline,
                      has_trailing_newline=last.has_trailing_newline)


def _has_block(node: cst.CSTNode) -> bool:
    """Does a top-level statement hold an indented block (so that its piece's default indent is
    the indent of its first block, not LibCST's fallback)? A one-line suite (``if x: pass``)
    holds none."""
    if isinstance(node, (cst.IndentedBlock, cst.Match)):
        return True
    parts = [getattr(node, name, None) for name in ("body", "orelse", "finalbody")]
    return any(isinstance(part, cst.CSTNode) and not isinstance(part, cst.SimpleStatementSuite) and _has_block(part)
               for part in [*parts, *getattr(node, "handlers", ())])
