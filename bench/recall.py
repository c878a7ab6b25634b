"""Recall and precision of torchlint's rules on hand-labelled real training code (issue 12).

    .venv/bin/python bench/recall.py          # prints the figures, writes bench/results/recall.md
    .venv/bin/python bench/recall.py --rules TL802,TL201 --output -

The corpus is the training code of bench/training_corpus.toml, materialised by bench/setup.sh
(or bench/training_corpus.py) under bench/.work/training. The labels, bench/labels/recall.csv,
were written by reading that code before any rule ran on it (bench/labels/README.md). This
script runs the working tree's torchlint once over the corpus (`python -m torchlint check
--isolated --select ALL --format json --no-cache`) and matches each finding of the rules under
study to a label by (repo, path, line, code):

- TP: a `bad` row that torchlint reports;      FN: a `bad` row it does not report;
- FP: an `ok` row (a trap) that it reports;    UNLABELLED: a finding with no row at all.

recall = TP / (TP + FN). Precision is given twice, because an unlabelled finding has not been
judged: "judged" precision = TP / (TP + FP) counts only findings a label speaks for, and
"floor" precision = TP / (TP + FP + UNLABELLED) counts every unlabelled finding as wrong. The
two agree once every finding is labelled, which is how the committed results are made: each
unlabelled finding is listed so that someone reads it and adds a row.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from urllib.parse import unquote, urlparse

from training_corpus import folder_name

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RULES = ("TL101", "TL103", "TL201", "TL401", "TL402", "TL403", "TL501", "TL602", "TL702", "TL801", "TL802",
         "TL902")  # the rules issue 12 touches
SHAPES = {"0": "direct (the shape the rule already targets)", "1": "behind the project's own helpers",
          "2": "across statements", "3": "layers built in lists and helpers", "4": "in the project's other files",
          "5": "implicit host syncs", "6": "framework-driven training", "7": "pinned memory where batches reach the GPU",
          "8": "smaller gaps"}
LABEL_COLUMNS = ["repo", "path", "line", "code", "label", "shape", "note"]


@dataclass(frozen=True)
class Label:
    """One row of the labels: a place a reviewer marked `bad`, or a trap marked `ok`."""

    repo: str
    path: str
    line: int
    code: str
    label: str
    shape: str
    note: str

    @property
    def key(self) -> tuple[str, str, int, str]:
        return self.repo, self.path, self.line, self.code


def read_labels(path: Path, corpus: Path) -> list[Label]:
    """The labels, checked against the corpus so that a stale line number fails loudly."""
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames != LABEL_COLUMNS:
            raise SystemExit(f"{path}: the header must be {','.join(LABEL_COLUMNS)}")
        rows = [Label(r["repo"], r["path"], int(r["line"]), r["code"], r["label"], r["shape"], r["note"])
                for r in reader]
    problems, seen = [], set()
    for number, row in enumerate(rows, start=2):
        source = corpus / folder_name(row.repo) / row.path
        if row.label not in ("bad", "ok") or row.shape not in SHAPES:
            problems.append(f"{path}:{number}: label must be bad/ok and shape 0-8")
        elif not source.is_file():
            problems.append(f"{path}:{number}: {source} is not in the corpus (run bench/setup.sh)")
        elif not 1 <= row.line <= len(source.read_text(encoding="utf-8").splitlines()):
            problems.append(f"{path}:{number}: line {row.line} is past the end of {source}")
        elif row.key in seen:
            problems.append(f"{path}:{number}: a second row for {row.key}")
        seen.add(row.key)
    if problems:
        raise SystemExit("\n".join(problems))
    return rows


def torchlint_command(corpus: Path) -> list[str]:
    """The command that produces the findings, as the results file records it."""
    return [sys.executable, "-m", "torchlint", "check", "--isolated", "--select", "ALL", "--format", "json",
            "--no-cache", "--exit-zero", str(corpus)]


def run_torchlint(corpus: Path) -> list[dict]:
    """torchlint's JSON report of the corpus, from the working tree's code."""
    result = subprocess.run(torchlint_command(corpus), cwd=ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"torchlint failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    return json.loads(result.stdout)


def finding_keys(report: list[dict], corpus: Path, rules: set[str]) -> dict[tuple[str, str, int, str], str]:
    """Each finding of the studied rules as a label key (one per line and code), with its message."""
    found = {}
    for entry in report:
        relative = Path(unquote(urlparse(entry["uri"]).path)).resolve().relative_to(corpus.resolve())
        folder, path = relative.parts[0], Path(*relative.parts[1:]).as_posix()
        repo = folder.replace("+", "/", 1)
        for diagnostic in entry["diagnostics"]:
            if diagnostic.get("code") in rules:
                key = (repo, path, diagnostic["range"]["start"]["line"] + 1, diagnostic["code"])
                found.setdefault(key, diagnostic["message"])
    return found


def ratio(numerator: int, denominator: int) -> str:
    """A percentage, or n/a where there is nothing to divide by (a rule with no rows)."""
    return f"{100 * numerator / denominator:.1f}%" if denominator else "n/a"


def score(labels: list[Label], found: dict, rules: list[str]) -> dict:
    """Per rule and in total: the counts, the missed rows and the findings that need a label."""
    by_key = {row.key: row for row in labels if row.code in rules}
    found = {key: message for key, message in found.items() if key[3] in rules}
    table = {}
    for code in [*rules, "total"]:
        wanted = [row for row in by_key.values() if code in ("total", row.code)]
        mine = {key for key in found if code in ("total", key[3])}
        bad = [row for row in wanted if row.label == "bad"]
        tp = sum(row.key in mine for row in bad)
        fp = sum(row.key in mine for row in wanted if row.label == "ok")
        unlabelled = sum(key not in by_key for key in mine)
        table[code] = {"bad": len(bad), "ok": len(wanted) - len(bad), "tp": tp, "fn": len(bad) - tp, "fp": fp,
                       "unlabelled": unlabelled, "recall": ratio(tp, len(bad)),
                       "precision": ratio(tp, tp + fp), "floor": ratio(tp, tp + fp + unlabelled)}
    missed = [row for row in by_key.values() if row.label == "bad" and row.key not in found]
    false_positives = [row for row in by_key.values() if row.label == "ok" and row.key in found]
    unlabelled = sorted(key for key in found if key not in by_key)
    return {"table": table, "missed": missed, "false_positives": false_positives, "unlabelled": unlabelled}


def render(result: dict, found: dict, labels: list[Label], rules: list[str], command: list[str],
           corpus: Path, label_file: Path) -> str:
    """The results as Markdown: figures, missed rows by shape, traps reported, unlabelled findings."""
    table, commit = result["table"], git_commit()
    repos = sorted({row.repo for row in labels})
    lines = ["# Recall and precision on real training code", "",
             f"Date: {date.today().isoformat()}. torchlint at commit `{commit}.",
             f"Corpus: {len(repos)} repositories of bench/training_corpus.toml, materialised by bench/setup.sh; "
             f"labels: `{shown(label_file)}` ({len(labels)} rows, written by reading the code before "
             "running the rules; bench/labels/README.md).", "", "Command (run by `bench/recall.py`):", "", "```sh",
             " ".join([".venv/bin/python", *command[1:-1], shown(corpus)]), "```", "",
             "TP: `bad` rows reported; FN: `bad` rows missed; FP: `ok` rows (traps) reported; unlabelled: "
             "findings with no row. Recall = TP / (TP + FN). Precision (judged) = TP / (TP + FP); precision "
             "(floor) = TP / (TP + FP + unlabelled), every unlabelled finding counted as wrong.", "",
             "| rule | bad rows | ok rows | TP | FN | FP | unlabelled | recall | precision (judged) | precision (floor) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for code in [*rules, "total"]:
        row = table[code]
        lines.append(f"| {code} | {row['bad']} | {row['ok']} | {row['tp']} | {row['fn']} | {row['fp']} | "
                     f"{row['unlabelled']} | {row['recall']} | {row['precision']} | {row['floor']} |")
    lines += ["", "## Missed `bad` rows by shape (issue 12's numbering)", "",
              "| shape | " + " | ".join(rules) + " | total |", "|---|" + "---|" * (len(rules) + 1)]
    counts = Counter((row.shape, row.code) for row in result["missed"])
    for shape, title in SHAPES.items():
        cells = [str(counts[(shape, code)]) for code in rules]
        lines.append(f"| {shape} {title} | " + " | ".join(cells) + f" | {sum(map(int, cells))} |")
    grouped = defaultdict(list)
    for row in result["missed"]:
        grouped[row.shape].append(row)
    for shape in SHAPES:
        if grouped[shape]:
            lines += ["", f"### Shape {shape}: {SHAPES[shape]} ({len(grouped[shape])} missed)", ""]
            lines += [f"- {row.code} `{row.repo}` {row.path}:{row.line}: {row.note}"
                      for row in sorted(grouped[shape], key=lambda r: (r.code, r.repo, r.path, r.line))]
    lines += ["", f"## Traps reported (`ok` rows torchlint flags): {len(result['false_positives'])}", ""]
    lines += [f"- {row.code} `{row.repo}` {row.path}:{row.line}: {row.note}"
              for row in sorted(result["false_positives"], key=lambda r: (r.code, r.repo, r.path, r.line))]
    lines += ["", f"## Unlabelled findings: {len(result['unlabelled'])}", "",
              "Each needs a row in the labels (read the code, then add `bad` or `ok` with `note: added after run`)."]
    lines += [f"- {code} `{repo}` {path}:{line}: {found[(repo, path, line, code)]}"
              for repo, path, line, code in result["unlabelled"]]
    return "\n".join(lines) + "\n"


def shown(path: Path) -> str:
    """A path as the results file shows it: relative to the repository root where it can be."""
    return os.path.relpath(path, ROOT)


def git(*args: str) -> str:
    """The output of a git command in this repository."""
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def git_commit() -> str:
    """The working tree's commit and the last commit that changed torchlint's code, marked when that
    code has uncommitted changes (the figures are those of the code, not of the labels)."""
    code = git("log", "-1", "--format=%h", "--abbrev=12", "--", "torchlint", "rules")
    dirty = git("status", "--porcelain", "--", "torchlint", "rules")
    return (f"{git('rev-parse', '--short=12', 'HEAD')}` (torchlint/ and rules/ as of `{code}`"
            + (", with uncommitted changes" if dirty else "") + ")")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=BENCH / ".work" / "training")
    parser.add_argument("--labels", type=Path, default=BENCH / "labels" / "recall.csv")
    parser.add_argument("--rules", default=",".join(RULES), help="comma-separated codes (default: issue 12's)")
    parser.add_argument("--output", default=str(BENCH / "results" / "recall.md"), help="'-' to only print")
    args = parser.parse_args(argv)
    corpus, rules = args.corpus.resolve(), [code.strip() for code in args.rules.split(",") if code.strip()]
    if not corpus.is_dir():
        raise SystemExit(f"{corpus}: no corpus there; run bench/setup.sh (or bench/training_corpus.py) first")
    labels = read_labels(args.labels.resolve(), corpus)
    found = finding_keys(run_torchlint(corpus), corpus, set(rules))
    result = score(labels, found, rules)
    text = render(result, found, labels, rules, torchlint_command(corpus), corpus, args.labels.resolve())
    print(text)
    if args.output != "-":
        Path(args.output).write_text(text)


if __name__ == "__main__":
    main()
