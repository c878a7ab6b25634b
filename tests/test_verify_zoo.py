"""The verify zoo (bench/zoo/): real public training scripts, each with its source, commit, license
and changes in a header; two of them run end to end under `torchlint verify --each` here, and
every safe fix of theirs must keep the loss trajectory."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
ZOO = ROOT / "bench" / "zoo"
sys.path.insert(0, str(ROOT / "bench"))
import verify_zoo  # noqa: E402

HEADER_FIELDS = ("# Source: https://github.com/", "# Commit: ", "# License: ")


@pytest.mark.parametrize("entry", verify_zoo.SCRIPTS, ids=lambda entry: entry.name)
def test_every_zoo_script_says_where_it_comes_from(entry):
    script = ZOO / entry.name / entry.script
    head = script.read_text(encoding="utf-8").splitlines()[:6]
    for field in HEADER_FIELDS:
        assert any(line.startswith(field) for line in head), (script, field)
    assert any("Changes" in line for line in script.read_text(encoding="utf-8").splitlines()[:12]), script


def test_the_zoo_has_the_kinds_of_script_the_issue_asks_for():
    assert len(verify_zoo.SCRIPTS) >= 10
    kinds = " ".join(entry.kind for entry in verify_zoo.SCRIPTS)
    for kind in ("CNN", "ResNet", "GAN", "VAE", "language model", "GPT", "policy gradient", "Lightning", "DDP",
                 "AMP"):
        assert kind in kinds, kind


needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="the harness runs training scripts and needs torch (the `test` extra)")

CI_SCRIPTS = {"resnet_cifar": 4, "nanogpt_ddp": 4}  # name -> optimizer steps


@needs_torch
@pytest.mark.parametrize("name", list(CI_SCRIPTS))
def test_zoo_script_end_to_end_with_every_safe_fix_on_its_own(name, monkeypatch):
    from torchlint.harness.cli import verify

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    entry = next(entry for entry in verify_zoo.SCRIPTS if entry.name == name)
    result = CliRunner().invoke(verify, ["--format", "json", "--each", "--steps", str(CI_SCRIPTS[name]),
                                         str(ZOO / entry.name / entry.script), "--", *entry.args],
                                catch_exceptions=False)
    report = json.loads(result.stdout)
    assert (result.exit_code, report["verdict"]) == (0, "pass"), report["reasons"]
    assert report["runs"]["original"]["steps"] == CI_SCRIPTS[name]
    assert report["per_fix"] and len(report["per_fix"]) == len(report["fixes"])
    for entry in report["per_fix"]:
        assert entry["applicability"] == "safe" and entry["verdict"] == "pass", entry
        assert entry["loss_max_rel_diff"] <= 1e-5
