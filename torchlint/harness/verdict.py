"""Pass or fail: what the runs of a verification must show for the fixes that were applied.

- Every run of the fixed script finishes, and takes as many optimizer steps as the original.
- Only safe fixes: the loss trajectories agree at every step, within a tolerance that is tight
  on the CPU (rtol 1e-5: deterministic kernels and the same seeds give the same floats, up to
  the last bits where a rewrite changes an operation's order) and looser on CUDA (rtol 1e-3:
  cuBLAS/cuDNN may pick other kernels when the memory layout or allocation pattern changes).
- Any unsafe fix: the fixed run still trains: every loss is finite, and the mean of the last
  losses is at least 10% below the mean of the first ones (means over a tenth of the steps, 1 to
  10 of them, so one noisy minibatch decides nothing).
- A distributed rewrite (TL5xx): the fixed script also runs under ``torchrun`` with N ranks, forms
  a process group of N, and its losses are finite.

The original must run and step an optimizer, or there is nothing to compare against: that is
``CANNOT_VERIFY`` (exit 2, verdict "error"), not a failed fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torchlint.harness.runner import RunResult

PASS, FAIL, CANNOT_VERIFY = 0, 1, 2
VERDICT_NAMES = {PASS: "pass", FAIL: "fail", CANNOT_VERIFY: "error"}  # as the reports write them

TOLERANCES = {"cpu": (1e-5, 1e-7), "cuda": (1e-3, 1e-5)}  # device -> (rtol, atol)
TRAINS_MIN_RELATIVE_DROP = 0.10
DISTRIBUTED_FAMILY = "TL5"


@dataclass(frozen=True)
class AppliedFix:
    code: str
    line: int  # 1-based, as the text report shows it
    applicability: str  # "safe" or "unsafe"

    @property
    def is_distributed_rewrite(self) -> bool:
        return self.code.startswith(DISTRIBUTED_FAMILY)


@dataclass
class Verdict:
    exit_code: int
    reasons: list[str]

    @property
    def name(self) -> str:
        """As the reports write it: pass, fail, or error when there was nothing to judge the fixes by."""
        return VERDICT_NAMES[self.exit_code]


def judge_original(original: RunResult) -> Verdict | None:
    """Why the original cannot serve as the reference, or None when it can."""
    if not original.finished:
        where = "does not run" if original.steps == 0 else f"stopped after {original.steps} optimizer steps"
        return Verdict(CANNOT_VERIFY, [f"the original script {where}: {_first_line(original.error)}"])
    if original.steps == 0:
        return Verdict(CANNOT_VERIFY, ["the original script never steps an optimizer (no optimizer.step() "
                                       "was called), so there is no training to compare"])
    return None


def judge(original: RunResult, fixed: RunResult, fixes: list[AppliedFix], *, device: str,
          distributed: RunResult | None = None, nproc: int | None = None) -> Verdict:
    """The verdict on the fixed runs, given an original that ran (see ``judge_original``)."""
    ran, reason = _same_steps(original, fixed)
    if not ran:
        return Verdict(FAIL, [reason])  # nothing else can be judged on a run that broke
    if any(fix.applicability == "unsafe" for fix in fixes):
        checks = [_still_trains(original, fixed, device)]
    else:
        checks = [_trajectories_agree(original, fixed, device)]
    if distributed is not None:
        checks.append(_runs_distributed(original, distributed, nproc))
    passed = all(ok for ok, _ in checks)
    return Verdict(PASS if passed else FAIL, [reason] + [why for _, why in checks])


def _same_steps(original: RunResult, fixed: RunResult) -> tuple[bool, str]:
    if not fixed.finished:
        return False, f"the fixed script failed after {fixed.steps} steps: {_first_line(fixed.error)}"
    if fixed.steps != original.steps:
        return False, (f"the fixed script took {fixed.steps} optimizer steps where the original took "
                       f"{original.steps}")
    return True, f"the fixed script runs: {fixed.steps} optimizer steps, like the original"


def _trajectories_agree(original: RunResult, fixed: RunResult, device: str) -> tuple[bool, str]:
    rtol, atol = TOLERANCES.get(device, TOLERANCES["cuda"])
    tolerance = f"rtol {rtol:g}, atol {atol:g} on {device}"
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


def trains(losses: list[float | None]) -> tuple[bool, str]:
    """Whether a loss trajectory shows training, and the numbers that say so."""
    if not losses or any(loss is None for loss in losses):
        return False, "no loss was recorded at some steps (no scalar was backpropagated)"
    bad = next((step for step, loss in enumerate(losses, start=1) if not math.isfinite(loss)), None)
    if bad is not None:
        return False, f"the loss is {losses[bad - 1]} at step {bad}"
    window = max(1, min(10, len(losses) // 10))
    first = sum(losses[:window]) / window
    last = sum(losses[-window:]) / window
    drop = (first - last) / abs(first) if first else 0.0
    summary = (f"the mean loss of the first {window} steps is {first:.4g}, of the last {window} {last:.4g} "
               f"({drop:+.0%} drop; at least {TRAINS_MIN_RELATIVE_DROP:.0%} needed)")
    return drop >= TRAINS_MIN_RELATIVE_DROP, summary


def _still_trains(original: RunResult, fixed: RunResult, device: str) -> tuple[bool, str]:
    ok, summary = trains(fixed.losses)
    if ok:
        unchanged = "; its losses even match the original's at every step" \
            if _trajectories_agree(original, fixed, device)[0] else ""
        return True, f"unsafe fixes: the fixed script still trains: {summary}{unchanged}"
    reason = f"unsafe fixes: the fixed script does not train: {summary}"
    if not trains(original.losses)[0]:
        reason += "; the original does not either over these steps: try more --steps"
    return False, reason


def _runs_distributed(original: RunResult, run: RunResult, nproc: int | None) -> tuple[bool, str]:
    launch = f"torchrun --nproc_per_node={nproc}"
    if not run.finished:
        return False, f"distributed rewrite: under {launch} the fixed script failed: {_first_line(run.error)}"
    if run.world_size != nproc:
        return False, (f"distributed rewrite: under {launch} the fixed script formed a process group of "
                       f"{run.world_size}, not {nproc}")
    if run.steps != original.steps:
        return False, (f"distributed rewrite: under {launch} the fixed script took {run.steps} steps where "
                       f"the original took {original.steps}")
    if not all(loss is not None and math.isfinite(loss) for loss in run.losses):
        return False, f"distributed rewrite: under {launch} the loss is not finite at every step"
    return True, (f"distributed rewrite: the fixed script runs under {launch} (world size {run.world_size}) "
                  "and as plain python")


def _first_line(error: str | None) -> str:
    """One line for the reason; the report shows the whole tail. A traceback ends with the
    exception; the runner's own messages start with their summary."""
    if not error:
        return "no error was recorded"
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    return lines[-1] if "Traceback (most recent call last)" in error else lines[0]


def _show(loss: float | None) -> str:
    return "not recorded" if loss is None else f"{loss:.8g}"
