"""Every rule against its fixtures, exactly.

fixtures/rules/<rule module>/
  bad*.py        each expected finding marked on its line: ``# expect: TL101`` (or ``TL101, TL201``)
  bad*.fixed.py  the exact output of ``--fix --unsafe-fixes`` with only that rule selected
  good*.py       the traps: no finding at all
A first line ``# fixture: target-torch=1.13`` sets options for that file (torchlint/testing.py,
which plugins use for their own rules' fixtures).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import libcst as cst
import pytest

from torchlint.engine import fix_source, lint_source
from torchlint.rule import all_rules
from torchlint.testing import expected_findings
from torchlint.testing import fixture_settings as settings_for

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "rules"


def rule_folder(rule) -> Path:
    return FIXTURES / rule.__module__.rsplit(".", 1)[1]


def cases(prefix: str):
    found = []
    for rule in all_rules():
        for path in sorted(rule_folder(rule).glob(f"{prefix}*.py")):
            if not path.name.endswith(".fixed.py"):
                found.append(pytest.param(rule, path, id=f"{rule.code}-{path.name}"))
    return found


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_every_rule_has_fixtures(rule):
    folder = rule_folder(rule)
    assert list(folder.glob("bad*.py")), f"{folder}: no bad fixture"
    assert list(folder.glob("good*.py")), f"{folder}: no good fixture"
    if rule.fix_applicability != "none":
        assert list(folder.glob("bad*.fixed.py")), f"{folder}: no fixed fixture"


@pytest.mark.parametrize("rule, path", cases("bad"))
def test_bad_fixture_findings(rule, path):
    source = path.read_text(encoding="utf-8")
    diagnostics = lint_source(source, str(path), settings_for(path, rule, source))
    assert expected_findings(source), f"{path}: no `# expect:` markers"
    assert sorted((d.line, d.code) for d in diagnostics) == expected_findings(source)
    for diag in diagnostics:
        assert diag.message and diag.name == rule.name


@pytest.mark.parametrize("rule, path", cases("good"))
def test_good_fixture_is_clean(rule, path):
    source = path.read_text(encoding="utf-8")
    diagnostics = lint_source(source, str(path), settings_for(path, rule, source))
    assert [(d.line + 1, d.code, d.message) for d in diagnostics] == []


@pytest.mark.parametrize("rule, path", cases("bad"))
def test_fixed_fixture_is_exact(rule, path):
    source = path.read_text(encoding="utf-8")
    settings = settings_for(path, rule, source)
    fixed_path = path.with_name(path.stem + ".fixed.py")
    result = fix_source(source, str(path), settings)
    if not fixed_path.exists():
        assert not result.fixed, f"{path}: fixes applied but {fixed_path.name} is missing"
        return
    expected = fixed_path.read_text(encoding="utf-8")
    assert result.source == expected
    cst.parse_module(result.source)  # the fixed code parses
    compile(result.source, str(fixed_path), "exec")  # and compiles
    again = fix_source(result.source, str(path), settings)
    assert again.source == result.source, "a second --fix changed the file again"
    # findings without a fix (or withheld ones) are still reported in the fixed file
    assert all(d.fix is None for d in again.remaining)


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_rule_documentation_sections(rule):
    docs = rule.docs()
    for section in ("## What it does", "## Why is it", "## Example", "## Use instead", "## Fix safety",
                    "## References"):
        assert section in docs, f"{rule.code}: missing section {section!r}"
    assert "https://" in docs.split("## References", 1)[1]
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name)


# --- messages by snapshot: a wording change shows in review -----------------------------------------

SNAPSHOT = "messages.snap"


def render_messages(rule) -> str:
    """Each bad fixture's findings as a reviewer reads them: position, message, and the fix's title
    and applicability."""
    lines = [f"# {rule.code} {rule.name}: the findings of its bad fixtures (TORCHLINT_UPDATE_SNAPSHOTS=1 "
             "pytest tests/test_rules.py rewrites this file)"]
    for path in sorted(rule_folder(rule).glob("bad*.py")):
        if path.name.endswith(".fixed.py"):
            continue
        source = path.read_text(encoding="utf-8")
        for diag in lint_source(source, str(path), settings_for(path, rule, source)):
            lines.append(f"{path.name}:{diag.line + 1}:{diag.col + 1}: {diag.code} {diag.message}")
            if diag.fix is not None:
                lines.append(f"    fix ({diag.fix.applicability}): {diag.fix.title}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_messages_match_the_snapshot(rule):
    snapshot = rule_folder(rule) / SNAPSHOT
    rendered = render_messages(rule)
    if os.environ.get("TORCHLINT_UPDATE_SNAPSHOTS"):
        snapshot.write_text(rendered, encoding="utf-8")
    assert snapshot.exists(), f"{snapshot} is missing: run TORCHLINT_UPDATE_SNAPSHOTS=1 pytest tests/test_rules.py"
    assert rendered == snapshot.read_text(encoding="utf-8")
