"""Jupyter notebooks: found, linted cell by cell as one module, IPython syntax skipped, fixed in
place with everything but the changed cells' `source` kept byte for byte."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import nbformat
import pytest

from conftest import GUIDE_RULES_CONFIG, ROOT, run_torchlint
from torchlint.notebook import mask_ipython

IMPORTS = "%matplotlib inline\nimport torch\nimport torch.nn as nn"
SHELL = "!pip install torch\nfiles = !ls\ntorch.zeros?\n?torch.ones"
LOOP = ("losses = []\nfor x, y in loader:\n    loss = criterion(model(x), y)\n    loss.backward()\n"
        "    %time opt.step()\n    losses.append(loss)")
BASH = "%%bash\nfor f in *; do echo $f; done"
MODEL = "model = nn.DataParallel(nn.Linear(2, 2))\nx = torch.zeros(3).cuda()  # é 😀"


@pytest.fixture(autouse=True)
def guide_rules_only(project):
    (project / "pyproject.toml").write_text(GUIDE_RULES_CONFIG)


def notebook(*cells, language: str = "python") -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": language, "display_name": "Python 3"}
    nb.metadata["language_info"] = {"name": language, "version": "3.11.7"}
    for index, cell in enumerate(cells):
        if cell.startswith("# "):
            nb.cells.append(nbformat.v4.new_markdown_cell(cell))
        else:
            code = nbformat.v4.new_code_cell(cell, execution_count=index)
            code.outputs = [nbformat.v4.new_output("stream", text=f"output of cell {index} ✓\n")]
            nb.cells.append(code)
    for index, cell in enumerate(nb.cells):
        cell.id = f"cell-{index}"  # deterministic ids
    return nb


def write(path, nb) -> bytes:
    nbformat.write(nb, str(path))
    return path.read_bytes()


def json_report(project, *args):
    result = run_torchlint("--no-cache", "--format", "json", *args, cwd=project)
    return result, {entry["path"]: entry["diagnostics"] for entry in json.loads(result.stdout)}


def test_cells_are_linted_as_one_module_and_report_their_own_cell(project):
    write(project / "train.ipynb", notebook("# Training ✨", IMPORTS, SHELL, LOOP, BASH, MODEL))
    result, found = json_report(project, ".")
    assert result.returncode == 1, result.stderr
    diagnostics = found["train.ipynb"]
    # No TL000: magics, shell escapes, help lines and the %%bash cell are skipped.
    assert [(d["code"], d["data"]["cell"], d["range"]["start"]) for d in diagnostics] == [
        ("TL101", 3, {"line": 5, "character": 4}),
        ("TL501", 5, {"line": 0, "character": 8}),  # `nn` is imported in cell 1
        ("TL201", 5, {"line": 1, "character": 4}),
    ]
    text = run_torchlint("--no-cache", "train.ipynb", cwd=project).stdout.decode()
    assert "train.ipynb:cell 4:6:5: TL101 [*]" in text


def test_an_import_in_another_cell_is_what_resolves_the_name(project):
    write(project / "with.ipynb", notebook("import torch.nn as nn", "# text", "m = nn.DataParallel(net)"))
    write(project / "without.ipynb", notebook("import torch", "# text", "m = nn.DataParallel(net)"))
    _, found = json_report(project, ".")
    assert list(found) == ["with.ipynb"]
    assert found["with.ipynb"][0]["data"]["cell"] == 2


def test_utf16_columns_and_fix_edits_are_relative_to_the_cell(project):
    write(project / "nb.ipynb", notebook("import torch", "x = '😀'; y = torch.zeros(3).cuda()"))
    _, found = json_report(project, "nb.ipynb")
    (diag,) = found["nb.ipynb"]
    assert diag["data"]["cell"] == 1
    assert diag["range"]["start"] == {"line": 0, "character": len("x = '😀'; y = ") + 1}
    (edit,) = diag["data"]["fix"]["edits"]
    assert edit["range"]["start"] == diag["range"]["start"] and "cell" not in edit


def test_fix_rewrites_only_the_changed_source_byte_for_byte(project):
    path = project / "train.ipynb"
    original = write(path, notebook("# Training ✨", IMPORTS, SHELL, LOOP, BASH, MODEL)).decode()
    result = run_torchlint("--fix", "train.ipynb", cwd=project)
    assert result.returncode == 1, result.stderr  # TL501 (unsafe) remains
    assert "2 fixed, 1 remaining" in result.stdout.decode()
    expected = original.replace('"    losses.append(loss)"', '"    losses.append(loss.detach())"').replace(
        '"x = torch.zeros(3).cuda()  # é 😀"', '"x = torch.zeros(3, device=\\"cuda\\")  # é 😀"')
    assert expected != original
    assert path.read_text(encoding="utf-8") == expected
    fixed = nbformat.read(str(path), as_version=4)
    nbformat.validate(fixed)
    assert fixed.cells[3].source.splitlines()[4] == "    %time opt.step()"  # the magic is back as it was


def test_fix_keeps_a_foreign_json_style(project):
    """Indent 2, keys not sorted, `source` as one string, ASCII escapes: kept as they were."""
    data = {"nbformat": 4, "nbformat_minor": 5,
            "metadata": {"language_info": {"name": "python"}, "title": "caf\u00e9"},
            "cells": [{"cell_type": "code", "id": "a", "metadata": {}, "execution_count": None, "outputs": [],
                       "source": "import torch\n!nvidia-smi\nx = torch.ones(2).cuda()\n"}]}
    path = project / "foreign.ipynb"
    original = json.dumps(data, indent=2, ensure_ascii=True)
    path.write_text(original, encoding="utf-8")
    assert run_torchlint("--fix", "foreign.ipynb", cwd=project).returncode == 0
    assert path.read_text(encoding="utf-8") == original.replace(
        "torch.ones(2).cuda()", 'torch.ones(2, device=\\"cuda\\")')


@pytest.mark.parametrize("style", ["crlf", "compact"])
def test_fix_keeps_crlf_lines_and_compact_separators_byte_for_byte(project, style):
    """Issue 17: a CRLF notebook's edited cell came back with LF lines, and a compact-JSON notebook's
    edited `source` with `", "` separators."""
    nb = notebook(IMPORTS, LOOP, MODEL)
    original = (nbformat.writes(nb).replace("\n", "\r\n") if style == "crlf"
                else json.dumps(json.loads(nbformat.writes(nb)), separators=(",", ":"), ensure_ascii=False))
    path = project / "train.ipynb"
    path.write_bytes(original.encode("utf-8"))
    run_torchlint("--fix", "train.ipynb", cwd=project)
    expected = original.replace('"    losses.append(loss)"', '"    losses.append(loss.detach())"').replace(
        '"x = torch.zeros(3).cuda()  # é 😀"', '"x = torch.zeros(3, device=\\"cuda\\")  # é 😀"')
    assert expected != original
    assert path.read_bytes().decode("utf-8") == expected


def test_unsafe_fix_across_cells_writes_a_valid_notebook(project):
    path = project / "dp.ipynb"
    training = "model = nn.DataParallel(nn.Linear(2, 2))\nfor x in batches:\n    model(x).sum().backward()"
    write(path, notebook("import torch\nimport torch.nn as nn", "# Model", training))
    _, found = json_report(project, "dp.ipynb")
    edits = found["dp.ipynb"][0]["data"]["fix"]["edits"]
    assert [e.get("cell") for e in edits] == [0, 0, None, None]  # the imports it needs go to cell 0
    result = run_torchlint("--fix", "--unsafe-fixes", "dp.ipynb", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    fixed = nbformat.read(str(path), as_version=4)
    nbformat.validate(fixed)
    assert fixed.cells[0].source.startswith("import os\n\nimport torch\nimport torch.nn as nn\n"
                                            "import torch.distributed as dist\n")
    assert not fixed.cells[0].source.endswith("\n")  # the cell had no trailing newline, and gets none
    assert fixed.cells[2].source.startswith("if not dist.is_initialized()")  # the process group, then DDP
    assert fixed.cells[2].source.endswith(training.replace(
        "nn.DataParallel(nn.Linear(2, 2))",
        "DistributedDataParallel(nn.Linear(2, 2).to(gpu), device_ids=None if gpu is None else [gpu])"))
    assert run_torchlint("--no-cache", "--select", "TL5", "dp.ipynb", cwd=project).returncode == 0


def test_diff_shows_cells_and_writes_nothing(project):
    path = project / "nb.ipynb"
    original = write(path, notebook("import torch", "x = torch.zeros(3).cuda()"))
    result = run_torchlint("--diff", "nb.ipynb", cwd=project)
    assert result.returncode == 1
    out = result.stdout.decode()
    assert "--- nb.ipynb:cell 2" in out and '+x = torch.zeros(3, device="cuda")' in out
    assert path.read_bytes() == original


def test_noqa_inside_a_cell(project):
    write(project / "nb.ipynb", notebook("import torch", "x = torch.zeros(3).cuda()  # noqa: TL201",
                                         "y = torch.ones(2).cuda()"))
    _, found = json_report(project, "nb.ipynb")
    assert [(d["code"], d["data"]["cell"]) for d in found["nb.ipynb"]] == [("TL201", 2)]


def test_a_syntax_error_is_reported_in_its_cell(project):
    write(project / "nb.ipynb", notebook("import torch", "# notes", "x = 1\ndef broken(:\n    pass"))
    _, found = json_report(project, "nb.ipynb")
    (diag,) = found["nb.ipynb"]
    assert (diag["code"], diag["data"]["cell"], diag["range"]["start"]["line"]) == ("TL000", 2, 1)


def test_broken_and_foreign_notebooks(project):
    (project / "broken.ipynb").write_text('{"cells": [\n  {"cell_type": }\n]}')
    write(project / "r.ipynb", notebook("x <- torch$zeros(3)$cuda()", language="R"))
    (project / "ok.py").write_text("import torch\nx = torch.zeros(3).cuda()\n")
    result, found = json_report(project, ".")
    assert result.returncode == 1
    assert sorted(found) == ["broken.ipynb", "ok.py"]
    (diag,) = found["broken.ipynb"]
    assert diag["code"] == "TL000" and "not valid JSON" in diag["message"]
    assert diag["range"]["start"] == {"line": 1, "character": 16} and diag["data"]["cell"] is None


def test_checkpoints_folder_is_not_linted(project):
    (project / ".ipynb_checkpoints").mkdir()
    write(project / ".ipynb_checkpoints" / "nb-checkpoint.ipynb", notebook("import torch\nx = torch.zeros(3).cuda()"))
    assert run_torchlint("--no-cache", ".", cwd=project).returncode == 0


def test_stdin_notebook_with_fix_prints_the_fixed_notebook(project):
    source = nbformat.writes(notebook("import torch", "x = torch.zeros(3).cuda()")) + "\n"
    result = run_torchlint("--fix", "--stdin-filename", "nb.ipynb", "-", cwd=project, input=source)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == source.replace("torch.zeros(3).cuda()", 'torch.zeros(3, device=\\"cuda\\")')


@pytest.mark.parametrize("source, masked_lines", [
    ("%time f()\nfor i in r:\n    !echo hi\n    obj?\n", [0, 2, 3]),
    ("files = !ls\nx = %env HOME\n??torch.zeros\n", [0, 1, 2]),
    ("!pip install \\\n    torch\nx = 1\n", [0, 1]),
    ("x = (a\n     % b)\n", []),  # a modulo on a continuation line is Python
    ('s = """\nwhat?\n!x\n"""\n', []),  # inside a string
    ("x = 1  # what?\n", []),
    ("%%time\nx = 1\n", [0]),
])
def test_ipython_lines_are_masked_with_same_length_python(source, masked_lines):
    masked, original = mask_ipython(source)
    assert sorted(original) == masked_lines
    assert [len(line) for line in masked.splitlines()] == [len(line) for line in source.splitlines()]
    compile(masked, "<cell>", "exec")


def test_a_cell_magic_that_is_not_python_skips_the_cell():
    assert mask_ipython("%%bash\nls -l\n") is None
    assert mask_ipython("%%writefile x.py\nimport torch\n") is None


@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed")
def test_pre_commit_hook_checks_notebooks(tmp_path):
    """The hooks' `types_or` takes jupyter files. try-repo sees only committed files, so the hook
    comes from a snapshot of the working tree as it is now."""
    pytest.importorskip("pre_commit")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    snapshot = tmp_path / "torchlint"
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, snapshot / name)
    subprocess.run([*git, "init", "-q"], cwd=snapshot, check=True)
    subprocess.run([*git, "add", "-A"], cwd=snapshot, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "snapshot"], cwd=snapshot, check=True)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    subprocess.run([*git, "init", "-q"], cwd=scratch, check=True)
    write(scratch / "train.ipynb", notebook("import torch", "x = torch.zeros(3).cuda()"))
    subprocess.run([*git, "add", "train.ipynb"], cwd=scratch, check=True)
    result = subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(snapshot), "torchlint", "--all-files"],
                            cwd=scratch, capture_output=True, text=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "train.ipynb:cell 2:1:5: TL201" in result.stdout
