"""The committed rule reference (docs/rules/) matches what the rules' docstrings and metadata
generate (regenerate it with `python -m torchlint.docs`), and each rule's Example fires it while
its Use instead does not."""

from __future__ import annotations

import re
from pathlib import Path

import libcst as cst
import pytest

from torchlint import docs
from torchlint.analysis.versions import version_matches
from torchlint.config import NEWEST_TORCH, resolve_settings
from torchlint.engine import lint_source
from torchlint.output import docs_url
from torchlint.rule import all_rules


def test_committed_docs_are_current():
    assert docs.stale() == [], "docs/rules is out of date: run `python -m torchlint.docs`"


def test_every_rule_has_a_page_at_its_docs_url():
    pages = docs.render()
    for rule in all_rules():
        assert docs_url(rule.code).endswith(f"/docs/rules/{rule.code}.md")
        assert f"{rule.code}.md" in pages
        assert f"({rule.code}.md)" in pages[docs.INDEX]
        assert pages[f"{rule.code}.md"].startswith(f"# {rule.code} {rule.name}\n")


def test_write_then_check(tmp_path):
    (tmp_path / "TL999.md").write_text("a page of a removed rule\n")
    changed = docs.write(tmp_path)
    assert "TL999.md" in changed and not (tmp_path / "TL999.md").exists()
    assert docs.stale(tmp_path) == []
    assert docs.main(["--check", "--out", str(tmp_path)]) == 0


# --- the examples are tests (Fixit's VALID/INVALID, here the docs' own code blocks) -------------------

CODE_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def first_block(docs_text: str, section: str) -> str | None:
    """The first Python code block of a section (``## Example``) of a rule's docs."""
    match = re.search(rf"^## {section}\b.*?$(.*?)(?=^## |\Z)", docs_text, re.DOTALL | re.MULTILINE)
    blocks = CODE_BLOCK.findall(match.group(1)) if match else []
    return blocks[0] if blocks else None


def example_torch(rule) -> str | None:
    """The newest torch a rule applies to, for a rule whose ``torch_versions`` leaves out the newest
    (``load-weights-only`` is about torch < 2.6); None (the default target) for the others."""
    if not rule.torch_versions or version_matches(rule.torch_versions, NEWEST_TORCH):
        return None
    candidates = [(2, minor) for minor in range(NEWEST_TORCH[1], -1, -1)] + [(1, minor) for minor in range(13, -1, -1)]
    found = next(v for v in candidates if version_matches(rule.torch_versions, v))
    return ".".join(map(str, found))


def findings_of(rule, code: str, tmp_path) -> list[str]:
    source = rule.example_prelude + code
    cst.parse_module(source)  # the block parses, with the prelude
    settings = resolve_settings(tmp_path, isolated=True, select=[rule.code], target_torch=example_torch(rule))
    return [d.code for d in lint_source(source, "train.py", settings) if d.code == rule.code]


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_the_example_fires_the_rule(rule, tmp_path):
    example = first_block(rule.docs(), "Example")
    assert example is not None, f"{rule.code}: the Example section has no ```python block"
    assert findings_of(rule, example, tmp_path), f"{rule.code}: its Example does not fire it"


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_use_instead_parses_and_is_clean(rule, tmp_path):
    instead = first_block(rule.docs(), "Use instead")
    assert instead is not None, f"{rule.code}: the Use instead section has no ```python block"
    assert findings_of(rule, instead, tmp_path) == [], f"{rule.code}: its Use instead block fires it"


def test_the_readme_names_the_rules_quiet_in_test_code_beyond_performance():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Test code", 1)[1].split("\n### ", 1)[0]
    named = set(re.findall(r"\bTL\d{3}\b", section))
    assert named == {rule.code for rule in all_rules() if rule.quiet_in_tests and rule.kind != "performance"}
    pages = docs.render()
    for rule in all_rules():
        row = "| In test code | not reported" if rule.silent_in_test_code() else "| In test code | reported |"
        assert row in pages[f"{rule.code}.md"], rule.code
