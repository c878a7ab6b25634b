"""Run `torchlint verify --each --unsafe-fixes` on every script of the zoo (bench/zoo/) and write
bench/results/verify-zoo.md: per script, the verdict on all fixes and the measured noise; per
fix, its verdict, loss drift, step-time and peak-memory ratios, memory growth and whether
`--keep` would keep it.

    python bench/verify_zoo.py                 # all scripts, results to bench/results/verify-zoo.md
    python bench/verify_zoo.py cnn_mnist gan_paintings --out /tmp/zoo.md
    python bench/verify_zoo.py --device cuda --out bench/results/verify-zoo-gpu.md   # on a GPU
    python bench/verify_zoo.py --imports --select ALL   # fix the imported model modules too, every rule

Each run uses one intra-op thread (OMP_NUM_THREADS=1, unless set): the runs of a verification
take turns on the machine, and torch's thread pool slows down several-fold when the cores are
shared. The zoo's scripts and what was changed in each are listed in bench/zoo/README.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ZOO = ROOT / "bench" / "zoo"
DEFAULT_OUT = ROOT / "bench" / "results" / "verify-zoo.md"


@dataclass(frozen=True)
class ZooScript:
    name: str  # the folder under bench/zoo
    script: str  # the file verify runs, in that folder
    kind: str
    steps: int
    args: list[str] = field(default_factory=list)


SCRIPTS = [
    ZooScript("cnn_mnist", "train.py", "CNN (MorvanZhou/PyTorch-Tutorial)", 20),
    ZooScript("resnet_cifar", "trainer.py", "ResNet-20 on CIFAR shapes, DataParallel (akamaster)", 8, ["-b", "32"]),
    ZooScript("gan_paintings", "train.py", "GAN (MorvanZhou/PyTorch-Tutorial)", 40),
    ZooScript("vae_lightning", "run.py", "VAE in a LightningModule (AntixK/PyTorch-VAE)", 8),
    ZooScript("char_lstm", "train.py", "character LSTM language model (graykode/nlp-tutorial)", 40),
    ZooScript("word_nnlm", "train.py", "word n-gram language model (graykode/nlp-tutorial)", 40),
    ZooScript("mingpt_chargpt", "chargpt.py", "small GPT, character level (karpathy/minGPT)", 20),
    ZooScript("reinforce_cartpole", "train.py", "policy gradient, REINFORCE (seungeunrho/minimalRL)", 20),
    ZooScript("nanogpt_ddp", "train.py", "GPT trainer for DDP/torchrun with AMP (karpathy/nanoGPT)", 20),
    ZooScript("amp_recipe", "amp_recipe.py", "AMP: autocast + GradScaler (pytorch/tutorials recipe)", 16),
]


def verify_one(entry: ZooScript, device: str = "auto", imports: bool = False, select: list[str] | None = None):
    from torchlint.harness.verify import VerifyOptions, verify

    options = VerifyOptions(steps=entry.steps, unsafe_fixes=True, each=True, script_args=entry.args,
                            timeout_s=900, device=device, imports=imports, select=select)
    started = time.monotonic()
    report = verify(ZOO / entry.name / entry.script, options,
                    progress=lambda message: print(f"  {entry.name}: {message}", file=sys.stderr))
    return report, time.monotonic() - started


def _ratio(comparison) -> str:
    if comparison.value is None:
        return "-"
    noise = "" if comparison.noise is None else f" ±{comparison.noise:.0%}"
    word = "" if comparison.change == "no measured change" else f" **{comparison.change}**"
    return f"{comparison.value:.2f}x{noise}{word}"


def _growth(comparison) -> str:
    if comparison.value is None:
        return "-"
    word = "" if comparison.change == "no measured change" else f" **{comparison.change}**"
    return f"{comparison.value / 1024:+.0f} KiB (±{comparison.noise / 1024:.0f}){word}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary_row(entry: ZooScript, report, seconds: float) -> str:
    noise = report.noise
    tolerance = "-" if noise is None else f"{noise.tolerance:.3g}"
    spread = "-" if noise is None or noise.seed_spread is None else f"{noise.seed_spread:.3g}"
    step_noise = report.comparisons.get("step_time")
    step_noise_text = "-" if step_noise is None or step_noise.noise is None else f"±{step_noise.noise:.0%}"
    original = report.runs["original"]
    step_ms = "-" if not original.step_time_s else f"{original.step_time_s * 1e3:.1f}"
    drift = "-" if report.reproducibility is None else f"{report.reproducibility.max_rel_diff:.2g}"
    return (f"| `{entry.name}/{entry.script}` | {entry.kind} | {len(report.fixes)} | {report.verdict.name} | "
            f"{original.steps} | {step_ms} | {spread} | {tolerance} | {drift} | {step_noise_text} | {seconds:.0f} |")


def fix_rows(entry: ZooScript, report) -> list[str]:
    rows = []
    for m in report.per_fix or []:
        diff = "-" if m.loss_max_rel_diff is None else f"{m.loss_max_rel_diff:.2g}"
        safety = "/".join(sorted({fix.applicability for fix in m.unit.fixes}))
        why = "" if m.verdict.name == "pass" else _cell(m.verdict.reasons[-1])[:160]
        rows.append(f"| `{entry.name}` | {m.unit.label} | {safety} | {m.verdict.name} | {diff} | "
                    f"{_ratio(m.step_time)} | {_ratio(m.peak_memory)} | {_growth(m.memory_growth)} | "
                    f"{'yes' if m.kept else 'no'} | {why} |")
    return rows


def machine_lines(command: str) -> list[str]:
    """Where the figures come from: the GPU by name when the runs used one, else a warning that the
    CUDA-only gains cannot show."""
    import torch

    written = (f"Written by `{command}` on {time.strftime('%Y-%m-%d')}: torch {torch.__version__}, "
               f"Python {platform.python_version()}, {os.cpu_count()} CPU cores, "
               f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    if torch.cuda.is_available():
        return [f"{written}, GPU: {torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda}).", ""]
    return [f"{written}, no GPU.", "",
            "**GPU figures are missing:** this run had no GPU, so every run is on the CPU, with CUDA calls mapped "
            "to it (the CUDA-only gains of fused optimizers, TF32, pinned memory and autocast cannot show here; "
            "`--device cuda` runs the same bench on a GPU: bench/results/verify-zoo-gpu.md).", ""]


def render(results: list, command: str = "python bench/verify_zoo.py") -> str:
    lines = [
        "# `torchlint verify --each --unsafe-fixes` on the zoo",
        "",
        *machine_lines(command),
        "Noise, per script: *seed spread* is how far the mean loss of the last steps moves when the original "
        "runs again with every seed shifted by one; *loss tolerance* is what an unsafe fix's run may end above "
        "the original (3x the larger of the seed spread and the step-to-step noise); *step-time noise* is the "
        "band within which a step-time ratio is reported as no measured change; *same-seed drift* (on a GPU, "
        "with a safe fix) is the largest relative difference between two runs of the original under the same "
        "seeds, and a safe fix may differ from the original by 3x that.",
        "",
        "| script | what | fixes | verdict (all fixes) | steps | step ms | seed spread | loss tolerance | "
        "same-seed drift | step-time noise | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [summary_row(entry, report, seconds) for entry, report, seconds in results]
    lines += [
        "",
        "## Each fix on its own",
        "",
        "Ratios are the fixed run against the original (best of each side's runs); a ratio inside its noise "
        "band carries no word. *kept*: what `--keep` would write (passes, and measures no worse).",
        "",
        "| script | fix | safety | verdict | loss max rel. diff | step time | peak memory | memory growth | kept | "
        "why not pass |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for entry, report, _ in results:
        lines += fix_rows(entry, report)
    without = [f"`{entry.name}` ({report.verdict.name}: {_cell(report.verdict.reasons[0])})"
               for entry, report, _ in results if not report.per_fix]
    if without:
        lines += ["", "Scripts with no fix measured: " + "; ".join(without) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="zoo folders to run (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where the runs train (verify's --device)")
    parser.add_argument("--imports", action="store_true",
                        help="fix the modules each script imports from its folder too (verify's --imports)")
    parser.add_argument("--select", action="append", help="rules whose fixes to apply (verify's --select)")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    by_name = {entry.name: entry for entry in SCRIPTS}
    unknown = [name for name in args.names if name not in by_name]
    if unknown:
        parser.error(f"not in the zoo: {', '.join(unknown)} (the zoo: {', '.join(by_name)})")
    chosen = [by_name[name] for name in args.names] if args.names else SCRIPTS  # in the order asked
    args.out.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python bench/verify_zoo.py", *([f"--device {args.device}"] if args.device != "auto" else []),
                        *(["--imports"] if args.imports else []), *(f"--select {code}" for code in args.select or [])])
    results = []
    for entry in chosen:
        print(f"{entry.name}: verify --each --unsafe-fixes --steps {entry.steps}", file=sys.stderr)
        report, seconds = verify_one(entry, args.device, args.imports, args.select)
        results.append((entry, report, seconds))
        # written after each script, so that a run stopped at a time limit keeps what it measured
        args.out.write_text(render(results, command), encoding="utf-8")
    print(f"written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
