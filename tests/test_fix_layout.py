"""`set_keyword` writes the new keyword in the call's own layout: one line, one argument a line
with a trailing comma, and one argument a line without one (the closing parenthesis stays on its
own line; found on swav's and torchvision's loaders, where TL603's fix wrote `drop_last=True, `
and pulled the parenthesis up)."""

from __future__ import annotations

import libcst as cst
import pytest

from torchlint.fixes import set_keyword

CASES = [
    ("f(a, b)", "f(a, b, k=1)"),
    ("f()", "f(k=1)"),
    ("f(a,)", "f(a, k=1,)"),
    ("f(\n    a,\n    b,\n)", "f(\n    a,\n    b,\n    k=1,\n)"),
    ("f(\n    a,\n    b\n)", "f(\n    a,\n    b,\n    k=1\n)"),
    ("f(\n    a\n)", "f(\n    a,\n    k=1\n)"),
    ("f(a, b\n)", "f(a, b, k=1\n)"),
    ("f(\n    a,\n    b  # the last\n)", "f(\n    a,\n    b,  # the last\n    k=1\n)"),
    ("f(\n    a,\n    b,  # the last\n)", "f(\n    a,\n    b,  # the last\n    k=1,\n)"),
    ("f(a, k=0)", "f(a, k=1)"),
]


@pytest.mark.parametrize("before, after", CASES)
def test_a_keyword_is_added_in_the_calls_layout(before, after):
    call = cst.parse_expression(before)
    assert cst.Module([]).code_for_node(set_keyword(call, "k", cst.Integer("1"))) == after
