"""How a verification is shown: a text table, one JSON object, and an optional plot."""

from __future__ import annotations

import json
from pathlib import Path

from torchlint.harness.measures import NO_CHANGE, Comparison, step_time_spread
from torchlint.harness.runner import RunResult
from torchlint.harness.verify import FixMeasurement, VerifyReport

PEAK_MEMORY_LABELS = {"cuda": "peak memory (CUDA)", "cpu": "peak memory (RSS)"}
MEASURE_NAMES = {"heap-in-use": "heap", "rss": "RSS", "cuda-allocated": "CUDA"}


def memory_measure_name(measure: str | None) -> str:
    """``heap-in-use+cuda-allocated`` -> ``heap+CUDA``: what the growth row and plot measure."""
    return "+".join(MEASURE_NAMES.get(part, part) for part in (measure or "rss").split("+"))


def display_path(path: Path) -> str:
    """Relative to the working directory when under it, as the user likely typed it."""
    try:
        return Path(path).relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(path)


def to_json(report: VerifyReport) -> dict:
    """The object ``torchlint verify --format json`` prints (see issue 3). Beyond the issue's keys:
    ``runs.fixed`` is null when the fixed script did not run; ``runs.fixed_torchrun`` is there when
    a distributed rewrite ran under torchrun; ``notes`` says how the numbers were taken (CUDA
    mapped to the CPU, the memory measure). Fix lines are 1-based, as in the text report. ``verdict``
    is "pass", "fail", "error" (the original could not serve as a reference) or "nothing-to-verify"
    (no fix applied), as the exit code is 0, 1, 2 or 0. Issue 13 adds ``runs.original_noise`` (the
    original under shifted seeds), ``loss_noise``, ``comparisons`` (fixed against original: step
    time, peak memory, memory growth, each with its noise band and "change"), ``per_fix`` (with
    --each), ``keep`` (with --keep) and ``profile`` (with --profile). On a GPU with a safe fix,
    ``runs.original_repeat`` (the original again under the same seeds) and ``reproducibility``
    (``max_rel_diff`` of the two originals' losses) say how far the script drifts by itself."""
    data = {
        "script": display_path(report.script),
        "device": report.device,
        "steps": report.steps,
        "fixes": [_fix_json(f) | {"applicability": f.applicability} for f in report.fixes],
        "imported": report.imported,
        "runs": {label: run.to_json() if run is not None else None for label, run in report.runs.items()},
        "verdict": report.verdict.name,
        "reasons": report.verdict.reasons,
        "notes": report.notes,
        "loss_noise": report.noise.to_json() if report.noise else None,
        "reproducibility": ({"max_rel_diff": report.reproducibility.max_rel_diff}
                            if report.reproducibility else None),
        "comparisons": {name: comparison.to_json() for name, comparison in report.comparisons.items()},
    }
    if report.per_fix is not None:
        data["per_fix"] = [entry for measurement in report.per_fix for entry in _per_fix_json(measurement)]
    if report.keep is not None:
        data["keep"] = {"written": report.keep.written, "summary": report.keep.summary,
                        "kept": [_fix_json(f) for f in report.keep.kept]}
    if report.profile is not None:
        data["profile"] = [finding.to_json() for finding in report.profile.findings]
        data["profile_step_ms"] = report.profile.step_ms
        data["profile_problem"] = report.profile.problem
    return data


def _fix_json(fix) -> dict:
    """A fix by rule and line, and by ``path`` (relative to the script's folder) when it is in a module
    the script imported (--imports); no ``path``: the script."""
    return {"code": fix.code, "line": fix.line, **({"path": fix.path} if fix.path else {})}


