"""Optimizer steps: which calls step an optimizer, which clear the gradients (through the file's own
helpers), and whether a loop accumulates gradients over several micro-batches per step.

An optimizer is a name that holds a ``torch.optim`` optimizer in the file, or is named like one
(``optimizer``, ``opt_d``, ``g_optimizer``, ``optimizerD``); a learning-rate scheduler never is.
Gradient accumulation is a loop whose backward runs on every iteration while its optimizer steps
only on some: under a remainder test (``if (i + 1) % accum == 0:``, or ``continue`` unless it
holds), or after an inner loop of micro-batches (``for micro in range(accum): ... backward()``).
A GAN's ``n_critic`` schedule, where the generator's backward and step sit under the same test,
is not accumulation.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.flow import function_of_call
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.conditions import is_periodic_test
from torchlint.analysis.loops import ast_backwards_by_loop, ast_training_loop_lines, is_backward_call, loop_types
from torchlint.analysis.syntax import ast_contains, ast_dotted_name, contains, dotted_name, positional_args
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst

OPTIMIZER_NAME = re.compile(r"optim|(^|_)opt($|_|[dg]$)", re.IGNORECASE)
NOT_OPTIMIZER = re.compile(r"sched", re.IGNORECASE)
# Functions that step the optimizer they are given: `xm.optimizer_step(optimizer)` (torch_xla).
STEP_FUNCTIONS = frozenset({"optimizer_step"})
# Helpers of other modules that, by their name, clear gradients: `reset_grad()`, `zero_grads(model)`.
ZEROING_HELPER = re.compile(r"(zero|reset|clear|clean)_?grad", re.IGNORECASE)
ZEROING_METHODS = frozenset({"zero_", "fill_", "detach_", "mul_"})  # on a `.grad`, with zero_grad itself
MAX_DEPTH = 3


def _last_part(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def optimizer_like(expr: cst.BaseExpression, bindings: Bindings) -> str | None:
    """The dotted name of ``expr`` when it holds an optimizer (or a list of them, for
    ``optimizers[i]``): built by ``torch.optim...`` in the file, or named like one; never a
    scheduler."""
    while type(expr) is cst.Subscript:  # one of a list of optimizers: `optimizers[i]`
        expr = expr.value
    name = dotted_name(expr)
    if name is None or NOT_OPTIMIZER.search(_last_part(name)):
        return None
    for value in bindings.values(name):
        if type(value) is cst.Call:
            qualified = bindings.qualified_name(value.func) or ""
            if qualified.startswith("torch.optim.") and "lr_scheduler" not in qualified:
                return name
    return name if OPTIMIZER_NAME.search(_last_part(name)) else None


def ast_optimizer_like(index: SyntaxIndex, expr: ast.AST) -> bool:
    """The precheck twin of ``optimizer_like``: may ``expr`` hold an optimizer? Named like one, or a
    (dotted) name the file assigns a call that its imports may make ``torch.optim...``."""
    while type(expr) is ast.Subscript:
        expr = expr.value
    name = ast_dotted_name(expr)
    if name is None or NOT_OPTIMIZER.search(_last_part(name)):
        return False
    return bool(OPTIMIZER_NAME.search(_last_part(name))) or name in _ast_optimizers_built(index)


def _ast_optimizers_built(index: SyntaxIndex) -> frozenset[str]:
    """The (dotted) names that ``=``, an annotated ``=`` or ``:=`` binds to a call of what may be a
    ``torch.optim`` class (not a scheduler): the values ``Bindings.values`` gives ``optimizer_like``."""
    def compute() -> frozenset[str]:
        found = set()
        bound = [(target, node.value) for node in index.nodes(ast.Assign) for target in node.targets]
        bound += [(node.target, node.value) for node in index.nodes(ast.AnnAssign, ast.NamedExpr)]
        for target, value in bound:
            if type(value) is ast.Call and any(name.startswith("torch.optim.") and "lr_scheduler" not in name
                                               for name in index.qualified_names(value.func)):
                name = ast_dotted_name(target)
                if name is not None:
                    found.add(name)
        return frozenset(found)
    return index.memo("optimizers_built", compute)


def ast_stepped_optimizer(index: SyntaxIndex, call: ast.Call) -> bool:
    """The precheck twin of ``stepped_optimizer``: may the call step an optimizer?"""
    func = call.func
    if type(func) is not ast.Attribute:
        return False
    positional = [arg for arg in call.args if type(arg) is not ast.Starred]
    if func.attr == "step":
        return ast_optimizer_like(index, func.value) or len(positional) == 1 \
            and "scaler" in (ast_dotted_name(func.value) or "").lower() and ast_optimizer_like(index, positional[0])
    return func.attr in STEP_FUNCTIONS and bool(positional) and ast_optimizer_like(index, positional[0])


def stepped_optimizer(call: cst.Call, bindings: Bindings) -> str | None:
    """The optimizer a call steps: ``optimizer.step()`` / ``optimizer.step(closure)``,
    ``scaler.step(optimizer)``, ``xm.optimizer_step(optimizer)``."""
    func = call.func
    if type(func) is not cst.Attribute:
        return None
    if func.attr.value == "step":
        own = optimizer_like(func.value, bindings)
        if own is not None:
            return own
        positional = positional_args(call)
        if len(positional) == 1 and "scaler" in (dotted_name(func.value) or "").lower():
            return optimizer_like(positional[0].value, bindings)
        return None
    if func.attr.value in STEP_FUNCTIONS:
        positional = positional_args(call)
        return optimizer_like(positional[0].value, bindings) if positional else None
    return None


def optimizer_steps(tree: cst.CSTNode, bindings: Bindings) -> list[tuple[cst.Call, str]]:
    """The optimizer steps in a subtree, in source order, with the optimizer each one steps
    (functions defined inside left out)."""
    found: list[tuple[cst.Call, str]] = []

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.Call:
            optimizer = stepped_optimizer(node, bindings)
            if optimizer is not None:
                found.append((node, optimizer))
        return type(node) not in (cst.FunctionDef, cst.Lambda, cst.ClassDef) or node is tree

    walk(tree, on_visit)
    return found


def _clears_grad(node: cst.CSTNode) -> bool:
    """One node that clears gradients in place: ``x.zero_grad()``, ``p.grad = None``,
    ``p.grad.zero_()``, ``p.grad.data.fill_(0)``, ``del p.grad``, ``torch._foreach_zero_(grads)``."""
    if type(node) is cst.Call:
        func = node.func
        name = func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else ""
        if name in ("zero_grad", "_foreach_zero_"):
            return True
        if name in ZEROING_METHODS and type(func) is cst.Attribute:
            receiver = dotted_name(func.value) or ""
            return receiver.endswith(".grad") or receiver.endswith(".grad.data")
        return False
    if type(node) is cst.AssignTarget:
        return (dotted_name(node.target) or "").endswith(".grad")
    if type(node) is cst.Del:
        return (dotted_name(node.target) or "").endswith(".grad")
    return False


def clears_gradients(tree: cst.CSTNode, bindings: Bindings, depth: int = 0,
                     seen: frozenset[int] = frozenset()) -> bool:
    """Does running ``tree`` clear gradients: directly (see ``_clears_grad``), in a function
    defined inside it (an LBFGS closure), in a function of the file it calls (``self.reset_grad()``
    followed into its body), or through a helper of another module named like one
    (``reset_grad``, ``zero_grads``)?"""
    found = []

    def on_visit(node: cst.CSTNode) -> bool:
        if found:
            return False
        if _clears_grad(node):
            found.append(node)
            return False
        if type(node) is cst.Call:
            function = function_of_call(node, bindings)
            if function is not None:
                if depth < MAX_DEPTH and id(function) not in seen \
                        and clears_gradients(function.body, bindings, depth + 1, seen | {id(function)}):
                    found.append(node)
            else:
                name = dotted_name(node.func)
                if name is not None and ZEROING_HELPER.search(_last_part(name)):
                    found.append(node)
            # a closure handed to the step: `optimizer.step(closure)`
            for arg in node.args:
                if type(arg.value) is cst.Name:
                    closures = bindings.defined(arg.value.value, cst.FunctionDef)
                    if len(closures) == 1 and id(closures[0]) not in seen and depth < MAX_DEPTH \
                            and clears_gradients(closures[0].body, bindings, depth + 1, seen | {id(closures[0])}):
                        found.append(node)
        return not found

    walk(tree, on_visit)
    return bool(found)


# --- gradient accumulation ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Accumulation:
    """A loop that steps its optimizer once every ``count`` micro-batches: ``step`` is that step,
    ``backwards`` the backward calls that run on every micro-batch, ``count`` the number of
    micro-batches when it is written (the ``accum`` of ``% accum``, the ``n`` of ``range(n)``)."""

    loop: cst.CSTNode
    step: cst.Call
    backwards: tuple[cst.Call, ...]
    count: cst.BaseExpression | None


class _Events:
    """Backward calls and optimizer steps in a loop body, each with the ``if`` tests and the inner
    loops around it (within the body)."""

    def __init__(self, loop: cst.CSTNode, bindings: Bindings):
        self.backwards: list[tuple[cst.Call, tuple[cst.CSTNode, ...]]] = []
        self.steps: list[tuple[cst.Call, tuple[cst.CSTNode, ...]]] = []
        self.skips: list[cst.If] = []  # `if <test>: continue` at the top level of the body
        stack: list[cst.CSTNode] = []

        def on_visit(node: cst.CSTNode) -> bool:
            if type(node) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
                return False
            if isinstance(node, (cst.If, *loop_types())):
                stack.append(node)
            if type(node) is cst.Call:
                if stepped_optimizer(node, bindings) is not None:
                    self.steps.append((node, tuple(stack)))
                elif is_backward_call(node, bindings):
                    self.backwards.append((node, tuple(stack)))
            return True

        def on_leave(node: cst.CSTNode) -> None:
            if stack and stack[-1] is node:
                stack.pop()

        for statement in loop.body.body:
            if type(statement) is cst.If and _only_continues(statement):
                self.skips.append(statement)
            walk(statement, on_visit, on_leave)


    def paired(self, around: tuple[cst.CSTNode, ...]) -> bool:
        """Is a backward under an ``if`` that also holds a step (a GAN's generator update every
        ``n_critic`` iterations): it belongs to that step, not to an accumulation."""
        return any(type(node) is cst.If and node in where for node in around for _, where in self.steps)


def _only_continues(statement: cst.If) -> bool:
    body = statement.body.body
    return statement.orelse is None and len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) \
        and len(body[0].body) == 1 and isinstance(body[0].body[0], cst.Continue)


def _remainder_divisor(test: cst.BaseExpression) -> cst.BaseExpression | None:
    """The ``k`` of the first ``x % k`` in a test."""
    found: list[cst.BaseExpression] = []

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.BinaryOperation and type(node.operator) is cst.Modulo and not found:
            found.append(node.right)
        return not found

    walk(test, on_visit)
    return found[0] if found else None


def _periodic_guard(test: cst.BaseExpression, bindings: Bindings) -> cst.BaseExpression | None:
    """For a test that holds every k-th iteration (``(i + 1) % k == 0``, or a name the loop
    assigns such a test to), the ``k``; else None. ``% 1`` is every iteration."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        test = test.expression
    if type(test) is cst.Name:
        values = [v for v in bindings.values(test.value) if v is not None]
        if len(values) != 1 or not is_periodic_test(values[0]):
            return None
        test = values[0]
    if not is_periodic_test(test):
        return None
    divisor = _remainder_divisor(test)
    if type(divisor) is cst.Integer and divisor.evaluated_value == 1:
        return None
    return divisor


