"""The semantic model's answers about reproducibility settings (analysis/reproducibility.py):
which statements set deterministic mode, with which value, in any import spelling; and the
precheck twin that must allow every file where a literal True is set."""

from __future__ import annotations

import ast
import textwrap

import libcst as cst
import pytest

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.reproducibility import (ast_switches_deterministic_on, deterministic_settings,
                                                deterministic_value)


def settings(source: str) -> list[tuple[str, tuple[bool, object]]]:
    module = cst.parse_module(textwrap.dedent(source))
    bindings = Bindings(module)
    return [(module.code_for_node(node), deterministic_value(node, bindings))
            for node in deterministic_settings(module, bindings)]


@pytest.mark.parametrize("source, expected", [
    ("import torch\ntorch.backends.cudnn.deterministic = True\n",
     [("torch.backends.cudnn.deterministic = True", (True, True))]),
    ("from torch.backends import cudnn\ncudnn.deterministic = False\n",
     [("cudnn.deterministic = False", (True, False))]),
    ("import torch.backends.cudnn as cb\ncb.deterministic = args.deterministic\n",
     [("cb.deterministic = args.deterministic", (False, None))]),
    ("import torch\ntorch.use_deterministic_algorithms(True, warn_only=True)\n",
     [("torch.use_deterministic_algorithms(True, warn_only=True)", (True, True))]),
    ("from torch import use_deterministic_algorithms as det\ndet(mode=True)\n", [("det(mode=True)", (True, True))]),
    ("import torch\ntorch.use_deterministic_algorithms(*flags)\n",
     [("torch.use_deterministic_algorithms(*flags)", (False, None))]),
    ("import torch\ncfg.deterministic = True\ntorch.backends.cudnn.benchmark = True\n", []),  # other flags
    ("deterministic = True\n", []),  # a name, not the flag
])
def test_which_statements_set_deterministic_mode(source, expected):
    assert settings(source) == expected


@pytest.mark.parametrize("source, expected", [
    ("torch.backends.cudnn.deterministic = True\n", True),
    ("cb.deterministic = True\n", True),
    ("torch.use_deterministic_algorithms(True)\n", True),
    ("torch.use_deterministic_algorithms(mode=True)\n", True),
    ("torch.backends.cudnn.deterministic = False\n", False),
    ("torch.use_deterministic_algorithms(args.deterministic)\n", False),
])
def test_the_precheck_twin(source, expected):
    assert ast_switches_deterministic_on(SyntaxIndex(ast.parse(source), source)) is expected