def _per_fix_json(measurement: FixMeasurement) -> list[dict]:
    """One entry per fix; fixes measured together share their measurements (``measured_with``)."""
    shared = {
        "verdict": measurement.verdict.name,
        "loss_max_rel_diff": measurement.loss_max_rel_diff,
        "step_time_ratio": measurement.step_time.value,
        "peak_memory_ratio": measurement.peak_memory.value,
        "memory_growth_bytes": measurement.run.memory_growth_bytes if measurement.run else None,
        "kept": measurement.kept,
        "step_time": measurement.step_time.to_json(),
        "peak_memory": measurement.peak_memory.to_json(),
        "memory_growth_change": measurement.memory_growth.to_json(),
        "reasons": measurement.verdict.reasons,
        "why_kept": measurement.why,
    }
    unit = measurement.unit
    return [{**_fix_json(fix), "applicability": fix.applicability,
             "measured_with": [other.label for other in [*unit.fixes, *unit.with_others] if other is not fix],
             **shared} for fix in unit.fixes]


def format_json(report: VerifyReport) -> str:
    return json.dumps(to_json(report), indent=2)


def format_bytes(count: int | None, signed: bool = False) -> str:
    if count is None:
        return "-"
    sign = "-" if count < 0 else ("+" if signed else "")
    value, unit = float(abs(count)), "B"
    for bigger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{sign}{value:.0f} {unit}" if unit == "B" else f"{sign}{value:.1f} {unit}"


def _spread(run: RunResult) -> str:
    spread = step_time_spread(run)
    return "-" if spread is None else f"+/-{spread:.1%}"


def _loss(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _rows(report: VerifyReport, runs: dict[str, RunResult]) -> list[tuple[str, list[str]]]:
    def each(show) -> list[str]:
        return [show(run) for run in runs.values()]

    measure = next((run.memory_measure for run in runs.values() if run.memory_measure), None)
    return [
        ("finished", each(lambda r: "yes" if r.finished else "no")),
        ("optimizer steps", each(lambda r: str(r.steps))),
        ("world size", each(lambda r: str(r.world_size))),
        ("first loss", each(lambda r: _loss(r.losses[0] if r.losses else None))),
        ("last loss", each(lambda r: _loss(r.losses[-1] if r.losses else None))),
        ("median step time", each(lambda r: "-" if r.step_time_s is None else f"{r.step_time_s * 1e3:.2f} ms")),
        ("its standard error", each(_spread)),
        (PEAK_MEMORY_LABELS.get(report.device, "peak memory"), each(lambda r: format_bytes(r.peak_memory_bytes))),
        (f"memory growth ({memory_measure_name(measure)})",
         each(lambda r: format_bytes(r.memory_growth_bytes, signed=True))),
    ]


RUN_TITLES = {"original_noise": "original, seeds+1", "original_repeat": "original, same seeds"}


def run_title(label: str) -> str:
    return RUN_TITLES.get(label, label.replace("_", " "))


def format_text(report: VerifyReport) -> str:
    lines = [f"torchlint verify {display_path(report.script)}",
             f"device {report.device}, up to {report.steps} optimizer steps per run", ""]
    if report.fixes:
        lines.append("fixes applied:")
        lines += [f"  {f.path + ' ' if f.path else ''}line {f.line:<5} {f.code}  {f.applicability}"
                  for f in report.fixes]
    else:
        lines.append("fixes applied: none")
    lines.append("")

    runs = {run_title(label): run for label, run in report.runs.items() if run is not None}
    rows = _rows(report, runs)
    first_width = max(len(name) for name, _ in rows) + 2
    widths = [max(len(label), *(len(values[i]) for _, values in rows)) + 2 for i, label in enumerate(runs)]
    lines.append(" " * first_width + "".join(label.rjust(w) for label, w in zip(runs, widths)))
    for name, values in rows:
        lines.append(name.ljust(first_width) + "".join(value.rjust(w) for value, w in zip(values, widths)))
    lines.append("")
    if report.comparisons:
        lines.append("fixed against original:")
        lines += [f"  {name.replace('_', ' ')}: {comparison.describe(in_bytes=name == 'memory_growth')}"
                  for name, comparison in report.comparisons.items()]
        lines.append("")

    lines.append(f"verdict: {report.verdict.name}")
    lines += [f"  - {reason}" for reason in report.verdict.reasons]
    if report.per_fix is not None:
        lines += ["", *_per_fix_table(report.per_fix)]
    if report.keep is not None:
        lines += ["", "--keep:"] + [f"  - {line}" for line in report.keep.summary]
    if report.profile is not None:
        lines += ["", *_profile_lines(report)]
    for label, run in runs.items():
        if run.error:
            lines += ["", f"{label} run error (end of its traceback or output):"]
            lines += [f"    {line}" for line in run.error.splitlines()]
    if report.notes:
        lines += ["", "notes:"] + [f"  - {note}" for note in report.notes]
    return "\n".join(lines)


def _short(name: str, comparison: Comparison) -> str:
    if comparison.value is None:
        return "-"
    if name == "memory growth":
        shown = format_bytes(int(comparison.value), signed=True)
    else:
        shown = f"{comparison.value:.3f}x"
    return shown if comparison.change == NO_CHANGE else f"{shown} {comparison.change}"


def _per_fix_table(measurements: list[FixMeasurement]) -> list[str]:
    """Each fix on its own, against the original; "=" marks a ratio within noise."""
    header = ("fix", "safety", "verdict", "loss diff", "step time", "peak memory", "memory growth", "kept")
    rows = []
    for m in measurements:
        safety = "/".join(sorted({fix.applicability for fix in m.unit.fixes}))
        diff = "-" if m.loss_max_rel_diff is None else f"{m.loss_max_rel_diff:.2g}"
        rows.append((m.unit.label, safety, m.verdict.name, diff, _short("step time", m.step_time),
                     _short("peak memory", m.peak_memory), _short("memory growth", m.memory_growth),
                     "yes" if m.kept else "no"))
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    table = ["each fix on its own (--each), against the original; a ratio within noise shows no word:"]
    table += ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
              for row in (header, *rows)]
    noise = [f"  {m.unit.label}: step time noise +/-{m.step_time.noise:.1%}"
             for m in measurements if m.step_time.noise is not None]
    grouped = [f"  {m.unit.label}: measured together because {m.unit.grouped}" for m in measurements if m.unit.grouped]
    failed = [f"  {m.unit.label}: {m.verdict.reasons[-1]}" for m in measurements if m.verdict.name != "pass"]
    return table + noise + grouped + failed


