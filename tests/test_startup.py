"""Start-up: a file that no rule parses deeply is linted without importing LibCST, PyYAML or
importlib.metadata (torchlint/lazy.py, torchlint/plugins.py); what is deferred still works."""

from __future__ import annotations

import subprocess
import sys
import threading

from conftest import ROOT
from torchlint.analysis.versions import parse_version
from torchlint.lazy import LazyModule
from torchlint.rule import data_table, rule_by_selector

PROBE = """
import sys
from torchlint.cli import main
try:
    main(["--isolated", "--no-cache", "--exit-zero", "-q", sys.argv[1]])
except SystemExit:
    pass
print(" ".join(name for name in ("libcst", "yaml", "importlib.metadata") if name in sys.modules))
"""


def imported_by_a_lint(path) -> set[str]:
    """Which of the deferred modules a fresh interpreter imports to lint ``path``."""
    done = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=True)
    return set(done.stdout.split())


def test_a_file_no_rule_parses_deeply_never_imports_libcst():
    """bench/speed.py times this file as the small clean one."""
    assert imported_by_a_lint(ROOT / "fixtures" / "examples" / "dataset.py") == set()


def test_a_file_with_findings_imports_libcst_when_it_needs_it():
    assert "libcst" in imported_by_a_lint(ROOT / "fixtures" / "examples" / "train.py")


def test_the_lazy_module_becomes_the_real_one():
    import libcst

    lazy = LazyModule("libcst")
    assert not lazy.loaded
    results = []
    threads = [threading.Thread(target=lambda: results.append(lazy.Call)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert lazy.loaded and results == [libcst.Call] * 8
    assert lazy.parse_module is libcst.parse_module and lazy.load() is libcst
    assert LazyModule("libcst").load() is libcst
    try:
        lazy.no_such_name
    except AttributeError as error:
        assert "no_such_name" in str(error)
    else:
        raise AssertionError("an unknown attribute must raise AttributeError")


def test_tl901_versions_are_its_tables_oldest():
    """TL901 names its Lightning versions without reading its YAML table at import; they must agree."""
    table = data_table("lightning_trainer_args.yaml")
    oldest = min((row["version"] for row in table), key=parse_version)
    assert rule_by_selector("TL901").lightning_versions == f">={oldest}"
    docs = rule_by_selector("TL901").docs()  # the table is filled in when the docs are rendered
    assert "<!-- table -->" not in docs and "| `gpus` | `accelerator=\"gpu\", devices=N`" in docs


WARM_UP_PROBE = """
import sys
from torchlint.warm_up import warm_up
warm_up()
print(" ".join(name for name in ("libcst", "libcst.native", "torchlint.positions", "yaml") if name in sys.modules))
"""


def test_the_language_servers_warm_up_loads_what_a_first_lint_would():
    """The server lints torchlint/warm_up.py's script while it starts: LibCST's parser, the
    positions' code generator and the rules' data tables are loaded by then."""
    done = subprocess.run([sys.executable, "-c", WARM_UP_PROBE], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=True)
    assert set(done.stdout.split()) == {"libcst", "libcst.native", "torchlint.positions", "yaml"}
    assert "warming up failed" not in done.stderr


def test_a_failing_warm_up_does_not_stop_the_server(monkeypatch, caplog):
    import torchlint.engine
    from torchlint.warm_up import warm_up

    def broken(*args, **kwargs):
        raise RuntimeError("broken")

    monkeypatch.setattr(torchlint.engine, "lint_source", broken)
    warm_up()
    assert "warming up failed" in caplog.text
