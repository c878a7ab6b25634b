"""``verify --profile``: the findings of a script ranked by the time they were measured to cost.

The profile run (see ``profiling``) sums, per line of the script, the time of host syncs, copies
from the host, DataLoader waits, optimizer steps, ``zero_grad`` and ``empty_cache`` calls. A
finding is charged what was measured on the lines it spans: a ``.item()`` finding the sync on its
line, a DataLoader finding the waits of the loader built there, a fused-optimizer finding the
steps of the optimizer built there. A finding that spans a block (a loop, a whole script) is
charged only its first line: the costs inside the block are other lines' findings. Two findings
on the same line are each charged that line's cost (they are about the same code). A finding on lines where nothing was measured is listed
as having no measurable cost: either it costs nothing here (a CUDA-only cost on the CPU) or its
cost is not one the profiler separates (a conv bias inside the convolution).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchlint.diagnostics import Diagnostic
from torchlint.harness.runner import RunResult

MAX_CHARGED_LINES = 4  # a call written over a few lines is one finding; a longer span is a block

CATEGORY_NAMES = {
    "host-sync": "host sync",
    "host-copy": "copy from the host",
    "loader-wait": "DataLoader wait for the next batch",
    "optimizer-step": "optimizer step",
    "zero-grad": "zero_grad",
    "empty-cache": "empty_cache",
}


@dataclass
class ProfiledFinding:
    code: str
    line: int  # 1-based
    message: str
    ms_per_step: float
    share_of_step: float | None  # of the profiled step time
    measured: bool
    what: list[str] = field(default_factory=list)  # the kinds of cost charged, with counts
    ops_per_step: float | None = None  # operators an optimizer step runs (what a fused step replaces)

    def to_json(self) -> dict:
        return {"code": self.code, "line": self.line, "ms_per_step": round(self.ms_per_step, 4),
                "share_of_step": None if self.share_of_step is None else round(self.share_of_step, 4),
                "measured": self.measured, "what": self.what, "ops_per_step": self.ops_per_step,
                "message": self.message}


@dataclass
class ProfileSummary:
    """What the profile run measured, or why it measured nothing."""

    step_ms: float | None
    steps: int
    findings: list[ProfiledFinding]
    problem: str | None = None


def attribute_findings(diagnostics: list[Diagnostic], run: RunResult) -> ProfileSummary:
    """The script's findings, most costly per step first, then those with no measurable cost."""
    profile = run.profile
    if not profile or "error" in profile:
        why = profile["error"] if profile else (
            f"the profile run stopped before the profiled steps ({run.steps} steps taken"
            + (f"; {run.exception}" if run.exception else "") + ")")
        return ProfileSummary(None, 0, [], problem=why)
    steps = profile["steps"]
    step_ms = profile["window_s"] * 1e3 / steps
    findings = [_charge(diagnostic, profile["costs"], steps, step_ms)
                for diagnostic in sorted(diagnostics, key=lambda d: (d.line, d.col, d.code))]
    findings.sort(key=lambda finding: (-finding.ms_per_step, finding.line, finding.code))
    return ProfileSummary(step_ms, steps, findings)


def _charge(diagnostic: Diagnostic, costs: list[dict], steps: int, step_ms: float) -> ProfiledFinding:
    first, last = diagnostic.line + 1, diagnostic.end_line + 1
    if last - first >= MAX_CHARGED_LINES:
        last = first
    charged = [cost for cost in costs if cost["line"] is not None and first <= cost["line"] <= last]
    ms = sum(cost["us"] for cost in charged) / 1e3 / steps
    what = [f"{CATEGORY_NAMES.get(cost['category'], cost['category'])} x{cost['count'] / steps:g}/step"
            for cost in charged]
    optimizer_ops = [cost["ops"] / cost["count"] for cost in charged
                     if cost["category"] == "optimizer-step" and cost["count"]]
    return ProfiledFinding(diagnostic.code, first, diagnostic.message, ms, ms / step_ms if step_ms else None,
                           measured=bool(charged), what=what,
                           ops_per_step=optimizer_ops[0] if optimizer_ops else None)
