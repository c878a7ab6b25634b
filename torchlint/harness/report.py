"""How a verification is shown: a text table, one JSON object, and an optional plot."""

from __future__ import annotations

import json
from pathlib import Path

from torchlint.harness.runner import RunResult
from torchlint.harness.verify import VerifyReport

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
    is "pass", "fail" or "error" (the original could not serve as a reference), as the exit code
    is 0, 1 or 2."""
    return {
        "script": display_path(report.script),
        "device": report.device,
        "steps": report.steps,
        "fixes": [{"code": f.code, "line": f.line, "applicability": f.applicability} for f in report.fixes],
        "runs": {label: run.to_json() if run is not None else None for label, run in report.runs.items()},
        "verdict": report.verdict.name,
        "reasons": report.verdict.reasons,
        "notes": report.notes,
    }


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
        (PEAK_MEMORY_LABELS.get(report.device, "peak memory"), each(lambda r: format_bytes(r.peak_memory_bytes))),
        (f"memory growth ({memory_measure_name(measure)})",
         each(lambda r: format_bytes(r.memory_growth_bytes, signed=True))),
    ]


def format_text(report: VerifyReport) -> str:
    lines = [f"torchlint verify {display_path(report.script)}",
             f"device {report.device}, up to {report.steps} optimizer steps per run", ""]
    if report.fixes:
        lines.append("fixes applied:")
        lines += [f"  line {f.line:<5} {f.code}  {f.applicability}" for f in report.fixes]
    else:
        lines.append("fixes applied: none")
    lines.append("")

    runs = {label.replace("_", " "): run for label, run in report.runs.items() if run is not None}
    rows = _rows(report, runs)
    first_width = max(len(name) for name, _ in rows) + 2
    widths = [max(len(label), *(len(values[i]) for _, values in rows)) + 2 for i, label in enumerate(runs)]
    lines.append(" " * first_width + "".join(label.rjust(w) for label, w in zip(runs, widths)))
    for name, values in rows:
        lines.append(name.ljust(first_width) + "".join(value.rjust(w) for value, w in zip(values, widths)))
    lines.append("")

    lines.append(f"verdict: {report.verdict.name}")
    lines += [f"  - {reason}" for reason in report.verdict.reasons]
    for label, run in runs.items():
        if run.error:
            lines += ["", f"{label} run error (end of its traceback or output):"]
            lines += [f"    {line}" for line in run.error.splitlines()]
    if report.notes:
        lines += ["", "notes:"] + [f"  - {note}" for note in report.notes]
    return "\n".join(lines)


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
