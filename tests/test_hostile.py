"""Hostile input through the real CLI: whatever a file holds or whatever happens to it on disk,
torchlint never damages it, never prints a Python traceback, and says in one line what went wrong
and with which file. The other files of the run are still checked (and fixed)."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import GUIDE_RULES_CONFIG, LEAK, LEAK_FIXED, run_torchlint
from torchlint import fileio, runner
from torchlint.cli import main
from torchlint.config import resolve_settings

MOVE = "import torch\n\nx = torch.zeros(3).cuda()\n"
MOVE_FIXED = 'import torch\n\nx = torch.zeros(3, device="cuda")\n'


@pytest.fixture
def project(tmp_path):
    """A project that selects the five guide rules, so that rules added later change nothing here."""
    (tmp_path / "pyproject.toml").write_text(GUIDE_RULES_CONFIG)
    return tmp_path


def fix(project, *paths, unsafe=False):
    args = ["--fix", "--no-cache", *(["--unsafe-fixes"] if unsafe else []), *(paths or ["."])]
    return run_torchlint(*args, cwd=project)


def assert_no_traceback(result) -> None:
    err = result.stderr.decode() if isinstance(result.stderr, bytes) else result.stderr
    out = result.stdout.decode() if isinstance(result.stdout, bytes) else result.stdout
    assert "Traceback" not in err + out, err


def error_lines(result) -> list[str]:
    err = result.stderr.decode() if isinstance(result.stderr, bytes) else result.stderr
    return [line for line in err.splitlines() if line.startswith("torchlint: error:")]


def in_process(project, monkeypatch, *args):
    """The CLI in this process, for the tests that make the file system misbehave on cue."""
    monkeypatch.chdir(project)
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert_no_traceback(result)
    return result


# --- what a file holds ---------------------------------------------------------------------------

PYTHON2 = b'import torch\nprint "training"\ntry:\n    x = torch.zeros(3).cuda()\nexcept Exception, e:\n    pass\n'
BROKEN = b"import torch\ndef train(:\n    x = torch.zeros(3).cuda()\n"


def test_syntax_errors_and_python2_are_tl000_and_left_alone(project):
    (project / "py2.py").write_bytes(PYTHON2)
    (project / "broken.py").write_bytes(BROKEN)
    (project / "train.py").write_text(LEAK)
    result = fix(project)
    out = result.stdout.decode()
    assert result.returncode == 1, result.stderr
    assert "broken.py:2:11: TL000 SyntaxError: invalid syntax" in out
    assert "py2.py:2:1: TL000 SyntaxError: Missing parentheses in call to 'print'" in out
    assert (project / "py2.py").read_bytes() == PYTHON2
    assert (project / "broken.py").read_bytes() == BROKEN
    assert (project / "train.py").read_text() == LEAK_FIXED  # the others are still fixed
    assert result.stderr == b""


def test_latin1_file_is_fixed_and_written_back_in_latin1(project):
    source = "# -*- coding: latin-1 -*-\n# Entraînement: données réelles\n" + LEAK.replace(
        "import torch\n", "import torch\nlabel = 'été'\n")
    path = project / "train.py"
    path.write_bytes(source.encode("latin-1"))
    result = fix(project, "train.py")
    assert result.returncode == 0, result.stderr
    expected = source.replace("losses.append(loss)", "losses.append(loss.detach())").encode("latin-1")
    assert path.read_bytes() == expected
    assert b"\xe9t\xe9" in path.read_bytes()  # still latin-1 bytes, not UTF-8


def test_bom_is_kept(project):
    path = project / "train.py"
    path.write_bytes(b"\xef\xbb\xbf# d\xc3\xa9j\xc3\xa0 vu\n" + LEAK.encode())
    assert fix(project, "train.py").returncode == 0
    assert path.read_bytes() == b"\xef\xbb\xbf# d\xc3\xa9j\xc3\xa0 vu\n" + LEAK_FIXED.encode()


def test_crlf_is_kept(project):
    path = project / "train.py"
    path.write_bytes(LEAK.replace("\n", "\r\n").encode())
    assert fix(project, "train.py").returncode == 0
    assert path.read_bytes() == LEAK_FIXED.replace("\n", "\r\n").encode()


def test_mixed_newlines_only_the_fixed_span_changes(project):
    lines = LEAK.splitlines(keepends=True)
    endings = ["\r\n", "\n", "\r", "\r\n", "\n", "\r", "\r\n"]
    original = "".join(line.replace("\n", end) for line, end in zip(lines, endings)).encode()
    path = project / "train.py"
    path.write_bytes(original)
    result = fix(project, "train.py")
    assert result.returncode == 0, result.stderr
    assert path.read_bytes() == original.replace(b"losses.append(loss)", b"losses.append(loss.detach())")


def test_a_multi_line_fix_in_a_crlf_file_writes_crlf(project):
    source = ("import torch\r\nimport torch.nn as nn\r\n\r\nmodel = nn.DataParallel(nn.Linear(2, 2))\r\n"
              "for x in batches:\r\n    model(x).sum().backward()\r\n")
    path = project / "dp.py"
    path.write_bytes(source.encode())
    assert fix(project, "dp.py", unsafe=True).returncode == 0
    data = path.read_bytes()
    assert b"    dist.init_process_group()\r\nelif not dist.is_initialized():" in data
    assert b"\n" not in data.replace(b"\r\n", b"")  # no bare LF was introduced
    compile(data, "dp.py", "exec")


def test_tab_indentation_is_kept(project):
    path = project / "train.py"
    source = LEAK.replace("    ", "\t")
    path.write_text(source)
    assert fix(project, "train.py").returncode == 0
    assert path.read_text() == source.replace("losses.append(loss)", "losses.append(loss.detach())")


def test_form_feeds(project):
    # a page break between top-level statements is kept and the fix lands where it belongs
    paged = project / "paged.py"
    paged.write_text(LEAK.replace("losses = []\n", "losses = []\n\x0c\n"))
    # LibCST drops a form feed in the indentation when it prints the tree back, so its positions
    # are off after it: the finding is reported, and the file is not touched
    indented = project / "indented.py"
    indented_source = LEAK.replace("    loss = criterion", "\x0c    loss = criterion")
    indented.write_text(indented_source)
    result = fix(project, "paged.py", "indented.py")
    assert_no_traceback(result)
    assert paged.read_text() == LEAK_FIXED.replace("losses = []\n", "losses = []\n\x0c\n")
    assert indented.read_text() == indented_source
    assert "indented.py:7" in result.stdout.decode() and "TL101" in result.stdout.decode()
    assert result.returncode == 1 and result.stderr == b""


def test_empty_and_comment_only_files(project):
    (project / "empty.py").write_bytes(b"")
    (project / "comment.py").write_bytes(b"# nothing here")  # no final newline either
    result = fix(project)
    assert result.returncode == 0, result.stderr
    assert (project / "empty.py").read_bytes() == b""
    assert (project / "comment.py").read_bytes() == b"# nothing here"


def test_a_fix_on_the_last_line_without_a_newline(project):
    path = project / "m.py"
    path.write_text(MOVE.rstrip("\n"))
    assert fix(project, "m.py").returncode == 0
    assert path.read_text() == MOVE_FIXED.rstrip("\n")


def test_binary_files_named_py(project):
    (project / "blob.py").write_bytes(bytes(range(256)) * 4)
    (project / "zeros.py").write_bytes(b"\x00" * 64)
    (project / "m.py").write_text(MOVE)
    result = fix(project)
    out = result.stdout.decode()
    assert result.returncode == 1
    assert "blob.py:1:1: TL000 cannot decode the file: not valid utf-8 text" in out
    assert "zeros.py:1:1: TL000 cannot decode the file: it contains NUL bytes" in out
    assert (project / "blob.py").read_bytes() == bytes(range(256)) * 4
    assert (project / "m.py").read_text() == MOVE_FIXED
    assert result.stderr == b""


def test_a_30k_line_file(project):
    function = ('def scale_{i}(values, factor=2):\n    """Scale the values ({i})."""\n    total = 0\n'
                "    for value in values:\n        total += value * factor  # accumulate\n    return total\n\n\n")
    body = "import torch\n\n\n" + "".join(function.format(i=i) for i in range(3750))
    path = project / "big.py"
    path.write_text(body + MOVE.split("\n\n", 1)[1])
    line = body.count("\n") + 1
    assert line > 30000
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    result = run_torchlint("--no-cache", "big.py", cwd=project)
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before
    assert result.returncode == 1, result.stderr
    assert f"big.py:{line}:5: TL201" in result.stdout.decode()
    # measured: about 4 s of CPU on the CI machine (1.4 s of it LibCST's parse); a cost that grows
    # faster than the file would show here many times over
    assert cpu < 20, f"{cpu:.1f} s of CPU for a 30k-line file"


DEEP = {
    # CPython refuses more than 200 nested brackets; LibCST's native parser would crash the process
    # on a couple of thousand
    "parens": ("x = " + "(" * 1000 + "1" + ")" * 1000, "TL000 SyntaxError: too many nested parentheses"),
    "chain": ("x = " + "+".join(["a"] * 5000), "TL000 torchlint cannot analyze this file"),
    "boolean": ("x = " + " and ".join(["a"] * 50000), "TL000 torchlint cannot analyze this file"),
    "strings": ("x = " + " ".join(['"a"'] * 8000), "TL000 torchlint cannot analyze this file"),
}


@pytest.mark.parametrize("shape", sorted(DEEP))
def test_deeply_nested_expressions(project, shape):
    code, expected = DEEP[shape]
    source = MOVE + code + "\n"
    (project / "deep.py").write_text(source)
    (project / "m.py").write_text(MOVE)
    result = fix(project)
    assert_no_traceback(result)
    assert result.returncode == 1, result.stderr
    assert expected in result.stdout.decode()
    assert (project / "deep.py").read_text() == source
    assert (project / "m.py").read_text() == MOVE_FIXED
    assert result.stderr == b""


def test_brackets_nested_as_deep_as_python_allows(project):
    # 199 levels: Python's limit is 200. Every rule reads it, inside a training loop; whatever a
    # rule's recursion makes of it, the outcome is a finding or a TL000, never a crash.
    source = LEAK + "    y = " + "f(" * 199 + "x" + ")" * 199 + "\n" + MOVE.split("\n\n", 1)[1]
    (project / "deep.py").write_text(source)
    result = run_torchlint("--fix", "--unsafe-fixes", "--select", "ALL", "--no-cache", "deep.py", cwd=project)
    assert_no_traceback(result)
    assert result.returncode in (0, 1) and result.stderr == b""
    compile((project / "deep.py").read_text(), "deep.py", "exec")


def test_a_recursion_error_in_the_analysis_is_tl000(project, monkeypatch):
    from torchlint import engine

    def overflow(*args):
        raise RecursionError("maximum recursion depth exceeded")

    (project / "m.py").write_text(MOVE)
    monkeypatch.setattr(engine, "walk", overflow)
    result = in_process(project, monkeypatch, "--fix", "--no-cache", "m.py")
    assert result.exit_code == 1
    assert "m.py:1:1: TL000 torchlint cannot analyze this file: an expression nests too deeply" in result.stdout
    assert (project / "m.py").read_text() == MOVE


# Text shaped to make a backtracking regular expression take exponential or quadratic time.
ADVERSARIAL = [")" + "#" * 5000 + "\n", ")\n" + "# " * 5000, ")" + " " * 20000, "(" * 20000, ")" * 20000,
               "." * 20000, "a" * 20000, "\n" * 20000, " " * 20000 + "x", "x = " + "f()" * 5000,
               '"' * 20000, "# noqa" + ":" * 20000]


PREFILTER_PROBE = """\
import json, sys, time
sys.path.pop(0)
from torchlint.rule import all_rules
texts = json.load(sys.stdin)
for rule in all_rules():
    for number, text in enumerate(texts):
        print(rule.code, number, flush=True)
        start = time.process_time()
        rule.applies(text)
        if time.process_time() - start > 0.5:
            print("SLOW", rule.code, number, flush=True)
