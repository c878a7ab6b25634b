"""``torchlint verify``: prove that a fixed training script still trains.

The script's folder is copied to a scratch directory once per run, so that no run sees what
another wrote (a checkpoint it would resume from) and the user's files are never touched: the
script in each copy is a file of its own, written in the script's own encoding, and a symbolic
link that leads back into the folder leads into the copy instead (see ``_copy_script_folder``).
The selected fixes are applied to the script itself in the fixed copies; modules it imports from
its folder run as written. Then the original runs, the fixed script runs, and, for a distributed
rewrite, the fixed script runs again under torchrun; ``verdict`` judges them.

Limits: the original always runs as plain ``python``, so a script that only works under a
launcher (it reads RANK/WORLD_SIZE) cannot be the reference; training that happens in processes
the script starts itself (``mp.spawn``) is not instrumented; steps are ``optimizer.step()`` calls
of any optimizer (a GAN's two optimizers make two steps per iteration).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from torchlint.config import DEFAULT_EXCLUDE, resolve_settings
from torchlint.engine import fix_source
from torchlint.fileio import SourceDecodeError, SourceFile, SourceReadError, WriteError, read_source, write_source
from torchlint.harness.runner import Progress, RunResult, run_script
from torchlint.harness.verdict import PASS, AppliedFix, Verdict, judge, judge_original

DEFAULT_STEPS = 100
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_NPROC_FOR_DISTRIBUTED = 2  # what DESIGN.md asks a distributed rewrite to survive
MAX_FOLDER_BYTES = 1 << 30
NOT_COPIED = (*DEFAULT_EXCLUDE, "__pycache__", "*.pyc")


class VerifyError(Exception):
    """Verification cannot start or be set up (a usage problem, exit 2); not a verdict."""


@dataclass
class VerifyOptions:
    steps: int = DEFAULT_STEPS
    unsafe_fixes: bool = False
    select: list[str] | None = None
    nproc: int | None = None  # None: 2 when a distributed rewrite was applied, else no torchrun run
    device: str = "auto"
    timeout_s: float = DEFAULT_TIMEOUT_S
    seed: int = 0
    script_args: list[str] = field(default_factory=list)


@dataclass
class VerifyReport:
    script: Path
    steps: int
    device: str
    fixes: list[AppliedFix]
    runs: dict[str, RunResult | None]  # "original", "fixed" and, for distributed rewrites, "fixed_torchrun"
    verdict: Verdict
    notes: list[str]

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code


def verify(script: Path, options: VerifyOptions, progress: Progress | None = None) -> VerifyReport:
    script = Path(script).resolve()
    if not script.is_file():
        raise VerifyError(f"{script}: no such file")
    if options.steps < 1:
        raise VerifyError("--steps must be at least 1")
    original_file, fixed_source, fixes = apply_fixes(script, options)
    distributed = any(fix.is_distributed_rewrite for fix in fixes)
    nproc = options.nproc if options.nproc is not None else (DEFAULT_NPROC_FOR_DISTRIBUTED if distributed else 1)
    _check_folder_size(script.parent)

    runs: dict[str, RunResult | None] = {"original": None, "fixed": None}
    left_out: list[str] = []  # links in the folder that lead to one of its ancestors
    with tempfile.TemporaryDirectory(prefix="torchlint-verify-") as scratch_dir:
        scratch = Path(scratch_dir)

        def run(label: str, source: str | None, launch_nproc: int | None = None) -> RunResult:
            copy = _copy_script_folder(original_file, scratch / label, source, left_out)
            if progress:
                launcher = f"torchrun --nproc_per_node={launch_nproc}" if launch_nproc else "python"
                progress(f"{label}: running {script.name} under {launcher} for {options.steps} steps")
            result = run_script(copy, options.script_args, label=label, steps=options.steps, seed=options.seed,
                                device=options.device, timeout_s=options.timeout_s,
                                result_dir=scratch / "results" / label, nproc=launch_nproc, progress=progress)
            if result.harness_error:
                raise VerifyError(result.harness_error)
            runs[label] = result
            return result

        original = run("original", None)
        device = original.device or options.device
        verdict = judge_original(original)
        if verdict is None and not fixes:
            verdict = Verdict(PASS, ["no fixes apply to this script with the selected rules: nothing to verify"])
        if verdict is None:
            fixed = run("fixed", fixed_source)
            distributed_run = run("fixed_torchrun", fixed_source, launch_nproc=nproc) \
                if distributed and nproc > 1 else None
            verdict = judge(original, fixed, fixes, device=device, distributed=distributed_run, nproc=nproc)

    report = VerifyReport(script, options.steps, device, fixes, runs, verdict, notes=[])
    report.notes = _notes(report, options, distributed, nproc, sorted(set(left_out)))
    return report


def _notes(report: VerifyReport, options: VerifyOptions, distributed: bool, nproc: int,
           left_out: list[str]) -> list[str]:
    """What a reader of the numbers must know about how they were taken."""
    notes = []
    if left_out:
        notes.append("symbolic links to a folder that holds the script's folder were left out of the runs' copies, "
                     f"so that no run could write to your files through them: {', '.join(left_out)}")
    mapped = [f"{run.cuda_mapped_calls} in the {label.replace('_', ' ')} run"
              for label, run in report.runs.items() if run is not None and run.cuda_mapped_calls]
    if mapped:
        notes.append("CUDA calls ran on the CPU: the runs' device is the CPU, so the harness mapped .cuda(), "
                     f"device=\"cuda\" and the like to it ({', '.join(mapped)})")
    original = report.runs["original"]
    if original.memory_measure and original.memory_measure.startswith("heap-in-use"):
        on_cuda = " plus the CUDA allocator's" if "cuda" in original.memory_measure else ""
        notes.append(f"memory growth is measured on the bytes the C heap holds in use{on_cuda} (live tensors "
                     "and autograd graphs; allocator caches excluded), late steps minus early steps")
    if report.fixes:
        notes.append(f"fixes were applied to {report.script.name} only; modules it imports ran as written")
    if original.finished and original.steps and not original.stopped_by_harness:
        notes.append(f"the script ended by itself after {original.steps} optimizer steps, before --steps "
                     f"{options.steps}")
    if distributed and nproc <= 1:
        notes.append("the distributed rewrite was not run under torchrun (--nproc 1)")
    if options.nproc and options.nproc > 1 and not distributed:
        notes.append(f"--nproc {options.nproc} was not used: it applies to distributed rewrites (TL5xx) only, "
                     "and none was applied")
    return notes


def apply_fixes(script: Path, options: VerifyOptions) -> tuple[SourceFile, str, list[AppliedFix]]:
    """The script as read (in its declared encoding), its fixed text and the fixes it took, with
    the project's configuration."""
    try:
        original = read_source(script)
    except SourceReadError as error:
        raise VerifyError(str(error)) from None
    except SourceDecodeError as error:
        raise VerifyError(f"{script}: cannot decode the script: {error}") from None
    settings = resolve_settings(script, select=options.select, unsafe_fixes=options.unsafe_fixes)
    result = fix_source(original.text, str(script), settings)
    fixes = [AppliedFix(d.code, d.line + 1, d.fix.applicability) for d in result.fixed]
    return original, result.source, sorted(fixes, key=lambda fix: (fix.line, fix.code))


