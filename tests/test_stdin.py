"""`--stdin-filename NAME -`: an editor's buffer, linted as if it were the file NAME."""

from __future__ import annotations

import json

import pytest

from conftest import GUIDE_RULES_CONFIG, run_torchlint

SOURCE = "import torch\nimport torch.nn as nn\n\nx = torch.zeros(3).cuda()\nm = nn.DataParallel(net)\n"
FIXED = SOURCE.replace("torch.zeros(3).cuda()", 'torch.zeros(3, device="cuda")')


@pytest.fixture(autouse=True)
def guide_rules_only(project):
    (project / "pyproject.toml").write_text(GUIDE_RULES_CONFIG)


def codes(result) -> list[str]:
    return [d["code"] for entry in json.loads(result.stdout) for d in entry["diagnostics"]]


def test_config_of_the_names_folder_even_for_a_new_file(project):
    (project / "sub").mkdir()
    (project / "sub" / "torchlint.yaml").write_text("select: [TL5]\n")
    for name in ("sub/new.py", "sub/deeper/new.py"):  # neither exists on disk
        result = run_torchlint("--format", "json", "--stdin-filename", name, "-", cwd=project, input=SOURCE)
        assert codes(result) == ["TL501"], name
        assert json.loads(result.stdout)[0]["path"] == name
    result = run_torchlint("--format", "json", "--stdin-filename", "top.py", "-", cwd=project, input=SOURCE)
    assert codes(result) == ["TL201", "TL501"]


def test_per_file_ignores_match_the_name(project):
    (project / "pyproject.toml").write_text(GUIDE_RULES_CONFIG + "per-file-ignores = { 'scripts/*.py' = ['TL2'] }\n")
    ignored = run_torchlint("--format", "json", "--stdin-filename", "scripts/run.py", "-", cwd=project, input=SOURCE)
    assert codes(ignored) == ["TL501"]
    kept = run_torchlint("--format", "json", "--stdin-filename", "train.py", "-", cwd=project, input=SOURCE)
    assert codes(kept) == ["TL201", "TL501"]


def test_fix_prints_the_fixed_buffer_and_reports_on_stderr(project):
    result = run_torchlint("--fix", "--stdin-filename", "train.py", "-", cwd=project, input=SOURCE)
    assert result.stdout.decode() == FIXED
    assert "TL501" in result.stderr.decode() and "1 fixed, 1 remaining" in result.stderr.decode()
    assert result.returncode == 1  # TL501 (unsafe) remains
    assert not (project / "train.py").exists()  # nothing is written


def test_fix_of_a_clean_buffer_echoes_it_and_exits_0(project):
    result = run_torchlint("--fix", "--stdin-filename", "train.py", "-", cwd=project, input=FIXED.replace(
        "m = nn.DataParallel(net)\n", ""))
    assert result.returncode == 0
    assert result.stdout.decode() == FIXED.replace("m = nn.DataParallel(net)\n", "")
