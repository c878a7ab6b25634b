"""
## What it does

Finds a random number generator seeded with the same value on every step of a training loop:
`torch.manual_seed(0)` (or `torch.cuda.manual_seed_all`, `random.seed`, `numpy.random.seed`)
inside the loop that calls `backward()`, with a seed that does not change from one iteration to
the next (a literal, or a name the loop never assigns). A seed built from the loop's own
variables (`torch.manual_seed(seed + step)`) gives each step its own numbers and is left alone.

## Why is it wrong

Seeding restarts the generator's sequence. Seeded with the same value every step, each step draws
the same random numbers as the step before: the same dropout masks, the same random crops and
flips, the same noise. The model trains on far less randomness than the code suggests, which
hurts regularization without any error or warning.

## Example

```python
for x, y in loader:
    torch.manual_seed(0)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
```

## Use instead

```python
torch.manual_seed(0)
for x, y in loader:
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
```

## Fix safety

There is no automatic fix: moving the seed out of the loop changes which numbers every step
draws, and only the author knows whether a fixed sequence per step was intended (a test that
compares steps, for example).

## Options

- `functions` (list, default `[]`): more seeding functions to report, by qualified name
  (`mylib.seed_everything`).

## References

- https://pytorch.org/docs/stable/notes/randomness.html
- https://pytorch.org/docs/stable/generated/torch.manual_seed.html
"""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.walk import visit
from torchlint.rule import Rule

SEEDERS = frozenset({"torch.manual_seed", "torch.random.manual_seed", "torch.cuda.manual_seed",
                     "torch.cuda.manual_seed_all", "random.seed", "numpy.random.seed"})


class _Assigned(cst.CSTVisitor):
    """The names a loop binds: its target and what its body assigns."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.names |= _names(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.names |= _names(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.names |= _names(node.target)

    def visit_For(self, node: cst.For) -> None:
        self.names |= _names(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.names |= _names(node.target)


def _names(node: cst.CSTNode) -> set[str]:
    found: set[str] = set()

    class Names(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.add(name.value)

    visit(node, Names())
    return found


class SeedInLoop(Rule):
    code = "XMP001"
    name = "seed-in-loop"
    kind = "correctness"
    summary = "A random generator seeded with the same value on every training step"
    triggers = ("seed",)
    options = {"functions": (list, [], "More seeding functions to report (qualified names)")}

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        if name is None or (name not in SEEDERS and name not in self.option("functions")):
            return
        loop = self.ctx.loops.step_loop()
        if loop is None:
            return
        assigned = _Assigned()
        visit(loop, assigned)
        if any(_names(arg.value) & assigned.names for arg in node.args):
            return  # the seed changes with the step
        self.report(node, f"`{self.ctx.code_for(node)}` on every training step makes each step draw the same "
                          "random numbers (dropout masks, augmentations); seed once, before the loop")
