"""Time torchlint against its peers on real code, side by side in one run.

    .venv/bin/python bench/speed.py     # writes bench/results/speed.md
    (the first run calls bench/setup.sh, which installs the corpora and peers into bench/.work)

Each command runs as a child process; wall time and peak RSS (the largest of the process and the
workers it waited for) come from os.wait4. The targets of issue 6 are single-process figures, so
torchlint's cold runs use -j1; the -j2/-j auto rows show what its process pool adds on this machine.
Medians of --repeat runs, except for the slow peers (TorchFix, Fixit), which run once.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLD = "torchlint --select ALL --no-cache -j1 (cold, one process)"
WARM = "torchlint --select ALL (warm: every file a cache hit)"
RUFF = "ruff check --isolated --select ALL --no-cache"
TORCHFIX = "torchfix -j1 (0.7.0)"
FIXIT = "fixit lint (2.2.1)"
SMALL = "torchlint on one small file, end to end"
SMALL_CLEAN = "torchlint on one small file that no rule parses deeply, end to end"
LOAD_AT_START = "/".join(f"{x:.1f}" for x in os.getloadavg())
ROOT = HERE.parent


def run(command: list[str], cwd: Path | None = None, env: dict | None = None) -> tuple[float, int, int]:
    """(wall seconds, peak RSS bytes, exit code) of one child process."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=None if env is None else {**os.environ, **env})
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    return elapsed, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status)


def measure(name: str, command: list[str], repeat: int, cwd: Path | None = None, env: dict | None = None) -> dict:
    times, rss, codes = [], [], set()
    for _ in range(repeat):
        elapsed, peak, code = run(command, cwd, env)
        times.append(elapsed)
        rss.append(peak)
        codes.add(code)
    result = {"name": name, "median_s": statistics.median(times), "runs": times, "peak_rss": max(rss),
              "exit_codes": sorted(codes), "command": " ".join([*(f"{k}={v}" for k, v in (env or {}).items()),
                                                                *command])}
    print(f"{name:55s} {result['median_s']:8.2f} s  {result['peak_rss'] / 2**20:7.0f} MiB  exit {sorted(codes)}",
          flush=True)
    return result


def count_lines(paths: list[Path]) -> tuple[int, int]:
    files = lines = 0
    for root in paths:
        for path in root.rglob("*.py"):
            files += 1
            with path.open("rb") as handle:
                lines += sum(1 for _ in handle)
    return files, lines