def _micro_batch_count(loop: cst.For) -> tuple[bool, cst.BaseExpression | None]:
    """Does an inner loop run over micro-batches: ``for _ in range(k)`` (count k) or over the
    chunks of a batch (``batch.chunk(k)``, ``torch.split(x, n)``)? (yes/no, the count if written)."""
    iterated = loop.iter
    while type(iterated) is cst.Call and dotted_name(iterated.func) == "enumerate" and iterated.args:
        iterated = iterated.args[0].value
    if type(iterated) is not cst.Call:
        return False, None
    name = dotted_name(iterated.func) or ""
    args = positional_args(iterated)
    if name == "range" and len(args) == 1:
        return True, args[0].value
    if _last_part(name) == "chunk":
        count = args[-1].value if args else None
        return True, count
    if _last_part(name) == "split":
        return True, None
    return False, None


def accumulation(loop: cst.CSTNode, bindings: Bindings) -> Accumulation | None:
    """The gradient accumulation of a loop, if it accumulates (see the module's docstring)."""
    events = _Events(loop, bindings)
    if not events.steps or not events.backwards:
        return None
    # a step after an inner loop of micro-batches whose backward runs without a step
    for call, around in events.steps:
        if any(isinstance(node, loop_types()) for node in around):
            continue
        for inner in _inner_loops(events):
            micro, count = _micro_batch_count(inner) if type(inner) is cst.For else (False, None)
            inside = tuple(b for b, outer in events.backwards if inner in outer)
            if micro and inside and not any(inner in outer for _, outer in events.steps) \
                    and not _cleared_before_step(loop, inner, call, bindings):
                return Accumulation(loop, call, inside, count)
    # every step under a remainder test (or after `if <test>: continue`), a backward outside it
    found = None
    for call, around in events.steps:
        guard = next((node for node in around
                      if type(node) is cst.If and _periodic_guard(node.test, bindings) is not None), None)
        if guard is not None:
            outside = tuple(b for b, where in events.backwards if guard not in where and not events.paired(where))
        else:
            position = _position(loop, call)
            guard = next((s for s in events.skips if _position(loop, s) < position
                          and _periodic_guard(s.test, bindings) is not None), None)
            if guard is None:
                return None  # a step on every iteration: nothing accumulates
            outside = tuple(b for b, where in events.backwards
                            if _position(loop, b) < _position(loop, guard) and not events.paired(where))
        if outside and found is None:
            found = Accumulation(loop, call, outside, _periodic_guard(guard.test, bindings))
    return found


