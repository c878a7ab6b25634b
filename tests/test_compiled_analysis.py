"""torchlint/analysis/compiled.py and callees.py: what a file compiles, what the compiled code
reaches, and the precheck twin that must never miss a compile site."""

from __future__ import annotations

import ast

import libcst as cst
import pytest

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.compiled import ast_compiled_callables, ast_may_run_compiled, compiled_code
from torchlint.analysis.index import SyntaxIndex
from torchlint.config import resolve_settings
from torchlint.engine import lint_source


def analysed(source: str):
    module = cst.parse_module(source)
    return compiled_code(module, Bindings(module), source)


def reached(source: str) -> dict[str, tuple[str, ...]]:
    """Each compiled function's name, with the functions the compile site reaches it through."""
    compiled = analysed(source)
    return {compiled.display_name(region.function): region.via for region in compiled.regions()}


MODEL = '''
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self._mix(x)

    def _mix(self, x):
        return self.proj(x)

    def unused(self, x):
        return x


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList()
        self.layers.append(Attention())

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return helper(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleDict(dict(h=nn.ModuleList([Block() for _ in range(2)])))

    def forward(self, x):
        for block in self.blocks.h:
            x = block(x)
        return x

    def generate(self, x):
        return self(x)


def helper(x):
    if not torch.compiler.is_compiling():
        debug(x)
    return skipped(x)


def debug(x):
    print(x)


@torch.compiler.disable
def skipped(x):
    return x


model = Net().cuda()
model = DDP(model, device_ids=[0])
model = torch.compile(model, mode="reduce-overhead")
'''


def test_a_compiled_module_reaches_its_submodules_and_helpers():
    assert reached(MODEL) == {
        "Attention.forward": ("Net.forward", "Block.forward", "Attention.forward"),
        "Attention._mix": ("Net.forward", "Block.forward", "Attention.forward", "Attention._mix"),
        "Block.forward": ("Net.forward", "Block.forward"),
        "Net.forward": ("Net.forward",),
        "helper": ("Net.forward", "Block.forward", "helper"),
    }  # not `unused`, `generate`, `debug` (an untraced branch) nor the disabled `skipped`
    [site] = analysed(MODEL).sites
    assert (site.label, site.mode, site.dynamic) == ("torch.compile(model)", "reduce-overhead", None)


@pytest.mark.parametrize("source, entries", [
    ("import torch\n@torch.compile\ndef f(x):\n    return x\n", {"f"}),
    ("import torch\n@torch.compile(fullgraph=True)\ndef f(x):\n    return x\n", {"f"}),
    ("from torch import compile\n@compile\ndef f(x):\n    return x\n", {"f"}),
    ("import torch\ndef f(x):\n    return x\nrun(torch.compile(f))\n", {"f"}),
    ("import torch\ndef f(x):\n    return x\ng = torch._dynamo.optimize('inductor')(f)\n", {"f"}),
    ("import torch\nimport torch.nn as nn\nclass M(nn.Module):\n    def forward(self, x):\n        return x\n"
     "m = M()\nm.compile()\n", {"M.forward"}),
    ("import torch\nimport torch.nn as nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.step = torch.compile(self.step)\n    def step(self, x):\n        return x\n", {"M.step"}),
    ("import torch\nimport torch.nn as nn\nclass Base(nn.Module):\n    def forward(self, x):\n        return x\n"
     "class M(Base):\n    pass\nc = torch.compile(M())\n", {"Base.forward"}),
])
def test_compile_sites_and_their_entries(source, entries):
    compiled = analysed(source)
    assert {compiled.display_name(entry) for site in compiled.sites for entry in site.entries} == entries
    assert ast_may_run_compiled(SyntaxIndex(ast.parse(source), source))


@pytest.mark.parametrize("source", [
    "import re\nPATTERN = re.compile('a+')\n",
    "class Keras:\n    def compile(self, optimizer):\n        pass\nm = Keras()\nm.compile(optimizer='adam')\n",
    "import torch\nfrom models import GPT\nmodel = torch.compile(GPT())\n",  # imported: no entry in this file
])
def test_what_is_not_a_compiled_function_of_the_file(source):
    assert [entry for site in analysed(source).sites for entry in site.entries] == []
    assert not ast_may_run_compiled(SyntaxIndex(ast.parse(source), source))


