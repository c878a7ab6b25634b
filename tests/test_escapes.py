"""What leaves a block as a tensor (torchlint/analysis/escapes.py): numbers, strings and host
copies may leave; stored, appended, returned, written-in-place or later-read tensors may not."""

from __future__ import annotations

import libcst as cst
import pytest

from torchlint.analysis.escapes import is_host_value, leaks


def block_and_after(source: str) -> tuple[cst.BaseSuite, list[cst.CSTNode]]:
    """The body of the first ``with`` of a function, and the statements after it."""
    function = cst.parse_module(source).body[0]
    body = list(function.body.body)
    index = next(i for i, s in enumerate(body) if isinstance(s, cst.With))
    return body[index].body, body[index + 1:]


@pytest.mark.parametrize("expression, host", [
    ("x.sum().item()", True), ("float(loss)", True), ("preds.argmax(1).cpu()", True), ("f'{acc:.2f}'", True),
    ("time.time() - 3", True), ("labels.size(0)", True), ("x.shape[0]", True),
    ("model(x)", False), ("x + 1", False), ("torch.cat(outputs)", False),
])
def test_host_values(expression, host):
    assert is_host_value(cst.parse_expression(expression)) is host


def test_numbers_leave_freely():
    block, after = block_and_after("def f(model, loader):\n"
                                   "    total = 0\n"
                                   "    with ctx():\n"
                                   "        for x, y in loader:\n"
                                   "            out = model(x)\n"
                                   "            acc = (out.argmax(1) == y).sum().item()\n"
                                   "            total += acc\n"
                                   "            meter.update(acc, x.size(0))\n"
                                   "    return total\n")
    assert leaks(block, after) == []


@pytest.mark.parametrize("statement, why", [
    ("self.cache = model(x)", "it stores a value on `self.cache`"),
    ("outputs.append(model(x))", "it puts a value into `outputs`, made outside it"),
    ("buffer.copy_(model(x))", "it writes in place into `buffer`, made outside it"),
    ("return model(x)", "it returns a value computed there"),
    ("out = model(x)", "`out` is computed there and read after it"),
])
def test_tensors_that_leave(statement, why):
    block, after = block_and_after("def f(model, x, outputs, buffer):\n"
                                   f"    with ctx():\n        {statement}\n"
                                   "    use(out)\n")
    assert why in leaks(block, after)


def test_a_name_bound_again_before_it_is_read_does_not_leave():
    block, after = block_and_after("def f(model, x):\n"
                                   "    with ctx():\n        out = model(x)\n"
                                   "    out = 0\n    return out\n")
    assert leaks(block, after) == []
