"""Launch one instrumented run of a script, as plain ``python`` or under ``torchrun``, and read
back what the bootstrap recorded.

Each run is its own process group (so a timeout ends DataLoader workers and torchrun's ranks too),
with the script's folder as its working directory, its output captured to files, and the same
seeds and hash seed as every other run. Progress goes to a callback while the run is going on.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from torchlint.harness import bootstrap
from torchlint.harness.bootstrap import ERROR_TAIL_LINES, RESULT_FILE, STEPS_FILE

PROGRESS_EVERY_S = 2.0
POLL_EVERY_S = 0.1
KILL_GRACE_S = 5.0

Progress = Callable[[str], None]


@dataclass
class RunResult:
    """One run as the report shows it. ``to_json`` is the RUN object of ``verify --format json``."""

    finished: bool
    steps: int
    losses: list[float | None]
    step_time_s: float | None  # median time between consecutive optimizer steps
    peak_memory_bytes: int | None
    memory_growth_bytes: int | None
    world_size: int
    error: str | None
    # Details for the text report, the notes and the plot.
    device: str | None = None
    memory_bytes: list[int] = field(default_factory=list)  # per step, measured as memory_measure
    memory_measure: str | None = None
    cuda_mapped_calls: int = 0
    harness_error: str | None = None  # the run could not be set up: not the script's fault
    stopped_by_harness: bool = False  # False when finished: the script ended by itself
    exception: str | None = None  # "Type: message" of what stopped the script, for one-line reasons
    step_times_s: list[float] = field(default_factory=list)  # between consecutive optimizer steps
    profile: dict | None = None  # what profiling.StepProfiler measured, for --profile
    imported_files: list[str] = field(default_factory=list)  # the script folder's modules it imported (rank 0)

    def to_json(self) -> dict:
        return {"finished": self.finished, "steps": self.steps, "losses": self.losses,
                "step_time_s": self.step_time_s, "peak_memory_bytes": self.peak_memory_bytes,
                "memory_growth_bytes": self.memory_growth_bytes, "world_size": self.world_size,
                "error": self.error}


def memory_growth(samples: list[int]) -> int | None:
    """Late minus early memory: the median of the last quarter of the per-step samples minus the
    median of the first quarter. Medians, so one step's transient allocation does not count."""
    if len(samples) < 2:
        return None
    window = max(1, len(samples) // 4)
    return int(statistics.median(samples[-window:]) - statistics.median(samples[:window]))


def run_environment(seed: int) -> dict[str, str]:
    """The user's environment, with the seeds and settings every run shares. Nothing of
    torchlint's: the bootstrap finds its package by itself and gives the script the path that
    ``python SCRIPT`` would (with an editable install, torchlint's folder is a whole repository)."""
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = str(seed)  # set/dict iteration order must match between runs
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # required by deterministic cuBLAS
    return env


@dataclass(frozen=True)
class RunSettings:
    """What one run is asked to do, beyond the script and its arguments."""

    steps: int
    seed: int
    device: str
    timeout_s: float
    seed_offset: int = 0  # shift the seeds the script sets itself (the noise run)
    profile_steps: int = 0  # profile this many steps after ``profile_warmup`` (the profile run)
    profile_warmup: int = 0


def bootstrap_command(script: Path, script_args: list[str], settings: RunSettings, result_dir: Path,
                      nproc: int | None) -> list[str]:
    launcher = [sys.executable]
    if nproc is not None:
        # torchrun as a module of this interpreter; --standalone picks a free rendezvous port.
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    # the bootstrap as a file, not `-m torchlint.harness.bootstrap`, which needs torchlint's folder on the path
    profiling = ["--profile-steps", str(settings.profile_steps), "--profile-warmup", str(settings.profile_warmup)] \
        if settings.profile_steps else []
    return [*launcher, str(Path(bootstrap.__file__).resolve()), "--result-dir", str(result_dir),
            "--steps", str(settings.steps), "--seed", str(settings.seed + settings.seed_offset),
            "--seed-offset", str(settings.seed_offset), "--device", settings.device, *profiling,
            str(script), "--", *script_args]


def run_script(script: Path, script_args: list[str], settings: RunSettings, *, label: str, result_dir: Path,
               nproc: int | None = None, progress: Progress | None = None) -> RunResult:
    """Run ``script`` (already in its scratch folder) for ``settings.steps`` optimizer steps."""
    result_dir.mkdir(parents=True, exist_ok=True)
    command = bootstrap_command(script, script_args, settings, result_dir, nproc)
    output_path = result_dir / "output.txt"
    started = time.monotonic()
    with output_path.open("wb") as output:
        # the hash seed stays the harness's own: the noise run shifts random numbers, not set order
        process = subprocess.Popen(command, cwd=script.parent, env=run_environment(settings.seed),
                                   stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        timed_out = _wait(process, label, settings.steps, started, settings.timeout_s, result_dir / STEPS_FILE,
                          progress)
    elapsed = time.monotonic() - started
    if progress:
        progress(f"{label}: done in {elapsed:.1f} s")
    return _read_result(process.returncode, timed_out, settings.timeout_s, result_dir,
                        output_path.read_text(encoding="utf-8", errors="replace"))


def _wait(process: subprocess.Popen, label: str, steps: int, started: float, timeout_s: float,
          steps_file: Path, progress: Progress | None) -> bool:
    """Wait for the run, reporting progress; end its whole process group on timeout."""
    next_report = started + PROGRESS_EVERY_S
    while process.poll() is None:
        now = time.monotonic()
        if now - started > timeout_s:
            _end_process_group(process)
            return True
        if progress and now >= next_report:
            progress(f"{label}: step {_count_lines(steps_file)}/{steps} after {now - started:.0f} s")
            next_report = now + PROGRESS_EVERY_S
        time.sleep(POLL_EVERY_S)
    return False


def _end_process_group(process: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as handle:
            return sum(1 for _ in handle)
    except OSError:
        return 0


def _tail(text: str) -> str:
    return "\n".join(text.rstrip().splitlines()[-ERROR_TAIL_LINES:])


def _read_result(returncode: int, timed_out: bool, timeout_s: float, result_dir: Path, output: str) -> RunResult:
    rank_results = {}
    for path in sorted(result_dir.glob(RESULT_FILE.format(rank="*"))):
        data = json.loads(path.read_text(encoding="utf-8"))
        rank_results[data["rank"]] = data
    records = _read_step_records(result_dir / STEPS_FILE)
    main = rank_results.get(0, {})

    harness_error = next((r["harness_error"] for r in rank_results.values() if r.get("harness_error")), None)
    failed = next(((rank, r) for rank, r in sorted(rank_results.items()) if r.get("error")), None)
    error = exception = None
    if failed is not None:
        where = f"rank {failed[0]}: " if len(rank_results) > 1 else ""
        error = where + failed[1]["error"]
        exception = where + (failed[1].get("exception") or failed[1]["error"].strip().splitlines()[-1])
    if timed_out:
        error = exception = f"timed out after {timeout_s:g} s (at step {len(records)}); raise --timeout or lower --steps"
    elif returncode != 0 and error is None and harness_error is None:
        # No traceback from the bootstrap: the process died (a signal, a crash in native code,
        # torchrun stopping its ranks); the end of its output says why.
        tail = _tail(output)
        last_line = tail.splitlines()[-1].strip() if tail else "no output"
        exception = f"the process exited with status {returncode}: {last_line}"
        error = f"{exception}\n{tail}"
    finished = bool(rank_results) and all(r["finished"] for r in rank_results.values()) and \
        returncode == 0 and not timed_out
    step_times = [r["step_time_s"] for r in records if r["step_time_s"] is not None]
    memory = [r["memory_bytes"] for r in records]
    return RunResult(
        finished=finished, steps=len(records), losses=[r["loss"] for r in records],
        step_time_s=statistics.median(step_times) if step_times else None,
        peak_memory_bytes=main.get("peak_memory_bytes"), memory_growth_bytes=memory_growth(memory),
        world_size=main.get("world_size", 1), error=error, device=main.get("device"),
        memory_bytes=memory, memory_measure=main.get("memory_measure"),
        cuda_mapped_calls=main.get("cuda_mapped_calls", 0), harness_error=harness_error,
        stopped_by_harness=bool(main.get("stopped_by_harness")), exception=exception, step_times_s=step_times,
        profile=main.get("profile"), imported_files=main.get("imported_files", []))


def _read_step_records(path: Path) -> list[dict]:
    """The per-step lines; a run killed mid-write may leave its last line incomplete."""
    records = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return records
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records
