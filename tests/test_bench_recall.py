"""bench/recall.py, bench/training_corpus.py and bench/make_large_file.py on small, made-up inputs:
the scoring that the published recall and precision figures rest on, the label checks that keep
a stale line number from being matched silently, and the renaming that keeps the large training
file valid Python. The real corpus is not needed (bench/setup.sh makes it; CI has none)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))

import make_large_file  # noqa: E402
import recall  # noqa: E402
import training_corpus  # noqa: E402

HEADER = "repo,path,line,code,label,shape,note\n"


def make_corpus(tmp_path: Path) -> Path:
    """One repository with one four-line file, laid out as bench/training_corpus.py writes it."""
    source = tmp_path / "corpus" / "owner+name" / "pkg" / "train.py"
    source.parent.mkdir(parents=True)
    source.write_text("a = 1\nb = 2\nc = 3\nd = 4\n")
    return tmp_path / "corpus"


def write_labels(tmp_path: Path, rows: str) -> Path:
    path = tmp_path / "labels.csv"
    path.write_text(HEADER + textwrap.dedent(rows))
    return path


def test_score_counts_hits_misses_traps_and_unlabelled(tmp_path):
    corpus = make_corpus(tmp_path)
    labels = recall.read_labels(write_labels(tmp_path, """\
        owner/name,pkg/train.py,1,TL802,bad,0,reported
        owner/name,pkg/train.py,2,TL802,bad,1,missed
        owner/name,pkg/train.py,3,TL802,ok,5,a trap it reports
        owner/name,pkg/train.py,4,TL201,ok,2,a trap it leaves alone
        """), corpus)
    found = {("owner/name", "pkg/train.py", 1, "TL802"): "m", ("owner/name", "pkg/train.py", 3, "TL802"): "m",
             ("owner/name", "pkg/train.py", 4, "TL802"): "a finding nobody labelled"}
    result = recall.score(labels, found, ["TL201", "TL802"])
    assert result["table"]["TL802"] == {
        "bad": 2, "ok": 1, "tp": 1, "fn": 1, "fp": 1, "unlabelled": 1,
        "recall": "50.0%", "precision": "50.0%", "floor": "33.3%"}
    assert result["table"]["TL201"]["ok"] == 1 and result["table"]["TL201"]["recall"] == "n/a"
    assert result["table"]["total"]["tp"] == 1 and result["table"]["total"]["unlabelled"] == 1
    assert [row.line for row in result["missed"]] == [2]
    assert [row.line for row in result["false_positives"]] == [3]
    assert result["unlabelled"] == [("owner/name", "pkg/train.py", 4, "TL802")]


def test_rules_outside_the_selection_are_ignored(tmp_path):
    corpus = make_corpus(tmp_path)
    labels = recall.read_labels(write_labels(tmp_path, "owner/name,pkg/train.py,1,TL201,bad,0,x\n"), corpus)
    result = recall.score(labels, {("owner/name", "pkg/train.py", 1, "TL201"): "m"}, ["TL802"])
    assert result["table"]["total"] == {"bad": 0, "ok": 0, "tp": 0, "fn": 0, "fp": 0, "unlabelled": 0,
                                             "recall": "n/a", "precision": "n/a", "floor": "n/a"}


@pytest.mark.parametrize(("row", "complaint"), [
    ("owner/name,pkg/train.py,5,TL802,bad,0,x\n", "past the end"),
    ("owner/name,pkg/gone.py,1,TL802,bad,0,x\n", "is not in the corpus"),
    ("owner/name,pkg/train.py,1,TL802,maybe,0,x\n", "bad/ok"),
    ("owner/name,pkg/train.py,1,TL802,bad,9,x\n", "shape 0-8"),
    ("owner/name,pkg/train.py,1,TL802,bad,0,x\nowner/name,pkg/train.py,1,TL802,ok,0,y\n", "a second row"),
])
def test_read_labels_rejects_rows_that_cannot_be_matched(tmp_path, row, complaint):
    corpus = make_corpus(tmp_path)
    with pytest.raises(SystemExit, match=complaint):
        recall.read_labels(write_labels(tmp_path, row), corpus)


def test_finding_keys_turn_uris_into_label_keys(tmp_path):
    corpus = make_corpus(tmp_path)
    uri = (corpus / "owner+name" / "pkg" / "train.py").as_uri()
    report = [{"uri": uri, "diagnostics": [
        {"code": "TL802", "range": {"start": {"line": 0, "character": 4}}, "message": "first"},
        {"code": "TL802", "range": {"start": {"line": 0, "character": 9}}, "message": "same line"},
        {"code": "TL603", "range": {"start": {"line": 2, "character": 0}}, "message": "not studied"}]}]
    assert recall.finding_keys(report, corpus, {"TL802"}) == {("owner/name", "pkg/train.py", 1, "TL802"): "first"}


def test_rename_leaves_attributes_and_keyword_arguments_alone():
    source = textwrap.dedent("""\
        def train(loader):
            return loader.train(train=True)


        model.train()
        train(train_loader)
        print(f"{train}")
        """)
    renamed = make_large_file.rename(source, {"train": "train_2"})
    assert renamed == textwrap.dedent("""\
        def train_2(loader):
            return loader.train(train=True)


        model.train()
        train_2(train_loader)
        print(f"{train}")
        """)


def test_build_concatenates_valid_python_with_renamed_clashes(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus"
    for repo, body in (("a+one", "from __future__ import annotations\ndef main():\n    return 1\n"),
                       ("b+two", "def main():\n    return 2\n\n\nif __name__ == '__main__':\n    main()\n")):
        (corpus / repo).mkdir(parents=True)
        (corpus / repo / "train.py").write_text(body)
    monkeypatch.setattr(make_large_file, "SOURCES", [("a/one", "train.py"), ("b/two", "train.py")])
    monkeypatch.setattr(make_large_file, "load_manifest", lambda: [
        {"name": name, "commit": "0" * 40, "license": "MIT", "url": f"https://github.com/{name}"}
        for name in ("a/one", "b/two")])
    text, header = make_large_file.build(corpus)
    tree = ast.parse(text)
    assert text.startswith("from __future__ import annotations\n") and text.count("__future__") == 1
    assert [node.name for node in tree.body if isinstance(node, ast.FunctionDef)] == ["main", "main_2"]
    assert "    main_2()" in text and len(header) == 2


def test_materialise_takes_only_python_files_under_the_paths_and_skips_an_unchanged_entry(tmp_path, monkeypatch):
    origin = tmp_path / "origin"
    (origin / "pkg" / "skip").mkdir(parents=True)
    (origin / "pkg" / "a.py").write_text("a = 1\n")
    (origin / "pkg" / "skip" / "b.py").write_text("b = 1\n")
    (origin / "notes.txt").write_text("not python\n")
    (origin / "other.py").write_text("c = 1\n")
    git = ["git", "-C", str(origin), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(origin)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    mirrors = tmp_path / "mirrors"
    (mirrors / "o+r").mkdir(parents=True)
    (mirrors / "o+r" / "repo").symlink_to(origin / ".git")
    monkeypatch.setattr(training_corpus, "MIRRORS", mirrors)
    entry = {"name": "o/r", "url": "unused", "commit": commit, "paths": ["pkg", "notes.txt"],
             "exclude": ["pkg/skip"]}
    dest = tmp_path / "training"
    training_corpus.materialise(entry, dest)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*.py")) == ["o+r/pkg/a.py"]
    (dest / "o+r" / "pkg" / "a.py").write_text("changed\n")
    training_corpus.materialise(entry, dest)  # same entry: left as it is
    assert (dest / "o+r" / "pkg" / "a.py").read_text() == "changed\n"
    training_corpus.materialise(entry | {"exclude": []}, dest)  # an edited entry is redone
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*.py")) == ["o+r/pkg/a.py",
                                                                                     "o+r/pkg/skip/b.py"]
