"""The semantic model's answers for the loop-correctness rules: which assignment reaches a use
(analysis/flow.py), what a loss is given (analysis/losses.py), which calls step an optimizer or
clear gradients and which loops accumulate (analysis/steps.py)."""

from __future__ import annotations

import ast
import textwrap

import libcst as cst
import pytest

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.flow import (argument_for, ast_reaching_assignments, function_of_call, path_to,
                                     reaching_assignments)
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.conditions import is_last_iteration_test
from torchlint.analysis.losses import Losses, first_input
from torchlint.analysis.steps import accumulation, clears_gradients, optimizer_like, stepped_optimizer
from torchlint.analysis.walk import walk


def parse(source: str) -> tuple[cst.Module, Bindings]:
    module = cst.parse_module(textwrap.dedent(source))
    return module, Bindings(module)


def calls(tree: cst.CSTNode, code: str) -> list[cst.Call]:
    """The calls in a tree whose code is ``code``."""
    module = cst.Module([])
    found = []
    walk(tree, lambda node: found.append(node) if isinstance(node, cst.Call)
         and module.code_for_node(node) == code else None)
    return found


def only_call(module: cst.Module, code: str) -> cst.Call:
    found = calls(module, code)
    assert len(found) == 1, code
    return found[0]


def loops(module: cst.Module) -> list[cst.CSTNode]:
    found = []
    walk(module, lambda node: found.append(node) if isinstance(node, (cst.For, cst.While)) else None)
    return found


# --- flow -------------------------------------------------------------------------------------------

def reaching(source: str, use: str, name: str) -> list[str] | None:
    module, _ = parse(source)
    chain = path_to(module, only_call(module, use))
    found = reaching_assignments(name, chain)
    return None if found is None else sorted(module.code_for_node(a.value) for a in found)


def test_the_last_assignment_before_the_use_reaches_it():
    assert reaching("""
        x = a()
        x = b()
        use(x)
        x = c()
    """, "use(x)", "x") == ["b()"]


def test_branches_may_or_may_not_run():
    source = """
        x = a()
        if flag:
            x = b()
        use(x)
    """
    assert reaching(source, "use(x)", "x") == ["a()", "b()"]
    assert reaching("""
        if flag:
            x = b()
        else:
            x = c()
        use(x)
    """, "use(x)", "x") == ["b()", "c()"]


def test_with_blocks_always_run_and_unknowns_give_none():
    assert reaching("""
        with ctx:
            x = a()
        use(x)
    """, "use(x)", "x") == ["a()"]
    assert reaching("""
        def f(x):
            use(x)
    """, "use(x)", "x") is None
    assert reaching("""
        x = a()
        x += 1
        use(x)
    """, "use(x)", "x") is None
    assert reaching("use(x)\n", "use(x)", "x") is None


def test_unpacking_names_the_element():
    module, _ = parse("""
        first, second = pair()
        use(second)
    """)
    found = reaching_assignments("second", path_to(module, only_call(module, "use(second)")))
    assert [(module.code_for_node(a.value), a.element) for a in found] == [("pair()", 1)]


TWIN_SHAPES = [
    ("x = a()\nx = b()\nuse(x)\nx = c()\n", True),
    ("x = a()\nif flag:\n    x = b()\nuse(x)\n", True),
    ("if flag:\n    x = b()\nelse:\n    x = c()\nuse(x)\n", True),
    ("if f:\n    x = a()\nelif g:\n    x = b()\nelse:\n    if h:\n        x = c()\n    else:\n        x = d()\n"
     "use(x)\n", True),
    ("if f:\n    x = a()\nelif g:\n    x = b()\nuse(x)\n", True),
    ("x = a()\nfor i in r:\n    x = b()\nelse:\n    x = c()\nuse(x)\n", True),
    ("x = a()\nfor x in r:\n    pass\nuse(x)\n", True),
    ("x = a()\nwhile c:\n    use(x)\n    x = b()\n", True),
    ("x = a()\ntry:\n    x = b()\nexcept E as x:\n    x = c()\nfinally:\n    pass\nuse(x)\n", True),
    ("with ctx:\n    x = a()\nuse(x)\n", True),
    ("x = a()\nwith ctx as (x, y):\n    pass\nuse(x)\n", True),
    ("first, x = pair()\nuse(x)\n", True),
    ("x: int = a()\nx += 1\nuse(x)\n", True),
    ("def f(x):\n    x = a()\n    use(x)\n", True),
    ("def f(x):\n    use(x)\n", True),
    ("x = a()\nclass C:\n    x = b()\n    use(x)\n", True),
    ("x = a()\ndef x():\n    pass\nuse(x)\n", True),
    ("x = a()\nf = lambda: use(x)\n", True),
    ("x = a()\nimport y\nuse(x)\n", True),
    # shapes the twin does not model: it answers every assignment of the scope
    ("x = a(); x = b()\nuse(x)\n", False),
    ("x = a()\nif c: x = b()\nuse(x)\n", False),
    ("x = a()\nif (x := b()):\n    pass\nuse(x)\n", False),
    ("x = a()\nimport x\nuse(x)\n", False),
    ("x = a()\nmatch y:\n    case [x]:\n        pass\nuse(x)\n", False),
]


