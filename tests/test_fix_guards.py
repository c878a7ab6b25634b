"""The guards every fix passes (DESIGN.md, "Fix safety"): TorchFix's `--fix` added
`weights_only=True` beside a `**kwargs` that already carried it (TypeError), rewrote a
`try/except ImportError` fallback away, and inverted a condition's intent. Here a fix that cannot
be proved safe is withheld: the finding is still reported, without a fix."""

from __future__ import annotations

import re
from pathlib import Path

import libcst as cst
import pytest

from libcst.metadata import MetadataWrapper, PositionProvider

from conftest import ROOT, run_torchlint
from test_rules import rule_folder, settings_for
from torchlint import guards
from torchlint.analysis.walk import walk
from torchlint.diagnostics import SourceText, apply_edits
from torchlint.config import resolve_settings
from torchlint.engine import fix_source, lint_source
from torchlint.analysis.syntax import dotted_name, find_keyword as keyword_arg
from torchlint.fixes import set_keyword
from torchlint.rule import Rule, all_rules


def diagnostics(tmp_path, source: str, code: str, **options):
    settings = resolve_settings(tmp_path, isolated=True, select=["ALL"], unsafe_fixes=True, **options)
    return [d for d in lint_source(source, "train.py", settings) if d.code == code]


def fixed_lines(tmp_path, source: str, code: str, **options) -> dict[int, bool]:
    """1-based line -> does the finding there carry a fix."""
    return {d.line + 1: d.fix is not None for d in diagnostics(tmp_path, source, code, **options)}


# --- a keyword added beside **kwargs ---------------------------------------------------------------

SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader
import pytorch_lightning as pl

device = torch.device("cuda")
model = Net().to(device)


def main():
    {line}
    for epoch in range(3):
        for x, y in loader:
            x = x.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = model(x).sum()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
"""
def keyword_additions(source: str, path: Path, settings) -> list[tuple[int, int]]:
    """What the fixes of a file add keywords to, as the engine's guard sees them: the (start, end)
    offsets of each call that a fix edit gives a keyword it lacked."""
    found = []
    original = guards._keyword_change

    def spy(old, new, ancestors):
        change = original(old, new, ancestors)
        if change is not None and change[1]:
            wrapper = MetadataWrapper(ancestors[0], unsafe_skip_copy=True)
            span = wrapper.resolve(PositionProvider)[change[0][0]]
            text = SourceText(source)
            found.append((text.offset(span.start.line - 1, span.start.column),
                          text.offset(span.end.line - 1, span.end.column)))
        return change

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(guards, "_keyword_change", spy)
        lint_source(source, str(path), settings)
    return sorted(set(found))


def starred_keywords(source: str) -> list[frozenset[str]]:
    """The keywords of each call that passes `**` arguments, in source order."""
    found = []
    walk(cst.parse_module(source), lambda node: found.append(frozenset(
        a.keyword.value for a in node.args if a.keyword is not None))
        if isinstance(node, cst.Call) and any(a.star == "**" for a in node.args) else None)
    return found


def keyword_cases():
    """Every fix in the rules' bad fixtures that adds a keyword to a call: derived from the
    fixtures, so that a rule whose fix starts adding keywords is covered without a table."""
    cases = []
    for rule in all_rules():
        for path in sorted(rule_folder(rule).glob("bad*.py")):
            if path.name.endswith(".fixed.py"):
                continue
            source = path.read_text(encoding="utf-8")
            for start, end in keyword_additions(source, path, settings_for(path, rule, source)):
                cases.append(pytest.param(rule, path, start, end, id=f"{rule.code}-{path.name}-{start}"))
    return cases


@pytest.mark.parametrize("rule, path, start, end", keyword_cases())
def test_no_keyword_is_added_beside_double_star_kwargs(rule, path, start, end):
    """The same call given `**opts` (which may carry the keyword already): no fix of the file adds
    a keyword to a call that passes `**`."""
    source = path.read_text(encoding="utf-8")
    call = cst.parse_expression(source[start:end])
    last = call.args[-1] if call.args else None
    separator = "" if last is None else " " if isinstance(last.comma, cst.Comma) else ", "
    closing = source.rindex(")", start, end)
    variant = source[:closing] + separator + "**opts" + source[closing:]
    settings = settings_for(path, rule, source)
    before = starred_keywords(variant)
    for diagnostic in lint_source(variant, str(path), settings):
        if diagnostic.fix is not None:
            after = starred_keywords(apply_edits(variant, list(diagnostic.fix.edits)))
            if len(after) == len(before):
                assert all(new <= old for new, old in zip(after, before)), diagnostic


def test_keyword_cases_cover_the_rules_that_add_keywords():
    assert {case.values[0].code for case in keyword_cases()} >= {
        "TL102", "TL201", "TL203", "TL301", "TL302", "TL401", "TL601", "TL602", "TL603", "TL701", "TL901"}


def test_non_blocking_is_not_added_beside_double_star_kwargs(tmp_path):
    source = SCRIPT.format(line="loader = DataLoader(dataset, batch_size=32, num_workers=4, pin_memory=True, "
                                "persistent_workers=True)").replace(
        "x = x.to(device, non_blocking=True)", "x = x.to(device, **opts)\n            y = y.to(device)")
    assert fixed_lines(tmp_path, source, "TL203") == {15: True}  # y: fixed; x: not even reported


class AddsFused(Rule):
    """## What it does\n\nA rule without guards of its own, to show the engine's."""

    code = "TL999"
    name = "adds-fused"
    kind = "performance"
    summary = "test rule"
    fix_applicability = "safe"
    triggers = ("Adam",)

    def visit_Call(self, node: cst.Call) -> None:
        if dotted_name(node.func) == "torch.optim.Adam" and keyword_arg(node, "fused") is None:
            new = set_keyword(node, "fused", cst.Name("True"))
            self.report(node, "no fused", self.fix("Pass fused=True", self.replace(node, new)))


