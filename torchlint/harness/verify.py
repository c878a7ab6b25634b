"""``torchlint verify``: prove that a fixed training script still trains, and measure what each
fix buys.

The script's folder is copied to a scratch directory once per run, so that no run sees what
another wrote (a checkpoint it would resume from) and the user's files are never touched: the
script in each copy is a file of its own, written in the script's own encoding, and a symbolic
link that leads back into the folder leads into the copy instead (see ``_copy_script_folder``).
The selected fixes are applied to the script itself in the fixed copies; modules it imports from
its folder run as written, unless ``--imports`` asks to fix them too: then the Python files under
the folder that the original run imported (``bootstrap.imported_files``) are fixed as ``check
--fix`` would fix them, each with the settings that apply to it, and their fixes are judged and
measured with the script's (``ModuleFixes``, ``Sources``).

The runs: the original; the original again under shifted seeds when run-to-run noise is needed
(an unsafe fix is judged against it, and ``--each`` reports every ratio against it); the script
with all fixes, and under torchrun for a distributed rewrite; with ``--each``, the script with
each fix on its own (``fix_plan``); with ``--keep``, the script with the kept fixes when they are
not all of them; with ``--profile``, the original under ``torch.profiler`` (``profiling``).
``verdict`` judges, ``measures`` compares times and memory.

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
from torchlint.fileio import SourceDecodeError, SourceFile, SourceReadError, WriteError, read_source, write_source
from torchlint.harness import fix_plan, measures
from torchlint.harness.attribution import ProfileSummary, attribute_findings
from torchlint.harness.fix_plan import FixRun, FixUnit
from torchlint.harness.measures import Comparison
from torchlint.harness.runner import Progress, RunResult, RunSettings, run_script
from torchlint.harness.verdict import (PASS, AppliedFix, LossNoise, Reproducibility, Verdict, judge,
                                       judge_original, loss_max_rel_diff, nothing_to_verify)
from torchlint.harness.verdict import one_line as _one_line

DEFAULT_STEPS = 100
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_NPROC_FOR_DISTRIBUTED = 2  # what DESIGN.md asks a distributed rewrite to survive
MAX_FOLDER_BYTES = 1 << 30
NOT_COPIED = (*DEFAULT_EXCLUDE, "__pycache__", "*.pyc")
NOISE_SEED_OFFSET = 1  # the noise run: every seed the script sets, plus one
PROFILE_WARMUP_STEPS = 2  # the first steps build caches and pay one-time costs
PROFILE_STEPS = 5


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
    each: bool = False  # measure each fix on its own too
    keep: bool = False  # write the fixes that pass and measure no worse to the script (implies each)
    profile: bool = False  # rank the findings by measured cost
    imports: bool = False  # fix the modules the script imports from its folder too


@dataclass
class ModuleFixes:
    """``--imports``: the fixes of one module that the original run imported from the script's folder."""

    path: str  # relative to the script's folder, with forward slashes
    file: SourceFile
    settings: object
    run: FixRun  # its fixes, each AppliedFix naming ``path``


@dataclass(frozen=True)
class Sources:
    """What a run's copy of the folder holds instead of the user's files: the script's fixed text
    (None: as written) and fixed modules' texts by path (the others as written)."""

    script: str | None = None
    modules: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, script: str | None, modules: dict[str, str]) -> Sources:
        return cls(script, tuple(sorted(modules.items())))


@dataclass
class FixMeasurement:
    """One fix (or group of fixes measured together) of ``verify --each``."""

    unit: FixUnit
    verdict: Verdict
    loss_max_rel_diff: float | None
    step_time: Comparison
    peak_memory: Comparison
    memory_growth: Comparison
    run: RunResult | None
    kept: bool = False
    why: str = ""  # why it was kept or not


@dataclass
class KeepResult:
    """What ``--keep`` did to the user's file."""

    kept: list[AppliedFix]
    written: bool
    summary: list[str]  # one line per fix: kept or not, and why; then what happened to the file


