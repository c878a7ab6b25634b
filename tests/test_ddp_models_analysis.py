"""The semantic model's answers about distributed wrappers (analysis/data.py): which names hold a
model the file wraps in DistributedDataParallel."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.data import DdpModels

from test_module_analysis import places

SOURCE = """\
from torch.nn.parallel import DistributedDataParallel as DDP
from elsewhere import wrapped

class Trainer:
    def __init__(self, model):
        self.model = DDP(model)

    def fit(self):
        PLACE

def train(net, other):
    PLACE

def main(model, flag):
    if flag:
        model = DDP(model)
    train(model, wrapped)
    plain = model
    PLACE
"""


def scopes_at(source: str) -> tuple[DdpModels, list[list[cst.CSTNode]]]:
    module = cst.parse_module(textwrap.dedent(source))
    return DdpModels(module, Bindings(module)), places(module)


@pytest.mark.parametrize("which, code, expected", [
    (0, "self.model", True),
    (1, "net", True),  # main() passes its DDP model
    (1, "other", False),  # main() passes a model of another module
    (2, "model", True),  # wrapped under a condition
    (2, "plain", False),  # a copy of the name: not followed
    (2, "wrapped", False),
])
def test_holds_ddp(which, code, expected):
    models, places = scopes_at(SOURCE)
    assert models.holds_ddp(cst.parse_expression(code), places[which]) is expected
