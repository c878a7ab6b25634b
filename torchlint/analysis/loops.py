"""Loops and training steps: which loops train (call ``backward``), which evaluate a model, what
runs once per step, and whether gradients are on at a place.

"The training loop" is a ``for``/``while`` loop whose body calls ``.backward(`` (or
``accelerator.backward(loss)``, ``self.manual_backward(loss)``, ``torch.autograd.backward``), or a
Lightning ``training_step``. Questions about the current place read the live ancestor stack of
the walk (``Loops(..., ancestors=ctx.ancestors)``)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from functools import cache, cached_property
from typing import TYPE_CHECKING

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.index import AST_LOOPS, SyntaxIndex
from torchlint.analysis.syntax import (ast_contains, ast_dotted_name, ast_is_literal, ast_root_names, dotted_name,
                                       is_literal, method_call, root_names, scope_types)
from torchlint.analysis.walk import Visitor, flat, visit
from torchlint.lazy import libcst as cst

if TYPE_CHECKING:
    from torchlint.analysis.calls import Calls

AST_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
BACKWARD_FUNCTIONS = frozenset({"torch.autograd.backward"})
# Methods that backpropagate their first argument: Accelerate, Fabric, Lightning.
BACKWARD_METHODS = frozenset({"manual_backward"})
# Objects whose `.backward(loss)` backpropagates its argument, not themselves (Accelerate's
# Accelerator, Fabric, DeepSpeed's engine, Lightning's strategy): they hold no graph.
BACKWARD_OWNER = re.compile(r"(^|_)(accelerator|fabric|engine|strategy|trainer|booster|deepspeed|runner|self)$",
                            re.IGNORECASE)
# The names of the methods and functions that backpropagate, as a precheck matches them.
BACKWARD_CALLEES = frozenset({"backward", "manual_backward"})
NO_GRAD_CONTEXTS = frozenset({
    "torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.inference_mode",
    "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode",
})
GRAD_SWITCHES = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled",
                           "torch.autograd.grad_mode.set_grad_enabled"})
EVAL_FUNCTION = re.compile(
    r"(^|_)(val|valid|validate|validation|eval|evaluate|evaluation|test|testing|predict|inference|infer|"
    r"extract|extraction|generate|sample|sampling)(_|$)")
# The last part of a name that holds a model (``model``, ``self.net``, ``text_encoder``) or a
# loader of batches (``train_loader``, ``val_dataloader``, ``batches``).
MODEL_NAME = re.compile(r"(^|_)(model|net|network|encoder|decoder|backbone|classifier|generator|discriminator|critic|"
                        r"teacher|student)$", re.IGNORECASE)
# Functions named for what they do to a model rather than a model: `build_model(cfg)`,
# `train_model(...)`, `_extract_info_one_model(...)` end like a model's name.
MODEL_BUILDER = re.compile(r"^_*(build|create|get|make|load|init|setup|prepare|wrap|define|construct|new|save|"
                           r"train|eval|evaluate|test|run|compute|extract|export|convert|update|apply|print|log|"
                           r"set|copy|clone|compare|check|is|has|to|from|num|count|unwrap)_", re.IGNORECASE)
LOADER_NAME = re.compile(r"(^|_)(loader|dataloader|dl|batches|dataset|ds)$", re.IGNORECASE)
# Wrappers a loop may iterate a loader through: `enumerate(loader)`, `tqdm(loader)`.
ITERATION_WRAPPERS = frozenset({"enumerate", "iter", "tqdm", "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm",
                                "rich.progress.track"})


@cache
def loop_types() -> tuple[type, ...]:
    """LibCST's loop statements (built on first use: see torchlint/lazy.py)."""
    return (cst.For, cst.While)


# --- backward ----------------------------------------------------------------------------------------