@dataclass
class VerifyReport:
    script: Path
    steps: int
    device: str
    fixes: list[AppliedFix]
    # "original", "original_noise" (shifted seeds), "fixed", "fixed_torchrun" (distributed
    # rewrites), "kept" (--keep, when not all fixes were kept); None where a run did not happen
    runs: dict[str, RunResult | None]
    verdict: Verdict
    notes: list[str]
    noise: LossNoise | None = None
    reproducibility: Reproducibility | None = None  # on a GPU: the original's drift under the same seeds
    comparisons: dict[str, Comparison] = field(default_factory=dict)  # fixed against original
    per_fix: list[FixMeasurement] | None = None
    keep: KeepResult | None = None
    profile: ProfileSummary | None = None
    profile_run: RunResult | None = None
    modules: list[ModuleFixes] = field(default_factory=list)  # --imports: the imported modules with fixes
    imported: list[str] = field(default_factory=list)  # the modules the original imported from the folder

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code


class _Runs:
    """Runs the script's copies in one scratch folder, each with a label of its own."""

    def __init__(self, original_file: SourceFile, options: VerifyOptions, scratch: Path, progress: Progress | None):
        self.original_file = original_file
        self.options = options
        self.scratch = scratch
        self.progress = progress
        self.left_out: list[str] = []  # links in the folder that lead to one of its ancestors
        self.settings = RunSettings(steps=options.steps, seed=options.seed, device=options.device,
                                    timeout_s=options.timeout_s)
        self.nproc = 1  # ranks for a distributed rewrite under torchrun; 1: no torchrun run
        self.module_files: dict[str, SourceFile] = {}  # --imports: the modules whose fixes a run may hold

    def run(self, label: str, sources: Sources | None, nproc: int | None = None, **settings) -> RunResult:
        folder = label.replace(" ", "_").replace(":", "").replace(",", "").replace("/", "_")
        sources = sources or Sources()
        copy = _copy_script_folder(self.original_file, self.scratch / folder, sources.script, self.left_out)
        for path, text in sources.modules:
            module = self.module_files[path]
            try:
                write_source(replace(module, path=copy.parent / path), text)
            except WriteError as error:
                raise VerifyError(f"{module.path}: the fixed module cannot be written: {error}") from None
        run_settings = replace(self.settings, **settings)
        if self.progress:
            launcher = f"torchrun --nproc_per_node={nproc}" if nproc else "python"
            self.progress(f"{label}: running {copy.name} under {launcher} for {run_settings.steps} steps")
        result = run_script(copy, self.options.script_args, run_settings, label=label,
                            result_dir=self.scratch / "results" / folder, nproc=nproc, progress=self.progress)
        if result.harness_error:
            raise VerifyError(result.harness_error)
        return result


def verify(script: Path, options: VerifyOptions, progress: Progress | None = None) -> VerifyReport:
    script = Path(script).resolve()
    if not script.is_file():
        raise VerifyError(f"{script}: no such file")
    if options.steps < 1:
        raise VerifyError("--steps must be at least 1")
    if options.keep:
        options = replace(options, each=True)
    original_file, settings = _read(script, options)
    everything = fix_plan.apply_fixes(original_file.text, str(script), settings)
    _check_folder_size(script.parent)

    with tempfile.TemporaryDirectory(prefix="torchlint-verify-") as scratch_dir:
        runs = _Runs(original_file, options, Path(scratch_dir), progress)
        original = runs.run("original", None)
        modules = _module_fixes(script, original.imported_files, options) if options.imports else []
        runs.module_files = {module.path: module.file for module in modules}
        applied = [*everything.applied.values(), *(fix for module in modules for fix in module.run.applied.values())]
        fixes = sorted(applied, key=lambda fix: (fix.path, fix.line, fix.code))
        distributed = any(fix.is_distributed_rewrite for fix in fixes)
        nproc = options.nproc if options.nproc is not None else (DEFAULT_NPROC_FOR_DISTRIBUTED if distributed else 1)
        runs.nproc = nproc
        report = VerifyReport(script, options.steps, original.device or options.device, fixes,
                              {"original": original}, Verdict(PASS, []), notes=[], modules=modules,
                              imported=original.imported_files)
        report.verdict = judge_original(original) or _verify_fixes(report, runs, everything, settings)
        report.runs.setdefault("fixed", None)
        if options.profile and report.verdict.name != "error":
            report.profile_run = runs.run("profile", None, steps=PROFILE_WARMUP_STEPS + PROFILE_STEPS,
                                          profile_steps=PROFILE_STEPS, profile_warmup=PROFILE_WARMUP_STEPS)
            report.profile = attribute_findings(fix_plan.lint(original_file.text, str(script), settings),
                                                report.profile_run)
        if options.keep and report.per_fix is not None:
            report.keep = _keep(report, runs, original_file, settings)
    report.notes = _notes(report, options, distributed, nproc, sorted(set(runs.left_out)))
    return report


