"""The command line as a user meets it: exit codes, formats, fixes, config, suppression."""

from __future__ import annotations

import json
import os
import stat

import pytest

from conftest import LEAK, LEAK_FIXED, ROOT, run_torchlint

DATA_PARALLEL = "import torch.nn as nn\n\nmodel = nn.DataParallel(nn.Linear(2, 2))\nfor x in batches:\n    model(x).sum().backward()\n"


def test_check_reports_and_exits_1(project):
    (project / "train.py").write_text(LEAK)
    result = run_torchlint("train.py", "--no-cache", cwd=project)
    assert result.returncode == 1
    out = result.stdout.decode()
    assert "train.py:7:5: TL101 [*]" in out
    assert "Found 1 error." in out
    assert "[*] 1 fixable with the `--fix` option." in out


def test_clean_file_exits_0(project):
    (project / "ok.py").write_text("import torch\nx = torch.zeros(3, device='cuda')\n")
    result = run_torchlint("ok.py", cwd=project)
    assert result.returncode == 0
    assert "All checks passed!" in result.stdout.decode()


def test_default_command_is_check_and_fix_writes(project):
    (project / "train.py").write_text(LEAK)
    result = run_torchlint("--fix", ".", cwd=project)
    assert result.returncode == 0, result.stderr
    assert (project / "train.py").read_text() == LEAK_FIXED
    assert "1 fixed, 0 remaining" in result.stdout.decode()


def test_unsafe_fixes_need_the_flag(project):
    (project / "dp.py").write_text(DATA_PARALLEL)
    result = run_torchlint("--fix", "dp.py", cwd=project)
    assert result.returncode == 1
    assert (project / "dp.py").read_text() == DATA_PARALLEL
    assert "1 hidden fix can be enabled with the `--unsafe-fixes` option" in result.stdout.decode()
    result = run_torchlint("--fix", "--unsafe-fixes", "--select", "TL501", "dp.py", cwd=project)
    assert result.returncode == 0
    assert "DistributedDataParallel(nn.Linear(2, 2).to(gpu), device_ids=None if gpu is None else [gpu])" \
        in (project / "dp.py").read_text()


def test_diff_does_not_write(project):
    (project / "train.py").write_text(LEAK)
    result = run_torchlint("--diff", "train.py", cwd=project)
    assert result.returncode == 1
    assert "+    losses.append(loss.detach())" in result.stdout.decode()
    assert (project / "train.py").read_text() == LEAK