class RewritesTrainerFlag(Rule):
    """## What it does\n\nReplaces an argument with text, and writes its fix from the end of the module."""

    code = "TL998"
    name = "rewrites-trainer-flag"
    kind = "migration"
    summary = "test rule"
    fix_applicability = "safe"
    triggers = ("Trainer",)

    def __init__(self, ctx):
        super().__init__(ctx)
        self.found: list[cst.Arg] = []

    def visit_Call(self, node: cst.Call) -> None:
        if dotted_name(node.func) == "Trainer":
            self.found += [a for a in node.args if a.keyword is not None and a.keyword.value == "gpus"]

    def leave_Module(self, original_node: cst.Module) -> None:
        for arg in self.found:  # far from the argument: the engine finds where it is
            self.report(arg, "gpus", self.fix("devices", self.replace(arg, f'accelerator="gpu", devices={1}')))


def engine_fixes(tmp_path, source: str, rule: type[Rule]) -> list[bool]:
    settings = resolve_settings(tmp_path, isolated=True, unsafe_fixes=True)
    return [d.fix is not None for d in lint_source(source, "t.py", settings, rules=(rule,))]


@pytest.mark.parametrize("source, fixed", [
    ("torch.optim.Adam(params)\n", True),
    ("torch.optim.Adam(params, **opts)\n", False),
    ("torch.optim.Adam(*groups, lr=0.1)\n", True),  # `*args` cannot hold a keyword
])
def test_the_engine_withholds_a_keyword_beside_double_star_whatever_the_rule(tmp_path, source, fixed):
    assert engine_fixes(tmp_path, source, AddsFused) == [fixed]


@pytest.mark.parametrize("source, fixed", [
    ("Trainer(gpus=1, max_epochs=3)\n", True),
    ("Trainer(gpus=1, **trainer_kwargs)\n", False),
    ("if args.devices > 1:\n    Trainer(gpus=args.devices)\n", False),
    ("if args.max_epochs > 1:\n    Trainer(gpus=1)\n", True),
])
def test_the_engine_guards_argument_edits_written_from_anywhere(tmp_path, source, fixed):
    assert engine_fixes(tmp_path, source, RewritesTrainerFlag) == [fixed]


# --- a fix inside a branch that tests the setting it changes --------------------------------------

@pytest.mark.parametrize("test", [
    "if args.fused:\n        pass\n    else:\n        ",
    "if not use_fused_adam:\n        ",
    "if cfg['fused'] is False:\n        ",
    "while not getattr(args, 'fused', False):\n        ",
])
def test_the_engine_withholds_a_fix_in_a_branch_testing_its_setting(tmp_path, test):
    source = "def main():\n    " + test + "torch.optim.Adam(params)\n"
    assert engine_fixes(tmp_path, source, AddsFused) == [False]
    unrelated = "def main():\n    " + test.replace("fused", "verbose") + "torch.optim.Adam(params)\n"
    assert engine_fixes(tmp_path, unrelated, AddsFused) == [True]