def _cleared_before_step(loop: cst.CSTNode, inner: cst.CSTNode, step: cst.Call, bindings: Bindings) -> bool:
    """Are the gradients of an inner loop's backward cleared before the step: in the inner loop
    itself (an adversarial attack's loop, which backpropagates to the input and clears its
    gradient, ``delta.grad.zero_()``), or by a statement between the inner loop and the step
    (``optimizer.zero_grad()`` before the training's own backward)? Then nothing accumulates."""
    if clears_gradients(inner.body, bindings):
        return True
    body = loop.body.body
    return any(clears_gradients(statement, bindings)
               for statement in body[_position(loop, inner) + 1:_position(loop, step)])


def _position(loop: cst.CSTNode, node: cst.CSTNode) -> int:
    """The index of the statement of the loop body that holds ``node``."""
    for index, statement in enumerate(loop.body.body):
        if contains(statement, node):
            return index
    return len(loop.body.body)


def _inner_loops(events: _Events) -> list[cst.CSTNode]:
    """The loops inside the body that hold a backward call."""
    seen: list[cst.CSTNode] = []
    for _, around in events.backwards:
        for node in around:
            if isinstance(node, loop_types()) and node not in seen:
                seen.append(node)
    return seen


# --- the precheck's questions ------------------------------------------------------------------------