def test_fix_keeps_crlf_bom_and_mode(project):
    path = project / "train.py"
    path.write_bytes(b"\xef\xbb\xbf" + LEAK.replace("\n", "\r\n").encode())
    path.chmod(0o754)
    assert run_torchlint("--fix", "train.py", cwd=project).returncode == 0
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf")
    assert data[3:].decode() == LEAK_FIXED.replace("\n", "\r\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o754


def test_select_ignore_by_code_prefix_and_name(project):
    (project / "train.py").write_text(LEAK + DATA_PARALLEL)
    codes = lambda *args: sorted({d["code"] for f in json.loads(run_torchlint(  # noqa: E731
        "--format", "json", "--no-cache", *args, "train.py", cwd=project).stdout) for d in f["diagnostics"]})
    assert codes() == ["TL101", "TL501"]
    assert codes("--select", "TL1") == ["TL101"]
    assert codes("--select", "data-parallel") == ["TL501"]
    assert codes("--ignore", "TL501") == ["TL101"]
    assert codes("--select", "TL101", "--extend-select", "TL5") == ["TL101", "TL501"]
    assert codes("--select", "ALL", "--ignore", "retained-graph,TL501") == []


def test_unknown_selector_is_a_usage_error(project):
    (project / "a.py").write_text("x = 1\n")
    result = run_torchlint("--select", "TL999", "a.py", cwd=project)
    assert result.returncode == 2
    assert "unknown rule selector `TL999`" in result.stderr.decode()


def test_missing_path_exits_2_and_names_it(project):
    result = run_torchlint("nope.py", cwd=project)
    assert result.returncode == 2
    assert "nope.py: no such file or directory" in result.stderr.decode()
    assert "Traceback" not in result.stderr.decode()


def test_unreadable_path_is_not_all_checks_passed(project):
    (project / "ok.py").write_text("x = 1\n")
    (project / "train.py").write_text(LEAK)
    result = run_torchlint("--no-cache", "ok.py", "nope.py", cwd=project)
    assert result.returncode == 2
    assert result.stdout.decode() == "Could not check 1 path (see the error above).\n"
    # with findings too, the summary counts them and still says that a path was not checked
    result = run_torchlint("--no-cache", "train.py", "nope.py", "gone.py", cwd=project)
    assert result.returncode == 2
    assert result.stdout.decode().splitlines()[-3:] == [
        "Found 1 error.", "Could not check 2 paths (see the errors above).",
        "[*] 1 fixable with the `--fix` option."]


def test_syntax_error_is_tl000_and_other_files_still_checked(project):
    (project / "broken.py").write_text("import torch\ndef f(:\n    pass\n")
    (project / "train.py").write_text(LEAK)
    result = run_torchlint("--fix", ".", cwd=project)
    out = result.stdout.decode()
    assert result.returncode == 1
    assert "broken.py:2:" in out and "TL000" in out
    assert (project / "broken.py").read_text() == "import torch\ndef f(:\n    pass\n"
    assert (project / "train.py").read_text() == LEAK_FIXED


def test_exit_zero(project):
    (project / "train.py").write_text(LEAK)
    assert run_torchlint("--exit-zero", "train.py", cwd=project).returncode == 0


def test_statistics(project):
    (project / "train.py").write_text(LEAK + DATA_PARALLEL)
    out = run_torchlint("--statistics", "--no-cache", "train.py", cwd=project).stdout.decode()
    assert "1\tTL101\t[*] retained-graph" in out
    assert "1\tTL501\t[ ] data-parallel" in out


def test_noqa_and_skip_file(project):
    (project / "a.py").write_text(LEAK.replace("losses.append(loss)", "losses.append(loss)  # noqa: TL101"))
    (project / "b.py").write_text(LEAK.replace("losses.append(loss)", "losses.append(loss)  # noqa"))
    (project / "c.py").write_text(LEAK.replace("losses.append(loss)", "losses.append(loss)  # noqa: TL201"))
    (project / "d.py").write_text("# torchlint: skip-file\n" + LEAK)
    (project / "e.py").write_text(DATA_PARALLEL.replace(
        "nn.DataParallel(nn.Linear(2, 2))", "nn.DataParallel(\n    nn.Linear(2, 2),\n)  # noqa: TL501"))
    result = run_torchlint("--format", "json", "--no-cache", ".", cwd=project)
    paths = [f["path"] for f in json.loads(result.stdout)]
    assert paths == ["c.py"]


def test_config_in_pyproject(project):
    (project / "pyproject.toml").write_text("[tool.torchlint]\nselect = ['TL5']\n")
    (project / "train.py").write_text(LEAK + DATA_PARALLEL)
    out = run_torchlint("--no-cache", "train.py", cwd=project).stdout.decode()
    assert "TL501" in out and "TL101" not in out


def test_config_yaml_and_per_file_ignores(project):
    (project / "torchlint.yaml").write_text("per-file-ignores:\n  'scripts/*.py': [TL101]\n")
    (project / "scripts").mkdir()
    (project / "scripts" / "t.py").write_text(LEAK)
    (project / "t.py").write_text(LEAK)
    result = run_torchlint("--format", "json", "--no-cache", ".", cwd=project)
    assert [f["path"] for f in json.loads(result.stdout)] == ["t.py"]


def test_unknown_config_key_names_key_and_file(project):
    (project / "pyproject.toml").write_text("[tool.torchlint]\nselekt = ['TL1']\n")
    (project / "a.py").write_text("x = 1\n")
    result = run_torchlint("a.py", cwd=project)
    assert result.returncode == 2
    err = result.stderr.decode()
    assert "pyproject.toml" in err and "unknown key `selekt`" in err


def test_bad_config_value(project):
    (project / ".torchlint.yaml").write_text("target-torch: banana\n")
    (project / "a.py").write_text("x = 1\n")
    result = run_torchlint("a.py", cwd=project)
    assert result.returncode == 2
    assert ".torchlint.yaml" in result.stderr.decode() and "target-torch" in result.stderr.decode()


def test_target_torch_from_project_requirement(project):
    (project / "pyproject.toml").write_text("[project]\nname='x'\ndependencies = ['torch>=1.13']\n")
    (project / "t.py").write_text("for b in loader:\n    opt.zero_grad()\n    loss.backward()\n")
    assert "TL301" in run_torchlint("--no-cache", "t.py", cwd=project).stdout.decode()
    assert "TL301" not in run_torchlint("--no-cache", "--target-torch", "2.1", "t.py", cwd=project).stdout.decode()


@pytest.mark.parametrize("line", ["  - pytorch=1.12.1", "  - pytorch::pytorch>=1.12", "    - torch==1.12.1"])
def test_target_torch_from_a_conda_environment(project, line):
    # edm pins `pytorch=1.12.1` in environment.yml: its torch 2.9 advice (TL706) would not even import
    (project / "environment.yml").write_text(f"name: x\ndependencies:\n  - python>=3.8\n{line}\n  - pip:\n")
    (project / "t.py").write_text("for b in loader:\n    opt.zero_grad()\n    loss.backward()\n")
    assert "TL301" in run_torchlint("--no-cache", "t.py", cwd=project).stdout.decode()


def test_src_folders_let_findings_see_into_the_project_helpers(project):
    """`src` (as Ruff's) names where the project's own packages live: a helper imported from there
    is followed, so its sync is reported at the call in the training loop; without it the import
    is third-party and nothing is claimed about it."""
    (project / "lib").mkdir()
    (project / "lib" / "helpers.py").write_text("def log_loss(value):\n    print(value.item())\n")
    (project / "train.py").write_text(
        "import torch\nfrom helpers import log_loss\n\nmodel = torch.nn.Linear(4, 1).cuda()\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x, y in loader:\n"
        "    optimizer.zero_grad()\n    loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "    loss.backward()\n    optimizer.step()\n    log_loss(loss)\n")
    (project / "pyproject.toml").write_text("[tool.torchlint]\n")
    assert "TL802" not in run_torchlint("--no-cache", "--select", "TL802", "train.py", cwd=project).stdout.decode()
    (project / "pyproject.toml").write_text('[tool.torchlint]\nsrc = ["lib"]\n')
    out = run_torchlint("--no-cache", "--select", "TL802", "train.py", cwd=project).stdout.decode()
    assert "train.py:11:5: TL802" in out and "helpers.py:2" in out


def test_gitignore_and_exclude_respected_but_explicit_files_checked(project):
    (project / ".git").mkdir()
    (project / ".gitignore").write_text("generated/\n")
    (project / "generated").mkdir()
    (project / "generated" / "t.py").write_text(LEAK)
    (project / ".venv").mkdir()
    (project / ".venv" / "t.py").write_text(LEAK)
    result = run_torchlint("--no-cache", ".", cwd=project)
    assert result.returncode == 0, result.stdout
    result = run_torchlint("--no-cache", "generated/t.py", cwd=project)
    assert result.returncode == 1


def test_cache_hit_gives_the_same_result(project):
    (project / "train.py").write_text(LEAK)
    first = run_torchlint("--format", "json", "train.py", cwd=project)
    assert (project / ".torchlint_cache").is_dir()
    second = run_torchlint("--format", "json", "train.py", cwd=project)
    assert first.stdout == second.stdout and second.returncode == 1


def test_stdin_with_filename(project):
    result = run_torchlint("--stdin-filename", "train.py", "-", cwd=project, input=LEAK)
    assert result.returncode == 1
    assert "train.py:7:5: TL101" in result.stdout.decode()
    fixed = run_torchlint("--fix", "--stdin-filename", "train.py", "-", cwd=project, input=LEAK)
    assert fixed.stdout.decode() == LEAK_FIXED


def test_rules_and_rule_commands():
    listing = json.loads(run_torchlint("rules", "--format", "json").stdout)
    codes = {r["code"] for r in listing}
    assert {"TL101", "TL201", "TL301", "TL401", "TL501"} <= codes
    doc = run_torchlint("rule", "TL401").stdout.decode()
    assert "bias-before-norm" in doc and "## Fix safety" in doc
    assert run_torchlint("rule", "retained-graph").returncode == 0
    assert run_torchlint("rule", "nope").returncode == 2


def test_version():
    result = run_torchlint("--version")
    assert result.returncode == 0 and "torchlint" in result.stdout.decode()


def test_fixed_file_is_written_atomically_without_leftovers(project):
    (project / "train.py").write_text(LEAK)
    run_torchlint("--fix", ".", cwd=project)
    assert sorted(p.name for p in project.iterdir()) == ["pyproject.toml", "train.py"]


def test_readme_example_runs():
    example = ROOT / "fixtures" / "examples" / "train.py"
    assert example.exists(), "the README's example script is missing"
    result = run_torchlint("--isolated", "--no-cache", str(example))
    assert result.returncode == 1
    assert all(code in result.stdout.decode() for code in ("TL101", "TL201", "TL301", "TL401", "TL501"))


def test_linting_never_imports_torch(project, tmp_path):
    (project / "train.py").write_text(LEAK + DATA_PARALLEL)
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "torch.py").write_text("raise ImportError('torchlint must not import torch')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])}
    result = run_torchlint("--no-cache", "--fix", "--unsafe-fixes", "train.py", cwd=project, env=env)
    assert result.returncode == 0, result.stderr
    probe = run_torchlint("--no-cache", "train.py", cwd=project, env={**env, "PYTHONVERBOSE": "1"})
    assert "import 'torch'" not in probe.stderr.decode()


def test_the_cache_fingerprint_knows_torchlints_own_code(tmp_path, monkeypatch):
    """An editable install keeps its version number from commit to commit: results cached by
    other code of torchlint must be misses (the README's example once printed stale messages)."""
    import torchlint.config as config

    package = tmp_path / "package"
    (package / "__pycache__").mkdir(parents=True)
    rule = package / "rule.py"
    rule.write_text("x = 1\n")
    before = config.code_stamp((package,))
    (package / "__pycache__" / "rule.cpython-311.pyc").write_bytes(b"\0")
    assert config.code_stamp((package,)) == before  # compiled files say nothing new
    os.utime(rule, ns=(rule.stat().st_atime_ns, rule.stat().st_mtime_ns + 1_000_000_000))
    assert config.code_stamp((package,)) != before

    import dataclasses

    settings = config.resolve_settings(tmp_path, isolated=True)
    cached_by = settings.fingerprint
    monkeypatch.setattr(config, "code_stamp", lambda: "other code")
    assert dataclasses.replace(settings).fingerprint != cached_by


def test_the_fast_exit_loses_no_output_cache_or_exit_code(project):
    """The command exits without the interpreter's teardown (cli.entry_point): everything it
    printed through a pipe, every cache entry and the exit code must still be there, from one
    process and from the process pool (more than 64 files)."""
    lines = "".join(f"x{i} = torch.zeros(3).cuda()\n" for i in range(40))
    for n in range(70):
        (project / f"m{n:02d}.py").write_text(f"import torch\n\n{lines}")
    cache = project / "cache"
    for jobs, caching in (("2", ["--no-cache"]), ("1", ["--cache-dir", str(cache)])):
        done = run_torchlint("check", "--isolated", "--select", "TL201", *caching, f"-j{jobs}", ".", cwd=project)
        assert done.returncode == 1, done.stderr
        findings = [line for line in done.stdout.decode().splitlines() if " TL201 " in line]
        assert len(findings) == 70 * 40  # about 300 KB: far past a pipe's buffer
        assert done.stdout.decode().rstrip().endswith("fixable with the `--fix` option.")
    assert len([p for p in cache.rglob("*") if p.is_file()]) >= 70