print("DONE")
"""


def test_rule_prefilters_take_linear_time():
    """`applies()` reads every file's raw text before anything is parsed: a pattern that backtracks
    (TL201's once took 2^n steps on `)` before a `####` banner line: torch/__init__.py hung it).
    In a child process, since a regular expression cannot be interrupted."""
    try:
        result = subprocess.run([sys.executable, "-c", PREFILTER_PROBE], input=json.dumps(ADVERSARIAL).encode(),
                                capture_output=True, timeout=60)
    except subprocess.TimeoutExpired as error:
        last = (error.stdout or b"").decode().split()[-2:]
        pytest.fail(f"rule {last[0]} never finished on adversarial text {last[1]}" if last else "no output")
    assert result.stdout.decode().endswith("DONE\n"), result.stderr.decode()
    assert [line for line in result.stdout.decode().splitlines() if line.startswith("SLOW")] == []


def test_banner_comments_after_a_call(project):
    source = MOVE + "setup(\n    name='x',\n)\n" + "#" * 120 + "\n# section\n" + "#" * 120 + "\n"
    (project / "m.py").write_text(source)
    result = subprocess.run([sys.executable, "-m", "torchlint", "--fix", "--no-cache", "m.py"], cwd=project,
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert (project / "m.py").read_text() == source.replace(MOVE, MOVE_FIXED)


def test_a_notebook_line_of_spaces(project):
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": ["import torch\n", " " * 100000 + "\n", "x = torch.zeros(3).cuda()\n"]}
    (project / "nb.ipynb").write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    result = subprocess.run([sys.executable, "-m", "torchlint", "--no-cache", "nb.ipynb"], cwd=project,
                            capture_output=True, timeout=60)
    assert result.returncode == 1 and b"nb.ipynb:cell 1:3:5: TL201" in result.stdout, result.stdout + result.stderr


# --- what the file system holds ------------------------------------------------------------------

def test_a_directory_named_like_a_python_file(project):
    (project / "x.py").mkdir()
    (project / "x.py" / "inner.py").write_text(MOVE)
    result = run_torchlint("--no-cache", "x.py", cwd=project)
    assert result.returncode == 1 and "x.py/inner.py:3:5: TL201" in result.stdout.decode()
    assert fix(project).returncode == 0
    assert (project / "x.py" / "inner.py").read_text() == MOVE_FIXED


def test_symlink_loops(project):
    (project / "sub").mkdir()
    (project / "sub" / "m.py").write_text(MOVE)
    (project / "sub" / "up").symlink_to("..")
    (project / "sub" / "me").symlink_to("../sub")
    (project / "self.py").symlink_to("self.py")
    (project / "dangling.py").symlink_to("nowhere.py")
    result = run_torchlint("--no-cache", ".", cwd=project)
    assert result.returncode == 1, result.stderr
    assert result.stdout.decode().count("TL201") == 1  # found once, not once per way round the loop
    assert result.stderr == b""
    named = run_torchlint("--no-cache", "self.py", "sub", cwd=project)
    assert named.returncode == 2
    assert error_lines(named) == ["torchlint: error: self.py: a broken symbolic link or a symlink loop"]
    assert "sub/m.py:3:5: TL201" in named.stdout.decode()
    assert_no_traceback(named)


def test_a_fifo_named_py_does_not_block(project):
    os.mkfifo(project / "pipe.py")
    (project / "m.py").write_text(MOVE)
    walked = run_torchlint("--no-cache", ".", cwd=project)
    assert walked.returncode == 1 and "m.py:3:5: TL201" in walked.stdout.decode()
    named = run_torchlint("--no-cache", "pipe.py", cwd=project)
    assert named.returncode == 2
    assert error_lines(named) == ["torchlint: error: pipe.py: not a file or directory"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file anyway; "
                                                "test_an_unreadable_file_in_process covers it")
def test_an_unreadable_file(project):
    path = project / "secret.py"
    path.write_text(MOVE)
    path.chmod(0)
    (project / "m.py").write_text(MOVE)
    result = fix(project)
    path.chmod(0o644)
    assert result.returncode == 2
    assert error_lines(result) == ["torchlint: error: secret.py: permission denied"]
    assert path.read_text() == MOVE
    assert (project / "m.py").read_text() == MOVE_FIXED


def test_an_unreadable_file_in_process(project, monkeypatch):
    (project / "secret.py").write_text(MOVE)
    (project / "m.py").write_text(MOVE)
    read_bytes = type(project).read_bytes

    def refuse(path):
        if path.name == "secret.py":
            raise PermissionError(13, "Permission denied", str(path))
        return read_bytes(path)

    monkeypatch.setattr(type(project), "read_bytes", refuse)
    result = in_process(project, monkeypatch, "--fix", "--no-cache", ".")
    assert result.exit_code == 2
    assert error_lines(result) == ["torchlint: error: secret.py: permission denied"]
    assert (project / "m.py").read_text() == MOVE_FIXED


def test_a_read_only_file_is_not_fixed(project):
    path = project / "m.py"
    path.write_text(MOVE)
    path.chmod(0o444)
    result = fix(project, "m.py")
    assert result.returncode == 2
    assert error_lines(result) == [
        "torchlint: error: m.py: the file is read-only; not fixed (make it writable to fix it)"]
    assert path.read_text() == MOVE
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert "m.py:3:5: TL201" in result.stdout.decode()  # still reported
    assert_no_traceback(result)


def test_a_file_changed_on_disk_meanwhile_is_not_overwritten(project, monkeypatch):
    path = project / "m.py"
    path.write_text(MOVE)
    theirs = MOVE + "y = 1  # saved from the editor while torchlint worked\n"
    check_text = runner.check_text

    def check_then_someone_saves(*args, **kwargs):
        result = check_text(*args, **kwargs)
        path.write_text(theirs)
        return result

    monkeypatch.setattr(runner, "check_text", check_then_someone_saves)
    result = in_process(project, monkeypatch, "--fix", "--no-cache", "m.py")
    assert result.exit_code == 2
    assert error_lines(result) == [
        "torchlint: error: m.py: changed on disk while torchlint was working; not overwritten, run again"]
    assert path.read_text() == theirs


@pytest.mark.parametrize("step", ["fsync", "chmod", "replace"])
def test_an_interrupt_during_the_write(project, monkeypatch, step):
    path = project / "m.py"
    path.write_text(MOVE)
    (project / "z.py").write_text(MOVE)  # checked after m.py: never reached
    real = getattr(fileio.os, step)

    def interrupt(*args, **kwargs):
        if step != "chmod" or str(args[0]).endswith(".torchlint.tmp"):
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(fileio.os, step, interrupt)
    result = in_process(project, monkeypatch, "--fix", "--no-cache", "m.py", "z.py")
    assert result.exit_code == 130
    assert error_lines(result) == [
        "torchlint: error: interrupted; files already fixed were written whole, the others are untouched"]
    assert path.read_text() == MOVE
    assert (project / "z.py").read_text() == MOVE
    assert sorted(p.name for p in project.iterdir()) == ["m.py", "pyproject.toml", "z.py"]  # no temp file


SLOW_RUN = """\
import sys, time
sys.path.pop(0)
from torchlint import runner
from torchlint.cli import main
from torchlint.config import resolve_settings
check_file = runner.check_file

def slow_check_file(*args):
    time.sleep(0.25)
    return check_file(*args)

runner.check_file = slow_check_file
main(["--fix", "--no-cache", "--jobs", "2", "."])
"""
STATE = re.compile(rb"\) (\S) (\d+) ")  # /proc/PID/stat: "pid (name) state ppid ..."


def process_state(pid: int) -> tuple[str, int] | None:
    """A process's state letter and parent (Linux /proc); None once it is gone."""
    try:
        match = STATE.search(Path(f"/proc/{pid}/stat").read_bytes())
    except OSError:
        return None
    return match.group(1).decode(), int(match.group(2))


def children(pid: int) -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and (process_state(int(entry.name)) or ("", 0))[1] == pid]


