"""The differential check of the statement-by-statement parse (torchlint/parsing.py, issue 16) over
whole corpora: every file's tree through ``StatementCache`` against the whole parse, and, on a
sample of files, a random edit sequence linted through the cache against a fresh lint of each text.

    .venv/bin/python bench/incremental_diff.py [DIR ...] [--edit-files N] [--edits N]

Without DIR it takes the corpora of bench/setup.sh (bench/.work/corpora/* and bench/.work/training).
Prints one line per folder and exits 1 on any difference. tests/test_parsing.py runs the same
checks on the fixtures.
"""

from __future__ import annotations

import argparse
import ast
import random
import sys
import time
from pathlib import Path

from torchlint.analysis.syntax import code_text
from torchlint.analysis.walk import flat, forget_children
from torchlint.config import resolve_settings
from torchlint.engine import lint_source
from torchlint.parsing import StatementCache, parse_module

WORK = Path(__file__).resolve().parent / ".work"


def random_edit(lines: list[str], rng: random.Random) -> list[str]:
    """One random edit of the kinds a person typing makes: a line added (a comment, a blank line, a
    statement that changes what the file configures), removed, doubled, or changed at its end."""
    lines = list(lines)
    at = rng.randrange(len(lines) + 1)
    kind = rng.choice(["comment", "blank", "statement", "delete", "duplicate", "append"])
    if kind == "comment":
        lines.insert(at, "# typed\n")
    elif kind == "blank":
        lines.insert(at, "\n")
    elif kind == "statement":
        lines.insert(at, "torch.backends.cudnn.benchmark = True\n")
    elif lines and kind == "delete":
        del lines[min(at, len(lines) - 1)]
    elif lines and kind == "duplicate":
        lines.insert(at, lines[min(at, len(lines) - 1)])
    elif lines:
        index = min(at, len(lines) - 1)
        lines[index] = lines[index].rstrip("\n") + "  # edited\n"
    return lines


def tree_difference(source: str, statements: StatementCache) -> str | None:
    """What differs between the cache's tree of ``source`` and the whole parse (or its code text
    and ``code_text``'s); None if nothing."""
    whole = parse_module(source)
    pieces = statements.parse(source, ast.parse(source))
    try:
        if not pieces.deep_equals(whole):
            return "the trees differ"
        for name in ("encoding", "default_indent", "default_newline", "has_trailing_newline"):
            if getattr(pieces, name) != getattr(whole, name):
                return f"Module.{name} differs"
        if pieces.code != source:
            return "the tree does not render the text"
        if len({id(node) for node in flat(pieces)[0]}) != len(flat(whole)[0]):
            return "a node is in two places"
        if statements.code(source) != code_text(source):
            return "code_text differs"
        return None
    finally:
        forget_children()


def _parsable(path: Path) -> str | None:
    try:
        source = path.read_text(encoding="utf-8")
        ast.parse(source)
        parse_module(source)
    except Exception:  # noqa: BLE001 - a file either parse refuses is not one to compare
        return None
    return source


def check_folder(folder: Path, edit_files: int, edits: int) -> tuple[str, int]:
    files = sorted(folder.rglob("*.py"))
    tree_differences = lint_differences = checked = 0
    began = time.perf_counter()
    parsable: list[tuple[Path, str]] = []
    for path in files:
        source = _parsable(path)
        if source is None:
            continue
        parsable.append((path, source))
        checked += 1
        found = tree_difference(source, StatementCache())
        if found is not None:
            tree_differences += 1
            print(f"  {path}: {found}", file=sys.stderr)
    trees = time.perf_counter() - began
    rng = random.Random(folder.name)
    sample = rng.sample(parsable, min(edit_files, len(parsable)))
    linted = 0
    for path, source in sample:
        settings = resolve_settings(path, isolated=True, select=["ALL"])
        lines = source.splitlines(keepends=True)
        statements = StatementCache()
        lint_source(source, str(path), settings, statements=statements)
        for _ in range(edits):
            lines = random_edit(lines, rng)
            text = "".join(lines)
            linted += 1
            if lint_source(text, str(path), settings, statements=statements) != lint_source(text, str(path), settings):
                lint_differences += 1
                print(f"  {path}: an edited text lints differently through the cache", file=sys.stderr)
    line = (f"{folder.name}: {checked} files, {tree_differences} with another tree ({trees:.0f} s); "
            f"{len(sample)} files edited {edits} times each: {linted} lints through the cache, "
            f"{lint_differences} with other findings than a fresh lint")
    return line, tree_differences + lint_differences


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--edit-files", type=int, default=20, help="files per folder given a random edit sequence")
    parser.add_argument("--edits", type=int, default=10, help="edits per sequence")
    args = parser.parse_args()
    folders = args.folders or [*sorted((WORK / "corpora").iterdir()), WORK / "training"]
    failed = 0
    for folder in folders:
        line, differences = check_folder(folder, args.edit_files, args.edits)
        print(line, flush=True)
        failed += differences
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
