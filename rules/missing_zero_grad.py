"""
## What it does

Finds an optimizer step in a training loop (a loop that calls `backward()` and `step()`) that
never clears the gradients: no `optimizer.zero_grad()` or `model.zero_grad()`, no
`p.grad = None` or `p.grad.zero_()` by hand, and no call of a helper that does one of these
(the file's own helpers are followed, `self.reset_grad()` into its body; helpers of other
modules count when named like one, `reset_grad`, `zero_grads`).

## Why is it wrong

`backward()` adds the new gradients into `.grad`; it never overwrites them. Without clearing, the
gradient at step n is the sum of the gradients of all n batches so far, so every step moves the
weights by the whole history: the effective learning rate grows with the step count and training
diverges or settles somewhere wrong, without an error (the PyTorch docs on `zero_grad`, and the
"Optimizing the model parameters" tutorial: "Gradients by default add up; to prevent
double-counting, we explicitly zero them at each iteration").

## Example

```python
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
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

No fix: where the gradients should be cleared (before the forward, after the step, every k
micro-batches when accumulating on purpose) is the author's decision. The rule stays silent when
the loop clears them anywhere, under any condition (gradient accumulation clears them every k
micro-batches), when the optimizer is created inside the loop (its parameters get fresh
gradients), for a step that is not an optimizer's (`scheduler.step()`, `env.step(action)`;
an optimizer is built by `torch.optim` in the file or named like one), in test code, and when the
loop calls `backward` only through a helper (it cannot see the order there). When the gradients
are cleared only in an outer loop (once per epoch), the finding says so.

## References

- https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html
- https://pytorch.org/tutorials/beginner/basics/optimization_tutorial.html#optimization-loop
- https://pytorch.org/tutorials/recipes/recipes/zeroing_out_gradients.html
"""

from __future__ import annotations

from torchlint.analysis.steps import (ast_clears_gradients_directly, ast_training_steps, clears_gradients,
                                     stepped_optimizer)
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, Severity, SyntaxIndex
from torchlint.rules._loop import assigned_in, innermost_training_loop


class MissingZeroGrad(Rule):
    code = "TL804"
    name = "missing-zero-grad"
    kind = "correctness"
    quiet_in_tests = True  # a test may step an optimizer on purpose
    summary = "A training loop that steps the optimizer but never clears the gradients (`zero_grad`)"
    severity = Severity.ERROR
    triggers = ("backward",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a step in a loop that calls backward and clears no gradients itself (`zero_grad()` in it,
        # or in a loop around it, tells the walk that they are cleared)
        return any(not ast_clears_gradients_directly(index, loop)
                   for _, loops in ast_training_steps(index) for loop in loops)

    def visit_Call(self, node: cst.Call) -> None:
        optimizer = stepped_optimizer(node, self.ctx.bindings)
        if optimizer is None:
            return
        loop = innermost_training_loop(self.ctx)
        if loop is None or assigned_in(loop, optimizer) or clears_gradients(loop, self.ctx.bindings):
            return
        step = self.ctx.code_for(node)
        outer = [other for other in self.ctx.loops.enclosing_loops() if other is not loop
                 and clears_gradients(other, self.ctx.bindings)]
        if outer:
            self.report(node, f"`{step}` applies gradients that are cleared only once per pass of an outer loop: "
                              "`backward()` adds into `.grad`, so each step in between applies the sum of the "
                              "gradients so far; clear them in this loop (`zero_grad()` before the backward or after "
                              "the step)")
            return
        self.report(node, f"`{step}` applies gradients that are never cleared: `backward()` adds into `.grad`, "
                          "so every step applies the sum of all the gradients so far; call "
                          f"`{optimizer}.zero_grad()` in the loop (before the backward or after the step)")
