"""Pass or fail: what the runs of a verification must show for the fixes that were applied.

- Every run of the fixed script finishes, and takes as many optimizer steps as the original.
- Only safe fixes: the loss trajectories agree at every step, within a tolerance that is tight
  on the CPU (rtol 1e-5: deterministic kernels and the same seeds give the same floats, up to
  the last bits where a rewrite changes an operation's order) and looser on CUDA (rtol 1e-3:
  cuBLAS/cuDNN may pick other kernels when the memory layout or allocation pattern changes).
  Where the original itself is not reproducible on the GPU (``cudnn.benchmark`` timing picks
  other kernels per run, atomics in backward kernels), a second run under the same seeds
  measures by how much, and the fixed run may differ from the original by up to
  ``NOISE_FACTOR`` times that (``Reproducibility``): a safe fix is then shown to stay within the
  variation the script has anyway, not to give the same floats.
- Any unsafe fix: the fixed run trains at least about as well as the original over the same
  steps: every loss is finite, and the mean loss of its last steps is no higher than the
  original's plus the run-to-run noise (``LossNoise``). The judgement is relative: an original
  that learns slowly over few steps does not fail a fix whose run matches it. When the original
  itself does not train over these steps, the reasons say so.
- A distributed rewrite (TL5xx): the fixed script also runs under ``torchrun`` with N ranks, forms
  a process group of N, and its losses are finite.

The run-to-run noise comes from a second run of the original with every seed shifted (see
``bootstrap.shift_script_seeds``): how far the end of training moves when only the random numbers
change (initialisation, data order, dropout), which is what an unsafe fix that changes numerics
must be told apart from. A rerun under the same seeds measures nothing on the CPU (it repeats the
same floats), so it is not used. Where step-to-step fluctuation over the last steps is larger
than the two runs' difference (one pair of runs may agree by chance), that stands in.

The original must run and step an optimizer, or there is nothing to compare against: that is
``error`` (exit 2), not a failed fix. No fix to apply is ``nothing-to-verify`` (exit 0): nothing
was compared, so the verdict does not say "pass".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torchlint.harness.runner import RunResult

PASS, FAIL, ERROR, NOTHING_TO_VERIFY = "pass", "fail", "error", "nothing-to-verify"
EXIT_CODES = {PASS: 0, FAIL: 1, ERROR: 2, NOTHING_TO_VERIFY: 0}
CANNOT_VERIFY = EXIT_CODES[ERROR]

TOLERANCES = {"cpu": (1e-5, 1e-7), "cuda": (1e-3, 1e-5)}  # device -> (rtol, atol)
DISTRIBUTED_FAMILY = "TL5"

LATE_WINDOW_FRACTION = 5  # the last fifth of the steps, 1 to 20 of them, decide how far training got
LATE_WINDOW_MAX = 20
NOISE_FACTOR = 3.0  # a fix may end this many noise units above the original (one pair of runs estimates it)
TOLERANCE_FLOOR = 1e-3  # relative: float rounding alone, when both noise estimates are zero


@dataclass(frozen=True)
class AppliedFix:
    code: str
    line: int  # 1-based, in the original file, as the text report shows it
    applicability: str  # "safe" or "unsafe"
    path: str = ""  # a module the script imported (verify --imports), relative to its folder; "": the script

    @property
    def label(self) -> str:
        """``TL203:184``, or ``models/net.py:TL401:32`` for a fix in an imported module."""
        return f"{self.path}:{self.code}:{self.line}" if self.path else f"{self.code}:{self.line}"

    @property
    def is_distributed_rewrite(self) -> bool:
        return self.code.startswith(DISTRIBUTED_FAMILY)


@dataclass
class Verdict:
    outcome: str  # PASS, FAIL, ERROR or NOTHING_TO_VERIFY
    reasons: list[str]

    @property
    def name(self) -> str:
        return self.outcome

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]


# --- run-to-run noise of the loss ---------------------------------------------------------------

def late_window(steps: int) -> int:
    return max(1, min(LATE_WINDOW_MAX, steps // LATE_WINDOW_FRACTION))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


@dataclass
class LossNoise:
    """How much the mean loss of the last ``window`` steps moves from run to run."""

    window: int
    seed_spread: float | None  # |original - noise run|, late means; None without a noise run
    step_noise: float  # standard error of the original's late mean, from step-to-step fluctuation
    tolerance: float

    @classmethod
    def measure(cls, original: list[float], noise_run: list[float] | None) -> "LossNoise":
        window = late_window(len(original))
        late = _mean(original[-window:])
        spread = None
        if noise_run and len(noise_run) == len(original) and _all_finite(noise_run):
            spread = abs(late - _mean(noise_run[-window:]))
        step_noise = _step_noise(original[-(window + 1):])
        estimate = max(spread or 0.0, math.sqrt(2) * step_noise)  # a difference of two runs: sqrt(2) x one
        tolerance = max(NOISE_FACTOR * estimate, TOLERANCE_FLOOR * abs(late))
        return cls(window, spread, step_noise, tolerance)

    def describe(self) -> str:
        parts = []
        if self.seed_spread is not None:
            parts.append(f"the original under shifted seeds ends {self.seed_spread:.3g} away")
        parts.append(f"step-to-step noise of the mean {self.step_noise:.3g}")
        return f"tolerance {self.tolerance:.3g} = {NOISE_FACTOR:g} x the larger of: " + "; ".join(parts)

    def to_json(self) -> dict:
        return {"window": self.window, "seed_spread": self.seed_spread, "step_noise": self.step_noise,
                "tolerance": self.tolerance}


def _step_noise(losses: list[float]) -> float:
    """Standard error of a window's mean from successive differences (a slow trend barely counts:
    the von Neumann estimate sigma^2 = mean(diff^2) / 2)."""
    if len(losses) < 2:
        return 0.0
    differences = [b - a for a, b in zip(losses, losses[1:])]
    sigma = math.sqrt(_mean([d * d for d in differences]) / 2)
    return sigma / math.sqrt(len(losses) - 1)


def _all_finite(losses: list[float | None]) -> bool:
    return all(loss is not None and math.isfinite(loss) for loss in losses)


@dataclass(frozen=True)
class Reproducibility:
    """How far two runs of the original under the same seeds drift apart (on a GPU; on the CPU
    they repeat the same floats)."""

    max_rel_diff: float  # over all steps; 0.0 when the two runs are bit-identical

    def allowed(self, rtol: float) -> float:
        return max(rtol, NOISE_FACTOR * self.max_rel_diff)

    def describe(self, rtol: float) -> str:
        return (f"two runs of the original under the same seeds differ by up to {self.max_rel_diff:.2g} "
                f"(nondeterministic GPU kernels), so the fixed run may differ by up to "
                f"{self.allowed(rtol):.2g} = the larger of rtol {rtol:g} and {NOISE_FACTOR:g} x that")


# --- verdicts -------------------------------------------------------------------------------------

def judge_original(original: RunResult) -> Verdict | None:
    """Why the original cannot serve as the reference, or None when it can."""
    if not original.finished:
        where = "does not run" if original.steps == 0 else f"stopped after {original.steps} optimizer steps"
        return Verdict(ERROR, [f"the original script {where}: {one_line(original)}"])
    if original.steps == 0:
        return Verdict(ERROR, ["the original script never steps an optimizer (no optimizer.step() "
                               "was called), so there is no training to compare"])
    return None


def nothing_to_verify(original: RunResult) -> Verdict:
    return Verdict(NOTHING_TO_VERIFY, [
        f"no fix applies to this script with the selected rules: nothing was compared (the original ran "
        f"{original.steps} optimizer steps)"])


def judge(original: RunResult, fixed: RunResult, fixes: list[AppliedFix], *, device: str,
          noise: LossNoise | None = None, distributed: RunResult | None = None,
          nproc: int | None = None, reproducibility: Reproducibility | None = None) -> Verdict:
    """The verdict on the fixed runs, given an original that ran (see ``judge_original``);
    ``noise`` is needed when a fix is unsafe; ``reproducibility`` is the original's own drift
    under the same seeds, where it was measured."""
    ran, reason = _same_steps(original, fixed)
    if not ran:
        return Verdict(FAIL, [reason])  # nothing else can be judged on a run that broke
    if any(fix.applicability == "unsafe" for fix in fixes):
        checks = [_trains_as_well(original, fixed, device, noise or LossNoise.measure(original.losses, None))]
    else:
        checks = [_trajectories_agree(original, fixed, device, reproducibility)]
    if distributed is not None:
        checks.append(_runs_distributed(original, distributed, nproc))
    passed = all(ok for ok, _ in checks)
    return Verdict(PASS if passed else FAIL, [reason] + [why for _, why in checks])


def _same_steps(original: RunResult, fixed: RunResult) -> tuple[bool, str]:
    if not fixed.finished:
        return False, f"the fixed script failed after {fixed.steps} steps: {one_line(fixed)}"
    if fixed.steps != original.steps:
        return False, (f"the fixed script took {fixed.steps} optimizer steps where the original took "
                       f"{original.steps}")
    return True, f"the fixed script runs: {fixed.steps} optimizer steps, like the original"


def loss_max_rel_diff(original: list[float | None], fixed: list[float | None]) -> float | None:
    """The largest relative difference of the two trajectories over their common steps (None
    when a loss is missing or not finite in either)."""
    pairs = list(zip(original, fixed))
    if not pairs or not all(_all_finite(pair) for pair in pairs):
        return None
    return max(abs(b - a) / abs(a) if a else abs(b) for a, b in pairs)


def _trajectories_agree(original: RunResult, fixed: RunResult, device: str,
                        reproducibility: Reproducibility | None = None) -> tuple[bool, str]:
    rtol, atol = TOLERANCES.get(device, TOLERANCES["cuda"])
    tolerance = f"rtol {rtol:g}, atol {atol:g} on {device}"
    if reproducibility is not None and reproducibility.allowed(rtol) > rtol:
        return _within_reproducibility(original, fixed, rtol, reproducibility)
    largest = 0.0
    for step, (a, b) in enumerate(zip(original.losses, fixed.losses), start=1):
        if a is None or b is None:
            if a is not b:
                return False, (f"safe fixes changed training: at step {step} the loss was "
                               f"{_show(a)} before and {_show(b)} after")
            continue
        if math.isnan(a) and math.isnan(b):
            continue
        if not abs(a - b) <= atol + rtol * abs(a):
            return False, (f"safe fixes changed training: the losses diverge at step {step}: {a:.8g} before, "
                           f"{b:.8g} after ({tolerance})")
        largest = max(largest, abs(a - b) / abs(a) if a else abs(b))
    return True, (f"safe fixes: the loss trajectories agree at all {len(original.losses)} steps "
                  f"(largest relative difference {largest:.2g}; {tolerance})")


def _within_reproducibility(original: RunResult, fixed: RunResult, rtol: float,
                            reproducibility: Reproducibility) -> tuple[bool, str]:
    largest = loss_max_rel_diff(original.losses, fixed.losses)
    if largest is None:
        return False, "safe fixes changed training: a loss is missing or not finite in one run and not the other"
    if largest <= reproducibility.allowed(rtol):
        return True, (f"safe fixes: the losses stay within the original's own run-to-run variation: largest "
                      f"relative difference {largest:.2g}; {reproducibility.describe(rtol)}")
    return False, (f"safe fixes changed training beyond the original's own run-to-run variation: largest "
                   f"relative difference {largest:.2g}; {reproducibility.describe(rtol)}")


def _trains_as_well(original: RunResult, fixed: RunResult, device: str, noise: LossNoise) -> tuple[bool, str]:
    broken = _not_finite(fixed.losses)
    if broken:
        return False, f"unsafe fixes: the fixed script does not train: {broken}"
    window = noise.window
    late_original, late_fixed = _mean(original.losses[-window:]), _mean(fixed.losses[-window:])
    limit = late_original + noise.tolerance
    compared = (f"its mean loss over the last {window} steps is {late_fixed:.4g}, the original's {late_original:.4g} "
                f"(at most {limit:.4g} allowed: {noise.describe()})")
    if late_fixed <= limit:
        same = "; its losses match the original's at every step" \
            if _trajectories_agree(original, fixed, device)[0] else ""
        reason = f"unsafe fixes: the fixed script trains at least about as well as the original: {compared}{same}"
        ok = True
    else:
        reason = f"unsafe fixes: the fixed script trains worse than the original, beyond run-to-run noise: {compared}"
        ok = False
    return ok, reason + _original_progress(original.losses, noise)


def _original_progress(losses: list[float], noise: LossNoise) -> str:
    """Said when the original itself does not train over these steps: then a pass shows that the
    fixes do no harm here, not that the script learns."""
    early, late = _mean(losses[:noise.window]), _mean(losses[-noise.window:])
    if early - late > noise.tolerance:
        return ""
    return (f"; note: the original itself does not train over these {len(losses)} steps (mean loss {early:.4g} "
            f"at the start, {late:.4g} at the end, within noise), so this compares runs that do not learn: "
            "use more --steps to judge learning")


def _not_finite(losses: list[float | None]) -> str | None:
    if not losses:
        return "no loss was recorded"
    for step, loss in enumerate(losses, start=1):
        if loss is None:
            return f"no loss was recorded at step {step} (no scalar was backpropagated)"
        if not math.isfinite(loss):
            return f"the loss is {loss} at step {step}"
    return None


def _runs_distributed(original: RunResult, run: RunResult, nproc: int | None) -> tuple[bool, str]:
    launch = f"torchrun --nproc_per_node={nproc}"
    if not run.finished:
        return False, f"distributed rewrite: under {launch} the fixed script failed: {one_line(run)}"
    if run.world_size != nproc:
        return False, (f"distributed rewrite: under {launch} the fixed script formed a process group of "
                       f"{run.world_size}, not {nproc}")
    if run.steps != original.steps:
        return False, (f"distributed rewrite: under {launch} the fixed script took {run.steps} steps where "
                       f"the original took {original.steps}")
    if not _all_finite(run.losses):
        return False, f"distributed rewrite: under {launch} the loss is not finite at every step"
    return True, (f"distributed rewrite: the fixed script runs under {launch} (world size {run.world_size}) "
                  "and as plain python")


def one_line(run: RunResult) -> str:
    """What stopped a run, on one line: the exception's type and message (the report shows the
    whole traceback tail)."""
    if run.exception:
        return run.exception
    if not run.error:
        return "no error was recorded"
    return run.error.strip().splitlines()[0]


def _show(loss: float | None) -> str:
    return "not recorded" if loss is None else f"{loss:.8g}"
