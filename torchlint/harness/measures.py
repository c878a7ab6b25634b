"""Step time and memory of a fixed run against the original's, with the noise that says whether a
difference was measured at all.

On a shared machine, step times wander by several percent between two runs of the same script,
so a ratio alone would print noise as a gain or a loss. Each comparison carries a noise band:

- step time: each side's time is the best (lowest) median of its runs, since load from other
  processes only ever slows a run down; the band is the larger of the difference between the
  original's two runs (the reference and the noise run, same work under other random numbers)
  and twice the standard error of the two medians compared (from each run's per-step spread:
  1.25 x IQR/1.349 / sqrt(n), the standard error of a median). ``verify`` runs a fix that
  measures slower a second time, and the original with it, so that neither one run slowed by the
  machine nor a machine that slowed down since the original ran makes it "slower" (the late
  original joins the originals: their spread widens the band);
- peak memory: the two original runs' difference, and at least ``PEAK_FLOOR`` (peak RSS moves by
  allocator arenas and thread stacks between identical runs);
- memory growth: the two original runs' difference, and at least ``GROWTH_FLOOR`` bytes.

A ratio inside its band is "no measured change"; only outside it is it "faster"/"slower" or
"more"/"less" memory. Without a noise run (plain ``verify`` with safe fixes only) the per-step
spread alone makes the band.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from torchlint.harness.runner import RunResult

MIN_STEP_TIMES = 4  # fewer per-step times give no usable spread
PEAK_FLOOR = 0.01
GROWTH_FLOOR = 64 * 1024
NO_CHANGE = "no measured change"


@dataclass
class Comparison:
    """A fixed run's measure against the original's: the ratio (or, for growth, the difference),
    the noise band around no change, and what that means."""

    value: float | None  # fixed / original (growth: fixed - original, in bytes)
    noise: float | None  # the half-width of the band of no change, same units as value's distance
    change: str  # "faster", "slower", "more", "less", NO_CHANGE, or "not measured"

    @property
    def worse(self) -> bool:
        return self.change in ("slower", "more")

    @property
    def better(self) -> bool:
        return self.change in ("faster", "less")

    def describe(self, in_bytes: bool = False) -> str:
        """``1.030x (no measured change, noise +/-4.0%)``; ``in_bytes``: a difference of bytes."""
        if self.value is None:
            return self.change
        if in_bytes:
            return f"{self.value / 1024:+.1f} KiB ({self.change}, noise {self.noise / 1024:.1f} KiB)"
        noise = "noise not measured" if self.noise is None else f"noise +/-{self.noise:.1%}"
        return f"{self.value:.3f}x ({self.change}, {noise})"

    def to_json(self) -> dict:
        return {"value": self.value, "noise": self.noise, "change": self.change}


def _relative_standard_error(times: list[float]) -> float | None:
    if len(times) < MIN_STEP_TIMES:
        return None
    quartiles = statistics.quantiles(times, n=4)
    spread = (quartiles[2] - quartiles[0]) / 1.349
    return 1.2533 * spread / math.sqrt(len(times)) / statistics.median(times)


def _judge(distance: float, noise: float, worse: str, better: str) -> str:
    if abs(distance) <= noise:
        return NO_CHANGE
    return worse if distance > 0 else better


def _fastest(runs: list[RunResult]) -> RunResult | None:
    timed = [run for run in runs if run.step_time_s]
    return min(timed, key=lambda run: run.step_time_s) if timed else None


def step_time(originals: list[RunResult], fixed_runs: list[RunResult]) -> Comparison:
    """``originals``: the original's runs (the reference first, then the noise run if any);
    ``fixed_runs``: one or more runs of the same fixed script."""
    original, fixed = _fastest(originals), _fastest(fixed_runs)
    if original is None or fixed is None:
        return Comparison(None, None, "not measured")
    ratio = fixed.step_time_s / original.step_time_s
    errors = [_relative_standard_error(run.step_times_s) for run in (original, fixed)]
    bands = [2 * math.sqrt(sum(error ** 2 for error in errors))] if None not in errors else []
    timed = [run.step_time_s for run in originals if run.step_time_s]
    if len(timed) > 1:
        bands.append(max(timed) / min(timed) - 1)
    if not bands:
        return Comparison(ratio, None, "not measured")
    noise = max(bands)
    return Comparison(ratio, noise, _judge(ratio - 1, noise, "slower", "faster"))


def peak_memory(original: RunResult, fixed: RunResult, noise_run: RunResult | None) -> Comparison:
    if not (original.peak_memory_bytes and fixed.peak_memory_bytes):
        return Comparison(None, None, "not measured")
    ratio = fixed.peak_memory_bytes / original.peak_memory_bytes
    noise = PEAK_FLOOR
    if noise_run is not None and noise_run.peak_memory_bytes:
        noise = max(noise, abs(noise_run.peak_memory_bytes / original.peak_memory_bytes - 1))
    return Comparison(ratio, noise, _judge(ratio - 1, noise, "more", "less"))


def memory_growth(original: RunResult, fixed: RunResult, noise_run: RunResult | None) -> Comparison:
    if original.memory_growth_bytes is None or fixed.memory_growth_bytes is None:
        return Comparison(None, None, "not measured")
    difference = fixed.memory_growth_bytes - original.memory_growth_bytes
    noise = GROWTH_FLOOR
    if noise_run is not None and noise_run.memory_growth_bytes is not None:
        noise = max(noise, abs(noise_run.memory_growth_bytes - original.memory_growth_bytes))
    return Comparison(difference, noise, _judge(difference, noise, "more", "less"))


def step_time_spread(run: RunResult) -> float | None:
    """The relative standard error of a run's median step time (None with too few steps)."""
    return _relative_standard_error(run.step_times_s)
