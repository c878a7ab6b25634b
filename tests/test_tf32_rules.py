"""TL705 tf32-matmul and TL706 tf32-api give advice about the same settings: together they must
neither contradict each other nor undo each other's fixes (the fixes reach a fixpoint), on a torch
with the `fp32_precision` settings and on one without."""

from __future__ import annotations

import pytest

from torchlint.config import resolve_settings
from torchlint.engine import fix_source, lint_source

NO_SETTING = """\
import torch

model = torch.nn.Linear(32, 1).cuda()
for x in loader:
    model(x.cuda()).sum().backward()
"""

LEGACY_SETTING = NO_SETTING.replace("import torch\n", "import torch\n\ntorch.backends.cuda.matmul.allow_tf32 = True\n")


def settings(tmp_path, torch: str):
    return resolve_settings(tmp_path, isolated=True, select=["TL705", "TL706"], unsafe_fixes=True,
                            target_torch=torch)


@pytest.mark.parametrize("torch", ["2.8", "2.9", "2.13"])
@pytest.mark.parametrize("source", [NO_SETTING, LEGACY_SETTING], ids=["no-setting", "legacy-setting"])
def test_the_two_rules_reach_a_fixpoint(tmp_path, torch, source):
    options = settings(tmp_path, torch)
    fixed = fix_source(source, "train.py", options).source
    assert fix_source(fixed, "train.py", options).source == fixed
    assert [d.code for d in lint_source(fixed, "train.py", options)] == []


def test_tf32_matmul_advice_is_not_reported_as_legacy(tmp_path):
    # TL705's fix sets the old and the new matmul state together; TL706 leaves it alone
    fixed = fix_source(NO_SETTING, "train.py", settings(tmp_path, "2.13")).source
    assert 'torch.set_float32_matmul_precision("high")' in fixed


def test_a_legacy_switch_is_migrated_not_advised_twice(tmp_path):
    options = settings(tmp_path, "2.13")
    assert [d.code for d in lint_source(LEGACY_SETTING, "train.py", options)] == ["TL706"]
    fixed = fix_source(LEGACY_SETTING, "train.py", options).source
    assert 'torch.backends.cuda.matmul.fp32_precision = "tf32"' in fixed and "allow_tf32" not in fixed
    # on a torch without the new settings the switch is the right spelling, and TL705 is satisfied
    assert [d.code for d in lint_source(LEGACY_SETTING, "train.py", settings(tmp_path, "2.8"))] == []
