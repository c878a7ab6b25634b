"""
## What it does

Finds calls that copy a value from the GPU to the host on every step of a training loop:
`loss.item()`, `x.cpu()`, `x.numpy()`, `x.tolist()`, and `print(loss)` of the tensor the loop
backpropagates, in the body of a loop that calls `backward()` (or in a Lightning
`training_step`).

## Why is it slow

CUDA runs asynchronously: Python queues kernels and moves on, so the host can prepare the next
step while the GPU works on this one. Reading a value on the host ends that: the call waits until
every kernel queued before it has finished, then copies. Done every step, it makes the CPU and GPU
take turns instead of overlapping. PyTorch's tuning guide lists `print(cuda_tensor)`, `.item()`,
`.cpu()` and `.numpy()` among the operations that force a synchronization; Lightning's speed guide
says not to call `.item()` in the training loop at all.

## Example

```python
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    running_loss += loss.item()
```

## Use instead

```python
running_loss = torch.zeros((), device="cuda")
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    running_loss += loss.detach()  # stays on the GPU, no sync
    if step % 100 == 0:
        print(running_loss.item() / (step + 1))  # one sync every 100 steps
```

## Fix safety

No automatic fix: where and how often to read the values is a decision about the code's output.
The rule does not fire under a condition that holds every k-th step (`if step % k == 0:`), for a
value that drives control flow (a NaN guard such as `if loss.item() > 1e4: break`, or a name
tested by an `if`/`assert`), once per epoch (after an inner training loop), inside `self.log(...)`
(TL903 `lightning-log-item` covers it), in an `except` block, or in tests.

Off by default: nearly every training script reads its loss every step on purpose for a progress
bar or a running average, and on a slow model one sync per step costs little, so the rule would
fire on most scripts. Enable it (`--extend-select TL802`) when tuning a loop's throughput.

## References

- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization
- https://lightning.ai/docs/pytorch/stable/advanced/speed.html#item-numpy-cpu
- https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution
"""

from __future__ import annotations

import ast

import libcst as cst

from torchlint.analysis.loops import AST_FUNCTIONS, ast_training_loop_lines, is_periodic_test
from torchlint.analysis.syntax import dotted_name, method_call, names_in
from torchlint.analysis.walk import visit
from torchlint.rule import Rule, SyntaxIndex

SYNC_METHODS = ("item", "cpu", "numpy", "tolist")
LOG_METHODS = frozenset({"log", "log_dict"})