def _module_fixes(script: Path, imported: list[str], options: VerifyOptions) -> list[ModuleFixes]:
    """The fixes of each module the original run imported from the script's folder, as ``check --fix``
    makes them with that file's settings; files the configuration excludes are left as written."""
    found = []
    for path in imported:
        file, settings = _read(script.parent / path, options, "module")
        if settings.is_excluded(file.path):
            continue
        run = fix_plan.apply_fixes(file.text, str(file.path), settings)
        if run.applied:
            run.applied = {fix_id: replace(fix, path=path) for fix_id, fix in run.applied.items()}
            found.append(ModuleFixes(path, file, settings, run))
    return found


def _all_fixed(everything: FixRun, modules: list[ModuleFixes]) -> Sources:
    return Sources.of(everything.source if everything.applied else None,
                      {module.path: module.run.source for module in modules})


def _read(script: Path, options: VerifyOptions, what: str = "script"):
    try:
        original = read_source(script)
    except SourceReadError as error:
        raise VerifyError(str(error)) from None
    except SourceDecodeError as error:
        raise VerifyError(f"{script}: cannot decode the {what}: {error}") from None
    return original, resolve_settings(script, select=options.select, unsafe_fixes=options.unsafe_fixes)


def _verify_fixes(report: VerifyReport, runs: _Runs, everything: FixRun, settings) -> Verdict:
    """Run the fixed script (and each fix, with --each) against the original that ran."""
    original = report.runs["original"]
    if not report.fixes:
        return nothing_to_verify(original)
    options = runs.options
    noise_run = None
    if options.each or any(fix.applicability == "unsafe" for fix in report.fixes):
        noise_run = runs.run("original_noise", None, seed_offset=NOISE_SEED_OFFSET)
        report.runs["original_noise"] = noise_run
        if not (noise_run.finished and noise_run.steps == original.steps):
            noise_run = None  # other seeds broke it: the step-to-step noise stands alone (see the notes)
    report.noise = LossNoise.measure(original.losses, noise_run.losses if noise_run else None)
    report.reproducibility = _reproducibility(runs, report)
    all_fixed = _all_fixed(everything, report.modules)
    fixed, verdict = _run_fixes(runs, report, "fixed", all_fixed, report.fixes, record=True)
    report.comparisons = _compare(runs, report, fixed, "fixed", all_fixed, noise_run)
    if options.each:
        units = fix_plan.fix_units(runs.original_file.text, str(report.script), settings, everything) if \
            everything.applied else []
        for module in report.modules:
            units += fix_plan.fix_units(module.file.text, str(module.file.path), module.settings, module.run,
                                        module=module.path)
        report.per_fix = [_measure_unit(runs, report, unit, number, noise_run, fixed, verdict)
                          for number, unit in enumerate(units, start=1)]
    return verdict


def _reproducibility(runs: _Runs, report: VerifyReport) -> Reproducibility | None:
    """On a GPU, with a safe fix to judge: run the original again under the same seeds, since
    cuDNN's autotuner and atomic-add kernels can make two identical runs drift apart; None on the
    CPU (the same floats repeat) or when only unsafe fixes are judged."""
    if report.device != "cuda" or all(fix.applicability == "unsafe" for fix in report.fixes):
        return None
    original = report.runs["original"]
    repeat = runs.run("original_repeat", None)
    report.runs["original_repeat"] = repeat
    if not (repeat.finished and repeat.steps == original.steps):
        return None
    drift = loss_max_rel_diff(original.losses, repeat.losses)
    return None if drift is None else Reproducibility(drift)


def _run_fixes(runs: _Runs, report: VerifyReport, label: str, sources: Sources, fixes: list[AppliedFix],
               record: bool = False) -> tuple[RunResult, Verdict]:
    """Run fixed sources (and under torchrun, for a distributed rewrite), and judge them; with
    ``record``, the runs go into the report's table."""
    fixed = runs.run(label, sources)
    distributed = None
    if any(fix.is_distributed_rewrite for fix in fixes) and runs.nproc > 1:
        distributed = runs.run(f"{label}_torchrun", sources, nproc=runs.nproc)
    if record:
        report.runs[label] = fixed
        if distributed is not None:
            report.runs[f"{label}_torchrun"] = distributed
    verdict = judge(report.runs["original"], fixed, fixes, device=report.device, noise=report.noise,
                    distributed=distributed, nproc=runs.nproc, reproducibility=report.reproducibility)
    return fixed, verdict


