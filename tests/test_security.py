"""Security: linting and fixing never run or import the linted code (nor torch); configuration
and data tables are read with YAML's safe loader; `verify`, the one command that runs code, runs
only the script named, in a temporary copy of its folder."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import LEAK, ROOT, run_torchlint
from harness_helpers import with_no_measured_change

# Modules torchlint imports (or Python might) that a project could shadow with a file of its own.
SHADOWED = ("torch", "click", "yaml", "libcst", "json", "re", "difflib", "hashlib", "tomllib", "fnmatch", "bisect",
            "tempfile", "codecs", "tokenize", "ast", "warnings", "dataclasses", "typing", "enum", "functools",
            "sitecustomize", "usercustomize", "pygls", "nbformat")
TRAIN = LEAK + "x = torch.zeros(3).cuda()\nmodel = torch.nn.DataParallel(model)\n"


def plant(folder: Path, name: str) -> None:
    """A module that leaves a marker file, then fails, if it is ever imported or run."""
    marker = folder / f"RAN_{name.replace('/', '_')}"
    (folder / name).write_text(f"open({str(marker)!r}, 'w').write('ran')\nraise SystemExit('ran {name}')\n")


def markers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("RAN_*"))


@pytest.fixture
def booby_trapped(project):
    """A project whose every module, and every file named like a module torchlint uses, would
    leave a marker if run."""
    for name in SHADOWED:
        plant(project, f"{name}.py")
    plant(project, "setup.py")
    plant(project, "conftest.py")
    (project / "pkg").mkdir()
    plant(project, "pkg/__init__.py")
    (project / "train.py").write_text("import pkg\nimport setup\nopen('RAN_train', 'w')\n" + TRAIN)
    notebook = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                           "source": ["import torch\n", "open('RAN_notebook', 'w')\n", "x = torch.zeros(3).cuda()\n"]}],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (project / "explore.ipynb").write_text(json.dumps(notebook))
    return project


@pytest.mark.parametrize("how", ["python -m torchlint", "torchlint"])
def test_linting_and_fixing_never_run_the_linted_code(booby_trapped, how):
    if how == "torchlint":
        script = Path(sys.executable).with_name("torchlint")
        if not script.exists():
            pytest.skip("no `torchlint` console script beside this interpreter")
        command = lambda *args: subprocess.run([str(script), *args], cwd=booby_trapped, capture_output=True)  # noqa: E731
    else:
        command = lambda *args: run_torchlint(*args, cwd=booby_trapped)  # noqa: E731
    for args in (["--no-cache", "--select", "ALL", "."], ["--fix", "--unsafe-fixes", "--select", "ALL", "."],
                 ["--format", "json", "--select", "ALL", "."]):
        result = command(*args)
        assert result.returncode in (0, 1), result.stderr.decode()
        assert markers(booby_trapped) == [], (args, result.stderr.decode())
    assert "loss.detach()" in (booby_trapped / "train.py").read_text()  # it did lint and fix


def test_the_linter_never_imports_torch(booby_trapped):
    # torch is installed here: an import of it anywhere in a lint would show in sys.modules
    code = ("import sys\nsys.path.pop(0)  # `-c` put the project first\nfrom torchlint.cli import main\ntry:\n    main(['--no-cache', '--select', 'ALL', '.'])\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=booby_trapped, capture_output=True)
    assert result.stdout.decode().splitlines()[-1] == "[]", result.stderr.decode()


UNSAFE_YAML = "select: !!python/object/apply:os.system ['touch {marker}']\n"


@pytest.mark.parametrize("name", ["torchlint.yaml", ".torchlint.yaml", "--config"])
def test_yaml_that_would_build_python_objects_is_refused(project, name):
    marker = project / "RAN_yaml"
    config = project / ("custom.yaml" if name == "--config" else name)
    config.write_text(UNSAFE_YAML.format(marker=marker))
    (project / "train.py").write_text(TRAIN)
    result = run_torchlint("--no-cache", *(["--config", config.name] if name == "--config" else []), "train.py",
                           cwd=project)
    assert result.returncode == 2
    shown = config.name if name == "--config" else config
    assert result.stderr.decode().splitlines() == [
        f"torchlint: error: {shown}:1:9: cannot read YAML: could not determine a constructor for the tag "
        "'tag:yaml.org,2002:python/object/apply:os.system' (tags that build Python objects are refused)"]
    assert not marker.exists()


def test_every_yaml_read_in_the_package_is_safe():
    """Configuration and the rules' data tables: `yaml.safe_load`, never `yaml.load` and friends."""
    unsafe = re.compile(r"yaml\.(load|load_all|unsafe_load|full_load|full_load_all|unsafe_load_all)\(|Loader\s*=")
    found = [f"{path.relative_to(ROOT)}:{number}" for folder in ("torchlint", "rules")
             for path in sorted((ROOT / folder).rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if unsafe.search(line)]
    assert found == []
    readers = [path.name for folder in ("torchlint", "rules") for path in (ROOT / folder).rglob("*.py")
               if "yaml.safe_load(" in path.read_text(encoding="utf-8")]
    assert readers, "no YAML reader found: has the way YAML is read changed? Check it is still safe."
    # the data tables' fast path: libyaml's loader, with the safe constructor only
    assert not issubclass(yaml.CSafeLoader, yaml.constructor.FullConstructor)
    assert issubclass(yaml.CSafeLoader, yaml.constructor.SafeConstructor)


VERIFIED = """\
import os

import torch

with open(os.environ["VERIFY_LOG"], "a") as log:
    log.write(os.getcwd() + "\\n")
open("written_by_the_script.txt", "w").write("a relative path lands in the copy")
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
inputs, targets = torch.randn(64, 4), torch.randn(64, 1)
losses = []
for step in range(200):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    losses.append(loss)
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="verify runs training and needs torch")
def test_verify_runs_only_the_named_script_in_a_temporary_copy(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from torchlint.harness.cli import verify

    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "train.py").write_text(VERIFIED)
    plant(folder, "other.py")
    plant(folder, "helpers.py")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    log = tmp_path / "cwd.log"
    monkeypatch.setenv("VERIFY_LOG", str(log))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with_no_measured_change(monkeypatch)  # no fix measures slower: nothing runs again, whatever the load
    result = CliRunner().invoke(verify, ["--steps", "20", "--device", "cpu", str(folder / "train.py")])
    assert result.exit_code == 0, result.output
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing written, nothing fixed here
    assert markers(tmp_path) == []  # other.py and helpers.py never ran
    runs = log.read_text().splitlines()
    # the original and the fixed script, each once (with measures made equal, nothing runs again)
    names = [Path(cwd).name for cwd in runs]
    assert names == ["original", "fixed"], runs
    assert all(Path(cwd) != folder and not Path(cwd).exists() for cwd in runs), runs
