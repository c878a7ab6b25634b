"""``# noqa`` (flake8/Ruff compatible) and ``# torchlint: skip-file``."""

from __future__ import annotations

import io
import re
import tokenize

from torchlint.diagnostics import Diagnostic

SKIP_FILE = re.compile(r"^[ \t]*#[ \t]*torchlint:[ \t]*skip-file\b", re.MULTILINE | re.IGNORECASE)
NOQA = re.compile(r"#\s*noqa(?::[\s]?(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)


def skip_file(source: str) -> bool:
    return "skip-file" in source and SKIP_FILE.search(source) is not None


def _noqa_codes(comment: str) -> frozenset[str] | None:
    """None: no noqa; empty set: a blanket noqa; else the codes named."""
    match = NOQA.search(comment)
    if match is None:
        return None
    codes = match.group("codes")
    return frozenset(c.upper() for c in re.split(r"[,\s]+", codes) if c) if codes else frozenset()


def _comments_and_logical_ends(source: str) -> tuple[dict[int, str], dict[int, int]]:
    """Comments by 0-based line, and each line's logical line's last line."""
    comments: dict[int, str] = {}
    logical_end: dict[int, int] = {}
    insignificant = (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT,
                     tokenize.ENCODING, tokenize.ENDMARKER)
    start = None  # first line of the logical line being read
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0] - 1] = tok.string
            if tok.type == tokenize.NEWLINE:
                if start is not None:
                    for line in range(start, tok.start[0]):
                        logical_end[line] = tok.start[0] - 1
                start = None
            elif tok.type not in insignificant and start is None:
                start = tok.start[0] - 1
    except (tokenize.TokenError, SyntaxError, IndentationError):
        # Tokenizers of older Pythons reject some newer syntax: fall back to physical lines.
        for number, line in enumerate(source.splitlines()):
            if "#" in line:
                comments[number] = line[line.index("#"):]
    return comments, logical_end


def apply_noqa(source: str, diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    if not diagnostics or "noqa" not in source.lower():
        return diagnostics
    comments, logical_end = _comments_and_logical_ends(source)
    kept = []
    for diag in diagnostics:
        suppressed = False
        for line in {diag.line, logical_end.get(diag.line, diag.line)}:
            codes = _noqa_codes(comments.get(line, ""))
            if codes is not None and (not codes or diag.code in codes):
                suppressed = True
        if not suppressed:
            kept.append(diag)
    return kept
