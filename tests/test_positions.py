"""Positions rendered statement by statement (positions._positions_by_statement: the innermost statement
around each node) are the positions of the whole-module render, for every node, whatever stands around
the statements."""

from __future__ import annotations

import ast

import libcst as cst
import pytest

from torchlint import engine, positions
from torchlint.config import resolve_settings
from torchlint.diagnostics import SourceText
from torchlint.analysis.walk import walk

SOURCES = {
    "plain": "import torch\nx = torch.zeros(3).cuda()\n",
    "comments and blank lines": "# header\n\nimport torch\n\n\n# about x\nx = 1  # one\n\n# trailing\n",
    "decorators": "@a\n# between\n@b(\n    1)\ndef f():\n    return 1\n\n\n@c\nclass C:\n    x = 1\n",
    "several statements on a line": "a = 1; b = 2\nc = a + b;\nif c: d = 3\n",
    "continuation lines": "x = (1,\n     2)\ny = 3 + \\\n    4\nz = '''a\nb'''\n",
    "crlf": "import torch\r\n\r\nfor i in range(3):\r\n    x = torch.ones(2).cuda()\r\n",
    "no trailing newline": "a = 1\nb = 2",
    "nested blocks": "def f(x):\n    if x:\n        # deep\n        return [i for i in x]\n    return None\n",
    "try and its parts": "try:\n    a = 1\nexcept ValueError as e:\n    b = 2\nexcept (KeyError, OSError):\n    pass\n"
                         "else:\n    c = 3\nfinally:\n    # done\n    d = 4\n",
    "elif chains": "if a:\n    x = 1\nelif b:\n    x = 2\n# before else\nelse:\n    if c:\n        x = 3\n    else: x = 4\n",
    "loops with else": "for i in range(3):\n    pass\nelse:\n    y = 1\nwhile x:\n    x -= 1\nelse:\n    z = 2\n",
    "match": "match p:\n    case 1:\n        a = 1\n    case [x, y] if x:\n        # c\n        a = 2\n    case _:\n        pass\n",
    "classes and decorated methods": "class A(B):\n    \"doc\"\n\n    @property\n    # note\n    def x(self):\n"
                                     "        return 1\n\n    async def y(self):\n        async with c as d:\n"
                                     "            await d\n",
    "comments at the end of blocks": "def f():\n    x = 1\n    # end of f\n\n# between\ndef g():\n    if x:\n"
                                     "        y = 2\n        # end of if\n    # end of g\n",
    "mixed indentation": "def f():\n  if x:\n      y = 1\n  return y\nclass C:\n        z = 1\n",
    "with items": "with open(a) as f, open(b) as g:\n    data = f.read() + g.read()\n",
}


def all_positions(module: cst.Module) -> dict[int, object]:
    provider = positions.PositionProvider()
    state = positions.PositionProvidingCodegenState(default_indent=module.default_indent,
                                                 default_newline=module.default_newline, provider=provider)
    module._codegen(state)
    return {id(node): span for node, span in provider._computed.items()}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_statement_by_statement_positions_match_the_whole_render(name):
    source = SOURCES[name]
    module = cst.parse_module(source)
    statement_lines = engine._statement_lines(ast.parse(source))
    expected = all_positions(module)
    nodes: list[cst.CSTNode] = []
    walk(module, nodes.append)
    nodes = [node for node in nodes if node is not module]
    found = positions._positions_by_statement(module, nodes, SourceText(source), statement_lines)
    assert found is not None
    spans, indents = found
    blocks = positions._block_indents(module, nodes)
    for node in nodes:
        assert spans[node] == expected[id(node)], (name, node)
        # what a fix's render is indented by (a node left out is found by _block_indents itself)
        assert indents.get(id(node), blocks[id(node)]) == blocks[id(node)], (name, node)


def test_a_statement_that_does_not_match_the_source_falls_back():
    source = "a = 1\nb = 2\n"
    module = cst.parse_module(source)
    target = module.body[1]
    walk(module, lambda node: None)
    # CPython's lines one off: the render would start on the wrong line, and the check sees it
    assert positions._positions_by_statement(module, [target], SourceText(source), [2, 3]) is None


