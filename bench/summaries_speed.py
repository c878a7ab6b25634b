"""What function summaries cost beside the parses the engine pays for anyway.

    .venv/bin/python bench/summaries_speed.py FILE...   # or a folder: its largest .py files

For each file, the best of --repeat runs (CPU time of this process: the machine may be shared)
of: CPython's ``ast.parse`` (the engine does it for every candidate file),
``libcst.parse_module`` (what a file that reaches the rules costs), ``summarize_module`` (the
index only: what a file costs when nothing in it is asked about), the index and every function's
local summary, and a disk-cache round trip of that summary (JSON written, then read back: what a
later run pays instead of parsing an unchanged helper).
"""

from __future__ import annotations

import argparse
import ast
import json
import time
from pathlib import Path

import libcst

from torchlint.analysis.function_facts import summarize_module
from torchlint.analysis.summaries import ModuleSummary


def best(repeat: int, run) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return min(times)


def every_function(tree: ast.Module, source: str, path: str) -> ModuleSummary:
    module = summarize_module(tree, source, path)
    module.to_json()  # summarizes every function, nested ones included
    return module


def measure(path: Path, repeat: int) -> dict:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    encoded = json.dumps(every_function(tree, source, str(path)).to_json())
    return {
        "file": path, "lines": source.count("\n"),
        "ast.parse": best(repeat, lambda: ast.parse(source)),
        "libcst": best(repeat, lambda: libcst.parse_module(source)),
        "index": best(repeat, lambda: summarize_module(tree, source, str(path))),
        "all functions": best(repeat, lambda: every_function(tree, source, str(path))),
        "cache write": best(repeat, lambda: json.dumps(every_function(tree, source, str(path)).to_json())),
        "cache read": best(repeat, lambda: ModuleSummary.from_json(json.loads(encoded))),
        "json bytes": len(encoded),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--largest", type=int, default=3, help="files taken from each folder given")
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    files = []
    for path in options.paths:
        if path.is_dir():
            files += sorted(path.rglob("*.py"), key=lambda p: p.stat().st_size, reverse=True)[:options.largest]
        else:
            files.append(path)
    columns = ("ast.parse", "libcst", "index", "all functions", "cache write", "cache read")
    print("| file | lines | " + " | ".join(f"{c} ms" for c in columns) + " | all functions / libcst | JSON KiB |")
    print("|---|---:|" + "---:|" * (len(columns) + 2))
    for path in files:
        row = measure(path, options.repeat)
        cells = " | ".join(f"{row[c] * 1000:.1f}" for c in columns)
        share = row["all functions"] / row["libcst"]
        print(f"| {path.name} | {row['lines']} | {cells} | {share:.1%} | {row['json bytes'] / 1024:.0f} |")


if __name__ == "__main__":
    main()
