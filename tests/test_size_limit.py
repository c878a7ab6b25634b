"""Issue 16: past `max-file-size` a file gets Python's syntax check and a TL000 that says why
nothing else ran, never minutes of analysis."""

from __future__ import annotations

import pytest

from torchlint.config import DEFAULT_MAX_FILE_SIZE, ConfigError, resolve_settings
from torchlint.engine import lint_source

SCRIPT = "import torch\n\nfor step in range(10):\n    x = torch.zeros(3).cuda()\n"


def settings_with(tmp_path, value):
    (tmp_path / "pyproject.toml").write_text(f"[tool.torchlint]\nmax-file-size = {value}\n", encoding="utf-8")
    return resolve_settings(tmp_path / "train.py")


def test_a_file_over_the_limit_gets_one_tl000_naming_the_setting(tmp_path):
    settings = settings_with(tmp_path, 100)
    source = SCRIPT + "# padding\n" * 20
    [only] = lint_source(source, str(tmp_path / "train.py"), settings)
    assert only.code == "TL000" and "over the `max-file-size`" in only.message
    assert [d.code for d in lint_source(SCRIPT, str(tmp_path / "train.py"), settings_with(tmp_path, 1000))] == ["TL201"]


def test_a_file_over_the_limit_still_gets_its_syntax_error(tmp_path):
    [only] = lint_source(SCRIPT + "x = (\n" + "# padding\n" * 20, str(tmp_path / "train.py"), settings_with(tmp_path, 100))
    assert only.code == "TL000" and "never closed" in only.message and only.line == 4


@pytest.mark.parametrize("value, size", [('"2MB"', 2 << 20), ('"512 KB"', 512 << 10), ("4096", 4096)])
def test_sizes_are_bytes_or_kb_and_mb(tmp_path, value, size):
    assert settings_with(tmp_path, value).max_file_size == size


@pytest.mark.parametrize("value", ['"big"', "0", "-5", "true", '"2GB"'])
def test_a_bad_size_names_the_file_and_the_accepted_forms(tmp_path, value):
    with pytest.raises(ConfigError, match=r"pyproject.toml: `max-file-size` must be a positive number"):
        settings_with(tmp_path, value)


def test_the_default_is_one_mebibyte_and_in_the_cache_fingerprint(tmp_path):
    default = resolve_settings(tmp_path, isolated=True)
    assert default.max_file_size == DEFAULT_MAX_FILE_SIZE == 1 << 20
    assert settings_with(tmp_path, "4096").fingerprint != settings_with(tmp_path, "8192").fingerprint


def test_far_over_the_limit_not_even_the_syntax_is_checked(tmp_path):
    # past 8 times the limit CPython's compiler would take about 80 MB of memory per MB of source
    [only] = lint_source(SCRIPT + "x = (\n" + "# padding\n" * 100, str(tmp_path / "train.py"), settings_with(tmp_path, 100))
    assert only.code == "TL000" and "not even its syntax was checked" in only.message


def test_a_large_file_that_no_rule_reads_deeply_is_not_a_finding(tmp_path):
    # torch's own 1 MB stubs (_VariableFunctions.pyi) name `cuda` and `to` but reach no rule's
    # analysis: they cost a CPython parse, not LibCST's, so the limit does not apply
    stub = "import torch\n\n" + "def to(self, device: torch.device) -> Tensor: ...\n" * 40
    assert len(stub) > 1000
    assert lint_source(stub, str(tmp_path / "stub.pyi"), settings_with(tmp_path, 1000)) == []


def test_over_the_limit_the_prechecks_stop_at_the_first_that_passes(tmp_path, monkeypatch):
    """Whether any rule would read the file is all the limit asks; a later precheck's cost (the
    costliest are linear in the file, and a 5 MB file has many shapes) is not paid."""
    from torchlint.rule import Rule

    asked = []
    original = Rule.precheck.__func__

    def counted(cls, index):
        asked.append(cls.code)
        return original(cls, index)

    settings = settings_with(tmp_path, 300)
    rules = tuple(rule for rule in settings.rules_for(str(tmp_path / "train.py")) if rule.code in ("TL101", "TL201"))
    for rule in rules:
        monkeypatch.setattr(rule, "precheck", classmethod(counted))
    script = ("import torch\n\nlosses = []\nfor step in range(10):\n    x = torch.zeros(3).cuda()\n"
              "    loss = model(x).sum()\n    loss.backward()\n    losses.append(loss)\n")
    assert [d.code for d in lint_source(script, str(tmp_path / "train.py"), settings, rules)] == ["TL201", "TL101"]
    assert asked == ["TL101", "TL201"]  # under the limit, each rule's precheck decides for itself
    asked.clear()
    [only] = lint_source(script + "# padding\n" * 20, str(tmp_path / "train.py"), settings, rules)
    assert only.code == "TL000" and "over the `max-file-size`" in only.message
    assert asked == ["TL101"]  # it passes: no later precheck is asked