class _BackwardFinder(Visitor):
    """Collects what a subtree backpropagates: ``loss.backward()`` -> {"loss"}."""

    def __init__(self, bindings: Bindings):
        self.bindings = bindings
        self.names: set[str] = set()
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if type(func) is cst.Attribute and func.attr.value == "backward":
            self.found = True
            target = func.value
            # scaler.scale(loss).backward(): the scaled value is the loss
            if method_call(target, "scale") and target.args:
                target = target.args[0].value
            # accelerator.backward(loss) / fabric.backward(loss): the argument is the loss
            passed = node.args and node.args[0].keyword is None
            owner = dotted_name(target) if passed else None
            if owner is None or not BACKWARD_OWNER.search(owner.rsplit(".", 1)[-1]):
                self.names |= root_names(target)
            if passed:
                self.names |= root_names(node.args[0].value)
        elif (type(func) is cst.Attribute and func.attr.value in BACKWARD_METHODS) or \
                self.bindings.qualified_name(func) in BACKWARD_FUNCTIONS:
            self.found = True
            if node.args:
                self.names |= root_names(node.args[0].value)

    # Functions defined inside a loop do not run as part of it.
    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def ast_backwards_by_loop(index: SyntaxIndex) -> dict[int, list[ast.Call]]:
    """Each loop that holds a call of backward (by its id) -> those calls."""
    def compute() -> dict[int, list[ast.Call]]:
        found: dict[int, list[ast.Call]] = {}
        for call in index.calls(*BACKWARD_CALLEES):
            for loop in index.place(call).loops:
                found.setdefault(id(loop), []).append(call)
        return found
    return index.memo("backwards_by_loop", compute)


def ast_training_loop_lines(index: SyntaxIndex) -> bytearray:
    """Lines of the loops that hold a call of ``backward`` (``loss.backward()``,
    ``accelerator.backward(loss)``, ``torch.autograd.backward(loss)``, ``self.manual_backward(loss)``)."""
    def compute() -> bytearray:
        holding = {id(loop): loop for call in index.calls(*BACKWARD_CALLEES) for loop in index.place(call).loops}
        return index.lines(holding.values())
    return index.memo("training_loop_lines", compute)


def ast_backpropagated_names(index: SyntaxIndex) -> frozenset[str]:
    """The precheck twin of ``Loops.backpropagated_names``, for the whole file: every name that
    some call of ``backward`` may backpropagate (what ``_BackwardFinder`` collects, and more: the
    receiver and every argument of each such call, the scaled value of ``scaler.scale(...)``)."""
    def compute() -> frozenset[str]:
        names: set[str] = set()
        for call in index.calls(*BACKWARD_CALLEES):
            parts = [*call.args, *(keyword.value for keyword in call.keywords)]
            if isinstance(call.func, ast.Attribute):
                target = call.func.value
                parts.append(target)
                if isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute) \
                        and target.func.attr == "scale":
                    parts += [*target.args, *(keyword.value for keyword in target.keywords)]
            for part in parts:
                names |= ast_root_names(part.value if isinstance(part, ast.Starred) else part)
        return frozenset(names)
    return index.memo("backpropagated_names", compute)


def ast_loop_lines(index: SyntaxIndex) -> bytearray:
    """Lines inside any loop."""
    return index.memo("loop_lines", lambda: index.lines(index.nodes(*AST_LOOPS)))


# --- grad mode ---------------------------------------------------------------------------------------

def with_item_disables_grad(item: cst.WithItem, bindings: Bindings) -> bool:
    expr = item.item
    func = expr.func if type(expr) is cst.Call else expr
    name = bindings.qualified_name(func)
    if name in NO_GRAD_CONTEXTS:
        return True
    if name in ("torch.set_grad_enabled", "torch.autograd.set_grad_enabled") and type(expr) is cst.Call:
        return bool(expr.args) and is_literal(expr.args[0].value, False)
    return False


def decorator_disables_grad(decorator: cst.Decorator, bindings: Bindings) -> bool:
    expr = decorator.decorator
    func = expr.func if type(expr) is cst.Call else expr
    return bindings.qualified_name(func) in NO_GRAD_CONTEXTS or grad_switch_off(expr, bindings) is True


def ast_surely_grad_disabled(index: SyntaxIndex, node: ast.AST) -> bool:
    """Is ``Loops.grad_disabled`` surely True at the node: inside a ``with`` whose item turns grad
    off, or in the body of a function decorated so, by a name that only ``torch.no_grad`` (and the
    like) can be? Statements that switch grad off for the rest of a block are not looked at: a
    precheck may miss a disabled place, not invent one."""
    def disables(expr: ast.AST, item: bool) -> bool:
        name = index.surely_qualified_name(expr.func if type(expr) is ast.Call else expr)
        if name in NO_GRAD_CONTEXTS:
            return True
        return item and name in ("torch.set_grad_enabled", "torch.autograd.set_grad_enabled") \
            and type(expr) is ast.Call and bool(expr.args) and ast_is_literal(expr.args[0], False)
    def regions() -> dict[int, list[ast.AST]]:  # line -> the withs and functions over it that turn grad off
        found = [with_ for with_ in index.nodes(ast.With, ast.AsyncWith)
                 if any(disables(item.context_expr, True) for item in with_.items)]
        found += [f for f in index.nodes(*AST_FUNCTIONS) if any(disables(d, False) for d in f.decorator_list)]
        by_line: dict[int, list[ast.AST]] = {}
        for region, line in ((r, line) for r in found for line in range(r.lineno, r.end_lineno + 1)):
            by_line.setdefault(line, []).append(region)
        return by_line
    return any(ast_contains(region, node) for region in index.memo("grad-off regions", regions).get(node.lineno, ()))


