"""The target GPU (issue 14): the table of compute capabilities (torchlint/analysis/gpus.py), the
`target-gpu` setting and flag, and the questions rules ask of it (an unknown GPU changes nothing)."""

from __future__ import annotations

import libcst as cst
import pytest

from conftest import run_torchlint
from torchlint.analysis import gpus
from torchlint.analysis.gpus import Gpu, architecture, capability, parse_gpu
from torchlint.config import ConfigError, resolve_settings
from torchlint.context import RuleContext


@pytest.mark.parametrize("text, expected", [
    ("sm_80", (8, 0)), ("sm80", (8, 0)), ("SM_75", (7, 5)), ("sm_90a", (9, 0)), ("compute_70", (7, 0)),
    ("sm_100", (10, 0)), ("sm_120", (12, 0)), ("8.6", (8, 6)), ("10.3", (10, 3)),
    ("a100", (8, 0)), ("H100", (9, 0)), ("h200", (9, 0)), ("b200", (10, 0)), ("t4", (7, 5)), ("l4", (8, 9)),
    ("v100", (7, 0)), ("a10g", (8, 6)), ("a10", (8, 6)), ("rtx4090", (8, 9)), ("RTX 4090", (8, 9)),
    ("rtx-3090", (8, 6)), ("p100", (6, 0)),
    # what torch.cuda.get_device_name() prints
    ("NVIDIA A100-SXM4-80GB", (8, 0)), ("Tesla T4", (7, 5)), ("NVIDIA H100 80GB HBM3", (9, 0)),
    ("NVIDIA GeForce RTX 4090", (8, 9)), ("NVIDIA A10G", (8, 6)), ("Tesla V100-SXM2-16GB", (7, 0)),
    ("NVIDIA RTX 6000 Ada Generation", (8, 9)), ("Quadro RTX 6000", (7, 5)),
])
def test_spellings(text, expected):
    assert parse_gpu(text).capability == expected
    assert capability(text) == expected


@pytest.mark.parametrize("text", ["", "banana", "sm_8", "80", "a1000", "rtx", "8", "sm_80x"])
def test_what_is_not_a_gpu(text):
    with pytest.raises(ValueError):
        parse_gpu(text)


def test_names_and_architectures():
    assert str(parse_gpu("t4")) == "T4 (sm_75)" and str(parse_gpu("sm_80")) == "sm_80"
    assert parse_gpu("a100").architecture == "Ampere" and parse_gpu("l4").architecture == "Ada Lovelace"
    assert architecture((7, 0)) == "Volta" and architecture((7, 5)) == "Turing"
    assert architecture((9, 0)) == "Hopper" and architecture((10, 0)) == architecture((12, 0)) == "Blackwell"
    assert architecture((2, 0)) == "unknown"
    # what the features need
    assert not parse_gpu("v100").at_least(gpus.BF16) and parse_gpu("a100").at_least(gpus.TF32)
    assert parse_gpu("l4").at_least(gpus.FP8) and not parse_gpu("a100").at_least(gpus.FP8)
    assert parse_gpu("t4").at_least(gpus.TENSOR_CORES) and not parse_gpu("p100").at_least("sm_70")


def test_every_name_in_the_table_parses_to_its_entry():
    for name, entry in gpus.GPUS.items():
        assert parse_gpu(name).capability == entry
        assert name in gpus.ACCEPTED


# --- the setting --------------------------------------------------------------------------------------

def test_setting_from_the_configuration_and_the_command_line(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.torchlint]\ntarget-gpu = "t4"\n')
    settings = resolve_settings(tmp_path)
    assert settings.target_gpu == Gpu((7, 5), "T4")
    assert resolve_settings(tmp_path, target_gpu="sm_90").target_gpu == Gpu((9, 0))  # the flag wins
    assert resolve_settings(tmp_path, isolated=True).target_gpu is None  # unknown by default
    (tmp_path / "pyproject.toml").write_text("[tool.torchlint]\n")
    assert resolve_settings(tmp_path).target_gpu is None


def test_the_gpu_is_in_the_cache_fingerprint(tmp_path):
    fingerprints = {resolve_settings(tmp_path, isolated=True, target_gpu=gpu).fingerprint
                    for gpu in (None, "t4", "a100", "sm_80")}
    assert len(fingerprints) == 4  # "a100" and "sm_80" have the same capability, but messages may name it
    assert resolve_settings(tmp_path, isolated=True, target_gpu="t4").fingerprint == \
        resolve_settings(tmp_path, isolated=True, target_gpu="T4").fingerprint


@pytest.mark.parametrize("value, says", [
    ('"banana"', "names no GPU torchlint knows: 'banana'"),
    ("8.0", "must be text in quotes"),
    ("80", "must be text in quotes"),
    ('["a100"]', "must be text in quotes"),
])
def test_bad_values_name_the_file_and_the_accepted_forms(tmp_path, value, says):
    (tmp_path / "pyproject.toml").write_text(f"[tool.torchlint]\ntarget-gpu = {value}\n")
    with pytest.raises(ConfigError) as error:
        resolve_settings(tmp_path)
    message = str(error.value)
    assert str(tmp_path / "pyproject.toml") in message and "`target-gpu`" in message and says in message
    if "names no GPU" in says:
        assert '"sm_80"' in message and "a100" in message and "t4" in message


def test_cli_flag_and_its_error(project):
    (project / "t.py").write_text(
        "import torch\nmodel = torch.nn.Linear(64, 64).cuda()\nif __name__ == '__main__':\n"
        "    for x in loader:\n        model(x.cuda()).sum().backward()\n")
    assert "TL705" in run_torchlint("--no-cache", "--select", "TL705", "t.py", cwd=project).stdout.decode()
    assert "TL705" in run_torchlint("--no-cache", "--select", "TL705", "--target-gpu", "h100", "t.py",
                                    cwd=project).stdout.decode()
    assert "TL705" not in run_torchlint("--no-cache", "--select", "TL705", "--target-gpu", "v100", "t.py",
                                        cwd=project).stdout.decode()
    result = run_torchlint("--no-cache", "--target-gpu", "sm_8", "t.py", cwd=project)
    assert result.returncode == 2 and "--target-gpu" in result.stderr.decode() and "sm_XY" in result.stderr.decode()
    (project / ".torchlint.yaml").write_text("target-gpu: banana\n")
    result = run_torchlint("--no-cache", "t.py", cwd=project)
    assert result.returncode == 2 and ".torchlint.yaml" in result.stderr.decode()


# --- what rules ask --------------------------------------------------------------------------------

def context(tmp_path, gpu):
    settings = resolve_settings(tmp_path, isolated=True, target_gpu=gpu)
    return RuleContext("t.py", "", cst.parse_module(""), settings)


def test_the_questions_say_no_while_the_gpu_is_unknown(tmp_path):
    unknown = context(tmp_path, None)
    assert unknown.target_gpu is None
    assert not unknown.gpu_at_least("sm_80") and not unknown.gpu_below("sm_80")
    t4, h100 = context(tmp_path, "t4"), context(tmp_path, "h100")
    assert t4.target_gpu.capability == (7, 5)
    assert t4.gpu_below(gpus.BF16) and not t4.gpu_at_least("sm_80") and t4.gpu_at_least("sm_70")
    assert h100.gpu_at_least(gpus.FP8) and h100.gpu_at_least("a100") and not h100.gpu_below("sm_90")
