"""`torchlint --fix --unsafe-fixes --select ALL` over copies of real ecosystems, to show that a
fix never damages code: no crash, every fixed file still compiles, a second run changes nothing,
and the JSON report is the same bytes whatever PYTHONHASHSEED.

    .venv/bin/python bench/ecosystem_fix.py [--corpora DIR] [NAME ...]   # writes bench/results/ecosystem-fix.md

DIR holds one folder per corpus (default: /work/corpora, else bench/.work/corpora as bench/setup.sh
makes it): the installed sources of torch, pytorch-lightning, timm and transformers. Each corpus's
Python files are copied to a temporary folder, and only the copy is touched. Exits 1 if any check
fails.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from datetime import date
from pathlib import Path

import libcst as cst

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPORA = ("torch", "pytorch-lightning", "timm", "transformers")
FIX = ["check", "--fix", "--unsafe-fixes", "--select", "ALL", "--no-cache"]
REPORT = ["check", "--unsafe-fixes", "--select", "ALL", "--no-cache", "--format", "json"]


def torchlint(args: list[str], cwd: Path, seed: str = "0") -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    env.pop("TORCHLINT_DEBUG", None)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "torchlint", *args, "."], cwd=cwd, env=env, capture_output=True)
    return done, time.perf_counter() - start


def copy_sources(source: Path, target: Path) -> None:
    """The corpus's .py/.pyi files, in their folders (no binaries: torch ships 700 MB of them)."""
    def ignore(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if not os.path.isdir(os.path.join(folder, n)) and not n.endswith((".py", ".pyi"))]
    shutil.copytree(source, target, ignore=ignore, symlinks=True)


