from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A shell without job control starts a background command (`pytest ... &`) with SIGINT ignored, and
# every process it starts inherits that: the tests that press Ctrl-C on torchlint would see it
# ignored. With Python's own handler here, the processes the tests start get the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The classic loss-list leak (TL101 on line 7, column 5; the safe fix detaches the loss).
LEAK = """\
import torch

losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    losses.append(loss)
"""
LEAK_FIXED = LEAK.replace("losses.append(loss)", "losses.append(loss.detach())")
# A pyproject that selects the five rules whose codes DESIGN.md fixes: tests that compare whole
# reports use it, so that a rule added later does not change what they see.
GUIDE_RULES_CONFIG = '[tool.torchlint]\nselect = ["TL101", "TL201", "TL301", "TL401", "TL501"]\n'


def run_torchlint(*args: str, cwd: Path | None = None, input: str | bytes | None = None,
                  env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess (exit codes and stdout/stderr as a user sees them)."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("TORCHLINT_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "torchlint", *args], cwd=cwd, capture_output=True,
                          input=input.encode() if isinstance(input, str) else input, env=full_env)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty project folder with its own pyproject (so the repository's config is not found)."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    return tmp_path