def alive(pids) -> list[int]:
    """Those of ``pids`` still running (a zombie has ended; PID 1 may be slow to reap it)."""
    return [pid for pid in pids if (process_state(pid) or ("Z", 0))[0] != "Z"]


def wait_until(condition, what: str, limit: float = 120):
    """Poll for ``condition()``; the limit only stops a test that would otherwise hang."""
    deadline = time.monotonic() + limit
    while not (found := condition()):
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)
    return found


def fixed_count(files) -> int:
    return sum(path.read_text() == MOVE_FIXED for path in files)


def contents(project) -> dict:
    return {path.name: path.read_bytes() for path in sorted(project.iterdir())}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_during_a_parallel_run(project):
    files = [project / f"m{i:03}.py" for i in range(160)]  # 8 batches of 20 files, a quarter of a second each
    for path in files:
        path.write_text(MOVE)
    process = subprocess.Popen([sys.executable, "-c", SLOW_RUN], cwd=project, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True)
    wait_until(lambda: fixed_count(files), "a file fixed")  # the workers are busy fixing
    workers = children(process.pid)
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole group
    _, stderr = process.communicate()
    assert process.returncode == 130
    assert stderr.decode().splitlines() == [
        "torchlint: error: interrupted; files already fixed were written whole, the others are untouched"]
    assert alive(workers) == []  # the workers stopped with it
    texts = [path.read_text() for path in files]
    # each worker stopped after the file in hand, not at the end of its batch or of the queue
    assert set(texts) <= {MOVE, MOVE_FIXED} and texts.count(MOVE_FIXED) < 160
    assert not list(project.glob("*.tmp")) and not list(project.glob(".*.tmp"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill_9_of_the_parent_ends_its_workers(project):
    """The workers of a `-j2` fix die with their parent: none is alive after a SIGKILL of the
    parent, and no file changes once they are gone."""
    files = [project / f"m{i:03}.py" for i in range(600)]
    for path in files:
        path.write_text(MOVE)
    process = subprocess.Popen([sys.executable, "-m", "torchlint", "--fix", "--no-cache", "-j2", "."], cwd=project,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = wait_until(lambda: fixed_count(files) and children(process.pid), "the workers fixing files")
    assert process.poll() is None, "the run ended before it could be killed: give it more files"
    process.kill()
    process.wait()
    wait_until(lambda: not alive(workers), f"the workers {alive(workers)} ending with their parent")
    before = contents(project)
    time.sleep(1)
    assert contents(project) == before
    assert set(before.values()) <= {MOVE.encode(), MOVE_FIXED.encode(), GUIDE_RULES_CONFIG.encode()}
    assert fixed_count(files) < len(files)


def test_an_edit_saved_while_the_fixed_file_is_written_is_kept(project, monkeypatch):
    """The editor saves between torchlint's read and its rename (here: while the new file is
    synced to disk): the file is left with the editor's text, and the run says so."""
    path = project / "m.py"
    path.write_text(MOVE)
    theirs = MOVE + "y = 1  # saved from the editor while torchlint wrote\n"
    fsync = fileio.os.fsync

    def fsync_then_someone_saves(fd):
        fsync(fd)
        path.write_text(theirs)

    monkeypatch.setattr(fileio.os, "fsync", fsync_then_someone_saves)
    result = in_process(project, monkeypatch, "--fix", "--no-cache", "m.py")
    assert result.exit_code == 2
    assert error_lines(result) == [
        "torchlint: error: m.py: changed on disk while torchlint was working; not overwritten, run again"]
    assert path.read_text() == theirs
    assert sorted(p.name for p in project.iterdir()) == ["m.py", "pyproject.toml"]  # no temp file


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_fix_as_root_keeps_another_users_file_theirs(project):
    path = project / "m.py"
    path.write_text(MOVE)
    os.chown(path, 4321, 8765)
    path.chmod(0o640)
    assert fix(project, "m.py").returncode == 0
    assert path.read_text() == MOVE_FIXED
    info = path.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (4321, 8765, 0o640)


def test_a_file_whose_owner_cannot_be_kept_is_written_in_place(project, monkeypatch):
    """A user who may write another user's file but not give a new file to them (chown refused):
    the fixed text goes into the file itself, as Ruff and Black write, and it stays theirs."""
    path = project / "m.py"
    path.write_text(MOVE)
    inode = path.stat().st_ino
    real_stat = type(path).stat

    def owned_by_someone_else(self, *args, **kwargs):
        info = real_stat(self, *args, **kwargs)
        if self.name != "m.py":
            return info
        return os.stat_result((info.st_mode, info.st_ino, info.st_dev, info.st_nlink, 4321, 8765, *info[6:]))

    def refuse(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(type(path), "stat", owned_by_someone_else)
    monkeypatch.setattr(fileio.os, "chown", refuse)
    result = in_process(project, monkeypatch, "--fix", "--no-cache", "m.py")
    assert result.exit_code == 0, result.output
    assert path.read_text() == MOVE_FIXED
    assert path.stat().st_ino == inode
    assert sorted(p.name for p in project.iterdir()) == ["m.py", "pyproject.toml"]


def test_fix_writes_through_hard_links(project):
    path = project / "m.py"
    path.write_text(MOVE)
    (project / "elsewhere").mkdir()
    link = project / "elsewhere" / "same.py"
    os.link(path, link)
    assert fix(project, "m.py").returncode == 0
    assert path.read_text() == link.read_text() == MOVE_FIXED
    assert path.stat().st_ino == link.stat().st_ino and path.stat().st_nlink == 2


@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_file_reached_by_two_names_is_fixed_once_in_a_parallel_run(project, link):
    (project / "m.py").write_text(MOVE)
    (project / "other.py").write_text(MOVE)
    (project / "alias.py").symlink_to("m.py") if link == "symbolic" else os.link(project / "m.py", project / "alias.py")
    result = run_torchlint("--fix", "--no-cache", "-j2", ".", cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stderr == b"" and "Found 2 errors (2 fixed, 0 remaining)." in result.stdout.decode()
    assert (project / "m.py").read_text() == (project / "other.py").read_text() == MOVE_FIXED


def test_a_crash_in_a_rule_stops_neither_the_run_nor_the_other_files(project, monkeypatch):
    (project / "a.py").write_text(MOVE)
    (project / "b.py").write_text(MOVE)
    check_text = runner.check_text

    def crash_on_a(source, path, *args, **kwargs):
        if path.endswith("a.py"):
            raise AttributeError("'NoneType' object has no attribute 'value'")
        return check_text(source, path, *args, **kwargs)

    monkeypatch.setattr(runner, "check_text", crash_on_a)
    result = in_process(project, monkeypatch, "--fix", "--no-cache", ".")
    assert result.exit_code == 2
    assert error_lines(result) == [
        "torchlint: error: a.py: internal error (AttributeError: 'NoneType' object has no attribute 'value'); "
        "the file was left as it was. Please report it (set TORCHLINT_DEBUG=1 for the traceback)"]
    assert (project / "a.py").read_text() == MOVE
    assert (project / "b.py").read_text() == MOVE_FIXED


def test_one_process_checks_the_largest_files_first_and_reports_in_the_given_order(tmp_path, monkeypatch):
    # the largest first keeps the process's peak memory at the largest file's (see check_files)
    files = []
    for name, lines in (("small.py", 1), ("large.py", 300), ("medium.py", 30), ("gone.py", 0)):
        path = tmp_path / name
        if lines:
            path.write_text(LEAK + "x = 1\n" * lines)
        files.append(path)
    seen = []
    real = runner.check_file
    monkeypatch.setattr(runner, "check_file", lambda path, *rest: seen.append(path.name) or real(path, *rest))
    results = runner.check_files(files, resolve_settings(tmp_path / "small.py"), runner.Options(), jobs=1)
    assert seen == ["large.py", "medium.py", "small.py", "gone.py"]
    assert [Path(result.path).name for result in results] == ["small.py", "large.py", "medium.py", "gone.py"]
