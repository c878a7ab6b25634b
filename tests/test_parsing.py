"""The statement-by-statement parse (torchlint/parsing.py, issue 16) builds the tree that the whole
parse builds, node for node and with no node in two places, and the lint of an edited text through
it is the lint of that text from scratch: on every fixture, on the shapes the assembly must get
right or refuse, and along random edit sequences. bench/incremental_diff.py runs the same checks
over the corpora."""

from __future__ import annotations

import ast
import random
import sys

import pytest

from conftest import ROOT
from torchlint.analysis.syntax import code_text
from torchlint.config import resolve_settings
from torchlint.engine import lint_source
from torchlint.parsing import StatementCache

sys.path.insert(0, str(ROOT / "bench"))

from incremental_diff import random_edit, tree_difference  # noqa: E402

FIXTURES = sorted((ROOT / "fixtures").rglob("*.py"))


def assert_same_tree(source: str, statements: StatementCache) -> None:
    """The cache's tree of ``source`` is the whole parse's, in every field (the module's header and
    footer too), renders ``source``, and has each node in one place (positions and the walk's
    caches key on a node); the code text it gives the rules is ``code_text``'s."""
    assert tree_difference(source, statements) is None


def test_every_fixture_parses_to_the_same_tree():
    statements = StatementCache()  # one cache for all: equal statements of other files are reused
    for path in FIXTURES:
        source = path.read_text(encoding="utf-8")
        try:
            ast.parse(source)
        except SyntaxError:
            continue
        assert_same_tree(source, statements)
    assert statements.parsed > 0 and statements.reused > 0


SHAPES = {
    "comments between statements, at the margin and inside a block's end": (
        "import torch\n\n\ndef f():\n    return 1\n    # the block's own comment\n\n# the next one's\n"
        "\n\n@decorated\n# between\ndef g():\n    pass\n"),
    "a header, a docstring, no final newline": "#!/usr/bin/env python\n# header\n\n\"\"\"Doc.\"\"\"\nx = 1",
    "equal statements": "import torch\nx = 1\nimport torch\nx = 1\n\nimport torch\n",
    "two statements on one line": "a = 1; b = 2\nc = 3\n",
    "a statement continued from the line before": "a = 1; \\\nb = 2\nc = 3\n",
    "windows newlines": "import torch\r\n\r\ndef f():\r\n    pass\r\nx = 1\r\n",
    "mixed newlines": "import torch\r\ndef f():\n    pass\n",
    "a lone carriage return": "a = 1\rb = 2\n",
    "a form feed between functions": "def f():\n    pass\n\f\ndef g():\n    pass\n",
    "the first block indents by two": "if x: pass\nclass A:\n  def f(self):\n      return 1\nfor i in y:\n  pass\n",
    "blocks that disagree on the indent": "def f():\n\tpass\ndef g():\n    pass\n",
    "one-line blocks only": "if x: pass\nelse: y = 1\nclass A: pass\n",
    "elif, else, try and with": (
        "if a:\n    pass\nelif b:\n  pass\nelse:\n    pass\n"
        "try:\n    pass\nexcept E:\n    pass\nelse:\n    pass\nfinally:\n    pass\nwith a as b: pass\n"),
    "a block first found in an else": "if a: pass\nelse:\n   b = 1\nc = 2\n",
    "a match statement": "match x:\n  case 1:\n    pass\n  case _:\n    pass\ny = 1\n",
    "async code": "async def f():\n    async with a:\n        await b\n",
    "comments only": "# nothing\n\n# here\n",
    "empty": "",
    "a trailing comment at the end": "x = 1\n\n# bye",
    "a class with a body of blank lines and comments": "class A:\n\n    # c\n    x = 1\n\n\n    # d\n\n",
}


@pytest.mark.parametrize("source", SHAPES.values(), ids=SHAPES.keys())
def test_shapes(source):
    assert_same_tree(source, StatementCache())


