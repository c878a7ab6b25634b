"""`set_keyword` writes the new keyword in the call's own layout: one line, one argument a line
with a trailing comma, and one argument a line without one (the closing parenthesis stays on its
own line; found on swav's and torchvision's loaders, where TL603's fix wrote `drop_last=True, `
and pulled the parenthesis up)."""

from __future__ import annotations

import libcst as cst
import pytest

from torchlint.fixes import insert_arg, set_keyword

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


@pytest.mark.parametrize("before, after", [(b, a.replace("k=1", "1")) for b, a in CASES[:-1]])
def test_an_argument_inserted_last_follows_the_same_layout(before, after):
    call = cst.parse_expression(before)
    assert cst.Module([]).code_for_node(insert_arg(call, len(call.args), cst.Arg(cst.Integer("1")))) == after


def test_an_argument_inserted_before_others_takes_their_separator():
    call = cst.parse_expression("f(\n    a,\n    b\n)")
    assert cst.Module([]).code_for_node(insert_arg(call, 0, cst.Arg(cst.Integer("1")))) == "f(\n    1,\n    a,\n    b\n)"


def test_the_comment_after_the_opening_parenthesis_stays_there():
    call = cst.parse_expression("f(  # why\n    a\n)")
    assert cst.Module([]).code_for_node(set_keyword(call, "k", cst.Integer("1"))) == "f(  # why\n    a,\n    k=1\n)"
