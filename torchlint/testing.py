"""Fixture tests for rules, torchlint's own (tests/test_rules.py) and a plugin's: a folder of
files that show what a rule reports and what it leaves alone.

  bad*.py        each expected finding marked on its line: ``# expect: XYZ001`` (or ``XYZ001, TL201``)
  bad*.fixed.py  the exact output of ``--fix --unsafe-fixes`` with only that rule selected
  good*.py       the traps: no finding at all

A first line ``# fixture: target-torch=1.13 target-gpu=t4`` sets settings for that file. A plugin
checks its rules with ``assert check_fixtures(MyRule, Path("fixtures/my_rule")) == []``.
"""

from __future__ import annotations

import re
from pathlib import Path

from torchlint.config import Settings, resolve_settings
from torchlint.engine import fix_source, lint_source
from torchlint.lazy import libcst as cst

EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>[A-Z]{2,5}\d{3}(?:\s*,\s*[A-Z]{2,5}\d{3})*)")
DIRECTIVE = re.compile(r"^#\s*fixture:\s*(?P<options>.*)$", re.MULTILINE)


def fixture_settings(path: Path, rule, source: str) -> Settings:
    """The settings a fixture is linted with: only ``rule``, unsafe fixes on, no configuration
    file, and the options of its ``# fixture:`` line."""
    options = {}
    match = DIRECTIVE.match(source)
    if match:
        for item in match.group("options").split():
            key, _, value = item.partition("=")
            options[key.replace("-", "_")] = value
    return resolve_settings(path, isolated=True, select=[rule.code], unsafe_fixes=True, **options)


def expected_findings(source: str) -> list[tuple[int, str]]:
    """(0-based line, code) of every ``# expect:`` marker."""
    found = []
    for number, line in enumerate(source.splitlines()):
        match = EXPECT.search(line)
        if match:
            found += [(number, code.strip()) for code in match.group("codes").split(",")]
    return sorted(found)


def check_fixtures(rule, folder: Path) -> list[str]:
    """What is wrong with ``rule`` against the fixtures in ``folder``: a line each, none when the
    bad fixtures find exactly what they mark, the fixed ones are exact, and the good ones are clean."""
    problems: list[str] = []
    bad = [p for p in sorted(folder.glob("bad*.py")) if not p.name.endswith(".fixed.py")]
    good = sorted(folder.glob("good*.py"))
    if not bad or not good:
        problems.append(f"{folder}: needs bad*.py and good*.py fixtures")
    for path in bad:
        source = path.read_text(encoding="utf-8")
        settings = fixture_settings(path, rule, source)
        found = sorted((d.line, d.code) for d in lint_source(source, str(path), settings))
        if not expected_findings(source):
            problems.append(f"{path}: no `# expect:` markers")
        elif found != expected_findings(source):
            problems.append(f"{path}: found {[(line + 1, code) for line, code in found]}, expected "
                            f"{[(line + 1, code) for line, code in expected_findings(source)]}")
        problems += _fixed_problems(path, source, settings)
    for path in good:
        source = path.read_text(encoding="utf-8")
        found = lint_source(source, str(path), fixture_settings(path, rule, source))
        problems += [f"{path}:{d.line + 1}: {d.code} {d.message} (a good fixture must be clean)" for d in found]
    return problems


def _fixed_problems(path: Path, source: str, settings: Settings) -> list[str]:
    fixed_path = path.with_name(path.stem + ".fixed.py")
    result = fix_source(source, str(path), settings)
    if not fixed_path.exists():
        return [f"{path}: fixes applied but {fixed_path.name} is missing"] if result.fixed else []
    if result.source != fixed_path.read_text(encoding="utf-8"):
        return [f"{fixed_path}: is not what `--fix --unsafe-fixes` writes"]
    cst.parse_module(result.source)
    if fix_source(result.source, str(path), settings).source != result.source:
        return [f"{fixed_path}: a second --fix changes it again"]
    return []