def grad_switch_off(node: cst.CSTNode, bindings: Bindings) -> bool | None:
    """For a ``torch.set_grad_enabled(x)`` call: True when x is False, False when it is True, None
    for anything else."""
    if type(node) is not cst.Call or bindings.qualified_name(node.func) not in GRAD_SWITCHES:
        return None
    if len(node.args) != 1 or node.args[0].star:
        return None
    value = node.args[0].value
    return True if is_literal(value, False) else (False if is_literal(value, True) else None)


def is_eval_call(node: cst.CSTNode) -> bool:
    """``model.eval()`` (no arguments: ``eval(expr)`` is the builtin)."""
    return method_call(node, "eval") is not None and not node.args


class _ModeCalls(Visitor):
    """``model.eval()`` / ``model.train(False)`` -> "eval", ``model.train()`` -> "train", in order."""

    def __init__(self) -> None:
        self.modes: list[str] = []

    def visit_Call(self, node: cst.Call) -> None:
        if is_eval_call(node):
            self.modes.append("eval")
        elif method_call(node, "train") and not any(a.keyword and a.keyword.value != "mode" for a in node.args):
            self.modes.append("eval" if node.args and is_literal(node.args[0].value, False) else "train")

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False


def last_mode_call(statements: Sequence[cst.CSTNode]) -> str | None:
    """The mode the last ``.eval()``/``.train()`` call among statements sets, if any."""
    finder = _ModeCalls()
    for statement in statements:
        visit(statement, finder)
    return finder.modes[-1] if finder.modes else None


# --- what runs how often -------------------------------------------------------------------------------

class _ModelCalls(Visitor):
    def __init__(self) -> None:
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func.value if type(node.func) is cst.Attribute and node.func.attr.value == "forward" \
            else node.func
        name = dotted_name(func)
        if name is not None and MODEL_NAME.search(name.rsplit(".", 1)[-1]):
            self.found = True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False


def calls_model(node: cst.CSTNode) -> bool:
    """Does the subtree call something named like a model (``model(x)``, ``self.net(x)``)?"""
    finder = _ModelCalls()
    visit(node, finder)
    return finder.found


def ast_calls_model(node: ast.AST) -> bool:
    """The precheck twin of ``calls_model`` on CPython's tree (nested functions are entered: a
    necessary condition may say yes more often)."""
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func.value if isinstance(call.func, ast.Attribute) and call.func.attr == "forward" \
                else call.func
            name = ast_dotted_name(func)
            if name is not None and MODEL_NAME.search(name.rsplit(".", 1)[-1]):
                return True
    return False


def _statements_outside_loops(block: cst.BaseSuite) -> list[cst.CSTNode]:
    """The statements of a block and of its nested blocks, not entering nested loops (or
    functions): what one iteration of the loop runs itself."""
    found: list[cst.CSTNode] = []
    for statement in getattr(block, "body", ()):
        if isinstance(statement, (*loop_types(), *scope_types())):
            continue
        if type(statement) is cst.SimpleStatementLine:
            found.append(statement)
            continue
        if type(statement) in (cst.If, cst.With, cst.Try) or hasattr(statement, "body"):
            test = getattr(statement, "test", None)
            if test is not None:
                found.append(test)
            for field in ("body", "orelse", "finalbody"):
                part = getattr(statement, field, None)
                if type(part) in (cst.Else, cst.Finally):
                    part = part.body
                if type(part) is cst.If:
                    found += _statements_outside_loops(cst.IndentedBlock(body=[part]))
                elif part is not None:
                    found += _statements_outside_loops(part)
            for handler in getattr(statement, "handlers", ()):
                found += _statements_outside_loops(handler.body)
    return found


