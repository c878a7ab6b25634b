"""The semantic model's answers about modules (analysis/modules.py): which names are layer classes,
which expressions build a module, which classes of the file belong together, and what a class
does with one of its attributes."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.modules import Modules, layer_class
from torchlint.analysis.walk import walk


def modules_of(source: str) -> tuple[cst.Module, Modules]:
    module = cst.parse_module(textwrap.dedent(source))
    return module, Modules(module, Bindings(module))


def expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def class_named(module: cst.Module, name: str) -> cst.ClassDef:
    return next(node for node in module.body if isinstance(node, cst.ClassDef) and node.name.value == name)


@pytest.mark.parametrize("name, expected", [
    ("torch.nn.Linear", True),
    ("torch.nn.modules.conv.Conv2d", True),
    ("torch.nn.parallel.DistributedDataParallel", True),
    ("torch.nn.Parameter", False),
    ("torch.nn.functional.relu", False),
    ("torch.nn.utils.rnn.PackedSequence", False),
    ("torch.nn.attention.SDPBackend", False),
    ("fairseq.modules.Linear", False),
    (None, False),
])
def test_layer_classes(name, expected):
    assert layer_class(name) is expected


HEADER = """\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from other import Thing

class Block(nn.Module):
    pass

class Plain:
    pass
