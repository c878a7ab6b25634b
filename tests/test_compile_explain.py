"""TLC001 compile-graph-break and TLC005 compile-cudagraph-break against ``torch._dynamo.explain``.

Each program below compiles something (``@torch.compile``, ``torch.compile(fn)``,
``torch.compile(model)``, ``model.compile()``) and names, in ``EXPLAIN``, what it compiles and
the arguments to run it with. The lines where torch 2.13 breaks the graph are marked ``# break``;
a break torchlint does not report is marked ``# break, missed: <why>``. For every program the
tests check that

- ``torch._dynamo.explain`` breaks the graph on exactly the marked lines (the innermost line of
  the program in each break reason's stack), so the marks are the truth on the torch the tests run;
- every TLC001 finding is on a line where ``explain`` breaks (no reported break is a false one),
  and TLC005 lists only such lines;
- torchlint misses exactly the lines marked ``missed``.

On these 16 programs ``explain`` finds 34 breaking lines; torchlint reports 32 of them and misses
2: a branch on a parameter without a ``Tensor`` annotation (the rule does not guess that an
unannotated parameter holds a tensor), and the call of a ``@torch.compiler.disable`` helper (a
break on purpose: it is what the messages advise for a helper with several breaks). Programs that
need NumPy or PIL are skipped where those are not installed.

``explain`` records a break only where the frame has traced some tensor work before it (a
statement that breaks right after another break, or first thing in a resumed frame, is run
eagerly without a record), so the programs put a tensor operation before each breaking line.

The second half shows the graph-break count before and after each rewrite the messages advise.
Each program is tiny and runs on the CPU, with ``torch._dynamo.reset()`` before every explain.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from torchlint.config import resolve_settings
from torchlint.engine import lint_source

torch = pytest.importorskip("torch")

BREAK = re.compile(r"#\s*break(?:,\s*missed:\s*(?P<why>.*))?$")
HAS_NUMPY = importlib.util.find_spec("numpy") is not None
HAS_PIL = importlib.util.find_spec("PIL") is not None

PROGRAMS = {
    "scalar_reads": '''
import torch


@torch.compile
def step(x):
    y = x * 2
    total = y.sum().item()  # break
    y = y + 1
    scale = float(y.mean())  # break
    y = y + 1
    count = int((y > 0).sum())  # break
    return y + total + scale + count


EXPLAIN = (step, (torch.randn(8),))
''',
    "lists_and_strings": '''
import torch


def describe(x: torch.Tensor):
    y = x * 2
    values = y.tolist()  # break
    y = y + 1
    text = str(y)  # break
    y = y + 1
    label = f"{y}"
    return y + len(values) + len(text) + len(label)


compiled = torch.compile(describe)
EXPLAIN = (describe, (torch.randn(8),))
''',
    "printing_module": '''
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        print("activations", h.shape)  # break
        if not torch.compiler.is_compiling():
            print(h)
        return torch.relu(h) * 2


model = Net()
model = torch.compile(model)
EXPLAIN = (model._orig_mod, (torch.randn(4, 8),))
''',
    "branches": '''
import torch


def route(x, threshold):
    y = x * 2
    if y.sum() > 0:  # break
        y = y + 1
    y = y * 2
    z = y - 1 if y.mean() > 0 else y + 1  # break
    z = z * 2
    if threshold > 0:  # break, missed: `threshold` has no Tensor annotation
        z = z * 3
    if y.shape[0] > 4 and z.dim() == 1:
        z = z * 5
    return z * 7


fast_route = torch.compile(route)
EXPLAIN = (route, (torch.randn(8), torch.tensor(1.0)))
''',
    "loop_on_values": '''
import torch


@torch.compile(fullgraph=False)
def shrink(x):
    y = x.abs() * 2
    while y.max() > 1:  # break
        y = y / 2
    return y


EXPLAIN = (shrink, (torch.randn(8),))
''',
    "comprehension_condition": '''
import torch


def keep_positive_rows(x):
    y = x * 2
    rows = [row for row in y if row.sum() > 0]  # break
    return torch.stack(rows) * 3 if rows else y


compiled = torch.compile(keep_positive_rows)
EXPLAIN = (keep_positive_rows, (torch.randn(4, 3),))
''',
    "helper_functions": '''
import torch


def stats(y):
    a = y.sum().item()  # break
    y = y + 1
    b = y.max().item()  # break
    y = y + 1
    print(a, b)  # break
    return a + b + y


@torch.compiler.disable
def quiet_stats(y):
    a = y.sum().item()
    return a


def step(x):
    y = x * 2
    s = stats(y)
    y = y + s
    q = quiet_stats(y)  # break, missed: a call of a torch.compiler.disable helper breaks on purpose
    return y + q


step_compiled = torch.compile(step)
EXPLAIN = (step, (torch.randn(8),))
''',
    "submodules": '''
import torch
import torch.nn as nn


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(8))

    def forward(self, x):
        if self.weight.sum() > 0:  # break
            x = x * self.weight
        return self._norm(x) * 2

    def _norm(self, x):
        return x / x.norm().item()  # break


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = Gate()
        self.fc = nn.Linear(8, 8)
        self.score = nn.Linear(8, 1)

    def forward(self, x):
        x = self.gate(self.fc(x)) * 3
        score = self.score(x[0])
        if score > 0:  # break
            x = x * 2
        return x * 3


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x * 4


net = Net()
net.compile()
EXPLAIN = (net.forward, (torch.randn(2, 8),))  # net's __call__ is compiled
''',
    "random_module": '''
import random

import torch


@torch.compile
def jitter(x):
    y = x * 2
    a = random.random()  # break
    y = y + 1
    b = random.choice([1, 2])  # break
    y = y + 1
    c = random.randint(0, 3)
    return y * a + b + c


EXPLAIN = (jitter, (torch.randn(8),))
''',
    "data_dependent_values": '''
import torch


def same(a, b):
    c = a * 2
    if torch.allclose(c, b):  # break
        c = c + 1
    c = c * 2
    exact = torch.equal(c, b)  # break
    return c * 3 + exact


compiled_same = torch.compile(same)
EXPLAIN = (same, (torch.randn(8), torch.randn(8)))
''',
    "dynamic_shapes": '''
import torch


@torch.compile
def select(x):
    y = x * 2
    a = y.nonzero()  # break
    y = y + 1
    b = torch.unique(y)  # break
    y = y + 1
    c = torch.masked_select(y, y > 0)  # break
    y = y + 1
    d = y[y > 0]  # break
    y = y + 1
    (e,) = torch.where(y > 0)  # break
    y = y + 1
    y[y > 0] = 0
    m = x > 0
    y = y + 1
    y[m] = x[m]  # break
    kept = torch.where(y > 0, y, 0)
    return kept.sum() + a.sum() + b.sum() + c.sum() + d.sum() + e.sum()


EXPLAIN = (select, (torch.randn(8),))
''',
    "logging_and_clock": '''
import logging
import time
import warnings

import torch

logger = logging.getLogger(__name__)


@torch.compile
def step(x):
    y = x * 2
    start = time.perf_counter()  # break
    y = y + 1
    logger.info("step")  # break
    y = y + 1
    logging.debug("step")  # break
    y = y + 1
    warnings.warn("slow")  # break
    return y + 1


EXPLAIN = (step, (torch.randn(8),))
''',
    "backward_inside": '''
import torch
import torch.nn as nn

model = nn.Linear(8, 1)


def train_step(x):
    loss = model(x).pow(2).mean()
    loss.backward()  # break
    return loss.detach() * 2


compiled_step = torch.compile(train_step)
EXPLAIN = (train_step, (torch.randn(4, 8),))
''',
    "not_breaks": '''
import random

import torch


@torch.compile
def clean(x, mask=None):
    y = x * 2
    z = y.cpu()
    if mask is not None:
        y = y * mask
    if y.shape[0] > 1 and len(y) > 2 and y.numel() > 3:
        y = y + 1
    assert y.sum() > -1e9
    n = random.randint(1, 3)
    for value in y:
        z = z + value
    biggest = max(y.sum(), y.mean())
    return y + z + n + biggest


EXPLAIN = (clean, (torch.randn(8),))
''',
    "numpy_traced": '''
import numpy as np
import torch


@torch.compile
def through_numpy(x):
    y = x * 2
    a = np.mean(y.numpy())
    return y + torch.as_tensor(a)


EXPLAIN = (through_numpy, (torch.randn(8),))
''',
    "images": '''
import torch
from PIL import Image


@torch.compile
def to_image(x):
    y = (x * 255).to(torch.uint8)
    image = Image.fromarray(y.numpy())  # break
    return y + 1, image


EXPLAIN = (to_image, (torch.rand(4, 4),))
''',
}
NEEDS = {"numpy_traced": HAS_NUMPY, "images": HAS_PIL and HAS_NUMPY}


def marked(source: str) -> tuple[set[int], set[int]]:
    """(lines marked as breaks, those of them marked as missed), 1-based."""
    breaks, missed = set(), set()
    for number, line in enumerate(source.splitlines(), start=1):
        match = BREAK.search(line)
        if match:
            breaks.add(number)
            if match.group("why"):
                missed.add(number)
    return breaks, missed


def explain_lines(source: str, path: Path) -> tuple[int, set[int]]:
    """(graph_break_count, the program's innermost line in each break reason) from
    ``torch._dynamo.explain`` on what the program names in ``EXPLAIN``."""
    path.write_text(source, encoding="utf-8")
    namespace = {"__name__": path.stem}
    exec(compile(source, str(path), "exec"), namespace)
    target, args = namespace["EXPLAIN"]
    target = getattr(target, "_torchdynamo_orig_callable", target)
    torch._dynamo.reset()
    try:
        output = torch._dynamo.explain(target)(*args)
    finally:
        torch._dynamo.reset()
    lines = set()
    for reason in output.break_reasons:
        frames = [frame for frame in reason.user_stack if frame.filename == str(path)]
        if frames:
            lines.add(frames[-1].lineno)
    return output.graph_break_count, lines


def findings(source: str, path: Path, code: str) -> list:
    settings = resolve_settings(path, isolated=True, select=[code])
    return lint_source(source, str(path), settings)


def program(name: str) -> str:
    if not NEEDS.get(name, True):
        pytest.skip(f"{name} needs a library that is not installed")
    return PROGRAMS[name]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_reported_breaks_are_real_breaks(name, tmp_path):
    source = program(name)
    path = tmp_path / f"{name}.py"
    breaks, missed = marked(source)
    _, lines = explain_lines(source, path)
    assert lines == breaks, "the marks disagree with torch._dynamo.explain"
    reported = {d.line + 1 for d in findings(source, path, "TLC001")}
    assert reported <= lines, f"reported where explain sees no break: {sorted(reported - lines)}"
    assert lines - reported == missed


def test_the_stated_counts(tmp_path):
    """The module docstring's figures: 16 programs, 34 breaking lines, 2 missed."""
    assert len(PROGRAMS) == 16
    all_breaks = sum(len(marked(source)[0]) for source in PROGRAMS.values())
    all_missed = sum(len(marked(source)[1]) for source in PROGRAMS.values())
    assert (all_breaks, all_missed) == (34, 2)


# --- TLC005: the breaks of a region compiled for CUDA graphs ---------------------------------------

CUDAGRAPH_PROGRAM = '''
import torch


def decode(x):
    y = x * 2
    if y.sum() > 0:  # break
        y = y + 1
    y = y * 2
    print(y.max().item())  # break
    return y * 3


decode_compiled = torch.compile(decode, mode="reduce-overhead")
EXPLAIN = (decode, (torch.randn(8),))
'''


def test_cudagraph_rule_lists_the_real_breaks(tmp_path):
    path = tmp_path / "decode.py"
    _, lines = explain_lines(CUDAGRAPH_PROGRAM, path)
    assert lines == marked(CUDAGRAPH_PROGRAM)[0] == {7, 10}
    breaks = findings(CUDAGRAPH_PROGRAM, path, "TLC001")
    assert {d.line + 1 for d in breaks} <= lines
    [found] = findings(CUDAGRAPH_PROGRAM, path, "TLC005")
    assert found.line + 1 == 14  # the compile call
    # it names the same breaks as TLC001: the branch, and the print and the .item() on line 10
    assert f"breaks its graph {len(breaks)} times" in found.message and len(breaks) == 3
    for shown in ("`if y.sum() > 0:`", "`print(y.max().item())`", "`y.max().item()`"):
        assert shown in found.message


# --- before and after the advised rewrites ----------------------------------------------------------

REWRITES = {
    # (before, after): the message's advice applied
    "keep the value a tensor": ('''
import torch


def step(x):
    y = x * 2
    return y + y.sum().item()


compiled = torch.compile(step)
EXPLAIN = (step, (torch.randn(8),))
''', '''
import torch


def step(x):
    y = x * 2
    return y + y.sum()


compiled = torch.compile(step)
EXPLAIN = (step, (torch.randn(8),))
'''),
    "torch.where instead of a branch": ('''
import torch


def step(x):
    y = x * 2
    if y.sum() > 0:
        return y + 1
    return y - 1


compiled = torch.compile(step)
EXPLAIN = (step, (torch.randn(8),))
''', '''
import torch


def step(x):
    y = x * 2
    return torch.where(y.sum() > 0, y + 1, y - 1)


compiled = torch.compile(step)
EXPLAIN = (step, (torch.randn(8),))
'''),
    "guard the print": ('''
import torch


def step(x):
    y = x * 2
    print(y)
    return y + 1


compiled = torch.compile(step)
EXPLAIN = (step, (torch.randn(8),))
''', '''
import torch


def step(x):
    y = x * 2
    if not torch.compiler.is_compiling():
        print(y)
    return y + 1


compiled = torch.compile(step)
EXPLAIN = (step, (torch.randn(8),))
'''),
    "torch.compiler.disable on the helper": ('''
import torch


def stats(y):
    a = y.sum().item()
    b = y.max().item()
    print(a, b)
    return a + b


def step(x):
    y = x * 2
    return y + stats(y)


compiled = torch.compile(step)
EXPLAIN = (step, (torch.randn(8),))
''', '''
import torch


@torch.compiler.disable
def stats(y):
    a = y.sum().item()
    b = y.max().item()
    print(a, b)
    return a + b


def step(x):
    y = x * 2
    return y + stats(y)


compiled = torch.compile(step)
EXPLAIN = (step, (torch.randn(8),))
'''),
}
# graph_break_count before and after each rewrite, as torch 2.13 counts them
REWRITE_COUNTS = {
    "keep the value a tensor": (1, 0),
    "torch.where instead of a branch": (1, 0),
    "guard the print": (1, 0),
    "torch.compiler.disable on the helper": (3, 1),
}


@pytest.mark.parametrize("advice", sorted(REWRITES))
def test_break_count_before_and_after_the_rewrite(advice, tmp_path):
    before, after = REWRITES[advice]
    counts = (explain_lines(before, tmp_path / "before.py")[0], explain_lines(after, tmp_path / "after.py")[0])
    assert counts == REWRITE_COUNTS[advice]
    assert findings(before, tmp_path / "before.py", "TLC001")
    assert findings(after, tmp_path / "after.py", "TLC001") == []


@pytest.mark.parametrize("setting, source", [
    ("capture_scalar_outputs", REWRITES["keep the value a tensor"][0]),
    ("capture_dynamic_output_shape_ops", '''
import torch


def step(x):
    y = x * 2
    return y + y.nonzero().sum()


EXPLAIN = (step, (torch.randn(8),))
'''),
])
def test_the_advised_dynamo_settings_remove_the_break(setting, source, tmp_path):
    assert explain_lines(source, tmp_path / "before.py")[0] == 1
    with torch._dynamo.config.patch(**{setting: True}):
        assert explain_lines(source, tmp_path / "after.py")[0] == 0


def test_reorderable_print_removes_the_break(tmp_path):
    source = REWRITES["guard the print"][0]
    assert explain_lines(source, tmp_path / "before.py")[0] == 1
    with torch._dynamo.config.patch(reorderable_logging_functions={print}):
        assert explain_lines(source, tmp_path / "after.py")[0] == 0
