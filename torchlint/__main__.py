"""``python -m torchlint``: the ``torchlint`` command."""

import os
import sys

# `python -m` puts the current folder first on sys.path, so a `click.py`, `yaml.py` or `libcst.py`
# in the project being linted would be imported, that is run, in place of the real module.
# Linting never runs the linted code: that folder goes (torchlint itself is already imported).
if not sys.flags.safe_path and sys.path and os.path.abspath(sys.path[0] or os.curdir) == os.getcwd():
    del sys.path[0]

from torchlint.cli import entry_point  # noqa: E402 - after the path is safe

if __name__ == "__main__":
    entry_point()
