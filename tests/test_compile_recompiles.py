"""TLC002 compile-in-loop, TLC003 compile-recompile and TLC004 compile-dynamic-shapes against what
Dynamo does: each program is linted, then run on the CPU with a counting backend
(``torch._dynamo.testing.CompileCounter``, no code generation), before and after the change the
message advises.

- TLC003: a Python number that changes every step compiles the function twice under the default
  settings and once per value under ``dynamic=False``; the advised 0-d tensor compiles it once.
- TLC004: a growing tensor sliced by its length compiles twice (once per length under
  ``dynamic=False``); marking the dimension dynamic compiles once.
- TLC002: the fix (hoisting ``torch.compile`` out of the loop) computes the same values and
  compiles the same number of graphs.
"""

from __future__ import annotations

import pytest

from torchlint.config import resolve_settings
from torchlint.engine import fix_source, lint_source

torch = pytest.importorskip("torch")
from torch._dynamo.testing import CompileCounter  # noqa: E402

STEPS = 6


def lint(source: str, tmp_path, code: str) -> list[int]:
    path = tmp_path / "program.py"
    settings = resolve_settings(path, isolated=True, select=[code])
    return [d.line + 1 for d in lint_source(source, str(path), settings)]


def run(source: str) -> tuple[int, object]:
    """(how many frames Dynamo compiled, what ``main()`` returned)."""
    torch._dynamo.reset()
    counter = CompileCounter()
    namespace = {"__name__": "program", "BACKEND": counter}
    try:
        exec(compile(source, "program.py", "exec"), namespace)
        result = namespace["main"]()
    finally:
        torch._dynamo.reset()
    return counter.frame_count, result


NUMBER_ARGUMENT = '''
import torch


def step(x, scale):
    return x * scale + 1


compiled = torch.compile(step, backend=BACKEND{options})


def main():
    x = torch.ones(4)
    out = []
    for i in range({steps}):
        out.append(compiled(x, {argument}))
    return out
'''


@pytest.mark.parametrize("options, argument, frames, reported", [
    ("", "i", 2, True),  # the second value compiles again, then the number is symbolic
    ("", "i * 0.5 + 0.25", 2, True),  # a float: the same
    (", dynamic=False", "i", STEPS, True),  # every value compiles (up to the limit of 8)
    ("", "torch.tensor(i)", 1, False),  # the advice: a 0-d tensor is a graph input
    (", dynamic=True", "i", 1, False),  # the number is symbolic from the start
])
def test_changing_numbers_recompile(options, argument, frames, reported, tmp_path):
    source = NUMBER_ARGUMENT.format(options=options, argument=argument, steps=STEPS)
    assert run(source)[0] == frames
    assert bool(lint(source, tmp_path, "TLC003")) == reported


GROWING_TENSOR = '''
import torch


def attend(x, bias):
    T = x.size(0)
    return x * bias[:T].sum()


compiled = torch.compile(attend, backend=BACKEND{options})


def main():
    x = torch.ones(2)
    bias = torch.ones(16)
    for _ in range({steps}):
        {mark}out = compiled(x, bias)
        x = torch.cat((x, out[-1:]))
    return x
'''


@pytest.mark.parametrize("options, mark, frames, reported", [
    ("", "", 2, True),  # the second length compiles again, then the length is symbolic
    (", dynamic=False", "", STEPS, True),  # every length compiles
    ("", "torch._dynamo.mark_dynamic(x, 0)\n        ", 1, False),  # the advice
    (", dynamic=True", "", 1, False),
])
def test_growing_lengths_recompile(options, mark, frames, reported, tmp_path):
    source = GROWING_TENSOR.format(options=options, mark=mark, steps=STEPS)
    assert run(source)[0] == frames
    assert bool(lint(source, tmp_path, "TLC004")) == reported


COMPILE_IN_LOOP = '''
import torch
import torch.nn as nn


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(5):
        x = torch.randn(8, 4)
        compiled = torch.compile(model, backend=BACKEND)
        loss = compiled(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses
'''


def test_hoisting_the_compile_keeps_the_values_and_the_graphs(tmp_path):
    path = tmp_path / "program.py"
    settings = resolve_settings(path, isolated=True, select=["TLC002"])
    assert lint(COMPILE_IN_LOOP, tmp_path, "TLC002") == [13]
    fixed = fix_source(COMPILE_IN_LOOP, str(path), settings).source
    assert "    compiled = torch.compile(model, backend=BACKEND)\n    for step in range(5):" in fixed
    assert lint(fixed, tmp_path, "TLC002") == []
    before, after = run(COMPILE_IN_LOOP), run(fixed)
    assert before[1] == after[1]  # the same losses, step for step
    assert before[0] == after[0]  # and the same graphs compiled
