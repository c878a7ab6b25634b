"""Third-party rules through the entry-point group `torchlint.rules` (issue 14), proved with the
example plugin package in tests/plugin_example/: discovery after the built-in rules, selection,
noqa, options, fixtures, docs, `torchlint rules`' origin, and plugins that cannot be used (skipped
with a message naming their distribution and entry point; the built-in rules still lint).

Most tests make the example visible the way an installed package is: a ``*.dist-info`` folder
with its METADATA and entry_points.txt on ``sys.path`` (importlib.metadata reads exactly that);
one installs the package for real with pip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import LEAK, ROOT, run_torchlint
from torchlint import docs
from torchlint.config import ConfigError, resolve_settings
from torchlint.engine import lint_source
from torchlint.output import docs_url
from torchlint.plugins import GROUP
from torchlint.rule import all_rules, builtin_rules, plugin_problems, reload_rules, rule_by_selector, rule_origin
from torchlint.testing import check_fixtures

EXAMPLE = ROOT / "tests" / "plugin_example"
ORIGIN = "torchlint-example-plugin 0.1.0"
SEEDED = "import torch\n\nfor x, y in loader:\n    torch.manual_seed(0)\n    model(x).sum().backward()\n"


def install_metadata(site: Path, name: str, version: str, entry_points: dict[str, str]) -> None:
    """What pip leaves in site-packages for a distribution, reduced to what entry points need."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = [f"[{GROUP}]"] + [f"{key} = {value}" for key, value in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A site folder on sys.path holding the example plugin's metadata (its code is found in
    tests/plugin_example); the rules are found again on the way in and out."""
    folder = tmp_path / "site"
    install_metadata(folder, "torchlint-example-plugin", "0.1.0", {"example": "torchlint_example_plugin.seed_in_loop"})
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(folder))
    reload_rules()
    yield folder
    monkeypatch.undo()
    for module in [m for m in sys.modules if m.startswith(("torchlint_example_plugin", "broken_plugin"))]:
        del sys.modules[module]
    reload_rules()


def environment(site: Path) -> dict[str, str]:
    """For a subprocess: the site folder and the example's code on its path."""
    return {"PYTHONPATH": os.pathsep.join([str(site), str(EXAMPLE), os.environ.get("PYTHONPATH", "")])}


def seed_rule():
    return rule_by_selector("XMP001")


# --- discovery, selection, noqa, options, fixtures ------------------------------------------------------

def test_the_plugin_rules_come_after_the_built_in_ones(site):
    rules = all_rules()
    assert rules[:len(builtin_rules())] == builtin_rules()
    assert [r.code for r in rules[len(builtin_rules()):]] == ["XMP001"]
    assert rule_origin(seed_rule()) == ORIGIN and rule_origin(rules[0]) == "torchlint"
    assert plugin_problems() == ()


def test_selectors_reach_plugin_rules(site, tmp_path):
    assert resolve_settings(tmp_path, isolated=True, select=["XMP"]).selected == {"XMP001"}
    assert resolve_settings(tmp_path, isolated=True, select=["seed-in-loop"]).selected == {"XMP001"}
    assert "XMP001" in resolve_settings(tmp_path, isolated=True, select=["ALL"]).selected
    assert "XMP001" in resolve_settings(tmp_path, isolated=True).selected  # on by default, as the plugin says
    assert "XMP001" not in resolve_settings(tmp_path, isolated=True, ignore=["XMP001"]).selected


def test_noqa_and_options(site, tmp_path):
    settings = resolve_settings(tmp_path, isolated=True, select=["XMP001"])
    assert [d.code for d in lint_source(SEEDED, "train.py", settings)] == ["XMP001"]
    assert lint_source(SEEDED.replace("(0)", "(0)  # noqa: XMP001"), "train.py", settings) == []
    assert [d.code for d in lint_source(SEEDED.replace("(0)", "(0)  # noqa: TL101"), "train.py", settings)] == ["XMP001"]
    own = SEEDED.replace("import torch", "from mylib import seed_everything").replace("torch.manual_seed", "seed_everything")
    assert lint_source(own, "train.py", settings) == []
    (tmp_path / "pyproject.toml").write_text('[tool.torchlint]\nselect = ["XMP"]\n\n'
                                             '[tool.torchlint.seed-in-loop]\nfunctions = ["mylib.seed_everything"]\n')
    assert [d.code for d in lint_source(own, "train.py", resolve_settings(tmp_path))] == ["XMP001"]
    (tmp_path / "pyproject.toml").write_text('[tool.torchlint.seed-in-loop]\nfunctionz = []\n')
    with pytest.raises(ConfigError, match="options of XMP001: functions"):
        resolve_settings(tmp_path)


