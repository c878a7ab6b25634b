"""A rule's bug costs only that rule's findings (issue 17): a rule or a precheck that raises is
left out of the file and said so, every other rule still reports; and the inputs that made
rules fail on real code (mixed line ends, a name rebound to itself) are checked for good."""

from __future__ import annotations

import ast

import libcst as cst

from torchlint.analysis.index import SyntaxIndex
from torchlint.config import resolve_settings
from torchlint.engine import lint_source
from torchlint.rule import Rule, all_rules

LEAK = """\
import torch

losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    losses.append(loss)
"""


class FailsOnCalls(Rule):
    """## What it does\n\nRaises on the third call it sees, after reporting the first two."""

    code = "TL997"
    name = "fails-on-calls"
    kind = "performance"
    summary = "test rule"
    triggers = ("loss",)

    def __init__(self, ctx):
        super().__init__(ctx)
        self.seen = 0

    def visit_Call(self, node: cst.Call) -> None:
        self.seen += 1
        if self.seen == 3:
            raise IndexError("list index out of range")
        self.report(node, "a call")


class FailsInPrecheck(Rule):
    """## What it does\n\nA precheck that raises."""

    code = "TL996"
    name = "fails-in-precheck"
    kind = "performance"
    summary = "test rule"
    triggers = ("loss",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        raise IndexError("bytearray index out of range")

    def visit_Call(self, node: cst.Call) -> None:
        self.report(node, "never reached")


def settings(tmp_path):
    return resolve_settings(tmp_path, isolated=True, select=["ALL"])


def test_a_failing_rule_loses_only_its_own_findings(tmp_path):
    retained_graph = next(rule for rule in all_rules() if rule.code == "TL101")
    crashes: list[str] = []
    found = lint_source(LEAK, "train.py", settings(tmp_path), (retained_graph, FailsOnCalls), crashes)
    assert [(d.code, d.line) for d in found] == [("TL101", 6)]  # the failing rule's two reports are gone too
    assert len(crashes) == 1
    assert "TL997 (fails-on-calls) failed" in crashes[0] and "IndexError: list index out of range" in crashes[0]
    assert crashes[0].startswith("train.py: ")


def test_a_failing_precheck_loses_only_its_rule(tmp_path):
    retained_graph = next(rule for rule in all_rules() if rule.code == "TL101")
    crashes: list[str] = []
    found = lint_source(LEAK, "train.py", settings(tmp_path), (FailsInPrecheck, retained_graph), crashes)
    assert [d.code for d in found] == ["TL101"]
    assert len(crashes) == 1 and "TL996 (fails-in-precheck) failed" in crashes[0]


def test_without_a_listener_the_failure_goes_to_standard_error(tmp_path, capsys):
    lint_source(LEAK, "train.py", settings(tmp_path), (FailsOnCalls,))
    assert "torchlint: error: train.py: rule TL997" in capsys.readouterr().err


def test_prechecks_count_lines_ended_by_a_lone_carriage_return(tmp_path):
    """Line ends mixed "\\n" and "\\r" (found by fuzzing): CPython counts both, and so must the
    line masks, or TL103's and TL205's prechecks read past their end."""
    source = ("import torch\nclass M(torch.nn.Module):\r    def __init__(self):\r        super().__init__()\r"
              "        x = 1 + \\\r            2\r        self.w = torch.zeros(3, device=\"cuda\")\n\n"
              "def f():\n    model.eval()\n    for b in loader:\n        model(b)\n")
    index = SyntaxIndex(ast.parse(source), source)
    assert all(isinstance(rule.precheck(index), bool) for rule in all_rules())
    crashes: list[str] = []
    found = lint_source(source, "train.py", settings(tmp_path), crashes=crashes)
    assert crashes == []
    assert {d.code for d in found} == {"TL103", "TL205"}


def test_a_name_rebound_to_itself_ends(tmp_path):
    """`mode = mode.reshape(-1, 1)` then `torch.tensor(mode)` (a diffusion library): TL204 followed
    the name into its own value without end, and the whole file became TL000, losing the other
    rules' findings. The rebinding is now followed once and read as unknown."""
    source = ("import numpy as np\nimport torch\n\n\ndef f(mode):\n    mode = mode.reshape(-1, 1)\n"
              "    mask = torch.zeros(3).cuda()\n    return torch.tensor(mode), mask\n")
    crashes: list[str] = []
    found = lint_source(source, "train.py", settings(tmp_path), crashes=crashes)
    assert crashes == []
    assert [(d.code, d.line + 1) for d in found] == [("TL201", 7)]


def test_a_failing_rule_fails_the_run_and_is_not_cached(tmp_path, monkeypatch):
    """The command line reports a rule's failure as an internal error (exit 2, DESIGN's exit
    codes), with the other rules' findings, and keeps no cache entry for the file: a second run
    meets the failure again instead of "All checks passed!" (swav's scripts, before 6cf6c32)."""
    from click.testing import CliRunner

    from torchlint.cli import main

    retained_graph = next(rule for rule in all_rules() if rule.code == "TL101")
    monkeypatch.setattr(retained_graph, "visit_Call", lambda self, node: [][0], raising=False)
    (tmp_path / "train.py").write_text(LEAK + "mask = torch.zeros(3).cuda()\n")
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        result = CliRunner().invoke(main, ["check", "--isolated", "--select", "TL101,TL201", "--cache-dir", "cache",
                                           "train.py"])
        assert result.exit_code == 2, result.output
        assert "torchlint: error: train.py: rule TL101 (retained-graph) failed on this file (IndexError" \
               in result.stderr
        assert "train.py:8:8: TL201" in result.stdout
        assert "1 rule failed on 1 file: its findings there are missing (see the error above)." in result.stdout
        assert "All checks passed!" not in result.stdout
