from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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
