"""Positions rendered statement by statement (positions._positions_by_statement) are the positions of
the whole-module render, for every node, whatever stands around the statements."""

from __future__ import annotations

import ast

import libcst as cst
import pytest

from torchlint import engine, positions
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
    first_lines = engine._statement_lines(ast.parse(source))
    expected = all_positions(module)
    nodes: list[cst.CSTNode] = []
    walk(module, nodes.append)
    nodes = [node for node in nodes if node is not module]
    found = positions._positions_by_statement(module, {id(node) for node in nodes}, SourceText(source), first_lines)
    if name == "no trailing newline":  # the last statement's render keeps a newline the file lacks
        assert found is None
        return
    assert found is not None
    for node in nodes:
        assert found[node] == expected[id(node)], (name, node)


def test_a_statement_that_does_not_match_the_source_falls_back():
    source = "a = 1\nb = 2\n"
    module = cst.parse_module(source)
    target = module.body[1]
    # CPython's lines one off: the render would start on the wrong line, and the check sees it
    assert positions._positions_by_statement(module, {id(target)}, SourceText(source), [2, 3]) is None


def test_the_engine_renders_only_the_statements_with_findings(monkeypatch):
    """A finding in a file with many statements is positioned without rendering the whole module
    (the statement path was once cut off by an early return, and every file paid a full render)."""
    from torchlint.config import resolve_settings

    def whole_module(*args):
        raise AssertionError("the whole module was rendered")

    monkeypatch.setattr(positions, "_positions", whole_module)
    source = "import torch\n\n" + "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(50)) \
        + "x = torch.zeros(3).cuda()\n"
    found = engine.lint_source(source, "train.py", resolve_settings(select=["TL201"], isolated=True))
    assert [(d.code, d.line) for d in found] == [("TL201", source.count("\n") - 1)]