def compile_bytecode() -> None:
    """Write torchlint's bytecode before timing it. An installed torchlint has it (pip compiles the
    modules it installs); a checkout run where PYTHONDONTWRITEBYTECODE=1 (this project's development
    machines set it) would compile about 100 modules again on every start, 0.1 to 0.2 s."""
    import compileall

    import torchlint
    import torchlint.rules

    for package in {Path(torchlint.__file__).parent, Path(torchlint.rules.__file__).parent}:
        compileall.compile_dir(package, quiet=1)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=HERE / ".work", help="where bench/setup.sh put corpora and peers")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-slow-peers", action="store_true", help="do not run TorchFix and Fixit")
    parser.add_argument("--skip-torch", action="store_true", help="do not lint the torch package itself")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "speed.md")
    args = parser.parse_args()

    corpora, peers = args.work / "corpora", args.work / "peers"
    torchlint = [sys.executable, "-m", "torchlint"]
    trees = [corpora / "pytorch-lightning", corpora / "timm"]
    if not all(tree.is_dir() for tree in trees) or not (peers / "ruff" / "bin" / "ruff").exists():
        print(f"setting up the corpora and peers in {args.work} (bench/setup.sh)", flush=True)
        subprocess.run(["bash", str(HERE / "setup.sh"), str(args.work)], check=True)
    compile_bytecode()
    files, lines = count_lines(trees)
    cache = Path(tempfile.mkdtemp(prefix="torchlint-bench-cache-"))
    rows = []
    print(f"pytorch-lightning + timm: {files} files, {lines} lines; {machine()}")

    lint = [*torchlint, "check", "--isolated", "--select", "ALL", "--exit-zero", "-q"]
    tl_warm = [*lint, "--cache-dir", str(cache), *map(str, trees)]
    ruff = [str(peers / "ruff" / "bin" / "ruff"), "check", "--isolated", "--select", "ALL", "--no-cache",
            "--exit-zero", "-q", *map(str, trees)]
    rows.append(measure(COLD, [*lint, "--no-cache", "-j1", *map(str, trees)], args.repeat))
    run(tl_warm)  # fill the cache
    rows.append(measure(WARM, tl_warm, args.repeat))
    rows.append(measure(RUFF, ruff, args.repeat))
    rows.append(measure("ruff, one thread (RAYON_NUM_THREADS=1)", ruff, args.repeat, env={"RAYON_NUM_THREADS": "1"}))
    for jobs in ("2", "0"):
        rows.append(measure(f"torchlint cold, process pool -j{jobs}" + (" (one worker a core)" if jobs == "0" else ""),
                            [*lint, "--no-cache", f"-j{jobs}", *map(str, trees)], args.repeat))
    if not args.skip_slow_peers:
        rows.append(measure(TORCHFIX, [str(peers / "torchfix" / "bin" / "torchfix"), "-j1", *map(str, trees)], 1))
        rows.append(measure(FIXIT, [str(peers / "fixit" / "bin" / "fixit"), "lint", *map(str, trees)], 1))

    example = ROOT / "fixtures" / "examples" / "train.py"
    rows.append(measure(SMALL, [*torchlint, "--isolated", "--no-cache", "--exit-zero", "-q", str(example)], 10))
    clean = ROOT / "fixtures" / "examples" / "dataset.py"  # no finding: LibCST is never imported
    rows.append(measure(SMALL_CLEAN, [*torchlint, "--isolated", "--no-cache", "--exit-zero", "-q", str(clean)], 10))
    torch_tree = corpora / "torch" / "torch"
    if not args.skip_torch and torch_tree.is_dir():
        t_files, t_lines = count_lines([torch_tree])
        print(f"torch: {t_files} files, {t_lines} lines")
        torch_cache = Path(tempfile.mkdtemp(prefix="torchlint-bench-torch-"))
        rows.append(measure(f"torchlint on torch's own sources ({t_files} files, {t_lines} lines), cold -j1",
                            [*lint, "--no-cache", "-j1", str(torch_tree)], args.repeat))
        warm = [*lint, "--cache-dir", str(torch_cache), str(torch_tree)]
        run(warm)
        rows.append(measure("torchlint on torch's own sources, warm", warm, args.repeat))
        shutil.rmtree(torch_cache, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    rows += issue_16_rows(args, torchlint, peers)
    write_report(args.out, rows, files, lines)


TRAINING = "torchlint --select ALL --no-cache -j1 on the training corpus (cold, one process)"
TRAINING_RUFF = "ruff on the training corpus, one thread (RAYON_NUM_THREADS=1)"
LARGE = "torchlint on one 3,000-line training file (bench/.work/large_train.py), cold"
LARGE_DIFF = "torchlint --diff on the 3,000-line file (its safe fixes, round after round), cold"
LSP_OPEN = "language server: open the 3,000-line file to its diagnostics"
LSP_EDIT = "language server: one-line edit to new diagnostics, after the debounce pause"
LSP_FIX_ALL = "language server: then the fix-all code action (source.fixAll) to its answer"


def issue_16_rows(args, torchlint: list[str], peers: Path) -> list[dict]:
    """The rows of issue 16: real training code against Ruff, one large file on the command line and
    in the language server, and files of 1, 5 and 50 MB."""
    rows = []
    training, large = args.work / "training", args.work / "large_train.py"
    if training.is_dir():
        t_files, t_lines = count_lines([training])
        print(f"training corpus: {t_files} files, {t_lines} lines")
        rows.append(measure(f"{TRAINING} ({t_files} files, {t_lines} lines)",
                            [*torchlint, "check", "--isolated", "--select", "ALL", "--exit-zero", "-q", "--no-cache",
                             "-j1", str(training)], args.repeat))
        rows.append(measure(TRAINING_RUFF, [str(peers / "ruff" / "bin" / "ruff"), "check", "--isolated", "--select",
                                            "ALL", "--no-cache", "--exit-zero", "-q", str(training)],
                            args.repeat, env={"RAYON_NUM_THREADS": "1"}))
    if not large.is_file():
        return rows
    rows.append(measure(LARGE, [*torchlint, "--isolated", "--no-cache", "--exit-zero", "-q", str(large)], args.repeat))
    rows.append(measure(LARGE_DIFF, [*torchlint, "--isolated", "--no-cache", "--diff", "-q", str(large)], args.repeat))
    sys.path.insert(0, str(HERE))
    import lsp_timing  # noqa: PLC0415 - bench/ is not a package

    lsp = lsp_timing.measure(large, args.repeat)
    rows.append({"name": LSP_OPEN, "median_s": lsp["open_s"], "runs": lsp["open_runs"], "peak_rss": 0,
                 "exit_codes": [0], "command": f"python bench/lsp_timing.py {large}"})
    rows.append({"name": LSP_EDIT, "median_s": lsp["edit_after_pause_s"],
                 "runs": [t - lsp_timing.DEBOUNCE_SECONDS for t in lsp["edit_runs"]], "peak_rss": 0,
                 "exit_codes": [0], "command": f"python bench/lsp_timing.py {large}"})
    rows.append({"name": LSP_FIX_ALL, "median_s": lsp["fix_all_s"], "runs": lsp["fix_all_runs"], "peak_rss": 0,
                 "exit_codes": [0], "command": f"python bench/lsp_timing.py {large}"})
    sizes = Path(tempfile.mkdtemp(prefix="torchlint-bench-sizes-"))
    text = large.read_text(encoding="utf-8")
    for megabytes in (1, 5, 50):
        copies = max(1, round(megabytes * 1_000_000 / len(text.encode("utf-8"))))
        path = sizes / f"train_{megabytes}mb.py"
        path.write_text(text * copies, encoding="utf-8")
        size = path.stat().st_size / 1e6
        limit = ["--config", str(_size_config(sizes, path.stat().st_size + 1))] if megabytes == 1 else ["--isolated"]
        rows.append(measure(f"torchlint on a {size:.1f} MB file" + (" (analysed: max-file-size raised)"
                                                                    if megabytes == 1 else " (past max-file-size)"),
                            [*torchlint, *limit, "--no-cache", "--exit-zero", "-q", str(path)], 1))
    shutil.rmtree(sizes, ignore_errors=True)
    return rows


def _size_config(folder: Path, size: int) -> Path:
    config = folder / "torchlint.yaml"
    config.write_text(f"max-file-size: {size}\n", encoding="utf-8")
    return config


def issue_16_targets(by: dict, rows: list[dict]) -> list[str]:
    def target(text: str, met: bool) -> str:
        return f"- {text}: {'met' if met else 'NOT met'}"

    out = ["", "Against the targets of issue 16:", ""]
    training = next((r for r in rows if r["name"].startswith(TRAINING)), None)
    if training is not None and TRAINING_RUFF in by:
        ratio = training["median_s"] / by[TRAINING_RUFF]["median_s"]
        out.append(target(f"training corpus cold -j1 within 2x of ruff on one thread: {ratio:.1f}x", ratio <= 2))
    if LARGE in by:
        out.append(target(f"one 3,000-line file, cold, 0.5 s or less: {by[LARGE]['median_s']:.2f} s",
                          by[LARGE]["median_s"] <= 0.5))
    if LSP_OPEN in by:
        out.append(target(f"language server, open to diagnostics in 1 s or less: {by[LSP_OPEN]['median_s']:.2f} s",
                          by[LSP_OPEN]["median_s"] <= 1))
        out.append(target(f"language server, a one-line edit to diagnostics in 0.3 s or less after the pause: "
                          f"{by[LSP_EDIT]['median_s']:.2f} s", by[LSP_EDIT]["median_s"] <= 0.3))
    out.append(target(f"one small file end to end in 0.15 s or less: {by[SMALL]['median_s']:.2f} s with findings "
                      f"(LibCST imported), {by[SMALL_CLEAN]['median_s']:.2f} s for a file no rule parses deeply",
                      by[SMALL_CLEAN]["median_s"] <= 0.15))
    for r in rows:
        if r["name"].startswith("torchlint on a 5.") or r["name"].startswith("torchlint on a 4."):
            out.append(target(f"{r['name']}: {r['median_s']:.1f} s, peak RSS {r['peak_rss'] / 2**20:.0f} MiB "
                              "(10 s and 1 GB or less)", r["median_s"] <= 10 and r["peak_rss"] <= 1e9))
    return out


def write_report(out: Path, rows: list[dict], files: int, lines: int) -> None:
    by = {r["name"]: r for r in rows}
    cold, warm, ruff = (by[name]["median_s"] for name in (COLD, WARM, RUFF))
    lines_out = [
        "# Speed: torchlint and its peers",
        "",
        f"Measured {date.today().isoformat()} with `python bench/speed.py` on: {machine()}.",
        f"Corpus: installed sources of pytorch-lightning 2.6.6 and timm 1.0.31 ({files} files, {lines} lines).",
        "Wall time of one process per run (median), and the peak RSS of the process (or of the largest of its "
        f"workers). Load average when the run started: {LOAD_AT_START}.",
        "",
        "| command | median s | runs (s) | peak RSS MiB | exit |",
        "|---|---:|---|---:|---|",
    ]
    for r in rows:
        runs = ", ".join(f"{t:.2f}" for t in r["runs"])
        lines_out.append(f"| `{r['name']}` | {r['median_s']:.2f} | {runs} | {r['peak_rss'] / 2**20:.0f} | "
                         f"{r['exit_codes']} |")

    def target(text: str, met: bool) -> str:
        return f"- {text}: {'met' if met else 'NOT met'}"

    lines_out += ["", "Against the targets of issue 6:", "",
                  target(f"cold, one process, within 10x of ruff: {cold / ruff:.1f}x ruff's time", cold <= 10 * ruff),
                  target(f"warm within 2x of ruff: {warm / ruff:.2f}x", warm <= 2 * ruff)]
    if TORCHFIX in by:
        ratio = by[TORCHFIX]["median_s"] / cold
        lines_out.append(target(f"at least 50x faster than TorchFix -j1: {ratio:.0f}x", ratio >= 50))
    if FIXIT in by:
        lines_out.append(f"- Fixit / torchlint cold: {by[FIXIT]['median_s'] / cold:.0f}x")
    small = by[SMALL]["median_s"]
    lines_out.append(target(f"one small file end to end in 0.35 s or less: {small:.2f} s", small <= 0.35))
    for r in rows:
        if r["name"].startswith("torchlint on torch"):
            lines_out.append(target(f"{r['name']}: {r['median_s']:.1f} s, peak RSS {r['peak_rss'] / 2**20:.0f} MiB "
                                    "(400 MB or less)", r["peak_rss"] <= 400e6))
    lines_out += issue_16_targets(by, rows)
    lines_out += ["", "Commands:", ""] + [f"- {r['name']}: `{r['command']}`" for r in rows]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines_out) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