class HostSyncInLoop(Rule):
    code = "TL802"
    name = "host-sync-in-loop"
    kind = "performance"
    summary = "`.item()`, `.cpu()`, `.numpy()`, `.tolist()` or `print(tensor)` on every training step"
    triggers = (".item()", ".cpu()", ".numpy()", ".tolist()", "print(")
    default_enabled = False

    @classmethod
    def applies(cls, text: str) -> bool:
        # a training loop calls backward (`loss.backward()`, `manual_backward`), or it is Lightning's
        return super().applies(text) and ("backward" in text or "training_step" in text)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a synchronizing call in a loop that calls backward, or in a Lightning training_step
        steps = index.lines(f for f in index.nodes(*AST_FUNCTIONS) if f.name == "training_step")
        training = ast_training_loop_lines(index)
        return any(training[call.lineno] or steps[call.lineno]
                   for call in index.nodes(ast.Call)
                   if isinstance(call.func, ast.Attribute) and call.func.attr in SYNC_METHODS
                   or isinstance(call.func, ast.Name) and call.func.id == "print")

    def __init__(self, ctx):
        super().__init__(ctx)
        self._reported_lines: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        what = self._sync(node)
        if what is None:
            return
        loop = self.ctx.loops.step_loop()
        if loop is None and not self.ctx.loops.in_training_step() or self.ctx.programs.in_test_code():
            return
        if not self._every_step(node, loop):
            return
        position = self.ctx.statement_position()
        if position is None or id(position[0]) in self._reported_lines:
            return
        self._reported_lines.add(id(position[0]))
        shown, advice = what
        self.report(node, f"`{shown}` makes the host wait for the GPU on every training step; {advice} every N "
                          "steps (`if step % N == 0:`)")

    def _sync(self, node: cst.Call) -> tuple[str, str] | None:
        """(the synchronizing call, what to write instead), or None."""
        method = method_call(node, *SYNC_METHODS)
        if method is not None:
            if method.attr.value in ("item", "cpu", "tolist") and node.args:
                return None
            parent = self.ctx.parent
            if isinstance(parent, cst.Attribute) and parent.attr.value in SYNC_METHODS:
                return None  # `x.cpu().numpy()`: reported once, at the outer call
            value = method.value
            while method_call(value, *SYNC_METHODS) is not None:
                value = value.func.value  # `x.cpu().numpy()` -> `x`
            kept = self.ctx.code_for(value)
            return self.ctx.code_for(node), f"keep `{kept}` on the device (add it up there, detached) and read it"
        if isinstance(node.func, cst.Name) and node.func.value == "print" and self.ctx.qualified_name(node.func) is None:
            loop = self.ctx.loops.step_loop()
            tensors = self.ctx.loops.backpropagated_names(loop) if loop is not None else None
            if tensors and any(self._prints_tensor(arg.value, tensors) for arg in node.args):
                return self.ctx.code_for(node), "print it"
        return None

    @staticmethod
    def _prints_tensor(expr: cst.BaseExpression, tensors: frozenset[str]) -> bool:
        if isinstance(expr, cst.Name):
            return expr.value in tensors
        if isinstance(expr, cst.FormattedString):
            return any(isinstance(part, cst.FormattedStringExpression) and isinstance(part.expression, cst.Name)
                       and part.expression.value in tensors for part in expr.parts)
        return False

    def _every_step(self, node: cst.Call, loop: cst.CSTNode | None) -> bool:
        """Runs on every step: not periodic, not a guard, not a log call, not error handling."""
        chain = self.ctx.ancestors[:-1]
        for parent, child in zip(chain, [*chain[1:], node]):
            if parent is loop:
                continue
            if isinstance(parent, (cst.If, cst.While)) and child is parent.test:
                return False  # drives control flow
            if isinstance(parent, cst.IfExp) and child is parent.test:
                return False
            if isinstance(parent, (cst.Assert, cst.ExceptHandler, cst.ExceptStarHandler)):
                return False
            if isinstance(parent, cst.If) and is_periodic_test(parent.test) and _inside_loop(chain, loop, parent):
                return False
            if isinstance(parent, cst.Call) and isinstance(parent.func, cst.Attribute) \
                    and parent.func.attr.value in LOG_METHODS and dotted_name(parent.func.value) == "self":
                return False  # self.log(...): lightning-log-item
        return not self._assigned_guard(loop)

    def _assigned_guard(self, loop: cst.CSTNode | None) -> bool:
        """``value = loss.item()`` where ``value`` is then tested (``if value > 1e4:``)."""
        position = self.ctx.statement_position()
        if position is None:
            return False
        statement, body, index = position
        targets = set()
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    for target in small.targets:
                        targets |= names_in(target.target)
        if not targets:
            return False
        tests = _Tests()
        for later in body[index + 1:]:
            visit(later, tests)
        return bool(targets & tests.names)


def _inside_loop(chain: list[cst.CSTNode], loop: cst.CSTNode | None, node: cst.CSTNode) -> bool:
    """``node`` lies between ``loop`` (None: the function) and the current node."""
    if loop is None:
        return True
    return chain.index(node) > chain.index(loop)


class _Tests(cst.CSTVisitor):
    """Names read by if/while tests and asserts."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_If(self, node: cst.If) -> None:
        self.names |= names_in(node.test)

    def visit_While(self, node: cst.While) -> None:
        self.names |= names_in(node.test)

    def visit_Assert(self, node: cst.Assert) -> None:
        self.names |= names_in(node.test)