def _compare(runs: _Runs, report: VerifyReport, fixed: RunResult, label: str, sources: Sources,
             noise_run: RunResult | None) -> dict[str, Comparison]:
    """Step time and memory of a fixed run against the original. A fix that measures slower runs
    once more, and so does the original, right after it: the fix is slower only if its faster run
    still is, against the fastest original, outside a band that now spans the original's early and
    late runs, so that a machine that slowed down since the original ran (seen on a GPU machine: every
    later run 1.45x slower) widens the band instead of making every fix "slower" (see ``measures``)."""
    original = report.runs["original"]
    originals = [original] + ([noise_run] if noise_run else [])
    step_time = measures.step_time(originals, [fixed])
    if step_time.worse and fixed.finished:
        again = runs.run(f"{label} again", sources)
        original_again = runs.run(f"original again ({label})", None)
        if original_again.finished and original_again.steps == original.steps:
            originals.append(original_again)
        step_time = measures.step_time(originals, [fixed, again])
    return {"step_time": step_time,
            "peak_memory": measures.peak_memory(original, fixed, noise_run),
            "memory_growth": measures.memory_growth(original, fixed, noise_run)}


def _measure_unit(runs: _Runs, report: VerifyReport, unit: FixUnit, number: int, noise_run: RunResult | None,
                  all_fixed: RunResult, all_verdict: Verdict) -> FixMeasurement:
    if len(unit.fixes) + len(unit.with_others) == len(report.fixes):
        # this unit applies all the fixes: its run and measures are the fixed run's
        run, verdict, comparisons = all_fixed, all_verdict, report.comparisons
    else:
        sources = Sources.of(None, {unit.path: unit.source}) if unit.path else Sources(unit.source)
        run, verdict = _run_fixes(runs, report, f"fix {number}", sources, [*unit.fixes, *unit.with_others])
        comparisons = _compare(runs, report, run, f"fix {number}", sources, noise_run)
    original = report.runs["original"]
    measurement = FixMeasurement(unit, verdict, loss_max_rel_diff(original.losses, run.losses),
                                 comparisons["step_time"], comparisons["peak_memory"],
                                 comparisons["memory_growth"], run)
    measurement.kept, measurement.why = _keep_decision(measurement)
    return measurement


def _keep_decision(measurement: FixMeasurement) -> tuple[bool, str]:
    """Keep a fix that passes and measures no worse than the original beyond noise."""
    if measurement.verdict.name != PASS:
        return False, f"its verdict is {measurement.verdict.name}: {measurement.verdict.reasons[-1]}"
    measured = {"step time": measurement.step_time, "peak memory": measurement.peak_memory,
                "memory growth": measurement.memory_growth}
    worse = [f"{name} {c.describe(in_bytes=name == 'memory growth')}" for name, c in measured.items() if c.worse]
    if worse:
        return False, "it passes but measures worse: " + "; ".join(worse)
    better = [f"{name} {c.change}" for name, c in measured.items() if c.better]
    return True, "it passes" + (f" and measures better: {', '.join(better)}" if better
                                else ", with no measured change in step time or memory")