def ast_optimizer_steps(index: SyntaxIndex) -> list[ast.Call]:
    """Calls that may step an optimizer: ``.step(...)`` and ``.optimizer_step(...)`` (see
    ``stepped_optimizer``)."""
    return [call for call in index.calls("step", *STEP_FUNCTIONS) if isinstance(call.func, ast.Attribute)]


def ast_steps_in_training_loops(index: SyntaxIndex) -> bool:
    """May an optimizer step inside a loop that calls backward?"""
    training = ast_training_loop_lines(index)
    return any(training[call.lineno] for call in ast_optimizer_steps(index))


def ast_training_steps(index: SyntaxIndex) -> list[tuple[ast.Call, tuple[ast.AST, ...]]]:
    """The calls that may step an optimizer in a loop that calls backward, each with every loop
    around it that holds a call of backward: the loop ``innermost_training_loop`` finds for the
    step, when there is one, is among them."""
    def compute() -> list[tuple[ast.Call, tuple[ast.AST, ...]]]:
        training = ast_training_loop_lines(index)
        steps = [call for call in ast_optimizer_steps(index)
                 if training[call.lineno] and ast_stepped_optimizer(index, call)]
        if not steps:
            return []
        holding = ast_backwards_by_loop(index)
        found = [(step, tuple(loop for loop in index.place(step).loops if id(loop) in holding)) for step in steps]
        return [(step, around) for step, around in found if around]
    return index.memo("training_steps", compute)


def ast_clears_gradients_directly(index: SyntaxIndex, loop: ast.AST) -> bool:
    """Does the loop hold a node that ``_clears_grad`` answers yes for (``x.zero_grad()``,
    ``p.grad = None``, ``p.grad.zero_()``), so that ``clears_gradients`` surely does? Helpers and
    closures, which it follows too, are not looked into: a precheck may miss a clear, not invent one."""
    def compute() -> list[ast.AST]:
        found: list[ast.AST] = []
        for call in index.nodes(ast.Call):
            func = call.func
            name = func.attr if type(func) is ast.Attribute else func.id if type(func) is ast.Name else ""
            if name in ("zero_grad", "_foreach_zero_") or name in ZEROING_METHODS and type(func) is ast.Attribute \
                    and (ast_dotted_name(func.value) or "").endswith((".grad", ".grad.data")):
                found.append(call)
        found += [target for node in index.nodes(ast.Assign) for target in node.targets
                  if (ast_dotted_name(target) or "").endswith(".grad")]
        return found
    return any(ast_contains(loop, node) for node in index.memo("gradient_clears", compute))

