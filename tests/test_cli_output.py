"""The report options a Ruff user reaches for, through the real command line: `--output-file`,
`--show-fixes`, `--watch`, colour (a terminal, a pipe, NO_COLOR, `--color/--no-color`), the
`full` format with the source line and a caret, and summaries that end every line."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner

from conftest import GUIDE_RULES_CONFIG, LEAK, LEAK_FIXED, run_torchlint
from torchlint.cli import main

SAFE_AND_UNSAFE = "import torch\nimport torch.nn as nn\n\nx = torch.zeros(3).cuda()\nm = torch.randn(3).cuda()\n"
ESCAPE = b"\x1b["


@pytest.fixture(autouse=True)
def guide_rules_only(project):
    (project / "pyproject.toml").write_text(GUIDE_RULES_CONFIG)


def run_on_a_terminal(*args: str, cwd, env: dict | None = None) -> bytes:
    """What the command writes to stdout when stdout is a terminal (a pseudo-terminal)."""
    import pty

    controller, terminal = pty.openpty()
    environment = {**os.environ, **(env or {})}
    process = subprocess.Popen([sys.executable, "-m", "torchlint", *args], cwd=cwd, stdout=terminal,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=environment)
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(controller)
    process.wait(timeout=60)
    return output


# --- every summary line ends with a newline ------------------------------------------------------

SUMMARY_PATHS = [[], ["--fix"], ["--diff"], ["--statistics"], ["-q"], ["--fix", "-q"], ["--diff", "-q"],
                 ["--fix", "--show-fixes"], ["--diff", "--show-fixes"], ["--format", "full"]]


@pytest.mark.parametrize("source", ["x = 1\n", SAFE_AND_UNSAFE, "import torch\nx = torch.zeros(3).cuda()"],
                         ids=["clean", "safe-and-unsafe", "no-final-newline"])
@pytest.mark.parametrize("flags", SUMMARY_PATHS, ids=" ".join)
def test_every_line_of_every_summary_ends_with_a_newline(project, monkeypatch, source, flags):
    monkeypatch.chdir(project)
    for stdin in (False, True):
        (project / "train.py").write_text(source)
        if stdin:  # in this process: sixty runs in a few seconds
            result = CliRunner().invoke(main, ["--no-cache", *flags, "--stdin-filename", "train.py", "-"], input=source)
        else:
            result = CliRunner().invoke(main, ["--no-cache", *flags, "train.py"])
        assert result.exit_code in (0, 1), (result.exception, result.stderr)
        fixed_buffer = stdin and "--fix" in flags  # stdout is the buffer itself, as it was sent
        for name, stream in (("stdout", result.stdout_bytes), ("stderr", result.stderr_bytes)):
            if stream and not (name == "stdout" and fixed_buffer):
                assert stream.endswith(b"\n"), (stdin, name, stream)


def test_diff_of_a_clean_file_prints_nothing_and_exits_0(project):
    (project / "ok.py").write_text("x = 1\n")
    result = run_torchlint("--no-cache", "--diff", "ok.py", cwd=project)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def test_diff_summary_counts_in_words_and_names_the_unsafe_fixes(project):
    (project / "train.py").write_text(SAFE_AND_UNSAFE)
    result = run_torchlint("--no-cache", "--diff", "train.py", cwd=project)
    assert result.returncode == 1
    assert result.stderr.decode() == "Would fix 1 error in 1 file (1 additional fix available with `--unsafe-fixes`).\n"
    (project / "dp.py").write_text("import torch\nm = torch.randn(3).cuda()\n")
    result = run_torchlint("--no-cache", "--diff", "dp.py", cwd=project)
    assert result.returncode == 0
    assert result.stderr.decode() == "No errors would be fixed (1 fix available with `--unsafe-fixes`).\n"


@pytest.mark.skipif(shutil.which("git") is None, reason="git apply reads the patch")
@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_diff_of_a_file_without_a_final_newline_is_a_patch_git_applies(project, newline):
    # difflib ran the last line into the next ("-x = ...cuda()+x = ...") and the summary after it
    source = newline.join(["import torch", "y = 1", "x = torch.zeros(3).cuda()"])
    (project / "train.py").write_bytes(source.encode())
    result = run_torchlint("--no-cache", "--diff", "train.py", cwd=project)
    patch = result.stdout.decode()
    assert patch.endswith("\n\\ No newline at end of file\n")
    assert patch.count("\\ No newline at end of file") == 2  # the old last line and the new one
    (project / "fix.patch").write_bytes(result.stdout)
    applied = subprocess.run(["git", "apply", "fix.patch"], cwd=project, capture_output=True)
    assert applied.returncode == 0, applied.stderr
    assert (project / "train.py").read_bytes() == source.replace(
        "torch.zeros(3).cuda()", 'torch.zeros(3, device="cuda")').encode()


@pytest.mark.skipif(shutil.which("git") is None, reason="git apply reads the patch")
def test_diff_where_the_last_line_is_unchanged_and_has_no_newline(project):
    source = "import torch\nx = torch.zeros(3).cuda()\nprint(x)"
    (project / "train.py").write_text(source)
    patch = run_torchlint("--no-cache", "--diff", "train.py", cwd=project).stdout.decode()
    assert patch.endswith(" print(x)\n\\ No newline at end of file\n") and patch.count("No newline") == 1
    (project / "fix.patch").write_text(patch)
    assert subprocess.run(["git", "apply", "fix.patch"], cwd=project).returncode == 0
    assert (project / "train.py").read_text() == source.replace("torch.zeros(3).cuda()", 'torch.zeros(3, device="cuda")')


def test_fix_of_a_clean_file_says_all_checks_passed_as_ruff_does(project):
    (project / "ok.py").write_text("x = 1\n")
    result = run_torchlint("--no-cache", "--fix", "ok.py", cwd=project)
    assert (result.returncode, result.stdout.decode()) == (0, "All checks passed!\n")


def test_quiet_stdin_prints_the_findings_without_the_summary(project):
    result = run_torchlint("-q", "--stdin-filename", "train.py", "-", cwd=project, input=LEAK)
    assert result.returncode == 1
    assert result.stdout.decode().splitlines() == [
        "train.py:7:5: TL101 [*] `losses` appends `loss` with its autograd graph on every iteration, so memory "
        "grows each step; use `loss.detach()`"]


# --- --output-file -----------------------------------------------------------------------------------

@pytest.mark.parametrize("output_format", ["text", "full", "json", "sarif", "github"])
def test_output_file_holds_what_stdout_would_and_the_exit_code_is_kept(project, output_format):
    (project / "train.py").write_text(LEAK)
    to_stdout = run_torchlint("--no-cache", "--format", output_format, "train.py", cwd=project)
    to_file = run_torchlint("--no-cache", "--format", output_format, "-o", "reports/lint.out", "train.py", cwd=project)
    assert (to_file.returncode, to_file.stdout, to_file.stderr) == (1, b"", b"")
    assert (project / "reports" / "lint.out").read_bytes() == to_stdout.stdout  # its folder was made


def test_output_file_is_never_coloured(project):
    (project / "train.py").write_text(LEAK)
    assert run_torchlint("--no-cache", "--color", "-o", "lint.txt", "train.py", cwd=project).returncode == 1
    assert ESCAPE not in (project / "lint.txt").read_bytes()


def test_output_file_with_diff_holds_the_patch_and_stderr_the_summary(project):
    (project / "train.py").write_text(LEAK)
    result = run_torchlint("--no-cache", "--diff", "--output-file", "fix.patch", "train.py", cwd=project)
    assert (result.returncode, result.stdout) == (1, b"")
    assert result.stderr.decode() == "Would fix 1 error in 1 file.\n"
    assert "+    losses.append(loss.detach())" in (project / "fix.patch").read_text()


def test_output_file_with_stdin_fix_keeps_the_buffer_on_stdout(project):
    result = run_torchlint("--fix", "-o", "lint.txt", "--stdin-filename", "train.py", "-", cwd=project, input=LEAK)
    assert (result.returncode, result.stdout.decode(), result.stderr) == (0, LEAK_FIXED, b"")
    assert (project / "lint.txt").read_text() == "Found 1 error (1 fixed, 0 remaining).\n"


def test_output_file_that_cannot_be_written_is_an_error_naming_it(project):
    (project / "train.py").write_text(LEAK)
    result = run_torchlint("--no-cache", "-o", "train.py/lint.txt", "train.py", cwd=project)
    assert result.returncode == 2
    assert result.stderr.decode().startswith("torchlint: error: train.py/lint.txt: cannot write the report (")
    assert (project / "train.py").read_text() == LEAK


# --- --show-fixes ------------------------------------------------------------------------------------

def test_show_fixes_lists_what_fix_fixed_per_file_and_rule(project):
    (project / "a.py").write_text(LEAK)
    (project / "b.py").write_text(SAFE_AND_UNSAFE.replace("x = torch", "x = torch.ones(2).cuda()\ny = torch"))
    result = run_torchlint("--no-cache", "--fix", "--show-fixes", ".", cwd=project)
    assert result.returncode == 1
    assert result.stdout.decode() == (
        "b.py:6:5: TL201 `torch.randn(...).cuda(...)` fills the tensor on the CPU, then copies it; create it on "
        "the device with `device=`\n"
        "\n"
        "Fixed 3 errors:\n"
        "- a.py:\n"
        "    1 × TL101 (retained-graph)\n"
        "- b.py:\n"
        "    2 × TL201 (move-after-create)\n"
        "\n"
        "Found 4 errors (3 fixed, 1 remaining).\n"
        "No fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n")


def test_show_fixes_with_diff_says_what_would_be_fixed_on_stderr(project):
    (project / "a.py").write_text(LEAK)
    result = run_torchlint("--no-cache", "--diff", "--show-fixes", "a.py", cwd=project)
    assert result.returncode == 1
    assert result.stdout.decode().startswith("--- a.py\n+++ a.py\n")
    assert result.stderr.decode() == ("Would fix 1 error:\n- a.py:\n    1 × TL101 (retained-graph)\n\n"
                                      "Would fix 1 error in 1 file.\n")
    assert (project / "a.py").read_text() == LEAK


def test_show_fixes_without_fix_adds_nothing(project):
    (project / "a.py").write_text(LEAK)
    plain = run_torchlint("--no-cache", "a.py", cwd=project)
    assert run_torchlint("--no-cache", "--show-fixes", "a.py", cwd=project).stdout == plain.stdout


# --- colour ------------------------------------------------------------------------------------------

@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_colour_on_a_terminal_unless_no_color_or_no_color_flag(project):
    (project / "train.py").write_text(LEAK)
    env = {"NO_COLOR": ""}  # set but empty does not count (no-color.org)
    coloured = run_on_a_terminal("--no-cache", "train.py", cwd=project, env=env)
    assert b"\x1b[1;31mTL101\x1b[0m" in coloured and b"\x1b[36m[*]\x1b[0m" in coloured
    assert ESCAPE not in run_on_a_terminal("--no-cache", "train.py", cwd=project, env={"NO_COLOR": "1"})
    assert ESCAPE not in run_on_a_terminal("--no-cache", "--no-color", "train.py", cwd=project, env=env)
    # the flag is the user's word for this run: it wins over NO_COLOR
    assert ESCAPE in run_on_a_terminal("--no-cache", "--color", "train.py", cwd=project, env={"NO_COLOR": "1"})


def test_no_colour_in_a_pipe_unless_asked(project):
    (project / "train.py").write_text(LEAK)
    environment = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    piped = run_torchlint("--no-cache", "train.py", cwd=project, env=environment)
    assert ESCAPE not in piped.stdout
    forced = run_torchlint("--no-cache", "--color", "train.py", cwd=project)
    assert ESCAPE in forced.stdout
    # without the escapes, the coloured report is the plain one
    assert strip_escapes(forced.stdout) == piped.stdout


def test_colour_never_touches_the_machine_formats(project):
    (project / "train.py").write_text(LEAK)
    for output_format in ("json", "jsonl", "sarif", "github"):
        plain = run_torchlint("--no-cache", "--format", output_format, "train.py", cwd=project).stdout
        assert run_torchlint("--no-cache", "--color", "--format", output_format, "train.py", cwd=project).stdout == plain


def strip_escapes(data: bytes) -> bytes:
    import re

    return re.sub(rb"\x1b\[[0-9;]*m", b"", data)


# --- the full format ---------------------------------------------------------------------------------

def test_full_format_shows_the_line_with_a_caret_under_the_span(project):
    (project / "t.py").write_text("import torch\n\n\ndef f():\n\tx = torch.zeros(3).cuda()\n    \n")
    result = run_torchlint("--no-cache", "--output-format", "full", "t.py", cwd=project)
    assert result.returncode == 1
    assert result.stdout.decode() == (
        "TL201 [*] `torch.zeros(...).cuda(...)` fills the tensor on the CPU, then copies it; create it on the "
        "device with `device=`\n"
        " --> t.py:5:6\n"
        "  |\n"
        "3 |\n"
        "4 | def f():\n"
        "5 |     x = torch.zeros(3).cuda()\n"  # the tab shown as four spaces, the caret lined up with it
        "  |         ^^^^^^^^^^^^^^\n"
        "  |\n"
        "help: Create the tensor on the device\n"
        "\n"
        "Found 1 error.\n"
        "[*] 1 fixable with the `--fix` option.\n")


def test_full_format_lines_the_arrow_up_with_the_gutter_when_blank_lines_are_left_out(project):
    (project / "t.py").write_text("import torch\n" + "\n" * 7 + "y = torch.zeros(3).cuda()\n\n\n")
    out = run_torchlint("--no-cache", "--format", "full", "t.py", cwd=project).stdout.decode().splitlines()
    assert out[1:7] == [" --> t.py:9:5", "  |", "7 |", "8 |", "9 | y = torch.zeros(3).cuda()",
                        "  |     ^^^^^^^^^^^^^^"]
    assert out[7] == "  |"


def test_full_format_counts_wide_characters_twice_for_the_caret(project):
    (project / "t.py").write_text("import torch\n训练 = 1; x = torch.zeros(3).cuda()\n")
    out = run_torchlint("--no-cache", "--format", "full", "t.py", cwd=project).stdout.decode().splitlines()
    line, carets = out[4], out[5]
    assert line == "2 | 训练 = 1; x = torch.zeros(3).cuda()"
    assert carets == "  |" + " " * (1 + 2 + 2 + len(" = 1; x = ")) + "^" * len("torch.zeros(3)")


def test_full_format_of_a_notebook_shows_the_cells_line(project):
    cells = [["import torch\n", "import torch.nn as nn"], ["# setup\n", "m = nn.DataParallel(net)"]]
    notebook = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
                           "source": source} for i, source in enumerate(cells)],
                "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
                "nbformat": 4, "nbformat_minor": 5}
    (project / "t.ipynb").write_text(json.dumps(notebook, indent=1))
    out = run_torchlint("--no-cache", "--format", "full", "t.ipynb", cwd=project).stdout.decode()
    assert " --> t.ipynb:cell 2:2:5\n  |\n1 | # setup\n2 | m = nn.DataParallel(net)\n  |     ^^^^^^^^^^^^^^^^^^^^\n" in out


def test_full_format_of_a_syntax_error_and_quiet_full(project):
    (project / "bad.py").write_text("import torch\ndef f(:\n    pass\n")
    result = run_torchlint("--no-cache", "-q", "--format", "full", "bad.py", cwd=project)
    out = result.stdout.decode()
    assert result.returncode == 1 and out.startswith("TL000 ") and "\n --> bad.py:2:" in out
    assert "2 | def f(:\n" in out and "Found" not in out


def test_concise_is_the_default_text(project):
    (project / "train.py").write_text(LEAK)
    text = run_torchlint("--no-cache", "train.py", cwd=project).stdout
    assert run_torchlint("--no-cache", "--output-format", "concise", "train.py", cwd=project).stdout == text


# --- torchlint rules ---------------------------------------------------------------------------------

def test_rules_listing_marks_the_rules_that_are_off_by_default():
    listing = json.loads(run_torchlint("rules", "--format", "json").stdout)
    off = {rule["code"] for rule in listing if not rule["default_enabled"]}
    assert off, "some rules are off by default"
    text = run_torchlint("rules").stdout.decode().splitlines()
    marked = {line.split()[0] for line in text if line.endswith("(off by default)")}
    assert marked == off
    code = sorted(off)[0]
    assert f"off by default (turn it on with `--extend-select {code}`)" in run_torchlint("rule", code).stdout.decode()


# --- --watch -----------------------------------------------------------------------------------------

def test_watch_checks_again_after_an_edit_and_ctrl_c_ends_it(project):
    (project / "train.py").write_text(LEAK)
    process = subprocess.Popen([sys.executable, "-m", "torchlint", "--no-cache", "--watch", "train.py"], cwd=project,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()

    def next_summary() -> str:
        while True:  # a generous bound: a loaded machine is slow, never wrong
            line = lines.get(timeout=120)
            if line.startswith(("Found", "All checks passed!")):
                return line

    try:
        assert next_summary() == "Found 1 error.\n"
        (project / "train.py").write_text(LEAK_FIXED)  # longer: the size changes, whatever the clock's grain
        assert next_summary() == "All checks passed!\n"
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0
    assert "Traceback" not in stderr
    assert "Watching for file changes (Ctrl-C to stop)." in stderr and "File change detected: train.py." in stderr


def test_watch_sees_files_added_to_a_watched_folder_and_the_configuration(project):
    from torchlint.config import resolve_settings
    from torchlint.watch import changed_paths, snapshot

    (project / "src").mkdir()
    (project / "src" / "a.py").write_text("x = 1\n")
    settings = resolve_settings(project / "src")
    before = snapshot([project / "src"], settings)
    assert settings.config_path in before
    (project / "src" / "b.py").write_text("y = 2\n")
    assert [p.name for p in changed_paths(before, snapshot([project / "src"], settings))] == ["b.py"]


def test_watch_reads_files_not_stdin(project):
    result = run_torchlint("--watch", "-", cwd=project, input="x = 1\n")
    assert result.returncode == 2
    assert "--watch checks files again when they change" in result.stderr.decode()