def _calls_in(node: cst.CSTNode) -> list[cst.Call]:
    """The calls a subtree makes when it runs (functions defined in it left out)."""
    found: list[cst.Call] = []

    class CallsIn(Visitor):
        def visit_Call(self, call: cst.Call) -> None:
            found.append(call)

        def visit_FunctionDef(self, function: cst.FunctionDef) -> bool:
            return False

        def visit_Lambda(self, function: cst.Lambda) -> bool:
            return False

    visit(node, CallsIn())
    return found


def iterated_value(loop: cst.For, bindings: Bindings) -> cst.BaseExpression:
    """What a for loop iterates, inside ``enumerate``/``tqdm``/``iter`` wrappers:
    ``for i, (x, y) in enumerate(tqdm(train_loader))`` -> ``train_loader``."""
    return unwrapped_iterable(loop.iter, bindings)


def unwrapped_iterable(expr: cst.BaseExpression, bindings: Bindings) -> cst.BaseExpression:
    """An iterable inside ``enumerate``/``tqdm``/``iter`` wrappers: ``tqdm(loader)`` -> ``loader``."""
    while type(expr) is cst.Call and expr.args and expr.args[0].keyword is None and not expr.args[0].star \
            and (dotted_name(expr.func) in ITERATION_WRAPPERS or bindings.qualified_name(expr.func) in ITERATION_WRAPPERS):
        expr = expr.args[0].value
    return expr


def iterated_name(loop: cst.For, bindings: Bindings) -> str | None:
    """The dotted name a for loop iterates (see ``iterated_value``), if it is one."""
    return dotted_name(iterated_value(loop, bindings))


# --- the loops of a file, and around the current place ---------------------------------------------------

