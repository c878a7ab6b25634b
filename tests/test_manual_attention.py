"""TL406 manual-attention: the attention the semantic model recognizes (analysis/attention.py), and
the fix computes what the hand-written code computed (the fixture and its fixed twin, run side by
side on random inputs; dropout off, as the fix's equivalence is up to dropout's random masks)."""

from __future__ import annotations

import math
from pathlib import Path

import libcst as cst
import pytest

from torchlint.analysis.attention import AttentionFinder
from torchlint.analysis.bindings import Bindings
from torchlint.analysis.walk import walk

torch = pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "rules" / "manual_attention"


def attentions(source: str) -> list[dict]:
    """What the finder sees in each product of a source: its parts, as code."""
    module = cst.parse_module(source)
    ancestors: list[cst.CSTNode] = []
    finder = AttentionFinder(module, Bindings(module), ancestors)
    found = []

    def on_visit(node: cst.CSTNode) -> bool:
        ancestors.append(node)
        attention = finder.at(node)
        if attention is not None:
            code = module.code_for_node
            found.append({"q": code(attention.query), "k": code(attention.key), "v": code(attention.value),
                          "exact_key": attention.key_transposed, "scale": attention.scale and (
                              attention.scale[0], code(attention.scale[1])),
                          "mask": attention.mask and attention.mask[0], "after": attention.mask_after_scale,
                          "dropout": attention.dropout is not None, "steps": len(attention.steps)})
        return True

    walk(module, on_visit, lambda node: ancestors.pop())
    return found


def test_the_parts_through_names():
    found = attentions("import torch\n\n\ndef f(q, k, v, mask):\n"
                       "    s = q @ k.transpose(-2, -1)\n"
                       "    s = s.masked_fill(mask, float('-inf'))\n"
                       "    s = s / 8\n"
                       "    p = torch.softmax(s, dim=-1)\n"
                       "    return p @ v\n")
    assert found == [{"q": "q", "k": "k", "v": "v", "exact_key": True, "scale": ("/", "8"), "mask": "fill",
                      "after": False, "dropout": False, "steps": 4}]


@pytest.mark.parametrize("source", [
    "y = F.softmax(q @ k.transpose(-2, -1), dim=1) @ v\n",  # not over the last dimension
    "y = F.softmax(q @ k.transpose(-2, -1)) @ v\n",  # the implicit (legacy) dimension
    "y = F.softmax(q @ k, dim=-1) @ v\n",  # no transposed keys
    "y = v @ F.softmax(q @ k.transpose(-2, -1), dim=-1)\n",  # the weights on the right
    "if c:\n    s = q @ k.mT\nelse:\n    s = q @ k.mT * 2\ny = s.softmax(-1) @ v\n",  # two assignments reach
])
def test_what_is_not_attention(source):
    assert attentions(source) == []


def test_a_bias_added_before_the_scale_is_told_apart():
    [found] = attentions("y = ((q @ k.mT + b) * 0.5).softmax(-1) @ v\n")
    assert found["mask"] == "add" and not found["after"]
    [found] = attentions("y = (q @ k.mT * 0.5 + b).softmax(-1) @ v\n")
    assert found["mask"] == "add" and found["after"]


def load(path: Path) -> dict:
    namespace: dict = {"__name__": path.stem}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    return namespace


def test_the_fix_computes_the_same_attention():
    before, after = load(FIXTURES / "bad.py"), load(FIXTURES / "bad.fixed.py")
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 6, 8, generator=gen) for _ in range(3))
    mask = torch.rand(6, 6, generator=gen) > 0.3
    mask[:, 0] = True  # no row fully masked (SDPA gives zeros there, the hand-written code NaN)
    bias = torch.randn(4, 6, 6, generator=gen)
    close = lambda a, b: torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)  # noqa: E731
    close(before["attention"](q, k, v, mask), after["attention"](q, k, v, mask))
    close(before["one_expression"](q, k, v), after["one_expression"](q, k, v))
    close(before["with_bias"](q, k, v, bias, 0.1, False), after["with_bias"](q, k, v, bias, 0.1, False))
    torch.manual_seed(0)
    model = before["CausalSelfAttention"](32, 4, 16, 0.1).eval()
    fixed = after["CausalSelfAttention"](32, 4, 16, 0.1).eval()
    fixed.load_state_dict(model.state_dict())
    x = torch.randn(3, 10, 32, generator=gen)
    close(model(x), fixed(x))
    assert math.isclose(fixed.attn_dropout.p, 0.1)