@pytest.mark.parametrize("source, exact", TWIN_SHAPES)
def test_the_precheck_twin_finds_the_same_reaching_assignments(source, exact):
    tree = ast.parse(source)
    use = next(node for node in ast.walk(tree) if isinstance(node, ast.Call) and ast.unparse(node) == "use(x)")
    found = ast_reaching_assignments(SyntaxIndex(tree, source), use.args[0])
    assert found.exact == exact
    twin = None if found.assignments is None else sorted(ast.unparse(value) for value, _ in found.assignments)
    libcst = reaching(source, "use(x)", "x")
    if exact:
        assert twin == libcst
    else:
        assert libcst is None or set(libcst) <= set(twin)


def test_calls_reach_the_files_own_functions_and_their_arguments():
    module, bindings = parse("""
        class Solver:
            def validate(self, net, loader):
                pass
        def helper(model):
            pass
        solver.validate(model, loader=val)
        helper(m)
        print(m)
    """)
    validate = only_call(module, "solver.validate(model, loader=val)")
    function = function_of_call(validate, bindings)
    assert function is not None and function.name.value == "validate"
    assert module.code_for_node(argument_for(validate, function, "net")) == "model"
    assert module.code_for_node(argument_for(validate, function, "loader")) == "val"
    assert function_of_call(only_call(module, "print(m)"), bindings) is None


# --- losses -----------------------------------------------------------------------------------------

LOSSES = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.out = nn.Sequential(nn.Linear(4, 3), nn.Softmax(dim=1))
            self.fc = nn.Linear(4, 1)
        def forward(self, x):
            return self.fc(x), self.out(x)

    head = Head().cuda()
    criterion = nn.CrossEntropyLoss()
    either = nn.CrossEntropyLoss() if flag else nn.NLLLoss()
    bce = nn.BCEWithLogitsLoss().to(device)

    def step(x, y):
        score, probs = head(x)
        a = criterion(probs, y)
        b = F.cross_entropy(torch.log_softmax(x, 1), y)
        c = bce(score.squeeze(1), y)
        d = either(x, y)
        e = F.binary_cross_entropy(torch.sigmoid(score), y)
"""


@pytest.fixture(scope="module")
def losses_module():
    module, bindings = parse(LOSSES)
    return module, Losses(module, bindings)


@pytest.mark.parametrize("call, kind", [
    ("criterion(probs, y)", "cross_entropy"),
    ("F.cross_entropy(torch.log_softmax(x, 1), y)", "cross_entropy"),
    ("bce(score.squeeze(1), y)", "bce_with_logits"),
    ("F.binary_cross_entropy(torch.sigmoid(score), y)", "bce"),
    ("either(x, y)", None),  # CrossEntropyLoss or NLLLoss: not known
    ("head(x)", None),
])
def test_which_loss_a_call_computes(losses_module, call, kind):
    module, losses = losses_module
    assert losses.kind(only_call(module, call)) == kind


@pytest.mark.parametrize("call, kind, node, through", [
    ("criterion(probs, y)", "softmax", "nn.Softmax(dim=1)", "head"),  # the second element of the forward's tuple
    ("F.cross_entropy(torch.log_softmax(x, 1), y)", "log_softmax", "torch.log_softmax(x, 1)", None),
    ("bce(score.squeeze(1), y)", "logits", "nn.Linear(4, 1)", "head"),  # through a shape-only method
    ("F.binary_cross_entropy(torch.sigmoid(score), y)", "sigmoid", "torch.sigmoid(score)", None),
    ("either(x, y)", None, None, None),  # a parameter: unknown
])
def test_what_reaches_the_loss(losses_module, call, kind, node, through):
    module, losses = losses_module
    loss = only_call(module, call)
    found = losses.activation(first_input(loss), path_to(module, loss))
    if kind is None:
        assert found is None
        return
    assert (found.kind, module.code_for_node(found.node), found.through) == (kind, node, through)


# --- steps ------------------------------------------------------------------------------------------

STEPS = """
    import torch
    solver = torch.optim.Adam(params)
    optimizer_d = make()
    lr_scheduler = make()
    solver.step()
    optimizer_d.step()
    scaler.step(opt_g)
    lr_scheduler.step()
    env.step(action)
