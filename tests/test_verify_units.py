"""The pieces of `torchlint verify` that need no training run: the verdict on given trajectories,
the noise bands of step-time and memory comparisons, and which fixes are measured together.
(test_verify.py runs real scripts end to end.)"""

from __future__ import annotations

import math
import random

import pytest

from harness_helpers import LowerLearningRateClaimedSafe
from torchlint.config import resolve_settings
from torchlint.engine import fix_source, lint_source
from torchlint.harness import fix_plan, measures
from torchlint.harness.runner import RunResult
from torchlint.harness.verdict import AppliedFix, LossNoise, Reproducibility, judge, loss_max_rel_diff

UNSAFE = [AppliedFix("TL999", 3, "unsafe")]


def run(losses, step_times=None, peak=300 << 20, growth=0) -> RunResult:
    return RunResult(finished=True, steps=len(losses), losses=list(losses),
                     step_time_s=None if not step_times else sorted(step_times)[len(step_times) // 2],
                     peak_memory_bytes=peak, memory_growth_bytes=growth, world_size=1, error=None,
                     step_times_s=list(step_times or []))


def trajectory(steps: int, seed: int, rate: float, level: float = 1.0, jitter: float = 0.05) -> list[float]:
    """A loss that decays at ``rate`` per step towards 0.1, with minibatch jitter."""
    rng = random.Random(seed)
    return [0.1 + level * math.exp(-rate * step) * (1 + jitter * rng.uniform(-1, 1)) for step in range(steps)]


def unsafe_verdict(original, fixed, noise_run):
    noise = LossNoise.measure(original, noise_run)
    return judge(run(original), run(fixed), UNSAFE, device="cpu", noise=noise)


@pytest.mark.parametrize("steps", [1, 2, 3, 5, 9, 10, 30, 99, 250])
@pytest.mark.parametrize("rate", [0.0, 0.003, 0.05])  # not training, barely (the 9% case), clearly
def test_a_fix_whose_run_matches_the_original_passes_for_any_number_of_steps(steps, rate):
    original = trajectory(steps, 0, rate)
    verdict = unsafe_verdict(original, list(original), trajectory(steps, 1, rate))
    assert verdict.name == "pass", verdict.reasons
    assert "its losses match the original's at every step" in verdict.reasons[1]


def test_an_original_that_does_not_train_is_said_and_is_not_the_fixes_failure():
    original = trajectory(30, 0, 0.0)
    verdict = unsafe_verdict(original, list(original), trajectory(30, 1, 0.0))
    assert verdict.name == "pass"
    assert "the original itself does not train over these 30 steps" in verdict.reasons[1]


@pytest.mark.parametrize("steps", [1, 4, 30])
def test_a_diverging_fix_fails(steps):
    original = trajectory(steps, 0, 0.05)
    diverged = [loss * 10 ** (4 * (step + 1)) for step, loss in enumerate(original)]  # lr x 1e4
    verdict = unsafe_verdict(original, diverged, trajectory(steps, 1, 0.05))
    assert verdict.name == "fail"
    assert "trains worse than the original" in verdict.reasons[1]


def test_a_non_finite_loss_fails():
    original = trajectory(10, 0, 0.05)
    verdict = unsafe_verdict(original, original[:5] + [math.inf] * 5, trajectory(10, 1, 0.05))
    assert verdict.name == "fail" and "the loss is inf at step 6" in verdict.reasons[1]


SAFE = [AppliedFix("TL999", 3, "safe")]


def test_a_safe_fix_on_a_gpu_that_drifts_by_itself_is_held_to_that_drift():
    # On an H200, ResNet-20 with cudnn.benchmark: two runs of the original under the same seeds
    # drift apart by a few percent by step 5, so rtol 1e-3 failed every safe fix (zoo, 2026-11-26).
    original = trajectory(8, 0, 0.05)
    repeat = [loss * (1 + 0.01 * (step % 2)) for step, loss in enumerate(original)]
    drift = Reproducibility(loss_max_rel_diff(original, repeat))
    assert drift.max_rel_diff == pytest.approx(0.01)
    within = [loss * (1 - 0.02 * (step % 2)) for step, loss in enumerate(original)]
    beyond = [loss * 1.05 for loss in original]
    assert judge(run(original), run(within), SAFE, device="cuda").name == "fail"  # rtol 1e-3 alone
    passed = judge(run(original), run(within), SAFE, device="cuda", reproducibility=drift)
    assert passed.name == "pass" and "the original's own run-to-run variation" in passed.reasons[1]
    failed = judge(run(original), run(beyond), SAFE, device="cuda", reproducibility=drift)
    assert failed.name == "fail" and "beyond the original's own run-to-run variation" in failed.reasons[1]


def test_a_reproducible_original_keeps_the_tight_tolerance():
    original = trajectory(8, 0, 0.05)
    nudged = [loss * 1.01 for loss in original]
    verdict = judge(run(original), run(nudged), SAFE, device="cuda", reproducibility=Reproducibility(0.0))
    assert verdict.name == "fail" and "rtol 0.001" in verdict.reasons[1]


def test_a_fix_within_seed_noise_passes_and_beyond_it_fails():
    original, other_seeds = trajectory(40, 0, 0.05), trajectory(40, 1, 0.05)
    noise = LossNoise.measure(original, other_seeds)
    assert noise.seed_spread > 0 and noise.tolerance >= 3 * noise.seed_spread
    within = [loss + noise.tolerance / 2 for loss in original]
    beyond = [loss + noise.tolerance * 2 for loss in original]
    assert unsafe_verdict(original, within, other_seeds).name == "pass"
    assert unsafe_verdict(original, beyond, other_seeds).name == "fail"


def test_loss_max_rel_diff():
    assert loss_max_rel_diff([1.0, 2.0], [1.0, 2.0]) == 0
    assert loss_max_rel_diff([1.0, 2.0], [1.1, 2.0]) == pytest.approx(0.1)
    assert loss_max_rel_diff([1.0], [math.nan]) is None


# --- step time and memory: no gain or loss within noise --------------------------------------------

def test_a_step_time_ratio_within_noise_is_no_measured_change():
    steady = [0.010 + 0.0005 * (i % 5) for i in range(40)]
    original, again = run([1.0] * 40, steady), run([1.0] * 40, [t * 1.05 for t in steady])
    two_percent = measures.step_time([original, again], [run([1.0] * 40, [t * 1.02 for t in steady])])
    assert two_percent.change == measures.NO_CHANGE and two_percent.noise >= 0.05
    half = measures.step_time([original, again], [run([1.0] * 40, [t * 0.5 for t in steady])])
    assert half.change == "faster" and half.value == pytest.approx(0.5)
    double = measures.step_time([original, again], [run([1.0] * 40, [t * 2 for t in steady])])
    assert double.change == "slower" and double.worse


def test_a_slow_run_among_two_does_not_make_a_fix_slower():
    steady = [0.010] * 40
    original = run([1.0] * 40, steady)
    disturbed, undisturbed = run([1.0] * 40, [0.02] * 40), run([1.0] * 40, steady)
    assert measures.step_time([original], [disturbed, undisturbed]).change == measures.NO_CHANGE


def test_too_few_steps_measure_no_change():
    comparison = measures.step_time([run([1.0], [0.01])], [run([1.0], [0.02])])
    assert comparison.value == pytest.approx(2) and comparison.change == "not measured"


def test_memory_comparisons():
    original, again = run([1.0], peak=300 << 20, growth=0), run([1.0], peak=301 << 20, growth=10_000)
    assert measures.peak_memory(original, run([1.0], peak=302 << 20), again).change == measures.NO_CHANGE
    assert measures.peak_memory(original, run([1.0], peak=400 << 20), again).change == "more"
    assert measures.memory_growth(original, run([1.0], growth=-(1 << 20)), again).change == "less"
    assert measures.memory_growth(original, run([1.0], growth=20_000), again).change == measures.NO_CHANGE


# --- which fixes are measured together ---------------------------------------------------------------

TWO_LEAKS = """\
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
losses, totals = [], []
for step in range(10):
    optimizer.zero_grad()
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    optimizer.step()
    losses.append(loss)
    totals.append(loss)
"""


def settings_for(tmp_path, **options):
    return resolve_settings(tmp_path / "train.py", **options)


def test_all_fixes_are_the_engines_and_each_applies_alone(tmp_path):
    settings = settings_for(tmp_path, select=["TL101"])
    everything = fix_plan.apply_fixes(TWO_LEAKS, "train.py", settings)
    assert everything.source == fix_source(TWO_LEAKS, "train.py", settings).source
    assert [(i.code, i.line) for i in everything.applied] == [("TL101", 11), ("TL101", 12)]
    units = fix_plan.fix_units(TWO_LEAKS, "train.py", settings, everything)
    assert [unit.label for unit in units] == ["TL101:11", "TL101:12"]
    assert units[0].source == TWO_LEAKS.replace("losses.append(loss)", "losses.append(loss.detach())")
    assert units[1].source == TWO_LEAKS.replace("totals.append(loss)", "totals.append(loss.detach())")


def test_a_fix_taken_in_a_later_round_keeps_its_original_line(tmp_path):
    # TL501's rewrite inserts lines (imports, the process group); TL705's fix lands in a later round, and is
    # still named by its line in the script as written. TL502 (a DistributedSampler) exists only
    # once TL501 has made the model DDP: it is named by the line of the loop it fixes.
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "fixtures" / "training" / "dataparallel.py"
    text = script.read_text(encoding="utf-8")
    settings = resolve_settings(script, unsafe_fixes=True)
    everything = fix_plan.apply_fixes(text, str(script), settings)
    first_lint = {(d.code, d.line + 1) for d in lint_source(text, str(script), settings) if d.fix}
    applied = {(i.code, i.line) for i in everything.applied}
    assert applied - first_lint == {("TL502", 44)}  # `for inputs, targets in loader:`
    assert first_lint <= applied
    units = fix_plan.fix_units(text, str(script), settings, everything)
    assert all(len(unit.ids) == 1 for unit in units)


def test_planted_rule_goes_through_the_same_rounds(monkeypatch, tmp_path):
    monkeypatch.setattr(fix_plan, "lint", lambda source, path, settings:
                        lint_source(source, path, settings, rules=(LowerLearningRateClaimedSafe,)))
    everything = fix_plan.apply_fixes(TWO_LEAKS, "train.py", settings_for(tmp_path))
    assert [i.code for i in everything.applied] == ["TL998"]
    assert "lr=0.01" in everything.source


def test_fixes_that_need_another_rules_fix_are_measured_with_it_and_reported_once():
    # mlp_move.py: TL203's non_blocking copies exist only once TL602 has pinned the loader.
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "fixtures" / "training" / "mlp_move.py"
    text = script.read_text(encoding="utf-8")
    settings = resolve_settings(script)
    everything = fix_plan.apply_fixes(text, str(script), settings)
    units = fix_plan.fix_units(text, str(script), settings, everything)
    reported = [fix_id for unit in units for fix_id in unit.ids]
    assert sorted(reported) == sorted(everything.applied)  # every fix once
    dependent = next(unit for unit in units if unit.fixes[0].code == "TL203")
    assert dependent.source == everything.source and "after other fixes" in dependent.grouped
    assert {fix.code for fix in dependent.with_others} >= {"TL602"}


def test_imported_files_are_the_folders_python_files_the_run_loaded(monkeypatch, tmp_path):
    """What ``--imports`` fixes: files under the script's folder that a module was loaded from, by
    path relative to it; not the script, not files elsewhere, not a module whose ``__file__`` is a
    bare name (torch._classes says "_classes.py", which is no file of the folder)."""
    import sys
    import types

    from torchlint.harness.bootstrap import imported_files

    (tmp_path / "models").mkdir()
    script = tmp_path / "train.py"
    for path in (script, tmp_path / "models" / "net.py", tmp_path / "utils.py", tmp_path / "_classes.py"):
        path.write_text("", encoding="utf-8")
    outside = tmp_path.parent / f"{tmp_path.name}-elsewhere.py"
    files = {"__main__": script, "models.net": tmp_path / "models" / "net.py", "utils": tmp_path / "utils.py",
             "elsewhere": outside, "compiled": tmp_path / "ext.so"}
    monkeypatch.chdir(tmp_path)
    for name, path in files.items():
        module = types.ModuleType(f"imported_files_test_{name}")
        module.__file__ = str(path)
        monkeypatch.setitem(sys.modules, module.__name__, module)
    bare = types.ModuleType("imported_files_test_bare")
    bare.__file__ = "_classes.py"
    monkeypatch.setitem(sys.modules, bare.__name__, bare)
    assert imported_files(script) == ["models/net.py", "utils.py"]


def _steps(step_s: float) -> RunResult:
    return run([1.0] * 8, [step_s * (1 + 0.001 * i) for i in range(8)])


class _LaterRuns:
    """Stands in for verify's runs after the first ones: the original, run again, takes
    ``original_s`` per step, the fix ``fixed_s``; the labels it was asked for are kept."""

    def __init__(self, original_s: float, fixed_s: float):
        self.original_s, self.fixed_s = original_s, fixed_s
        self.labels: list[str] = []

    def run(self, label, sources, **settings) -> RunResult:
        self.labels.append(label)
        return _steps(self.original_s if label.startswith("original") else self.fixed_s)


def _compare_after_slowdown(late_original_s: float, fixed_s: float):
    from types import SimpleNamespace

    from torchlint.harness.verify import _compare

    runs = _LaterRuns(late_original_s, fixed_s)
    report = SimpleNamespace(runs={"original": _steps(0.100)})
    comparisons = _compare(runs, report, _steps(fixed_s), "fix 1", None, noise_run=_steps(0.101))
    return comparisons["step_time"], runs.labels


def test_a_fix_measured_slower_after_the_machine_slowed_down_is_not_called_slower():
    """Seen on an H100 machine: the original's two runs came first and fast, every later run was
    1.45x slower, so every fix measured "slower". The original runs again beside the fix's second
    run, and the band spans its early and late runs."""
    step_time, labels = _compare_after_slowdown(late_original_s=0.145, fixed_s=0.145)
    assert labels == ["fix 1 again", "original again (fix 1)"]
    assert step_time.change == "no measured change" and step_time.noise >= 0.44


def test_a_fix_still_slower_than_the_original_run_beside_it_is_slower():
    step_time, labels = _compare_after_slowdown(late_original_s=0.100, fixed_s=0.145)
    assert labels == ["fix 1 again", "original again (fix 1)"] and step_time.change == "slower"


@pytest.mark.parametrize(("step_time", "peak", "kept", "why"), [
    (measures.Comparison(1.30, 0.05, "slower"), measures.Comparison(1.0, 0.01, measures.NO_CHANGE), False,
     "it passes but measures worse: step time 1.300x (slower, noise +/-5.0%)"),
    (measures.Comparison(1.0, 0.05, measures.NO_CHANGE), measures.Comparison(1.2, 0.01, "more"), False,
     "it passes but measures worse: peak memory 1.200x (more, noise +/-1.0%)"),
    (measures.Comparison(0.7, 0.05, "faster"), measures.Comparison(1.0, 0.01, measures.NO_CHANGE), True,
     "it passes and measures better: step time faster"),
    (measures.Comparison(1.02, 0.05, measures.NO_CHANGE), measures.Comparison(1.0, 0.01, measures.NO_CHANGE), True,
     "it passes, with no measured change in step time or memory"),
])
def test_keep_keeps_a_passing_fix_unless_it_measures_worse(step_time, peak, kept, why):
    from torchlint.harness.verdict import Verdict
    from torchlint.harness.verify import FixMeasurement, _keep_decision

    no_growth = measures.Comparison(0.0, 65536.0, measures.NO_CHANGE)
    measurement = FixMeasurement(None, Verdict("pass", []), 0.0, step_time, peak, no_growth, None)
    assert _keep_decision(measurement) == (kept, why)


def test_keep_does_not_keep_a_fix_that_fails():
    from torchlint.harness.verdict import Verdict
    from torchlint.harness.verify import FixMeasurement, _keep_decision

    same = measures.Comparison(1.0, 0.05, measures.NO_CHANGE)
    measurement = FixMeasurement(None, Verdict("fail", ["losses diverge at step 2"]), 0.5, same, same, same, None)
    assert _keep_decision(measurement) == (False, "its verdict is fail: losses diverge at step 2")
