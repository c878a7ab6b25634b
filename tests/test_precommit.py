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


def _readme_pre_commit_config() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## pre-commit", 1)[1]
    return section.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_the_readmes_pre_commit_config_runs_at_its_rev(scratch, tmp_path):
    """The README's `rev` is a commit of this repository that pre-commit can install the hooks
    from (no tag that does not exist): its config, with this clone standing in for GitHub."""
    import re

    config = _readme_pre_commit_config()
    rev = re.search(r"rev: (\S+)", config).group(1)
    assert re.fullmatch(r"[0-9a-f]{40}", rev), f"`rev: {rev}` is not a commit"
    known = subprocess.run(["git", "cat-file", "-e", f"{rev}:.pre-commit-hooks.yaml"], cwd=ROOT, capture_output=True)
    if known.returncode != 0 and (ROOT / ".git").exists():
        shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True)
        if shallow.stdout.strip() == "true":
            pytest.skip("a shallow clone does not hold the README's commit")
    assert known.returncode == 0, f"the README's rev {rev} is not a commit of this repository with the hooks"
    project = tmp_path / "project"
    shutil.copytree(scratch, project)
    (project / "train.py").write_text(LEAK)  # as the other tests left it, it may be fixed already
    (project / ".pre-commit-config.yaml").write_text(config.replace("https://github.com/torchlint/torchlint", str(ROOT)))
    result = _pre_commit("run", "--all-files", cwd=project)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "train.py:7:5: TL101" in result.stdout