def snapshot(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*.py*")) if p.is_file() and not p.is_symlink()}


def compiles(data: bytes) -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(data, "<fixed>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        return f"{error.__class__.__name__}: {error}"
    return None


def definitions(data: bytes) -> list[tuple[str, Counter]]:
    """Each function and class of a file, in order: its qualified name and its decorators."""
    found: list[tuple[str, Counter]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                found.append((name, Counter(ast.unparse(d) for d in child.decorator_list)))
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(data), "")
    return found


def definitions_kept(before: bytes, after: bytes) -> list[str]:
    """A fix rewrites code inside definitions, never the definitions themselves: the same
    functions and classes in the same order, and no decorator written more often than before (a
    fix that rewrote a decorated function wrote its decorators twice). Decorators a fix adds or
    swaps (`@torch.no_grad()` for `@torch.inference_mode()`) are fine."""
    try:
        old, new = definitions(before), definitions(after)
    except (SyntaxError, ValueError):
        return []
    if [name for name, _ in old] != [name for name, _ in new]:
        return ["its functions and classes changed"]
    return [f"`{name}` has a decorator more often than before" for (name, was), (_, now) in zip(old, new)
            if any(now[d] > count for d, count in was.items())]


def problems_of(done: subprocess.CompletedProcess, what: str) -> list[str]:
    found = []
    stderr = done.stderr.decode(errors="replace")
    if done.returncode not in (0, 1):
        found.append(f"{what}: exit {done.returncode}")
    if "Traceback" in stderr:
        found.append(f"{what}: a traceback on stderr")
    found += [f"{what}: {line}" for line in stderr.splitlines() if line.startswith("torchlint: error:")]
    return found


def counts(report: bytes) -> tuple[Counter, Counter]:
    """Findings and fixable findings per rule in a JSON report."""
    found, fixable = Counter(), Counter()
    for entry in json.loads(report or b"[]"):
        for diagnostic in entry["diagnostics"]:
            found[diagnostic["code"]] += 1
            if diagnostic["data"]["fix"] is not None:
                fixable[diagnostic["code"]] += 1
    return found, fixable


def round_trips(folder: Path, files: list[str]) -> list[str]:
    """Files LibCST does not print back exactly as read: its positions would be off in them."""
    failed = []
    for name in files:
        data = (folder / name).read_bytes()
        try:
            module = cst.parse_module(data)
        except Exception:  # noqa: BLE001 - not parseable (TL000): nothing to compare
            continue
        if module.bytes != data:
            failed.append(name)
    return failed


def run_corpus(name: str, source: Path, work: Path) -> dict:
    print(f"== {name}", flush=True)
    tree = work / name
    copy_sources(source, tree)
    original = snapshot(tree)
    result = {"name": name, "files": len([f for f in original if f.endswith(".py")]), "problems": [], "times": {}}

    reports = {}
    for seed in ("0", "1"):
        done, result["times"][f"json (PYTHONHASHSEED={seed})"] = torchlint(REPORT, tree, seed)
        result["problems"] += problems_of(done, f"json, seed {seed}")
        reports[seed] = done.stdout
    if reports["0"] != reports["1"]:
        result["problems"].append("JSON output differs between PYTHONHASHSEED 0 and 1")
    result["found"], result["fixable"] = counts(reports["0"])

    done, result["times"]["--fix, first run"] = torchlint(FIX, tree)
    result["problems"] += problems_of(done, "first --fix")
    result["summary"] = done.stdout.decode(errors="replace").strip().splitlines()[-2:]
    fixed = snapshot(tree)
    changed = sorted(f for f in fixed if fixed[f] != original.get(f))
    result["changed"] = len(changed)
    for file in changed:
        error = compiles((tree / file).read_bytes())
        if error is not None and compiles((source / file).read_bytes()) is None:
            result["problems"].append(f"{file}: compiled before the fix, not after ({error})")
        elif error is None and file.endswith(".py"):
            result["problems"] += [f"{file}: {problem}" for problem in
                                   definitions_kept((source / file).read_bytes(), (tree / file).read_bytes())]

    done, result["times"]["--fix, second run"] = torchlint([*FIX, "--format", "json"], tree)
    result["problems"] += problems_of(done, "second --fix")
    again = snapshot(tree)
    result["problems"] += [f"{f}: changed again by the second --fix" for f in again if again[f] != fixed[f]]
    result["remaining"], _ = counts(done.stdout)

    start = time.perf_counter()
    result["not_round_tripped"] = round_trips(tree, sorted(original))
    result["times"]["LibCST round trip (in process)"] = time.perf_counter() - start
    for problem in result["problems"]:
        print("   PROBLEM:", problem, flush=True)
    print(f"   {result['files']} files, {result['changed']} changed, "
          f"{sum(result['found'].values())} findings, {len(result['problems'])} problems", flush=True)
    return result


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return done.stdout.strip() + (" (with uncommitted changes)" if dirty else "")


def write_markdown(results: list[dict], corpora: Path, path: Path) -> None:
    from torchlint import __version__

    lines = [
        "# `--fix` over real ecosystems", "",
        f"Date: {date.today().isoformat()}. torchlint {__version__}, commit {commit()}; Python "
        f"{platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores.", "",
        "Command, over a temporary copy of each corpus's Python files (from "
        f"`{corpora}`):", "",
        "```bash",
        ".venv/bin/python bench/ecosystem_fix.py   # runs, in each copy:",
        "torchlint check --unsafe-fixes --select ALL --no-cache --format json .   # PYTHONHASHSEED=0, then 1",
        "torchlint check --fix --unsafe-fixes --select ALL --no-cache .",
        "torchlint check --fix --unsafe-fixes --select ALL --no-cache --format json .   # must change nothing",
        "```", "",
        "Checks: exit code 0 or 1 and no traceback on every run; every file the fix changed still "
        "compiles (`compile()`), unless it did not compile before either; the second `--fix` changes "
        "no file; the JSON report is byte-identical under PYTHONHASHSEED 0 and 1. Also: the files LibCST "
        "does not print back byte for byte (torchlint withholds fixes in those).", "",
        "| corpus | files | changed by --fix | findings | fixable | left after --fix | problems |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(f"| {r['name']} | {r['files']} | {r['changed']} | {sum(r['found'].values())} | "
                     f"{sum(r['fixable'].values())} | {sum(r['remaining'].values())} | {len(r['problems'])} |")
    lines += ["", "Findings per rule, before the fix → after it (fixable before, in brackets):", "",
              "| rule | " + " | ".join(r["name"] for r in results) + " |",
              "|---|" + "---:|" * len(results)]
    for code in sorted({c for r in results for c in r["found"]}):
        cells = [f"{r['found'][code]} → {r['remaining'][code]} ({r['fixable'][code]})" if r["found"][code] else ""
                 for r in results]
        lines.append(f"| {code} | " + " | ".join(cells) + " |")
    lines += ["", "Wall time per run, seconds (2 cores, shared with other work while it ran):", "",
              "| run | " + " | ".join(r["name"] for r in results) + " |", "|---|" + "---:|" * len(results)]
    for run in results[0]["times"]:
        lines.append(f"| {run} | " + " | ".join(f"{r['times'][run]:.1f}" for r in results) + " |")
    lines += ["", "## Problems", ""]
    for r in results:
        for problem in r["problems"] or ["none"]:
            lines.append(f"- {r['name']}: {problem}")
        lines.append(f"- {r['name']}: LibCST prints every file back byte for byte" if not r["not_round_tripped"] else
                     f"- {r['name']}: LibCST does not round-trip {len(r['not_round_tripped'])} file(s): "
                     + ", ".join(r["not_round_tripped"][:10]))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", default=list(CORPORA))
    parser.add_argument("--corpora", type=Path,
                        default=Path("/work/corpora") if Path("/work/corpora").is_dir() else HERE / ".work" / "corpora")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "ecosystem-fix.md")
    args = parser.parse_args()
    missing = [n for n in args.names if not (args.corpora / n).is_dir()]
    if missing:
        print(f"no corpus {', '.join(missing)} in {args.corpora} (bench/setup.sh makes them)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="torchlint-ecosystem-") as work:
        results = [run_corpus(name, args.corpora / name, Path(work)) for name in args.names]
    write_markdown(results, args.corpora, args.out)
    print(f"wrote {args.out}")
    return 1 if any(r["problems"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