def test_the_code_text_of_a_piece_is_kept_with_it():
    source = 'def f():\n    """Plans autocast."""\n    return 1  # autocast\n\n\n"""A docstring."""\nx = "two words"\n'
    statements = StatementCache()
    statements.parse(source, ast.parse(source))
    assert statements.code(source) == code_text(source)
    assert "autocast" not in statements.code(source) and "two words" not in statements.code(source)
    edited = source.replace("return 1", "return 2")
    statements.parse(edited, ast.parse(edited))
    assert statements.code(edited) == code_text(edited)
    assert statements.code(source) == code_text(source)  # not the text parsed last: tokenized whole


def test_a_shape_the_assembly_refuses_is_parsed_whole():
    statements = StatementCache()
    statements.parse(SHAPES["blocks that disagree on the indent"], ast.parse(SHAPES["blocks that disagree on the indent"]))
    statements.parse(SHAPES["a statement continued from the line before"],
                     ast.parse(SHAPES["a statement continued from the line before"]))
    assert statements.parsed == 2  # the first text's two pieces; the second was never cut


def test_only_the_changed_statement_is_parsed_again():
    source = "import torch\n\n\ndef f():\n    return 1\n\n\ndef g():\n    return 2\n\n\nx = f()\n"
    statements = StatementCache()
    statements.parse(source, ast.parse(source))
    assert (statements.parsed, statements.reused) == (4, 0)
    edited = source.replace("return 2", "return 3  # edited")
    assert_same_tree(edited, statements)
    assert (statements.parsed, statements.reused) == (5, 3)
    assert_same_tree(source, statements)  # the undo: the piece before the edit is still kept
    assert (statements.parsed, statements.reused) == (5, 7)


def test_a_statement_duplicated_by_an_edit_gets_a_tree_of_its_own():
    source = "import torch\nx = torch.zeros(3).cuda()\n"
    statements = StatementCache()
    statements.parse(source, ast.parse(source))
    doubled = source + "x = torch.zeros(3).cuda()\n"
    assert_same_tree(doubled, statements)
    assert_same_tree(doubled + "x = torch.zeros(3).cuda()\n", statements)


EDITED = ["fixtures/examples/train.py", "fixtures/training/cnn_bn_leak.py", "fixtures/training/dataparallel.py",
          "fixtures/training/lightning_old_trainer.py", "fixtures/rules/manual_attention/bad.py"]


@pytest.mark.parametrize("name", EDITED)
def test_random_edits_lint_as_a_fresh_lint_does(name):
    path = ROOT / name
    settings = resolve_settings(path, isolated=True, select=["ALL"])
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    rng = random.Random(name)
    statements = StatementCache()
    for _ in range(12):
        lines = random_edit(lines, rng)
        text = "".join(lines)
        fresh = lint_source(text, str(path), settings)
        assert lint_source(text, str(path), settings, statements=statements) == fresh
        try:
            ast.parse(text)
        except SyntaxError:
            continue
        assert_same_tree(text, statements)
    assert statements.reused > 0


def test_a_notebooks_cells_lint_through_the_cache_as_a_fresh_lint_does():
    """The language server keeps one cache per notebook, for its cells' joined text."""
    from torchlint.notebook import code_cell, lint_cells

    settings = resolve_settings(ROOT / "train.ipynb", isolated=True, select=["ALL"])
    sources = ["import torch\nimport torch.nn as nn\n%matplotlib inline\n",
               "model = nn.DataParallel(nn.Linear(2, 2)).cuda()\n",
               "losses = []\nfor x, y in loader:\n    loss = model(x).sum()\n    loss.backward()\n"
               "    losses.append(loss)\n"]
    statements = StatementCache()
    for edit in ("", "# a note\n", "x = torch.zeros(3).cuda()\n"):
        sources[1] = edit + sources[1]
        cells = [code_cell(index, source) for index, source in enumerate(sources)]
        through_cache = lint_cells(cells, "train.ipynb", settings, statements)
        assert through_cache == lint_cells(cells, "train.ipynb", settings)
        assert {d.code for d in through_cache} >= {"TL101", "TL501"}
    assert statements.reused > 0