def _keep(report: VerifyReport, runs: _Runs, original_file: SourceFile, settings) -> KeepResult:
    """Write the fixes that were kept to the user's script (and, with --imports, its modules), when
    together they pass again."""
    kept_units = [m for m in report.per_fix if m.kept]
    summary = [f"{'kept' if m.kept else 'not kept'}: {m.unit.label} ({m.why})" for m in report.per_fix]
    kept = [fix for m in kept_units for fix in m.unit.fixes]
    if not kept:
        return KeepResult([], False, summary + [f"{report.script.name} was not changed: no fix was kept"])
    ids: dict[str, set] = {}
    for m in kept_units:
        ids.setdefault(m.unit.path, set()).update(m.unit.ids)
    files = {"": (original_file, settings), **{m.path: (m.file, m.settings) for m in report.modules}}
    texts = {}
    for path, wanted in ids.items():
        file, file_settings = files[path]
        texts[path] = fix_plan.apply_fixes(file.text, str(file.path), file_settings,
                                           lambda fix_id, wanted=wanted: fix_id in wanted).source
    names = [report.script.name if not path else path for path in sorted(texts)]
    if len(kept) == len(report.fixes):
        verdict = report.verdict
    else:
        sources = Sources.of(texts.get(""), {path: text for path, text in texts.items() if path})
        _, verdict = _run_fixes(runs, report, "kept", sources, kept, record=True)
    if verdict.name != PASS:
        return KeepResult(kept, False, summary + [
            f"{', '.join(names)} {'was' if len(names) == 1 else 'were'} not changed: the kept fixes together do "
            f"not pass ({verdict.reasons[-1]})"])
    for path, text in sorted(texts.items()):
        try:
            write_source(files[path][0], text)
        except WriteError as error:
            raise VerifyError(str(error)) from None
    return KeepResult(kept, True, summary + [
        f"{', '.join(names)} {'was' if len(names) == 1 else 'were'} rewritten with the {len(kept)} kept "
        f"fix{'es' if len(kept) > 1 else ''}, which pass together"])


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
                     f"device=\"cuda\" and the like to it ({', '.join(mapped)}); CUDA autocast regions kept "
                     "CUDA's op policy (an op it rejects fails the run) but computed in float32")
    original = report.runs["original"]
    if original.memory_measure and original.memory_measure.startswith("heap-in-use"):
        on_cuda = " plus the CUDA allocator's" if "cuda" in original.memory_measure else ""
        notes.append(f"memory growth is measured on the bytes the C heap holds in use{on_cuda} (live tensors "
                     "and autograd graphs; allocator caches excluded), late steps minus early steps")
    noise_run = report.runs.get("original_noise")
    if noise_run is not None:
        usable = report.noise is not None and report.noise.seed_spread is not None
        notes.append("run-to-run noise: the original ran a second time with every seed it sets shifted by "
                     f"{NOISE_SEED_OFFSET}" + ("" if usable else f", but that run did not finish its steps "
                                               f"({_one_line(noise_run)}), so step-to-step noise alone was used"))
    repeat = report.runs.get("original_repeat")
    if repeat is not None:
        drift = report.reproducibility
        notes.append("reproducibility: the original ran a second time under the same seeds, because on a GPU "
                     "two identical runs can differ (cuDNN's autotuner, atomic adds); " +
                     ("they gave the same losses, so safe fixes are held to the usual tolerance" if drift and
                      drift.max_rel_diff == 0 else
                      f"their losses differ by up to {drift.max_rel_diff:.2g}, and safe fixes are judged against "
                      "that" if drift else "the two runs could not be compared (that run did not finish its "
                      f"steps, or a loss was not finite: {_one_line(repeat)}), so safe fixes are held to the usual "
                      "tolerance"))
    notes += _imports_notes(report, options)
    if original.finished and original.steps and not original.stopped_by_harness:
        notes.append(f"the script ended by itself after {original.steps} optimizer steps, before --steps "
                     f"{options.steps}")
    if distributed and nproc <= 1:
        notes.append("the distributed rewrite was not run under torchrun (--nproc 1)")
    if options.nproc and options.nproc > 1 and not distributed:
        notes.append(f"--nproc {options.nproc} was not used: it applies to distributed rewrites (TL5xx) only, "
                     "and none was applied")
    if report.profile_run is not None:
        notes.append(f"--profile: the original ran again under torch.profiler with Python stacks for steps "
                     f"{PROFILE_WARMUP_STEPS + 1}-{PROFILE_WARMUP_STEPS + PROFILE_STEPS}; the profiler slows "
                     "Python-heavy code, so shares are of the profiled step, not of the plain one")
    return notes


def _imports_notes(report: VerifyReport, options: VerifyOptions) -> list[str]:
    """Which of the project's files the fixed runs changed: the script, and with --imports the
    modules the original imported from its folder."""
    imported = report.imported
    if not options.imports:
        if not (report.fixes and imported):
            return []
        return [f"fixes were applied to {report.script.name} only; the {_count(imported, 'module')} it imported "
                f"from its folder ran as written ({_listed(imported)}): --imports fixes them too"]
    fixed = [module.path for module in report.modules]
    if not imported:
        return [f"--imports: {report.script.name} imported no module from its folder"]
    return [f"--imports: of the {_count(imported, 'module')} {report.script.name} imported from its folder "
            f"({_listed(imported)}), " + (f"{_listed(fixed)} had fixes, applied with the script's"
                                          if fixed else "none had a fix")]


def _count(items: list, noun: str) -> str:
    return f"{len(items)} {noun}{'' if len(items) == 1 else 's'}"


def _listed(items: list[str], shown: int = 8) -> str:
    return ", ".join(items[:shown]) + (f" and {len(items) - shown} more" if len(items) > shown else "")


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
