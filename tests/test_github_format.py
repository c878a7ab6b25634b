"""`--format github`: GitHub Actions workflow commands, one annotation per finding, escaped the
way the Actions toolkit (@actions/core) escapes them."""

from __future__ import annotations

import nbformat
import pytest

from conftest import GUIDE_RULES_CONFIG, LEAK, run_torchlint
from torchlint.output import _escape_data, _escape_property


@pytest.fixture(autouse=True)
def guide_rules_only(project):
    (project / "pyproject.toml").write_text(GUIDE_RULES_CONFIG)


def test_annotation_per_finding(project):
    (project / "train.py").write_text(LEAK)
    (project / "broken.py").write_text("x = (\n")
    result = run_torchlint("--no-cache", "--format", "github", ".", cwd=project)
    assert result.returncode == 1
    lines = result.stdout.decode().splitlines()
    assert lines[1] == ("::warning file=train.py,line=7,col=5,endLine=7,endColumn=24,title=TL101 (retained-graph)::"
                        "`losses` appends `loss` with its autograd graph on every iteration, so memory grows each "
                        "step; use `loss.detach()`")
    assert lines[0].startswith("::error file=broken.py,line=1,col=5,") and "title=TL000 (syntax-error)::" in lines[0]
    assert len(lines) == 2


def test_properties_and_message_are_escaped(project):
    (project / "a,b:c.py").write_text(LEAK)
    out = run_torchlint("--no-cache", "--format", "github", ".", cwd=project).stdout.decode()
    assert out.startswith("::warning file=a%2Cb%3Ac.py,line=7,")


def test_escaping_follows_the_actions_toolkit():
    assert _escape_data("100% done\r\nnext: a,b") == "100%25 done%0D%0Anext: a,b"
    assert _escape_property("100% done\r\nnext: a,b") == "100%25 done%0D%0Anext%3A a%2Cb"


def test_notebook_findings_name_the_cell(project):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import torch"), nbformat.v4.new_code_cell("x = torch.ones(2).cuda()")]
    nbformat.write(nb, str(project / "nb.ipynb"))
    out = run_torchlint("--no-cache", "--format", "github", "nb.ipynb", cwd=project).stdout.decode()
    assert out.startswith("::warning file=nb.ipynb,title=TL201 (move-after-create)::cell 2, line 1, column 5: ")


def test_clean_run_prints_nothing(project):
    (project / "ok.py").write_text("x = 1\n")
    result = run_torchlint("--no-cache", "--format", "github", ".", cwd=project)
    assert result.returncode == 0 and result.stdout == b""