def test_the_example_fixtures(site):
    assert check_fixtures(seed_rule(), EXAMPLE / "fixtures" / "seed_in_loop") == []


def test_fixture_checks_catch_a_wrong_rule(site, tmp_path):
    (tmp_path / "bad.py").write_text("import torch\n\nfor x in loader:\n    model(x).sum().backward()  # expect: XMP001\n")
    (tmp_path / "good.py").write_text(SEEDED)
    problems = check_fixtures(seed_rule(), tmp_path)
    assert any("bad.py: found []" in p for p in problems) and any("good.py:4: XMP001" in p for p in problems)


def test_the_cache_fingerprint_knows_the_plugin_version(site, tmp_path):
    with_plugin = resolve_settings(tmp_path, isolated=True).fingerprint
    shutil.rmtree(next(site.glob("*.dist-info")))
    install_metadata(site, "torchlint-example-plugin", "0.2.0", {"example": "torchlint_example_plugin.seed_in_loop"})
    reload_rules()
    assert rule_origin(seed_rule()) == "torchlint-example-plugin 0.2.0"
    assert resolve_settings(tmp_path, isolated=True).fingerprint != with_plugin


# --- docs ---------------------------------------------------------------------------------------------

def test_docs_pages_of_a_plugin(site, tmp_path):
    pages = docs.render(plugin="torchlint-example-plugin")
    assert sorted(pages) == [docs.INDEX, "XMP001.md"]
    page = pages["XMP001.md"]
    assert page.startswith("# XMP001 seed-in-loop\n") and "## Why is it wrong" in page
    assert f"| Origin | `{ORIGIN}` (plugin, entry point `example = torchlint_example_plugin.seed_in_loop`) |" in page
    assert f"## XMP: {ORIGIN}" in pages[docs.INDEX] and "--plugin torchlint-example-plugin" in pages[docs.INDEX]
    # torchlint's own reference is unchanged by an installed plugin
    assert "XMP001.md" not in docs.render() and docs.stale() == []
    out = tmp_path / "pages"
    assert docs.main(["--plugin", "torchlint_example_plugin", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [docs.INDEX, "XMP001.md"]
    assert docs.main(["--plugin", "torchlint-example-plugin", "--out", str(out), "--check"]) == 0
    assert docs.main(["--plugin", "no-such-plugin", "--out", str(out)]) == 2


def test_a_plugin_rule_links_its_own_page_or_none(site, monkeypatch):
    assert docs_url("XMP001") is None  # the example publishes no page: no link to torchlint's
    monkeypatch.setattr(seed_rule(), "documentation_url", "https://example.org/XMP001")
    assert docs_url("XMP001") == "https://example.org/XMP001"
    assert docs_url("TL101").endswith("/docs/rules/TL101.md")


# --- the command line ------------------------------------------------------------------------------------

def test_cli_lists_lints_and_documents_plugin_rules(site, tmp_path):
    env = environment(site)
    listing = json.loads(run_torchlint("rules", "--format", "json", env=env).stdout)
    origins = {entry["code"]: entry["origin"] for entry in listing}
    assert origins["XMP001"] == ORIGIN and origins["TL101"] == "torchlint"
    text = run_torchlint("rules", env=env).stdout.decode().splitlines()
    assert text[-1].startswith("XMP001  seed-in-loop") and text[-1].endswith(f"[from {ORIGIN}]")
    assert all("[from" not in line for line in text[:-1])
    page = run_torchlint("rule", "XMP001", env=env).stdout.decode()
    assert "# seed-in-loop (XMP001)" in page and ORIGIN in page and "## What it does" in page
    (tmp_path / "train.py").write_text(SEEDED)
    result = run_torchlint("--isolated", "--no-cache", "--select", "XMP001", "train.py", cwd=tmp_path, env=env)
    assert result.returncode == 1 and "train.py:4:5: XMP001" in result.stdout.decode()
    result = run_torchlint("--isolated", "--no-cache", "--format", "json", "train.py", cwd=tmp_path, env=env)
    found = json.loads(result.stdout)[0]["diagnostics"]
    assert [d["code"] for d in found] == ["XMP001"] and "codeDescription" not in found[0]


# --- plugins that cannot be used -------------------------------------------------------------------------

BROKEN = '''"""
## What it does
Nothing.
"""
from torchlint.rule import Rule


class Clash(Rule):
    code = "{code}"
    name = "{name}"
    kind = "correctness"
    summary = "a rule that cannot be registered"
    triggers = ("x",)
'''


def broken_plugin(site: Path, module: str, code: str, name: str) -> None:
    (site / f"{module}.py").write_text(BROKEN.format(code=code, name=name))


@pytest.mark.parametrize("entry, says", [
    ("no_such_module", "cannot be loaded (ModuleNotFoundError"),
    ("os:sep", "names neither a module nor a subclass of torchlint.rule.Rule"),
    ("json", "defines no rule"),
    ("broken_plugin_tl", "uses torchlint's own prefix TL"),
    ("broken_plugin_name", "its name `retained-graph` is torchlint's TL101 retained-graph"),
    ("broken_plugin_twin", f"its code XMP001 is {ORIGIN}'s XMP001 seed-in-loop"),
    ("broken_plugin_bad:Clash", "kind must be one of"),
])
def test_a_plugin_that_cannot_be_used_is_skipped_and_named(site, entry, says):
    broken_plugin(site, "broken_plugin_tl", "TL999", "tl-prefix")
    broken_plugin(site, "broken_plugin_name", "ZZZ001", "retained-graph")
    broken_plugin(site, "broken_plugin_twin", "XMP001", "seed-twin")
    broken_plugin(site, "broken_plugin_bad", "ZZZ002", "bad-kind")
    (site / "broken_plugin_bad.py").write_text((site / "broken_plugin_bad.py").read_text().replace(
        '"correctness"', '"style"'))
    install_metadata(site, "zz-broken-plugin", "9.9", {"broken": entry})
    reload_rules()
    problems = plugin_problems()
    assert len(problems) == 1, problems
    assert f"plugin `broken = {entry}` (entry point of zz-broken-plugin 9.9 in group torchlint.rules)" in problems[0]
    assert says in problems[0]
    assert [r.code for r in all_rules()[len(builtin_rules()):]] == ["XMP001"]  # the good plugin still loads


def test_a_broken_plugin_does_not_break_linting(site, tmp_path):
    install_metadata(site, "zz-broken-plugin", "9.9", {"broken": "no_such_module"})
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "train.py").write_text(LEAK)
    result = run_torchlint("--no-cache", "train.py", cwd=tmp_path, env=environment(site))
    assert result.returncode == 1 and "train.py:7:5: TL101" in result.stdout.decode()
    assert "warning: plugin `broken = no_such_module` (entry point of zz-broken-plugin 9.9" in result.stderr.decode()
    result = run_torchlint("rules", env=environment(site))
    assert result.returncode == 0 and "zz-broken-plugin 9.9" in result.stderr.decode()


# --- a real install -------------------------------------------------------------------------------------

def test_pip_install_of_the_example_plugin(tmp_path):
    """``pip install`` of the example package (no index, no build isolation: the setuptools of this
    environment builds it), then torchlint in a fresh process finds its rule."""
    pytest.importorskip("setuptools")
    source = tmp_path / "source"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    target = tmp_path / "installed"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                              "--no-build-isolation", "--target", str(target), str(source)],
                             capture_output=True, timeout=300)
    if install.returncode != 0:
        pytest.skip(f"pip cannot build the example here: {install.stderr.decode()[-300:]}")
    env = {"PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}
    listing = json.loads(run_torchlint("rules", "--format", "json", env=env).stdout)
    assert {entry["code"]: entry["origin"] for entry in listing}["XMP001"] == ORIGIN
    (tmp_path / "train.py").write_text(SEEDED)
    result = run_torchlint("--isolated", "--no-cache", "--select", "XMP", "train.py", cwd=tmp_path, env=env)
    assert "train.py:4:5: XMP001" in result.stdout.decode() and not result.stderr


def test_the_cheap_scan_finds_the_group_only_where_an_entry_points_file_declares_it(tmp_path, monkeypatch):
    """Start-up skips importlib.metadata when no metadata folder on sys.path names the group; the
    scan must say yes for a declared group, and for an archive on the path (which it cannot read)."""
    from torchlint.plugins import _may_declare

    folder = tmp_path / "site"
    install_metadata(folder, "some-plugin", "1.0", {"example": "some_plugin.rules"})
    (folder / "other-1.0.dist-info").mkdir()  # a distribution without entry points
    monkeypatch.syspath_prepend(str(folder))
    assert _may_declare(GROUP)
    assert not _may_declare("torchlint.no-such-group")
    archive = tmp_path / "packages.zip"
    archive.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip
    monkeypatch.syspath_prepend(str(archive))
    assert _may_declare("torchlint.no-such-group")
