"""Property tests on generated programs (hypothesis, hypothesmith): torchlint never crashes, a fix
always leaves a program that parses (and compiles, if it compiled before) and that a second fix
leaves alone, the guide's five anti-patterns are found wherever they are put into generated code,
and the prechecks change no finding. Deterministic (derandomized) and bounded, so CI is neither slow nor flaky."""

from __future__ import annotations

import re
import textwrap
import warnings
from functools import cache
from unittest import mock
from pathlib import Path

import hypothesmith
import libcst as cst
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from torchlint import engine
from torchlint.config import resolve_settings
from torchlint.engine import fix_source, lint_source

pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")  # hypothesmith compiles odd code
FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.data_too_large])
PRELUDE = "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader\n\n"
ANTI_PATTERNS = {
    "TL101": """\
losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    losses.append(loss)
""",
    "TL201": "mask = torch.zeros(8, 8).cuda()\n",
    "TL301": "optimizer.zero_grad(set_to_none=False)\n",
    "TL401": "net = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU())\n",
    "TL501": "model = nn.DataParallel(model)\n",
}
# A training script that sets off most of the other rules too, so that all of them read the
# generated code around it.
TRAINING = """\
loader = DataLoader(dataset, batch_size=32, shuffle=True)
model = nn.DataParallel(Net()).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.cuda.amp.GradScaler()
for epoch in range(3):
    model.train()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad(set_to_none=False)
        with torch.cuda.amp.autocast():
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        torch.cuda.empty_cache()
        print(loss.item())
    model.eval()
    for x, y in loader:
        out = model(x.cuda())
"""
# Generated code must not change what the rules see in the inserted code: no imports (they
# rebind names), nothing named like the inserted code's names, no suppressions.
OFF_LIMITS = ("import", "torch", "nn", "grad", "graph", "backward", "noqa", "skip-file", "DataParallel", "loader",
              "model", "optimizer", "criterion", "loss", "mask", "net", "inference_mode")


def settings_for(tmp_path: Path, select=("ALL",)):
    return resolve_settings(tmp_path, isolated=True, select=list(select), unsafe_fixes=True)


def compiles(source: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, "<generated>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


@cache
def python_programs():
    """Programs from Python's grammar (hypothesmith): odd whitespace, comments, unicode, every
    statement form. Built once: building it compiles the grammar (seconds)."""
    return hypothesmith.from_grammar()


@cache
def generated_code():
    """Generated programs that compile and leave the inserted code's names alone."""
    return python_programs().filter(lambda code: compiles(code) and not any(word in code for word in OFF_LIMITS))


def ensure_newline(code: str) -> str:
    return code if code.endswith(("\n", "\r")) or not code else code + "\n"


# Blocks the inserted code may find itself in: (header, how many levels deeper the body goes).
BLOCKS = [
    ("if flag:\n", 1), ("if flag:\n{unit}pass\nelse:\n", 1), ("for step in range(3):\n", 1),
    ("while running:\n", 1), ("with open(path) as handle:\n", 1), ("try:\n{unit}pass\nfinally:\n", 1),
    ("def run(a, *args, b=1, **kw):\n", 1), ("async def run():\n", 1), ("@decorator(1)\ndef run():\n", 1),
    ("class Runner(Base):\n{unit}def fit(self):\n", 2), ('match command:\n{unit}case "train" | "fit":\n', 2),
]
NEWLINE = re.compile(r"\r\n|\r|\n")


@st.composite
def programs_with(draw, snippet: str):
    """``snippet`` put into generated code, inside blocks nested up to three deep (indented with
    spaces or tabs), with the generated code before or after it, at the top level or in the
    innermost block, with LF or CRLF line ends. Returns the program and the snippet's lines."""
    code = ensure_newline(draw(generated_code()))
    unit = draw(st.sampled_from(["    ", "  ", "\t"]))
    body, outside = snippet, ""
    if draw(st.booleans()):
        body = code + body if draw(st.booleans()) else body + code  # beside it, in the same block
    else:
        outside = code
    for header, depth in reversed(draw(st.lists(st.sampled_from(BLOCKS), max_size=3))):
        body = header.format(unit=unit) + textwrap.indent(body, unit * depth, lambda line: True)
    if "\r" not in code and draw(st.booleans()):
        body, outside = body.replace("\n", "\r\n"), outside.replace("\n", "\r\n")
    source = PRELUDE + (outside + body if draw(st.booleans()) else body + outside)
    assume(compiles(source))
    first_line = snippet.splitlines()[0].strip()
    first = len(NEWLINE.findall(source[:source.index(first_line)]))
    return source, range(first, first + snippet.count("\n"))


@pytest.mark.parametrize("code", sorted(ANTI_PATTERNS))
def test_anti_patterns_in_generated_code_are_found(tmp_path, code):
    checked = settings_for(tmp_path, [code])

    @FUZZ
    @given(programs_with(ANTI_PATTERNS[code]))
    def found(program):
        source, lines = program
        diagnostics = lint_source(source, "generated.py", checked)
        assert any(d.code == code and d.line in lines for d in diagnostics), (source, diagnostics)

    found()


@st.composite
def training_programs(draw):
    """A training script after some of the five anti-patterns, with generated code at a drawn
    place among them, at the top level or inside a function."""
    codes = draw(st.lists(st.sampled_from(sorted(ANTI_PATTERNS)), max_size=5, unique=True))
    parts = [ANTI_PATTERNS[code] for code in codes] + [TRAINING]
    parts.insert(draw(st.integers(0, len(parts))), ensure_newline(draw(generated_code())))
    source = PRELUDE + "".join(parts)
    if draw(st.booleans()):
        source = PRELUDE + "def main():\n" + textwrap.indent("".join(parts), "    ", lambda line: True)
    assume(compiles(source))
    return source


@settings(FUZZ, max_examples=30)  # each example fixes a whole training script twice
@given(training_programs())
def test_fixes_keep_generated_programs_valid(program):
    checked = settings_for(Path.cwd())
    lint_source(program, "generated.py", checked)  # never raises
    result = fix_source(program, "generated.py", checked)  # FixError: a fix broke the program
    cst.parse_module(result.source)
    assert compiles(result.source), result.source
    again = fix_source(result.source, "generated.py", checked)
    assert again.source == result.source, "a second --fix changed the file again"


@settings(FUZZ, max_examples=30)
@given(training_programs())
def test_prechecks_hide_no_finding_in_generated_programs(program):
    """The cheap first pass (torchlint/analysis/index.py) only skips work: with or without it, the same
    findings, fixes included."""
    checked = settings_for(Path.cwd())
    with mock.patch.object(engine, "_prechecked", lambda rules, *args, **kwargs: rules):
        unfiltered = lint_source(program, "generated.py", checked)
    assert lint_source(program, "generated.py", checked) == unfiltered


@FUZZ
@given(python_programs())
def test_any_program_is_linted_without_a_crash(code):
    """Raw generated programs, valid or not for this Python, with every rule on."""
    checked = settings_for(Path.cwd())
    source = PRELUDE + ensure_newline(code) + ANTI_PATTERNS["TL201"]
    diagnostics = lint_source(source, "generated.py", checked)
    if compiles(source):
        assert all(d.code != "TL000" for d in diagnostics), diagnostics
        assert compiles(fix_source(source, "generated.py", checked).source)