"""


@pytest.mark.parametrize("code, expected", [
    ("nn.Linear(2, 2)", "Linear"),
    ("Block()", "Block"),
    ("nn.Linear(2, 2).cuda()", "Linear"),
    ("nn.Linear(2, 2) if a else nn.Identity()", "Linear"),
    ("nn.Linear(2, 2) if a else None", None),
    ("Plain()", None),
    ("Thing()", None),
    ("nn.Parameter(x)", None),
    ("F.relu", None),
    ("nn.Linear(2, 2).eval()", None),
])
def test_constructed_class(code, expected):
    _, modules = modules_of(HEADER)
    assert modules.constructed_class(expression(code)) == expected


@pytest.mark.parametrize("code, expected", [
    ("DDP(model)", True),
    ("Block().eval()", True),
    ("nn.Linear(2, 2)", True),
    ("model.eval()", False),
    ("Thing()", False),
])
def test_module_values(code, expected):
    _, modules = modules_of(HEADER)
    assert modules.is_module_value(expression(code)) is expected


def test_class_family_is_bases_and_derived_classes_of_the_file():
    module, modules = modules_of("""\
        class A(nn.Module): pass
        class B(A): pass
        class C(B): pass
        class D(A): pass
        class E(nn.Module): pass
        """)
    family = [c.name.value for c in modules.class_family(class_named(module, "B"))]
    assert family == ["B", "A", "C"]


SOURCE = """\
class Net(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.blocks = []
        for _ in range(3):
            self.blocks.append(nn.Linear(d, d))
        self.blocks.extend([nn.ReLU(), nn.Tanh()])
        self.heads = {"a": nn.Linear(d, d)}
        self.sliced = [nn.Linear(d, d), nn.Linear(d, d)]
        self.handed = [nn.Linear(d, d), nn.Linear(d, d)]
        self.net = nn.Sequential(*self.handed)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        for key, head in self.heads.items():
            x = head(x) if key in self.heads else x
        y = [s(x) for s in self.sliced[1:]]
        return x, len(self.blocks), self.blocks[0]


class Child(Net):
    def more(self):
        return self.heads
"""


def test_attribute_uses():
    module, modules = modules_of(SOURCE)
    net = class_named(module, "Net")
    blocks = modules.attribute_uses(net, "blocks")
    code = cst.Module([]).code_for_node
    assert [code(v) for v in blocks.assigned] == ["[]"]
    assert [code(v) for v in blocks.added] == ["nn.Linear(d, d)", "nn.ReLU()", "nn.Tanh()"]
    assert not blocks.handed and not blocks.other
    heads = modules.attribute_uses(net, "heads")
    assert heads.other and not heads.handed  # returned by the derived class
    sliced = modules.attribute_uses(net, "sliced")
    assert sliced.other and not sliced.handed
    handed = modules.attribute_uses(net, "handed")
    assert handed.handed


def test_registering_by_hand_hands_every_attribute():
    module, modules = modules_of("""\
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = [nn.Linear(2, 2), nn.Linear(2, 2)]
                for i, block in enumerate(self.blocks):
                    self.add_module(str(i), block)
        """)
    assert modules.attribute_uses(class_named(module, "Net"), "blocks").handed


HELD = """\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(2, 2)
        self.blocks = nn.ModuleList([nn.Linear(2, 2)])
        self.later = None

    def forward(self, x):
        PLACE

def train(model):
    net = Net().cuda()
    net = DDP(net)
    other = load()
    PLACE
"""


def places(module: cst.Module) -> list[list[cst.CSTNode]]:
    """The enclosing functions and classes (innermost first) of each name ``PLACE`` in a module."""
    found: list[list[cst.CSTNode]] = []
    stack: list[cst.CSTNode] = []

    def on_visit(node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.ClassDef, cst.FunctionDef)):
            stack.append(node)
        if isinstance(node, cst.Name) and node.value == "PLACE":
            found.append(stack[::-1])
        return True

    def on_leave(node: cst.CSTNode) -> None:
        if stack and stack[-1] is node:
            stack.pop()

    walk(module, on_visit, on_leave)
    return found


def place(source: str, which: int) -> tuple[Modules, list[cst.CSTNode]]:
    """The modules and the enclosing scopes of the ``which``-th ``PLACE``."""
    module, modules = modules_of(source)
    return modules, places(module)[which]


def test_values_at_a_place():
    module = cst.parse_module(textwrap.dedent(HELD))
    bindings = Bindings(module)
    scopes = places(module)[1]  # in train(model)
    code = cst.Module([]).code_for_node
    assert [code(v) for v in bindings.values_at("net", scopes)[0]] == ["Net().cuda()", "DDP(net)"]
    assert bindings.values_at("model", scopes) == ([None], True)  # the parameter binds it, with no value
    assert bindings.values_at("nn", scopes) == ([], False)


@pytest.mark.parametrize("which, code, expected", [
    (0, "self.enc", True),
    (0, "self.blocks[0]", True),
    (0, "self.later", False),
    (0, "self", False),
    (1, "net", True),
    (1, "model", False),  # a parameter
    (1, "other", False),
])
def test_is_module_here(which, code, expected):
    modules, scopes = place(HELD, which)
    assert modules.is_module_here(expression(code), scopes) is expected


STATE = """\
import torch.nn as nn

class Pool(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k
        self.avg = nn.AvgPool1d(k)

class Decomp(Pool):
    def __init__(self, k):
        super().__init__(k)
        self.inner = Pool(k)

class WithBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("w", None)

class WithDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)

class Built(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = make_activation()

class Linear2(nn.Linear):
    pass
"""


@pytest.mark.parametrize("layer, expected", [
    ("ReLU", True), ("MSELoss", True), ("Linear", False), ("Dropout", False), ("Pool", True), ("Decomp", True),
    ("WithBuffer", False), ("WithDropout", False), ("Built", False), ("Linear2", False), ("Missing", False),
])
def test_stateless_layers(layer, expected):
    _, modules = modules_of(STATE)
    assert modules.stateless(layer) is expected


def test_a_local_of_the_same_name_does_not_hide_a_class():
    _, modules = modules_of(HEADER + "\ndef f():\n    Block = 1\n")
    assert modules.constructed_class(expression("Block()")) == "Block"
    _, modules = modules_of(HEADER + "\nBlock = wrap(Block)\n")
    assert modules.constructed_class(expression("Block()")) is None
