"""bench/ecosystem_fix.py in small: `--fix --unsafe-fixes --select ALL` over a pinned sample, with
the same checks (no crash, every fixed file still compiles and keeps its definitions and their
decorators, a second run changes nothing, JSON identical under PYTHONHASHSEED 0 and 1).

The committed sample (fixtures/ecosystem/: training code written for this test, in the styles of
the four ecosystems) always runs. A few files of the installed corpora run too when they are there
(bench/setup.sh or /work/corpora); CI has none, so that part is skipped there."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import warnings
from collections import Counter
from pathlib import Path

import pytest

from conftest import ROOT, run_torchlint

SAMPLE = ROOT / "fixtures" / "ecosystem"
# bench/ecosystem_fix.py, whose checks these are (bench/ is a folder of scripts, not a package)
_SPEC = importlib.util.spec_from_file_location("ecosystem_fix", ROOT / "bench" / "ecosystem_fix.py")
ECOSYSTEM = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ECOSYSTEM)
CORPORA = next((p for p in (Path(os.environ.get("TORCHLINT_CORPORA", "/work/corpora")),
                            ROOT / "bench" / ".work" / "corpora") if p.is_dir()), None)
PINNED = [  # the corpora's files of training code (demos, AMP, DataParallel, EMA, schedulers)
    "torch/torch/nn/parallel/data_parallel.py",
    "torch/torch/cuda/amp/grad_scaler.py",
    "torch/torch/optim/swa_utils.py",
    "pytorch-lightning/pytorch_lightning/demos/boring_classes.py",
    "pytorch-lightning/pytorch_lightning/demos/transformer.py",
    "pytorch-lightning/pytorch_lightning/demos/lstm.py",
    "timm/timm/utils/cuda.py",
    "timm/timm/utils/model_ema.py",
    "transformers/transformers/optimization.py",
    "transformers/transformers/trainer_pt_utils.py",
]
FIX = ("--fix", "--unsafe-fixes", "--select", "ALL", "--no-cache", ".")
REPORT = ("--unsafe-fixes", "--select", "ALL", "--no-cache", "--format", "json", ".")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*.py"))}


def compiles(data: bytes) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(data, "<sample>", "exec", dont_inherit=True)
    except SyntaxError:
        return False
    return True


def assert_clean_run(result) -> None:
    assert result.returncode in (0, 1), result.stderr.decode()
    assert b"Traceback" not in result.stderr and b"torchlint: error:" not in result.stderr, result.stderr.decode()


def fix_twice(tree: Path) -> tuple[dict[str, bytes], dict[str, bytes], Counter]:
    """The ecosystem checks over ``tree``; (files before, files after, findings per rule before)."""
    before = snapshot(tree)
    reports = []
    for seed in ("0", "1"):
        result = run_torchlint(*REPORT, cwd=tree, env={"PYTHONHASHSEED": seed})
        assert_clean_run(result)
        reports.append(result.stdout)
    assert reports[0] == reports[1], "the JSON report depends on PYTHONHASHSEED"
    found = Counter(d["code"] for entry in json.loads(reports[0]) for d in entry["diagnostics"])

    assert_clean_run(run_torchlint(*FIX, cwd=tree))
    after = snapshot(tree)
    for name, data in after.items():
        if data != before[name] and compiles(before[name]):
            assert compiles(data), f"{name} no longer compiles after --fix"
            assert ECOSYSTEM.definitions_kept(before[name], data) == [], name

    assert_clean_run(run_torchlint(*FIX, cwd=tree))
    again = snapshot(tree)
    assert [n for n in again if again[n] != after[n]] == [], "the second --fix changed files"
    return before, after, found


def test_committed_sample(tmp_path):
    tree = tmp_path / "sample"
    shutil.copytree(SAMPLE, tree)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'sample'\n")
    before, after, found = fix_twice(tree)
    assert set(before) == {"compat.py", "ddp_train.py", "finetune_loop.py", "lightning_module.py",
                           "train_cnn_amp.py"}
    for code in ("TL101", "TL201", "TL301", "TL401", "TL501"):  # the guide's five, each found
        assert found[code], code
    # every fallback and every flag-chosen setting in compat.py is left as written
    assert after["compat.py"] == before["compat.py"]
    assert b"history.append(loss.detach())" in after["train_cnn_amp.py"]
    assert b'torch.amp.autocast("cuda", enabled=args.amp)' in after["train_cnn_amp.py"]
    assert b"DistributedDataParallel(build_model().to(gpu), device_ids=" in after["ddp_train.py"]
    assert b'accelerator="gpu", devices=1' in after["lightning_module.py"]


@pytest.mark.skipif(CORPORA is None, reason="no installed corpora (bench/setup.sh puts them in bench/.work/corpora; "
                                            "TORCHLINT_CORPORA names another folder): the committed sample ran instead")
def test_pinned_corpus_sample(tmp_path):
    tree = tmp_path / "corpora"
    present = [name for name in PINNED if (CORPORA / name).is_file()]
    assert len(present) >= len(PINNED) // 2, f"most pinned files are missing from {CORPORA}: other versions?"
    for name in present:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CORPORA / name, tree / name)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'corpora'\n")
    fix_twice(tree)
