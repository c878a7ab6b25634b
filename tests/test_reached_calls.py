"""The calls that running a file may reach: the precheck twin (programs.ast_reached_calls, on
CPython's tree) never leaves out a call that Programs.runs (on LibCST's tree) says is reached."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.programs import ast_reached_calls
from torchlint.analysis.walk import walk
from torchlint.context import RuleContext

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

PROGRAMS = {
    "module-level and main": """
        def train(): step()
        def step(): work()
        def unused(): never()
        if __name__ == "__main__":
            train()
    """,
    "decorators, spawned workers and dunder methods": """
        import torch.multiprocessing as mp
        def register(f): return f
        @register
        def hook(): in_hook()
        class Meter:
            def __init__(self): made()
            def update(self): updated()
        def worker(rank): Meter()
        def main(): mp.spawn(worker, nprocs=2)
        main()
    """,
    "nested definitions": """
        def outer():
            def inner(): deep()
            def dead(): no()
            return inner()
        class Unused:
            def __call__(self): nope()
        outer()
    """,
    "names in strings and comments do not count": """
        def fit(): fitted()
        # fit()
        print("fit()")
        x = {"fit": 1}
    """,
}


def _positions(source: str) -> tuple[set, set]:
    module = cst.parse_module(source)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    places = wrapper.resolve(PositionProvider)
    programs = RuleContext(path="f.py", source=source, module=module, settings=None).programs
    libcst: set = set()
    walk(module, lambda node: libcst.add((places[node].start.line, places[node].start.column))
         if isinstance(node, cst.Call) and programs.runs(node) else None, lambda node: None)
    tree = ast.parse(source)
    reached = ast_reached_calls(SyntaxIndex(tree, source))
    python = {(node.lineno, node.col_offset) for node in ast.walk(tree) if type(node) is ast.Call and id(node) in reached}
    return libcst, python


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_twins_reach_the_same_calls(name):
    libcst, python = _positions(textwrap.dedent(PROGRAMS[name]))
    assert libcst == python
    assert libcst  # the table's programs each reach something


def test_unreached_calls_are_left_out():
    source = textwrap.dedent(PROGRAMS["module-level and main"])
    tree = ast.parse(source)
    reached = ast_reached_calls(SyntaxIndex(tree, source))
    names = {node.func.id for node in ast.walk(tree) if type(node) is ast.Call and id(node) in reached}
    assert names == {"train", "step", "work"}


@pytest.mark.parametrize("path", sorted(p for p in FIXTURES.rglob("*.py") if p.read_text("utf-8").isascii()),
                         ids=lambda p: str(p.relative_to(FIXTURES)))
def test_the_precheck_twin_reaches_every_call_libcst_reaches(path):
    source = path.read_text("utf-8")
    try:
        ast.parse(source)
        cst.parse_module(source)
    except (SyntaxError, cst.ParserSyntaxError, RecursionError):
        pytest.skip("not Python both parsers read")
    libcst, python = _positions(source)
    assert libcst <= python
