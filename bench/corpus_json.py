"""The `--select ALL --format json` report of torchlint on the bench corpora, saved or compared.

    .venv/bin/python bench/corpus_json.py save DIR [NAME ...]      # write DIR/<corpus>.json
    .venv/bin/python bench/corpus_json.py compare DIR [NAME ...]   # list every difference from DIR

Behaviour-preserving changes (a refactoring, a faster engine) must leave these reports identical;
`compare` prints each finding that appeared or disappeared (path, line, code, message) and exits 1
when there is any. The corpora are the installed sources that bench/setup.sh puts in
bench/.work/corpora (torch, pytorch-lightning, timm, transformers); the reports name files
relative to each corpus, so a saved report compares across checkouts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPORA = ("torch", "pytorch-lightning", "timm", "transformers")
COMMAND = ["check", "--isolated", "--select", "ALL", "--no-cache", "--exit-zero", "--format", "json", "-j0", "."]


def report(corpus: Path) -> list[dict]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run([sys.executable, "-m", "torchlint", *COMMAND], cwd=corpus, env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"torchlint failed on {corpus} (exit {done.returncode}):\n{done.stderr[-2000:]}")
    files = json.loads(done.stdout)
    for entry in files:
        entry.pop("uri", None)  # absolute: differs between checkouts
    return files


def findings(files: list[dict]) -> dict[tuple, dict]:
    return {(f["path"], d["range"]["start"]["line"], d["range"]["start"]["character"], d["code"], d["message"]): d
            for f in files for d in f["diagnostics"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("save", "compare"))
    parser.add_argument("directory", type=Path)
    parser.add_argument("names", nargs="*", default=list(CORPORA))
    parser.add_argument("--corpora", type=Path, default=HERE / ".work" / "corpora")
    args = parser.parse_args()
    args.directory.mkdir(parents=True, exist_ok=True)
    changed = False
    for name in args.names:
        files = report(args.corpora / name)
        saved = args.directory / f"{name}.json"
        if args.action == "save":
            saved.write_text(json.dumps(files, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            print(f"{name}: {sum(len(f['diagnostics']) for f in files)} findings saved to {saved}")
            continue
        before = json.loads(saved.read_text(encoding="utf-8"))
        if before == files:
            print(f"{name}: identical ({sum(len(f['diagnostics']) for f in files)} findings)")
            continue
        changed = True
        old, new = findings(before), findings(files)
        print(f"{name}: differs")
        for key in sorted(old.keys() - new.keys()):
            print(f"  - {key[0]}:{key[1] + 1}:{key[2] + 1} {key[3]} {key[4]}")
        for key in sorted(new.keys() - old.keys()):
            print(f"  + {key[0]}:{key[1] + 1}:{key[2] + 1} {key[3]} {key[4]}")
        for key in sorted(old.keys() & new.keys()):
            if old[key] != new[key]:
                print(f"  ~ {key[0]}:{key[1] + 1}:{key[2] + 1} {key[3]} (same finding, other details: fix or range)")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