def _not_copied(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in NOT_COPIED)


def _check_folder_size(folder: Path) -> None:
    total = 0
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not _not_copied(d)]
        for name in files:
            if not _not_copied(name):
                try:
                    total += os.lstat(os.path.join(root, name)).st_size
                except OSError:
                    continue
    if total > MAX_FOLDER_BYTES:
        raise VerifyError(f"{folder} holds {total / 2**30:.1f} GiB; verify copies the script's folder for each "
                          f"run and stops above {MAX_FOLDER_BYTES / 2**30:.0f} GiB. Move the script into a "
                          "folder with only what it needs (symbolic links to data are copied as links).")


def _copy_script_folder(script: SourceFile, destination: Path, source: str | None, left_out: list[str]) -> Path:
    """Copy the script's folder, and in it the script as read, or ``source`` in the script's
    encoding when given. Symbolic links are copied as links (data stays where it is), except
    that none may lead to the user's files in the folder: one that leads into the folder is
    pointed at the same place in the copy, one that leads to a folder holding it is left out
    (its name is added to ``left_out``), and the script itself is a file of its own."""
    folder = script.path.parent
    shutil.copytree(folder, destination, symlinks=True,
                    ignore=lambda _dir, names: [n for n in names if _not_copied(n)])
    for link in _links(destination):
        target = Path(os.path.realpath(folder / link.relative_to(destination)))
        if target == folder or folder in target.parents:
            link.unlink()
            link.symlink_to(os.path.relpath(destination / target.relative_to(folder), link.parent))
        elif target in folder.parents:
            link.unlink()
            left_out.append(link.relative_to(destination).as_posix())
    copy = destination / script.path.name
    copy.unlink(missing_ok=True)  # whatever the copy holds there, the runs get the bytes that were read
    copy.write_bytes(script.raw)
    if source is not None:
        try:
            write_source(replace(script, path=copy), source)
        except WriteError as error:
            raise VerifyError(f"{script.path}: the fixed script cannot be written: {error}") from None
    return copy


def _links(folder: Path) -> list[Path]:
    """The symbolic links under ``folder``, which is not left through them."""
    return [Path(root, name) for root, dirs, files in os.walk(folder) for name in (*dirs, *files)
            if os.path.islink(os.path.join(root, name))]
