"""The committed rule reference (docs/rules/) matches what the rules' docstrings and metadata
generate; regenerate it with `python -m torchlint.docs`."""

from __future__ import annotations

from torchlint import docs
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
