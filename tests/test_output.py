"""The JSON (LSP-shaped) output: shape, UTF-16 positions, determinism."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import ROOT, run_torchlint

from torchlint.diagnostics import SourceText

EXAMPLE = ROOT / "fixtures" / "examples" / "train.py"


def test_json_shape(project):
    source = "import torch\n\nx = torch.zeros(3).cuda()\n"
    (project / "t.py").write_text(source)
    data = json.loads(run_torchlint("--format", "json", "--no-cache", "t.py", cwd=project).stdout)
    assert len(data) == 1
    entry = data[0]
    assert entry["path"] == "t.py"
    assert entry["uri"] == (project / "t.py").resolve().as_uri()
    [diag] = entry["diagnostics"]
    assert diag["range"] == {"start": {"line": 2, "character": 4}, "end": {"line": 2, "character": 18}}
    assert diag["severity"] == 2 and diag["code"] == "TL201" and diag["source"] == "torchlint"
    assert diag["codeDescription"]["href"].endswith("/docs/rules/TL201.md")
    assert diag["data"]["name"] == "move-after-create" and diag["data"]["cell"] is None
    fix = diag["data"]["fix"]
    assert fix["applicability"] == "safe"
    assert fix["edits"] == [{"range": {"start": {"line": 2, "character": 4}, "end": {"line": 2, "character": 25}},
                             "newText": 'torch.zeros(3, device="cuda")'}]


def test_character_counts_utf16_code_units(project):
    # "训练" is 2 code points and 2 UTF-16 units; "🔥" is 1 code point but 2 UTF-16 units
    source = "import torch\n\nnote = '训练🔥'; x = torch.zeros(3).cuda()  # 注释 🚀\n"
    (project / "t.py").write_text(source, encoding="utf-8")
    data = json.loads(run_torchlint("--format", "json", "--no-cache", "t.py", cwd=project).stdout)
    [diag] = data[0]["diagnostics"]
    code_points = source.splitlines()[2].index("torch.zeros")
    assert diag["range"]["start"]["character"] == code_points + 1  # the emoji counts twice
    edit = diag["data"]["fix"]["edits"][0]
    assert edit["range"]["start"]["character"] == code_points + 1


def test_source_text_positions_split_lines_like_python():
    text = SourceText("a\r\nb\rc\nd\x0ce\n")
    assert text.line_starts == [0, 3, 5, 7, 11]
    assert text.position(text.offset(3, 2)) == (3, 2)
    assert text.utf16_col(0, 1) == 1


def test_json_is_byte_identical_across_hash_seeds(tmp_path):
    outputs = set()
    for seed in ("0", "1", "123"):
        result = run_torchlint("--isolated", "--no-cache", "--format", "json", "--select", "ALL",
                               str(EXAMPLE), str(ROOT / "fixtures" / "rules"), env={"PYTHONHASHSEED": seed})
        outputs.add(result.stdout)
    assert len(outputs) == 1
    assert len(json.loads(outputs.pop())) > 5


def test_jsonl_one_diagnostic_per_line(project):
    (project / "t.py").write_text("import torch\nx = torch.zeros(3).cuda()\ny = torch.ones(3).cuda()\n")
    lines = run_torchlint("--format", "jsonl", "--no-cache", "t.py", cwd=project).stdout.decode().splitlines()
    assert [json.loads(line)["range"]["start"]["line"] for line in lines] == [1, 2]
    assert all(json.loads(line)["path"] == "t.py" for line in lines)


def test_text_output_columns_are_one_based(project):
    (project / "t.py").write_text("import torch\nx = torch.zeros(3).cuda()\n")
    out = run_torchlint("--no-cache", "t.py", cwd=project).stdout.decode()
    assert out.startswith("t.py:2:5: TL201 [*] ")
    assert Path(project / "t.py").exists()


def test_text_summary_never_says_all_passed_when_paths_were_not_checked():
    from torchlint.output import format_text

    assert format_text([], unsafe_fixes=False, fix_mode=False) == "All checks passed!\n"
    assert format_text([], unsafe_fixes=False, fix_mode=False, errors=1) == \
        "Could not check 1 path (see the error above).\n"
    assert format_text([], unsafe_fixes=False, fix_mode=True, errors=3) == \
        "Could not check or fix 3 paths (see the errors above).\n"