BRANCHES = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

device = torch.device("cuda")


def main():
    if args.use_bias:
        net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
    else:
        net = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8))
    model = net.to(device)
    if args.fused:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if cfg["persistent_workers"]:
        pass
    else:
        loader = DataLoader(dataset, batch_size=32, num_workers=4, pin_memory=True)
    for epoch in range(3):
        for x, y in loader:
            x = x.to(device) if not args.non_blocking else x.to(device, non_blocking=True)
            if args.set_to_none is False:
                optimizer.zero_grad(set_to_none=False)
            if device.type == "cuda":
                mask = torch.zeros(3).to(device)
            loss = model(x).sum()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("code, line", [
    ("TL401", 10),  # bias, under `if args.use_bias` (reported from the end of the file)
    ("TL302", 17),  # fused, in the else of `if args.fused`
    ("TL603", 21),  # persistent_workers, in the else of `if cfg["persistent_workers"]`
    ("TL203", 24),  # non_blocking, in the branch of `... if not args.non_blocking else ...`
    ("TL301", 26),  # set_to_none, under `if args.set_to_none is False`
])
def test_rules_fixes_are_withheld_in_a_branch_testing_their_setting(tmp_path, code, line):
    assert fixed_lines(tmp_path, BRANCHES, code).get(line) is False


def test_a_branch_on_another_setting_keeps_the_fix(tmp_path):
    # `if device.type == "cuda"`: the fix moves `device` into the factory, it does not change it
    assert fixed_lines(tmp_path, BRANCHES, "TL201") == {28: True}


def test_fix_all_leaves_every_guarded_branch_as_written(tmp_path):
    settings = resolve_settings(tmp_path, isolated=True, select=["ALL"], unsafe_fixes=True)
    fixed = fix_source(BRANCHES, "train.py", settings).source
    for kept in ("nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))\n", "AdamW(model.parameters(), lr=1e-3)\n",
                 "optimizer.zero_grad(set_to_none=False)", "x.to(device) if not args.non_blocking",
                 'num_workers=4, pin_memory=True)\n'):
        assert kept in fixed, kept
    assert 'mask = torch.zeros(3, device=device)' in fixed
    compile(fixed, "train.py", "exec")


# --- fallbacks for other versions are not "migrated" away -------------------------------------------

FALLBACKS = """\
import torch

try:
    from torch.amp import GradScaler
except ImportError:
    from torch.cuda.amp import GradScaler

try:
    scaler = torch.amp.GradScaler("cuda")
except AttributeError:
    scaler = torch.cuda.amp.GradScaler()

if TORCH_GREATER_EQUAL_2_3:
    scaler = torch.amp.GradScaler("cuda")
else:
    scaler = torch.cuda.amp.GradScaler()

amp_scaler = torch.cuda.amp.GradScaler() if not hasattr(torch, "amp") else torch.amp.GradScaler("cuda")

try:
    from apex import amp
    HAS_APEX = True
except ImportError:
    amp = None
    HAS_APEX = False

try:
    from torch.cuda.amp import autocast
except ImportError:
    autocast = None


def make_scaler():
    if TORCH_GREATER_EQUAL_2_4:
        return torch.amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()  # the other branch, without `else`


with torch.cuda.amp.autocast():
    pass
"""


def test_version_fallbacks_are_not_migrated(tmp_path):
    found = {(d.line + 1, d.code): d.fix is not None for code in ("TL701", "TL702")
             for d in diagnostics(tmp_path, FALLBACKS, code)}
    # only the unconditional old spelling at the end is migrated; the optional apex import is
    # reported once (issue 12's shape 8), with nothing to migrate it to automatically
    lines = FALLBACKS.splitlines()
    assert found == {(lines.index("with torch.cuda.amp.autocast():") + 1, "TL701"): True,
                     (lines.index("    from apex import amp") + 1, "TL702"): False}


def test_fix_keeps_every_fallback_chain(project):
    path = project / "train.py"
    path.write_text(FALLBACKS)
    result = run_torchlint("--fix", "--unsafe-fixes", "--select", "ALL", "--no-cache", "train.py", cwd=project)
    assert result.returncode in (0, 1), result.stderr
    fixed = path.read_text()
    head, tail = FALLBACKS.rsplit("\n\nwith ", 1)
    assert fixed.startswith(head), "a fallback chain was rewritten"
    assert re.search(r"with torch\.amp\.autocast\(\"cuda\"\):", fixed)
    compile(fixed, "train.py", "exec")