"""


@pytest.mark.parametrize("call, optimizer", [
    ("solver.step()", "solver"),  # built by torch.optim, whatever its name
    ("optimizer_d.step()", "optimizer_d"),
    ("scaler.step(opt_g)", "opt_g"),
    ("lr_scheduler.step()", None),
    ("env.step(action)", None),
])
def test_which_calls_step_an_optimizer(call, optimizer):
    module, bindings = parse(STEPS)
    assert stepped_optimizer(only_call(module, call), bindings) == optimizer


def test_optimizer_like_names():
    _, bindings = parse("x = 1\n")
    names = {"optimizer": True, "optD": True, "g_opt": True, "optim_g": True, "options": False, "adopt": False,
             "optimizer_scheduler": False}
    for name, expected in names.items():
        assert (optimizer_like(cst.parse_expression(name), bindings) is not None) is expected, name


def test_clearing_gradients_follows_the_files_helpers():
    module, bindings = parse("""
        class Solver:
            def reset_grad(self):
                self.opt.zero_grad()
            def nothing(self):
                pass
        for x in a:
            self.reset_grad()
        for x in b:
            self.nothing()
        for x in c:
            for p in params:
                p.grad = None
        for x in d:
            utils.clear_grads(model)
    """)
    first, second, third, _, fourth = loops(module)
    assert clears_gradients(first, bindings)
    assert not clears_gradients(second, bindings)
    assert clears_gradients(third, bindings)
    assert clears_gradients(fourth, bindings)


def test_accumulation_and_its_count():
    module, bindings = parse("""
        for i, b in enumerate(loader):
            loss(b).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
        for i, b in enumerate(loader):
            d_loss.backward()
            opt_d.step()
            if i % n_critic == 0:
                g_loss.backward()
                opt_g.step()
        for it in range(10):
            for micro in range(k):
                loss().backward()
            optimizer.step()
    """)
    periodic, critic, outer, micro = loops(module)
    found = accumulation(periodic, bindings)
    assert found is not None and module.code_for_node(found.count) == "accum"
    assert accumulation(critic, bindings) is None  # the generator's backward is under its step's test
    found = accumulation(outer, bindings)
    assert found is not None and module.code_for_node(found.count) == "k"
    assert accumulation(micro, bindings) is None


def test_an_inner_loop_cleared_before_the_step_does_not_accumulate():
    module, bindings = parse("""
        for x, y in loader:
            for _ in range(attack_iters):
                loss(x + delta).backward()
                delta.grad.zero_()
            opt.zero_grad()
            loss(x + delta).backward()
            opt.step()
        for x, y in loader:
            for _ in range(attack_iters):
                loss(x + delta).backward()
            opt.zero_grad()
            loss(x + delta).backward()
            opt.step()
        for x, y in loader:
            opt.zero_grad()
            for micro in range(k):
                loss(micro).backward()
            opt.step()
    """)
    cleared_inside, cleared_after, accumulated = loops(module)[::2]
    assert accumulation(cleared_inside, bindings) is None
    assert accumulation(cleared_after, bindings) is None
    found = accumulation(accumulated, bindings)  # cleared before the inner loop, not between it and the step
    assert found is not None and module.code_for_node(found.count) == "k"


@pytest.mark.parametrize("test, last", [
    ("i == len(steps) - 1", True),
    ("i + 1 == len(loader)", True),
    ("len(loader) - 1 <= i", True),
    ("i >= len(batches) - 1", True),
    ("i % 100 == 0", False),  # periodic, not the last
    ("i == 0", False),  # the first
    ("j == len(loader) - 1", False),  # not the loop's index
    ("f(i) == len(loader)", False),
])
def test_last_iteration_tests(test, last):
    module, _ = parse(f"""
        for i, (x, y) in enumerate(loader):
            if {test}:
                pass
    """)
    loop = loops(module)[0]
    assert is_last_iteration_test(loop.body.body[0].test, loop) is last
