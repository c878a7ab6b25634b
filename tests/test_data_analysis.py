"""The semantic model's answers about data loading (analysis/data.py), the literal a name always
holds (Bindings.literal) and whether a name means one thing (Bindings.ambiguous), which the
DataLoader, torch.load and checkpoint rules read."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.data import (batch_parts, handed_to, is_dataloader_call, known_value, loader_calls,
                                     pins_memory, without_workers)
from torchlint.analysis.syntax import statements
from torchlint.analysis.walk import walk


def parse(source: str) -> tuple[cst.Module, Bindings]:
    module = cst.parse_module(textwrap.dedent(source))
    return module, Bindings(module)


@pytest.mark.parametrize("source, name, expected", [
    ("N = 0\n", "N", (True, 0)),
    ("N = 0\nif debug:\n    N = 0\n", "N", (True, 0)),
    ("N = 0\nif fast:\n    N = 4\n", "N", (False, None)),  # two different values
    ("N = 0\nN += 1\n", "N", (False, None)),  # changed in place
    ("for N in range(3):\n    pass\n", "N", (False, None)),  # a loop target
    ("from config import N\n", "N", (False, None)),  # imported: anything
    ("N = 0\nfrom config import N\n", "N", (False, None)),
    ("N = compute()\n", "N", (False, None)),  # not a literal
    ("def N():\n    return 0\nN = 0\n", "N", (False, None)),  # also a function
    ("args.n = 0\n", "args.n", (False, None)),  # attributes are set from anywhere
    ("x = 1\n", "N", (False, None)),  # never bound
])
def test_the_literal_a_name_always_holds(source, name, expected):
    _, bindings = parse(source)
    assert bindings.literal(name) == expected


def loader(source: str) -> tuple[cst.Call, Bindings]:
    module, bindings = parse(source)
    found = []
    walk(module, lambda node: found.append(node) if is_dataloader_call(node, bindings) else None)
    assert len(found) == 1
    return found[0], bindings


PRELUDE = "from torch.utils.data import DataLoader\n"


@pytest.mark.parametrize("call, expected", [
    ("DataLoader(ds, batch_size=8)", True),  # absent: the default is 0
    ("DataLoader(ds, num_workers=0)", True),
    ("DataLoader(ds, 8, True, None, None, 0)", True),  # sixth by position
    ("DataLoader(ds, num_workers=WORKERS)", True),  # WORKERS = 0, below
    ("DataLoader(ds, num_workers=4)", False),
    ("DataLoader(ds, num_workers=args.workers)", False),
    ("DataLoader(ds, num_workers=0 if debug else 4)", False),
    ("DataLoader(ds, **loader_kwargs)", False),  # may carry num_workers
    ("DataLoader(*loader_args)", False),
    ("DataLoader(ds, num_workers=False)", False),  # not the int 0 as written
])
def test_which_loaders_run_without_workers(call, expected):
    node, bindings = loader(PRELUDE + "WORKERS = 0\n" + f"loader = {call}\n")
    assert without_workers(node, bindings) is expected


def test_a_parameter_hides_the_module_level_name():
    node, bindings = loader(PRELUDE + "WORKERS = 0\ndef make(ds, WORKERS):\n    return DataLoader(ds, num_workers=WORKERS)\n")
    assert without_workers(node, bindings) is True  # what the file's bindings alone say
    assert without_workers(node, bindings, parameters={"ds", "WORKERS"}) is False
    assert known_value(cst.Name("WORKERS"), bindings, {"WORKERS"}) == (False, None)
    assert known_value(cst.Integer("2"), bindings, {"WORKERS"}) == (True, 2)


@pytest.mark.parametrize("source, expected", [
    ("from torch import load\n", False),
    ("import torch\nimport torch.nn\n", False),  # both bind `torch` to torch
    ("try:\n    from safetensors.torch import load_file as load\nexcept ImportError:\n    from torch import load\n", True),
    ("from torch import load\nload = other\n", True),
])
def test_a_name_bound_to_more_than_one_thing_is_ambiguous(source, expected):
    _, bindings = parse(source)
    name = "torch.load" if "import torch\n" in source else "load"
    assert bindings.ambiguous(cst.parse_expression(name)) is expected


# --- which loader a loop iterates, whether it pins, what holds its batch (TL206) ---------------------

def loops_of(source: str) -> tuple[cst.Module, Bindings, list[cst.For]]:
    module = cst.parse_module(source)
    return module, Bindings(module), [s for s in statements(module.body) if isinstance(s, cst.For)]


def test_loader_calls_through_names_and_wrappers():
    module, bindings, (loop,) = loops_of("from torch.utils.data import DataLoader\n"
                                         "loader = DataLoader(ds, num_workers=2)\n"
                                         "bar = tqdm(loader)\n"
                                         "for i, b in enumerate(bar):\n    pass\n")
    [call] = loader_calls(loop.iter, bindings)
    assert module.code_for_node(call) == "DataLoader(ds, num_workers=2)"
    assert pins_memory(call) is False


def test_unknown_loaders():
    _, bindings, loops = loops_of("from torch.utils.data import DataLoader\n"
                                  "def f(loader):\n    for b in loader:\n        pass\n"
                                  "for b in make_loader():\n    pass\n"
                                  "x = DataLoader(ds)\nx = other\nfor b in x:\n    pass\n")
    assert [loader_calls(loop.iter, bindings) for loop in loops] == [None, None, None]


def test_pins_memory():
    def pins(arguments: str):
        module = cst.parse_module(f"DataLoader({arguments})\n")
        return pins_memory(module.body[0].body[0].value)

    assert [pins("ds"), pins("ds, pin_memory=False"), pins("ds, pin_memory=True"), pins("ds, 8, True, None, None, 0, "
            "None, True"), pins("ds, pin_memory=args.pin"), pins("ds, **kw")] == [False, False, True, True, None, None]


def test_batch_parts_are_taken_out_not_computed():
    _, _, (loop,) = loops_of("for batch in loader:\n"
                             "    x, y = batch\n"
                             "    img = batch['image']\n"
                             "    z = batch.float()\n"
                             "    y = y.long()\n"
                             "    w = (x, img)\n"
                             "    pass\n")
    assert batch_parts(loop, loop.body.body[-1]) == {"batch", "x", "img", "w"}


@pytest.mark.parametrize("source, expected", [
    ("def train(net, data):\n    pass\ntrain(model, loader)\n", [("train", "data")]),
    ("def train(net, data):\n    pass\ntrain(model, data=loader)\n", [("train", "data")]),  # by keyword
    ("def train(self, data):\n    pass\nobj.train(loader)\n", []),  # a method call: which class is unknown
    ("def train(net, data):\n    data = list(data)\ntrain(model, loader)\n", []),  # rebound in the function
    ("def train(net, data):\n    pass\ntrain(model, loader.dataset)\n", []),  # a part, not the loader
    ("def train(net, data):\n    pass\ndef train(net, data):\n    pass\ntrain(model, loader)\n", []),  # two
    ("train(model, loader)\n", []),  # not defined in the file
])
def test_the_functions_a_value_is_handed_to(source, expected):
    module, bindings = parse(source)
    assert [(f.name.value, p) for f, p in handed_to(module, bindings, "loader")] == expected
