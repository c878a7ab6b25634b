"""Issue 17, "inputs that stop the whole run": hostile .gitignore patterns and configuration files
get a message (or are skipped, as git skips them), never an internal error, a hang or a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_torchlint
from torchlint.config import ConfigError, resolve_settings
from torchlint.discovery import GitIgnore

SCRIPT = "import torch\nx = torch.zeros(3).cuda()\n"


def test_a_reversed_range_matches_nothing_and_the_other_patterns_still_apply(project):
    # `[z-a].py` once aborted the run with re.error ("bad character range")
    (project / ".gitignore").write_text("[z-a].py\nb.py\n", encoding="utf-8")
    for name in ("a.py", "b.py"):
        (project / name).write_text(SCRIPT, encoding="utf-8")
    result = run_torchlint("--no-cache", ".", cwd=project)
    assert result.returncode == 1, result.stderr
    assert "a.py:2:5: TL201" in result.stdout.decode() and "b.py" not in result.stdout.decode()
    assert b"Traceback" not in result.stderr


def test_a_malformed_pattern_is_skipped_with_a_warning_naming_the_line(tmp_path):
    ignore = GitIgnore(tmp_path, ["build/", "[[:nope:]].py", "*.log"])
    assert len(ignore.patterns) == 2
    [warning] = ignore.warnings
    assert warning.startswith(f"{tmp_path / '.gitignore'}:2: skipped the pattern `[[:nope:]].py`")


def test_many_stars_against_a_long_name_match_without_backtracking(tmp_path):
    # with a backtracking regex this pattern takes minutes on a 60-character name (C(60, 8) splits)
    ignore = GitIgnore(tmp_path, ["*a*a*a*a*a*a*a*a*b"])
    assert ignore.match(tmp_path / ("a" * 60 + ".py"), is_dir=False) is None
    assert ignore.match(tmp_path / ("a" * 60 + "b"), is_dir=False) is True


def write_config(project: Path, name: str, data: bytes) -> None:
    (project / name).write_bytes(data)


ALIAS_BOMB = b"""ignore:
  - &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
  - &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  - &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  - &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
  - &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
  - &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
  - &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
  - [*g,*g,*g,*g,*g,*g,*g,*g,*g]
"""


@pytest.mark.parametrize("name, data, message", [
    # 320 bytes that expand to 9^8 strings: the message once printed all of them
    ("torchlint.yaml", ALIAS_BOMB, "`ignore` must be a list of strings, got [["),
    ("pyproject.toml", b"tool = 5\n", "`tool` must be a table, got 5"),
    ("torchlint.yaml", b'select: ["TL2\xff"]\n', "not UTF-8 text (byte b'\\xff' at offset 13); save it as UTF-8"),
    ("torchlint.yaml", b"target-torch: 2.10\n", "target-torch"),
])
def test_a_hostile_configuration_is_a_short_message_and_exit_2(project, name, data, message):
    (project / "pyproject.toml").unlink()
    write_config(project, name, data)
    (project / "train.py").write_text(SCRIPT, encoding="utf-8")
    result = run_torchlint("--no-cache", "train.py", cwd=project)
    stderr = result.stderr.decode()
    assert result.returncode == 2 and "Traceback" not in stderr
    assert f"{project / name}:" in stderr and message in stderr
    assert len(stderr) < 1000


def test_a_float_target_torch_is_refused_rather_than_read_as_2_1(project):
    # YAML reads 2.10 as the float 2.1: that would silently target the wrong torch
    (project / "pyproject.toml").unlink()
    write_config(project, "torchlint.yaml", b"target-torch: 2.10\n")
    with pytest.raises(ConfigError, match="quote"):
        resolve_settings(project / "train.py")


def test_a_toml_float_target_torch_is_refused_rather_than_read_as_2_1(project):
    # the issue's own case: `target-torch = 2.10` in pyproject.toml is the TOML float 2.1
    write_config(project, "pyproject.toml", b"[tool.torchlint]\ntarget-torch = 2.10\n")
    with pytest.raises(ConfigError, match=r"quotes.*2\.10"):
        resolve_settings(project / "train.py")
