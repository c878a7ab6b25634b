"""`--format sarif`: SARIF 2.1.0 checked against the official OASIS schema (vendored in
tests/data, so the check runs offline), and the parts GitHub code scanning reads."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import nbformat
import pytest

from conftest import GUIDE_RULES_CONFIG, LEAK, run_torchlint
from torchlint.rule import rule_by_selector

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
MODEL = ("import torch\nimport torch.nn as nn\n\nm = nn.DataParallel(net)\ny = '😀'; x = torch.zeros(3).cuda()\n"
         "for b in batches:\n    m(b).sum().backward()\n")


def validate(sarif: dict) -> None:
    validator = jsonschema.validators.validator_for(SCHEMA)
    validator(SCHEMA, format_checker=validator.FORMAT_CHECKER).validate(sarif)


@pytest.fixture(autouse=True)
def guide_rules_only(project):
    (project / "pyproject.toml").write_text(GUIDE_RULES_CONFIG)


@pytest.fixture
def sarif(project) -> dict:
    (project / "my dir").mkdir()
    (project / "my dir" / "train.py").write_text(LEAK)
    (project / "model.py").write_text(MODEL, encoding="utf-8")
    (project / "broken.py").write_text("def f(:\n    pass\n")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import torch"), nbformat.v4.new_code_cell("x = torch.ones(2).cuda()")]
    nbformat.write(nb, str(project / "nb.ipynb"))
    result = run_torchlint("--no-cache", "--format", "sarif", ".", cwd=project)
    assert result.returncode == 1, result.stderr
    return json.loads(result.stdout)


def test_output_is_valid_sarif_2_1_0(sarif):
    validate(sarif)
    assert sarif["version"] == "2.1.0"


def test_the_schema_check_is_real(sarif):
    broken = copy.deepcopy(sarif)
    broken["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)
    broken = copy.deepcopy(sarif)
    broken["runs"][0]["results"][0]["level"] = "warn"
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)


def test_tool_and_rules_carry_the_documentation(sarif):
    from torchlint import __version__

    driver = sarif["runs"][0]["tool"]["driver"]
    assert (driver["name"], driver["version"]) == ("torchlint", __version__)
    assert driver["informationUri"].startswith("https://")
    rules = {rule["id"]: rule for rule in driver["rules"]}
    assert {"TL000", "TL101", "TL201", "TL301", "TL401", "TL501"} <= set(rules)
    leak = rules["TL101"]
    assert leak["name"] == "retained-graph"
    rule = rule_by_selector("TL101")
    assert leak["shortDescription"]["text"] == rule.summary
    what_it_does = rule.docs().split("## What it does", 1)[1].split("\n## ", 1)[0]
    assert leak["fullDescription"]["text"] == " ".join(what_it_does.split()) != ""
    assert "## Fix safety" in leak["help"]["markdown"] and leak["help"]["text"] == leak["help"]["markdown"]
    assert leak["helpUri"].endswith("/TL101.md")
    assert leak["defaultConfiguration"]["level"] == "warning"


def test_results_locations_and_fixes(sarif):
    run = sarif["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    results = run["results"]
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in results)
    by_key = {(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], r["ruleId"]): r for r in results}
    assert sorted(by_key) == [("broken.py", "TL000"), ("model.py", "TL201"), ("model.py", "TL501"),
                              ("my%20dir/train.py", "TL101"), ("nb.ipynb", "TL201")]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"].endswith("/")
    assert run["columnKind"] == "utf16CodeUnits"

    leak = by_key[("my%20dir/train.py", "TL101")]
    assert leak["level"] == "warning" and leak["message"]["text"].startswith("`losses` appends `loss`")
    location = leak["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
    assert location["region"] == {"startLine": 7, "startColumn": 5, "endLine": 7, "endColumn": 24}
    (fix,) = leak["fixes"]
    (change,) = fix["artifactChanges"]
    assert change["replacements"] == [{"deletedRegion": {"startLine": 7, "startColumn": 19, "endLine": 7, "endColumn": 23},
                                       "insertedContent": {"text": "loss.detach()"}}]

    moved = by_key[("model.py", "TL201")]
    # Columns count UTF-16 code units: the emoji before the call counts twice.
    assert moved["locations"][0]["physicalLocation"]["region"]["startColumn"] == len("y = '😀'; x = ") + 2
    assert by_key[("model.py", "TL501")]["fixes"][0]["description"]["text"].endswith("(unsafe)")
    assert by_key[("broken.py", "TL000")]["level"] == "error" and "fixes" not in by_key[("broken.py", "TL000")]

    cell = by_key[("nb.ipynb", "TL201")]
    assert cell["properties"] == {"cell": 1} and "fixes" not in cell
    assert cell["locations"][0]["physicalLocation"]["region"]["startLine"] == 1
    assert run["invocations"] == [{"executionSuccessful": True, "toolExecutionNotifications": []}]


def test_a_clean_run_is_valid_sarif_too(project):
    (project / "ok.py").write_text("x = 1\n")
    result = run_torchlint("--no-cache", "--format", "sarif", ".", cwd=project)
    assert result.returncode == 0
    sarif = json.loads(result.stdout)
    validate(sarif)
    assert sarif["runs"][0]["results"] == []


def test_stdin_buffer_in_sarif(project):
    result = run_torchlint("--format", "sarif", "--stdin-filename", "src/train.py", "-", cwd=project, input=LEAK)
    sarif = json.loads(result.stdout)
    validate(sarif)
    (only,) = sarif["runs"][0]["results"]
    assert only["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "src/train.py"