@pytest.mark.parametrize("source", [
    "import re\nimport torch\nx = re.compile('a')\nmodel = Net()\n",
    "import torch\ndef build(gm):\n    return torch.compile(gm)\n",  # a parameter: nothing of the file
    "import torch\nfrom models import GPT\nclass Cache:\n    def f(self):\n        return torch.compile(self.g)\n",
    "import torch\nclass Cache:\n    def build(self):\n        self.kernel.compile(self.source)\n",
    "import torch\nfrom torch._inductor import BenchmarkRequest\nclass R(BenchmarkRequest):\n"
    "    def f(self):\n        self.kernel.compile()\n",  # a torch class that is not a module
    "import torch\ndef wrap(*args, **kwargs):\n    return torch.compile(*args, **kwargs)\n",
])
def test_the_precheck_says_no_without_a_compiled_function_of_the_file(source):
    assert not ast_may_run_compiled(SyntaxIndex(ast.parse(source), source))


@pytest.mark.parametrize("source, names", [
    ("import torch\n@torch.compile\ndef f(x):\n    return x\ng = torch.compile(f)\nh = torch.compile(net)\n",
     {"f", "g", "h"}),
    ("import torch\nfn = torch._dynamo.optimize('inductor')(f)\nk: Any = torch.compile(mode='max-autotune')(f)\n",
     {"fn", "k"}),
    ("import torch\nimport torch.nn as nn\nclass M(nn.Module):\n    pass\nm = M()\nm.compile()\n", {"m"}),
    ("import torch.compile as tc\ncompiled = tc(f)\n", {"compiled"}),
    ("import re\nimport torch\nx = re.compile('a')\ny = torch.compile()\n", set()),
])
def test_the_precheck_finds_the_names_that_hold_compiled_callables(source, names):
    compiled = analysed(source)
    assert {name for name in names if compiled.compiled_callable(cst.parse_expression(name))} == names
    assert names <= ast_compiled_callables(SyntaxIndex(ast.parse(source), source))
    assert not ast_compiled_callables(SyntaxIndex(ast.parse(source), source)) - names - {
        f"self.{name}" for name in names}


def test_compiled_callables_are_the_names_that_hold_them():
    source = ("import torch\n@torch.compile\ndef f(x):\n    return x\ng = torch.compile(f)\n"
              "self_model = torch.compile(net)\n")
    compiled = analysed(source)
    assert {name for name in ("f", "g", "self_model", "h") if compiled.compiled_callable(cst.Name(name))} == {
        "f", "g", "self_model"}


@pytest.mark.parametrize("source, marked", [
    ("import torch\nf = torch.compile(g)\n", False),
    ("import torch\nf = torch.compile(g, dynamic=False)\n", False),
    ("import torch\nf = torch.compile(g, dynamic=True)\n", True),
    ("import torch\nf = torch.compile(g, dynamic=args.dynamic)\n", True),  # unknown: perhaps marked
    ("import torch\nf = torch.compile(g)\ntorch._dynamo.mark_dynamic(x, 1)\n", True),
    ("import torch\ntorch._dynamo.config.automatic_dynamic_shapes = False\nf = torch.compile(g)\n", True),
])
def test_where_shapes_are_marked_dynamic(source, marked):
    assert analysed(source).marks_dynamic is marked


def test_the_eager_branch_that_compiles_the_function_itself_is_not_traced():
    source = '''
import torch


def create_mask(n, _compile=False):
    if _compile:
        print("compiling")
        return torch.compile(create_mask)(n, False)
    return torch.ones(n).sum().item()
'''
    compiled = analysed(source)
    [region] = compiled.regions()
    assert len(compiled.eager_branches(region.function)) == 1
    lines = [d.line + 1 for d in lint_source(source, "m.py", resolve_settings("m.py", isolated=True,
                                                                                 select=["TLC001"]))]
    assert lines == [9]  # the .item() of the traced path, not the print of the eager one


def test_breaks_in_test_files_are_not_reported(tmp_path):
    # a file named like a test is test code when it holds a test (README, "Test code")
    source = "import torch\n@torch.compile\ndef f(x):\n    print(x)\n    return x\n\ndef test_f():\n    f(1)\n"
    for name, expected in (("train.py", 1), ("test_compile.py", 0)):
        path = tmp_path / name
        settings = resolve_settings(path, isolated=True, select=["TLC001"])
        assert len(lint_source(source, str(path), settings)) == expected