class Loops:
    """The file's training and evaluation loops, and the loops around the current place of the walk."""

    def __init__(self, module: cst.Module, bindings: Bindings, ancestors: list[cst.CSTNode],
                 calls: Callable[[], Calls] | None = None, source: str | None = None):
        self.module = module
        # can a statement switch grad off (`torch.set_grad_enabled(False)`)? Not without the word
        self._may_switch_grad = source is None or "set_grad_enabled" in source
        self.bindings = bindings
        self.ancestors = ancestors  # the walk's live stack: the module ... the current node
        self._calls = calls  # what a call does (summaries), built when first asked
        self._backpropagated: dict[int, frozenset[str] | None] = {}
        self._nested: dict[int, list[cst.CSTNode]] = {}
        self._itself: dict[int, bool] = {}  # loop -> does its own body call backward
        self._autograd: dict[tuple[int, bool], bool] = {}

    def runs_backward(self, node: cst.CSTNode) -> bool:
        """Does a subtree backpropagate, itself or through a function it calls (``train_step()``
        that runs ``loss.backward()``)? Calls are resolved from the current place's scope."""
        return self.backpropagated_names(node) is not None or self._callees_use_autograd(node, backward_only=True)

    def uses_autograd(self, node: cst.CSTNode) -> bool:
        """Does a function the subtree calls use autograd (a backward pass, ``torch.autograd.grad``,
        ``requires_grad_()``, ``enable_grad``)?"""
        return self._callees_use_autograd(node, backward_only=False)

    def _callees_use_autograd(self, node: cst.CSTNode, backward_only: bool) -> bool:
        key = (id(node), backward_only)
        if key not in self._autograd:
            found = False
            if self._calls is not None:
                calls = self._calls()
                for call in _calls_in(node):
                    summary = calls.summary(call)
                    if summary is not None and (summary.backward or not backward_only and summary.autograd):
                        found = True
                        break
            self._autograd[key] = found
        return self._autograd[key]

    def backpropagated_names(self, loop: cst.CSTNode) -> frozenset[str] | None:
        """Names a loop (or any subtree) backpropagates (``loss`` in ``loss.backward()``); None if
        it never calls backward, so a loop is not a training loop."""
        key = id(loop)
        if key not in self._backpropagated:
            finder = _BackwardFinder(self.bindings)
            visit(loop, finder)
            self._backpropagated[key] = frozenset(finder.names) if finder.found else None
        return self._backpropagated[key]

    def enclosing_loops(self) -> list[cst.CSTNode]:
        """Enclosing for/while loops, innermost first, up to the enclosing function (its callers'
        loops are not visible)."""
        loops = []
        scopes, loop_kinds = scope_types(), loop_types()
        for node in reversed(self.ancestors[:-1]):
            kind = type(node)  # these classes have no subclasses
            if kind in scopes:
                break
            if kind in loop_kinds:
                loops.append(node)
        return loops

    def training_loop(self) -> cst.CSTNode | None:
        """The outermost enclosing for/while loop that calls ``.backward(``, if any."""
        found = None
        for loop in self.enclosing_loops():
            if self.backpropagated_names(loop) is not None:
                found = loop
        return found

    def in_training_step(self) -> bool:
        """Inside a Lightning ``training_step`` (the loop runs in the Trainer)."""
        function = self._enclosing_function()
        return function is not None and function.name.value == "training_step"

    def in_training_loop(self) -> bool:
        return self.training_loop() is not None or self.in_training_step()

    def step_loop(self) -> cst.CSTNode | None:
        """The loop around the current node whose every iteration is one training step: the
        innermost enclosing loop (in this function) that calls backward. None when there is none,
        or when that loop also holds another loop that calls backward and the current node is not
        in it, unless the loop also calls backward itself (a GAN's generator step around the
        critic's inner loop): then the node runs once per pass of that inner loop (an epoch loop)."""
        ancestors = {id(node) for node in self.ancestors}
        for loop in self.enclosing_loops():
            if self.backpropagated_names(loop) is None:
                continue
            inner = [other for other in self.nested_loops(loop)
                     if id(other) not in ancestors and self.backpropagated_names(other) is not None]
            return None if inner and not self.backpropagates_itself(loop) else loop
        return None

    def backpropagates_itself(self, loop: cst.CSTNode) -> bool:
        """Does the loop's own body (its nested loops left out) call backward? Then each of its
        iterations is a training step, whatever its inner loops do."""
        if id(loop) not in self._itself:
            finder = _BackwardFinder(self.bindings)
            for statement in _statements_outside_loops(loop.body):
                visit(statement, finder)
            self._itself[id(loop)] = finder.found
        return self._itself[id(loop)]

    def nested_loops(self, loop: cst.CSTNode) -> list[cst.CSTNode]:
        """Every for/while loop inside ``loop``'s body (functions defined there left out)."""
        if id(loop) not in self._nested:
            found: list[cst.CSTNode] = []

            class Loops(Visitor):
                def on_visit(self, node: cst.CSTNode) -> bool:
                    if isinstance(node, loop_types()):
                        found.append(node)
                    return not isinstance(node, scope_types())

            visit(loop.body, Loops())
            self._nested[id(loop)] = found
        return self._nested[id(loop)]

    @cached_property
    def training_loops(self) -> list[cst.CSTNode]:
        """The file's outermost training loops: for/while loops that call ``.backward(`` and are
        not inside another such loop of the same function, in source order."""
        found: list[cst.CSTNode] = []
        nodes, ends, index = flat(self.module)
        end = ends[index]
        while index < end:
            node = nodes[index]
            if (type(node) is cst.For or type(node) is cst.While) and self.backpropagated_names(node) is not None:
                found.append(node)
                index = ends[index]  # loops inside it are not outermost; functions inside it are rare
            else:
                index += 1
        return found

    # evaluation ---------------------------------------------------------------------------------------
    def evaluation_loop(self) -> cst.CSTNode | None:
        """The loop that evaluates a model around the current node, or None. Its enclosing loops
        from the innermost out must call no backward (an epoch loop that also trains further out
        is fine), and either the last ``.eval()``/``.train()`` call before one of these loops (in
        its block, or in an enclosing block up to the function) puts a model in eval mode: the
        loop right after it; or there is no such call, the function calls no backward at all and
        is named like evaluation (``validate``, ``evaluate``, ``test_epoch``...): the outermost
        such loop."""
        found = self._evaluation()
        return found[0] if found else None

    def eval_mode_set(self) -> bool:
        """The evaluation loop around the current node follows a ``model.eval()`` call (rather
        than being known only by its function's name)."""
        found = self._evaluation()
        return bool(found and found[1])

    def _evaluation(self) -> tuple[cst.CSTNode, bool] | None:
        candidates = []
        for loop in self.enclosing_loops():
            if self.runs_backward(loop):
                break
            candidates.append(loop)
        if not candidates:
            return None
        # walk out from the innermost loop: the statements before it in each enclosing block
        chain = self.ancestors[:-1]
        loop_here = candidates[0]
        for i in range(chain.index(loop_here), 0, -1):
            node, parent = chain[i], chain[i - 1]
            if isinstance(node, scope_types()):
                break
            if isinstance(node, loop_types()):
                if self.runs_backward(node):
                    break
                loop_here = node
            if type(parent) in (cst.IndentedBlock, cst.Module):
                body = list(parent.body)
                mode = last_mode_call(body[: body.index(node)])
                if mode is not None:
                    return (loop_here, True) if mode == "eval" else None
        function = self._enclosing_function()
        if function is not None and EVAL_FUNCTION.search(function.name.value) \
                and len(candidates) == len(self.enclosing_loops()) \
                and not self.runs_backward(function.body):
            return candidates[-1], False
        return None

    def grad_disabled(self) -> bool:
        """Under ``torch.no_grad()``/``inference_mode()``/``set_grad_enabled(False)``: as a with
        block, as a decorator of an enclosing function, or after a ``torch.set_grad_enabled(False)``
        statement earlier in the function (with no ``set_grad_enabled(True)`` after it)."""
        chain = self.ancestors[:-1]
        for node in chain:
            if type(node) is cst.With and any(with_item_disables_grad(item, self.bindings) for item in node.items):
                return True
            if type(node) is cst.FunctionDef and any(decorator_disables_grad(d, self.bindings)
                                                         for d in node.decorators):
                return True
        if not self._may_switch_grad:
            return False
        for i in range(len(self.ancestors) - 1, 0, -1):
            node, parent = self.ancestors[i], self.ancestors[i - 1]
            if isinstance(node, scope_types()):
                break
            if type(parent) in (cst.IndentedBlock, cst.Module):
                body = list(parent.body)
                for statement in reversed(body[: body.index(node)]):
                    switch = self._grad_switch(statement)
                    if switch is not None:
                        return switch
        return False

    def _grad_switch(self, statement: cst.CSTNode) -> bool | None:
        """A statement line that is a ``torch.set_grad_enabled(...)`` call: True for False, False
        for True."""
        if type(statement) is cst.SimpleStatementLine:
            for small in reversed(statement.body):
                if type(small) is cst.Expr:
                    switch = grad_switch_off(small.value, self.bindings)
                    if switch is not None:
                        return switch
        return None

    # loops over a value ---------------------------------------------------------------------------------
    @cached_property
    def _loops_by_iterable(self) -> dict[str, list[cst.For]]:
        index: dict[str, list[cst.For]] = {}
        bindings = self.bindings

        class ForLoops(Visitor):
            def visit_For(self, node: cst.For) -> None:
                iterated = iterated_name(node, bindings)
                if iterated is not None:
                    index.setdefault(iterated, []).append(node)

        visit(self.module, ForLoops())
        return index

    def loops_over(self, name: str | None) -> list[cst.For]:
        """The for loops of the file that iterate ``name`` (through enumerate/tqdm wrappers)."""
        return self._loops_by_iterable.get(name or "", [])

    def iterating_loops(self, bound_name: str | None) -> list[cst.For]:
        """The for loops that iterate the value the current node builds: through the name it is
        assigned to once (``bound_name``: ``loader = DataLoader(...)`` ... ``for x in loader``), or
        in place (``for x in DataLoader(...)``)."""
        node = self.ancestors[-1]
        if bound_name is not None:
            return self.loops_over(bound_name) if self.bindings.value_of(bound_name) is node else []
        for ancestor in reversed(self.ancestors[:-1]):
            if type(ancestor) is cst.For:
                iterated = ancestor.iter
                while type(iterated) is cst.Call and iterated.args and iterated is not node:
                    iterated = iterated.args[0].value
                return [ancestor] if iterated is node else []
            if type(ancestor) not in (cst.Call, cst.Arg):
                return []
        return []

    def _enclosing_function(self) -> cst.FunctionDef | None:
        return next((n for n in reversed(self.ancestors[:-1]) if type(n) is cst.FunctionDef), None)


def is_backward_call(call: cst.Call, bindings: Bindings) -> bool:
    """Is this one call a backward (``loss.backward()``, ``accelerator.backward(loss)``,
    ``self.manual_backward(loss)``, ``torch.autograd.backward(loss)``)?"""
    finder = _BackwardFinder(bindings)
    finder.visit_Call(call)
    return finder.found