def test_the_engine_renders_only_the_statements_with_findings(monkeypatch):
    """A finding in a file with many statements is positioned without rendering the whole module
    (the statement path was once cut off by an early return, and every file paid a full render)."""

    def whole_module(*args):
        raise AssertionError("the whole module was rendered")

    monkeypatch.setattr(positions, "_positions", whole_module)
    source = "import torch\n\n" + "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(50)) \
        + "x = torch.zeros(3).cuda()\n"
    found = engine.lint_source(source, "train.py", resolve_settings(select=["TL201"], isolated=True))
    assert [(d.code, d.line) for d in found] == [("TL201", source.count("\n") - 1)]


def test_statement_by_statement_positions_match_the_whole_render_on_every_fixture():
    """Every fixture of the rules, every node: the innermost statement's render gives the whole
    module's positions, and its blocks are the node's. (On 930 files of the training corpus, timm and pytorch-lightning, all
    nodes matched too, without a fallback to the whole render.)"""
    from pathlib import Path

    fell_back = []
    root = Path(__file__).resolve().parent.parent / "fixtures"
    paths = sorted(root.rglob("*.py"))
    assert len(paths) > 100
    for path in paths:
        source = path.read_text(encoding="utf-8")
        try:
            tree = ast.parse(source)
            module = cst.parse_module(source)
        except (SyntaxError, cst.ParserSyntaxError):
            continue
        nodes: list[cst.CSTNode] = []
        walk(module, nodes.append)
        nodes = [node for node in nodes if node is not module]
        found = positions._positions_by_statement(module, nodes, SourceText(source), engine._statement_lines(tree))
        if found is None:
            fell_back.append(path.name)
            continue
        spans, indents = found
        expected, blocks = all_positions(module), positions._block_indents(module, nodes)
        assert all(spans[node] == expected[id(node)] and indents.get(id(node), blocks[id(node)]) == blocks[id(node)]
                   for node in nodes), path
    assert fell_back == []


@pytest.mark.parametrize("after", ["", "\n\nprint('after')\n", "\n\ndef g():\n    return 1\n"])
def test_removing_the_last_statement_of_a_block_edits_its_lines_only(after):
    # the statement that ends a loop, a function and (without `after`) the module: its own lines go,
    # with the blank line above it and its trailing comment, and no edit spans the module
    source = ("import torch\n\n\ndef train(model, loader, optimizer):\n    for x in loader:\n"
              "        model(x).backward()\n        optimizer.step()\n\n        torch.cuda.empty_cache()  # free\n") + after
    settings = resolve_settings(None, isolated=True, select=["TL801"])
    [diagnostic] = engine.lint_source(source, "train.py", settings)
    [edit] = diagnostic.fix.edits
    removed = "\n        torch.cuda.empty_cache()  # free\n"  # the blank line, then the statement
    assert (edit.start, edit.end, edit.text) == (source.index(removed), source.index(removed) + len(removed), "")


@pytest.mark.parametrize("where, expected", [
    ("line_before", "# new\n@a\n# between\n@b(\n    1)\ndef f():\n    return 1\n"),
    ("lines", ""),
])
def test_a_decorated_definitions_lines_start_at_its_first_decorator(where, expected, tmp_path):
    # a FunctionDef's span starts at `def`: a line inserted before it went between its decorators,
    # and deleting its lines left the decorators on the next statement
    from torchlint.fixes import NodeEdit
    from torchlint.rule import Rule

    class AroundDefinitions(Rule):
        """## What it does\n\nEdits around each definition."""

        code, name, kind, summary, triggers = "TL995", "around-definitions", "performance", "test rule", ("def",)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.report(node, "a definition", self.fix("edit", NodeEdit(node, "# new\n" if where == "line_before" else "",
                                                                        where)))

    source = "@a\n# between\n@b(\n    1)\ndef f():\n    return 1\n"
    settings = resolve_settings(tmp_path, isolated=True, select=["ALL"])
    [diagnostic] = engine.lint_source(source, "m.py", settings, rules=(AroundDefinitions,))
    [edit] = diagnostic.fix.edits
    assert source[:edit.start] + edit.text + source[edit.end:] == expected
