"""The pre-commit hooks, through the real `pre-commit try-repo` on a scratch repository."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is needed")

LEAK = "import torch\n\nlosses = []\nfor x in loader:\n    loss = model(x)\n    loss.backward()\n    losses.append(loss)\n"


def _pre_commit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pre_commit", *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    pytest.importorskip("pre_commit")
    repo = tmp_path_factory.mktemp("scratch")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "train.py").write_text(LEAK)
    subprocess.run(["git", "add", "train.py"], cwd=repo, check=True)
    return repo


def test_check_hook_fails_on_findings(scratch):
    result = _pre_commit("try-repo", str(ROOT), "torchlint", "--all-files", cwd=scratch)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "TL101" in result.stdout
    assert (scratch / "train.py").read_text() == LEAK


def test_fix_hook_rewrites_the_file(scratch):
    result = _pre_commit("try-repo", str(ROOT), "torchlint-fix", "--all-files", cwd=scratch)
    # pre-commit fails a hook that modified files, even when nothing is left to report
    assert result.returncode == 1, result.stdout + result.stderr
    assert "files were modified by this hook" in result.stdout
    assert (scratch / "train.py").read_text() == LEAK.replace("losses.append(loss)", "losses.append(loss.detach())")
    again = _pre_commit("try-repo", str(ROOT), "torchlint", "--all-files", cwd=scratch)
    assert again.returncode == 0, again.stdout