def _profile_lines(report: VerifyReport) -> list[str]:
    profile = report.profile
    if profile.problem:
        return [f"profile (--profile): nothing measured: {profile.problem}"]
    lines = [f"findings by measured cost (--profile; {profile.steps} profiled steps of {profile.step_ms:.2f} ms):"]
    for finding in profile.findings:
        where = f"line {finding.line:<5} {finding.code}"
        if finding.measured:
            ops = f", {finding.ops_per_step:g} ops per optimizer step" if finding.ops_per_step else ""
            lines.append(f"  {finding.ms_per_step:8.3f} ms/step {finding.share_of_step:6.1%}  {where}  "
                         f"{'; '.join(finding.what)}{ops}")
        else:
            lines.append(f"  {'no measurable cost':>23}  {where}")
    return lines


def plot(report: VerifyReport, path: Path) -> None:
    """Loss and memory per step of every run, in one PNG. Needs matplotlib (ImportError if absent)."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    figure, (loss_axes, memory_axes) = plt.subplots(1, 2, figsize=(11, 4))
    for label, run in report.runs.items():
        if run is None or not run.steps:
            continue
        steps = range(1, run.steps + 1)
        loss_axes.plot(steps, [float("nan") if v is None else v for v in run.losses], label=label)
        memory_axes.plot(steps, [b / 2**20 for b in run.memory_bytes], label=label)
    loss_axes.set(title="loss", xlabel="optimizer step")
    measure = memory_measure_name(report.runs["original"].memory_measure)
    memory_axes.set(title=f"memory held ({measure})", xlabel="optimizer step", ylabel="MiB")
    for axes in (loss_axes, memory_axes):
        axes.legend()
    figure.suptitle(f"torchlint verify {display_path(report.script)} ({report.device})")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
