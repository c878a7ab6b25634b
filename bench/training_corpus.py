"""Materialise the training-code corpus listed in bench/training_corpus.toml.

Each repository's `.py` files under its `paths` (less `exclude`) are written, at the recorded
commit, to <dest>/<owner>+<name>/ with their paths inside the repository kept, so that a label's
(repo, path, line) in bench/labels/recall.csv names the same line on every machine. A repository
comes from the `fetch` tool's mirror (/work/.mirror/<owner>+<name>/repo) when it is there, else it
is cloned from GitHub, which needs network access. Nothing of the corpus is committed.

Usage: python bench/training_corpus.py [DEST]   (default: bench/.work/training)
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

BENCH = Path(__file__).resolve().parent
MANIFEST = BENCH / "training_corpus.toml"
MIRRORS = Path("/work/.mirror")
STAMP = ".manifest"  # in each repository's folder: the manifest entry it was made from


def load_manifest(path: Path = MANIFEST) -> list[dict]:
    """The repositories of the corpus, as the manifest lists them."""
    with path.open("rb") as handle:
        return tomllib.load(handle)["repo"]


def folder_name(repo: str) -> str:
    """The corpus folder of `owner/name` (the `repo` column of the labels names repositories so)."""
    return repo.replace("/", "+")


def git(git_dir: Path, *args: str) -> bytes:
    """Run git on a bare or ordinary repository and return its output; fail with git's message."""
    result = subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"git {' '.join(args[:2])} in {git_dir} failed: {result.stderr.decode().strip()}")
    return result.stdout


def wanted_files(git_dir: Path, repo: dict) -> list[str]:
    """The `.py` files of the commit under the repository's `paths`, less those under `exclude`."""
    listing = git(git_dir, "ls-tree", "-r", "--name-only", repo["commit"], "--", *repo["paths"]).decode()
    excluded = tuple(prefix.rstrip("/") + "/" for prefix in repo.get("exclude", []))
    files = [name for name in listing.splitlines() if name.endswith(".py") and not name.startswith(excluded)]
    if not files:
        raise SystemExit(f"{repo['name']}: no .py files under {repo['paths']} at {repo['commit']}")
    return files


def clone(repo: dict, into: Path) -> Path:
    """Clone the repository from GitHub (needs network) and return its git directory."""
    print(f"{repo['name']}: no mirror here, cloning {repo['url']} (needs network access)", file=sys.stderr)
    subprocess.run(["git", "clone", "--quiet", "--bare", "--filter=blob:none", repo["url"], str(into)], check=True)
    return into


def extract(git_dir: Path, repo: dict, dest: Path) -> int:
    """Write the wanted files of the commit under dest (replacing what was there); return their count."""
    files = wanted_files(git_dir, repo)
    archive = git(git_dir, "archive", "--format=tar", repo["commit"], "--", *files)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    (dest / STAMP).write_text(stamp(repo))
    return len(files)


def stamp(repo: dict) -> str:
    """What a materialised folder records of its manifest entry, so that an edited entry is redone."""
    return "\n".join([repo["commit"], *repo["paths"], *(f"-{path}" for path in repo.get("exclude", []))]) + "\n"


def materialise(repo: dict, root: Path) -> None:
    """Bring one repository's files to root/<owner>+<name>, unless the same entry is already there."""
    dest = root / folder_name(repo["name"])
    if (dest / STAMP).exists() and (dest / STAMP).read_text() == stamp(repo):
        return
    mirror = MIRRORS / folder_name(repo["name"]) / "repo"
    if mirror.is_dir():
        count = extract(mirror, repo, dest)
    else:
        with tempfile.TemporaryDirectory() as scratch:
            count = extract(clone(repo, Path(scratch) / "repo.git"), repo, dest)
    print(f"{repo['name']}: {count} files at {repo['commit'][:12]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", nargs="?", type=Path, default=BENCH / ".work" / "training")
    args = parser.parse_args(argv)
    for repo in load_manifest():
        materialise(repo, args.dest)


if __name__ == "__main__":
    main()
