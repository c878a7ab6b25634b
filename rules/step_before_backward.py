"""
## What it does

Finds an optimizer step that runs, in an iteration of a training loop, before any `backward()`
of that iteration while a backward follows it: `optimizer.step()` written above
`loss.backward()`.

## Why is it wrong

`step()` applies whatever gradients `.grad` holds when it runs. Before the backward of the
iteration, those are the previous iteration's gradients, or none at all when `zero_grad()` ran
in between (the usual order `zero_grad(); ...; step(); backward()` makes every step apply
nothing, and with `set_to_none=True`, the default since torch 2.0, the optimizer skips every
parameter: the model never trains). At best the updates lag one batch behind and the last
backward is wasted; there is no error either way. The PyTorch docs: call `step()` "once the
gradients are computed using e.g. `backward()`".

## Example

```python
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    optimizer.step()
    loss.backward()
```

## Use instead

```python
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
```

## Fix safety

No fix: moving the step changes which gradients it applies, and where the author meant it to go
(after which backward, before or after clipping and scaler updates) is not always clear. The
rule stays silent for a step under a condition (`if i % k == 0: optimizer.step()` at the top of
an iteration applies the gradients accumulated over the previous ones, on purpose), for a step
that is not an optimizer's (`scheduler.step()`, `env.step(action)`), for a step that computes its
own gradients (`optimizer.step(closure)`, or a differentiable optimizer's `step(loss)` from the
`higher` library), and when a backward of the same iteration comes before the step (a GAN's
discriminator step before its generator's backward is in order).

## References

- https://pytorch.org/docs/stable/optim.html#taking-an-optimization-step
- https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.step.html
- https://pytorch.org/tutorials/beginner/basics/optimization_tutorial.html#optimization-loop
"""

from __future__ import annotations

import ast
from functools import cache

from torchlint.analysis.index import AST_LOOPS, AST_SCOPES
from torchlint.analysis.loops import BACKWARD_CALLEES, ast_backwards_by_loop, is_backward_call
from torchlint.analysis.steps import ast_training_steps, optimizer_like, stepped_optimizer
from torchlint.analysis.syntax import ast_contains
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, Severity, SyntaxIndex
from torchlint.rules._loop import innermost_training_loop


@cache
def condition_types() -> tuple[type, ...]:
    return (cst.If, cst.IfExp, cst.Try, cst.TryStar, cst.BooleanOperation, cst.Match)


AST_CONDITIONS = (ast.If, ast.IfExp, ast.Try, *((ast.TryStar,) if hasattr(ast, "TryStar") else ()), ast.BoolOp,
                  ast.Match)


def _ast_ancestry(index: SyntaxIndex, call: ast.Call) -> tuple[ast.AST, ...]:
    """The loops, conditions and scopes (functions, lambdas, classes: a definition's decorators
    inside it) around a call in a loop, from its outermost loop in, by one walk of that loop."""
    outermost = index.place(call).loops[0]

    def compute() -> dict[int, tuple[ast.AST, ...]]:
        found: dict[int, tuple[ast.AST, ...]] = {}
        stack: list[tuple[ast.AST, tuple[ast.AST, ...]]] = [(outermost, (outermost,))]
        while stack:
            node, chain = stack.pop()
            for child in ast.iter_child_nodes(node):
                if type(child) is ast.Call:
                    found[id(child)] = chain
                inner = chain + (child,) if isinstance(child, (*AST_LOOPS, *AST_CONDITIONS, *AST_SCOPES)) else chain
                stack.append((child, inner))
        return found
    return index.memo(("TL807 ancestry", id(outermost)), compute)[id(call)]


def _ast_under(index: SyntaxIndex, call: ast.Call, loop: ast.AST, kinds: tuple[type, ...]) -> bool:
    """Is the call inside a node of ``kinds`` that is inside ``loop`` (one of the loops around it)?"""
    chain = _ast_ancestry(index, call)
    at = next(i for i, node in enumerate(chain) if node is loop)
    return any(isinstance(node, kinds) for node in chain[at + 1:])


def _ast_backward_of_body(index: SyntaxIndex, call: ast.Call, loop: ast.AST) -> bool:
    """Is the call surely one that ``_backwards_around`` collects: a ``.backward(...)`` or
    ``.manual_backward(...)`` in a statement of the loop's body, not in a function, lambda or class
    defined there (its decorators included)?"""
    if not (type(call.func) is ast.Attribute and call.func.attr in BACKWARD_CALLEES):
        return False
    if not any(ast_contains(statement, call) for statement in loop.body):
        return False
    return not _ast_under(index, call, loop, AST_SCOPES)


class StepBeforeBackward(Rule):
    code = "TL807"
    name = "step-before-backward"
    kind = "correctness"
    summary = "`optimizer.step()` before `loss.backward()` in the same iteration"
    severity = Severity.ERROR
    triggers = ("backward",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a step in a loop that calls backward after it, under no condition inside that loop, and
        # with no `.backward()` of the loop's own before it
        steps = ast_training_steps(index)
        if not steps:
            return False
        for step, loops in steps:
            start = (step.lineno, step.col_offset)
            for loop in loops:
                if _ast_under(index, step, loop, AST_CONDITIONS):
                    continue
                inside = ast_backwards_by_loop(index).get(id(loop), [])
                if not any((call.lineno, call.col_offset) >= start for call in inside):
                    continue
                if not any((call.lineno, call.col_offset) < start and _ast_backward_of_body(index, call, loop)
                           for call in inside):
                    return True
        return False

    def visit_Call(self, node: cst.Call) -> None:
        optimizer = stepped_optimizer(node, self.ctx.bindings)
        if optimizer is None or self._computes_gradients(node):
            return
        loop = innermost_training_loop(self.ctx)
        if loop is None or self._conditional(loop):
            return
        before, after = self._backwards_around(loop, node)
        if before or not after:
            return
        backward = self.ctx.code_for(after[0].func)
        self.report(node, f"`{self.ctx.code_for(node)}` runs before `{backward}()` in the same iteration: it "
                          "applies the previous iteration's gradients (or none, once they are cleared), so the "
                          "updates lag a batch behind or never happen; step after the backward")

    def _computes_gradients(self, step: cst.Call) -> bool:
        """``optimizer.step(closure)`` (LBFGS) runs the backward itself, and a differentiable
        optimizer's ``inner_optimizer.step(loss)`` (the ``higher`` library) takes the loss: neither
        applies gradients left from before. (``scaler.step(optimizer)`` is given the optimizer.)"""
        return bool(step.args) and isinstance(step.func, cst.Attribute) and step.func.attr.value == "step" \
            and optimizer_like(step.func.value, self.ctx.bindings) is not None

    def _conditional(self, loop: cst.CSTNode) -> bool:
        """Is the step under a condition inside the loop (a deliberate deferred step)?"""
        index = next(i for i, node in enumerate(self.ctx.ancestors) if node is loop)
        return any(isinstance(node, condition_types()) for node in self.ctx.ancestors[index + 1:])

    def _backwards_around(self, loop: cst.CSTNode, step: cst.Call) -> tuple[list[cst.Call], list[cst.Call]]:
        """The backward calls of the loop body before the step and after it, in source order
        (functions defined in the body left out)."""
        before: list[cst.Call] = []
        after: list[cst.Call] = []
        seen_step = []

        def on_visit(node: cst.CSTNode) -> bool:
            if node is step:
                seen_step.append(node)
            elif isinstance(node, cst.Call) and is_backward_call(node, self.ctx.bindings):
                (after if seen_step else before).append(node)
            return not isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef))

        walk(loop.body, on_visit)
        return before, after
