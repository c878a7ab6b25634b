"""
## What it does

Finds `with torch.no_grad():` around pure inference, where `torch.inference_mode()` would do:
a block that runs a model (`model(x)`, `self.net(x)`, `self(x)`) in an evaluation loop (a loop
after `model.eval()`, or in a function named like evaluation: `evaluate`, `validate`, `predict`,
`inference`, `test`...), in a function that never calls `backward`, and whose results leave the
block only as Python numbers, strings or host copies (`.item()`, `.tolist()`, `.cpu()`,
`float(...)`): accuracy counts, losses to log, predictions gathered on the CPU.

Off by default: the rule cannot see what the callers of a function or the rest of a program do
with tensors (see Fix safety), so it is advice to weigh rather than a finding to act on blindly.

## Why is it slow

`torch.no_grad()` only stops autograd from recording the graph. `torch.inference_mode()` also
skips the bookkeeping that autograd would need if the tensors ever met it again: the version
counter bumped by every in-place operation and the tracking of views. PyTorch's documentation of
`inference_mode` calls it the preferred mode for code that will not interact with autograd, with
better performance than `no_grad`; the gain is in the per-operation overhead, largest for models
of many small operations and for CPU inference.

## Expected gain

Small. The saving is per operation (no version counters, no view tracking), so it shows for models
of many small operations and for CPU inference, and hardly when large kernels dominate. We found no
published measurement we could check in full. To see it on your model, time the evaluation loop
before and after the change.

## Example

```python
def evaluate(model, loader):
    model.eval()
    correct = 0
    with torch.no_grad():
        for images, labels in loader:
            correct += (model(images).argmax(1) == labels).sum().item()
    return correct / len(loader.dataset)
```

## Use instead

```python
def evaluate(model, loader):
    model.eval()
    correct = 0
    with torch.inference_mode():
        for images, labels in loader:
            correct += (model(images).argmax(1) == labels).sum().item()
    return correct / len(loader.dataset)
```

## Fix safety

Unsafe. Tensors made under `inference_mode` are inference tensors for good: autograd refuses to
save them for a backward pass later ("Inference tensors cannot be saved for backward"), and they
cannot be changed in place outside inference mode. The fix is right when nothing does either, and
the rule checks what it can see: it stays silent when the block stores a tensor on an object
(`self.cache = out`), puts one into a container made outside it (`outputs.append(logits)`),
writes in place into a tensor made outside it (an EMA update, `p.mul_(decay)`), returns or
yields one, or computes a tensor that code after it (or the next pass of a loop around it) reads;
in a function that calls `backward` (pseudo-labels, target networks and teacher outputs under
`no_grad` feed training); in Lightning hooks (the Trainer already runs them under
`inference_mode`); in `@torch.no_grad()` decorators (the rule does not follow a decorated
function's callers); and for a target torch older than 1.9, which has no `inference_mode`. What
it cannot see is a tensor that leaves through a helper it calls, or a host copy changed in place
later (`preds.cpu()` with nothing else on the CPU shares memory with an inference tensor).

## References

- https://pytorch.org/docs/stable/generated/torch.inference_mode.html
- https://pytorch.org/docs/stable/notes/autograd.html#inference-mode
- https://pytorch.org/cppdocs/notes/inference_mode.html
"""

from __future__ import annotations

import ast
import re

from torchlint.analysis.escapes import leaks
from torchlint.analysis.index import span
from torchlint.analysis.loops import (AST_LOOPS, EVAL_FUNCTION, ast_calls_model, ast_loop_lines, calls_model,
                                      last_mode_call, loop_types)
from torchlint.analysis.syntax import scope_types
from torchlint.analysis.walk import Visitor, visit
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

NO_GRAD = frozenset({"torch.no_grad", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad"})
# Functions whose name says they only infer: their blocks are inference even without a loop.
INFERENCE_FUNCTION = re.compile(r"(^|_)(predict|prediction|predictions|evaluate|evaluation|inference|infer|validate|"
                                r"validation)(_|$)")


class InferenceMode(Rule):
    code = "TL106"
    name = "inference-mode"
    kind = "performance"
    summary = "`torch.no_grad()` around pure inference, where `torch.inference_mode()` is faster"
    fix_applicability = "unsafe"
    triggers = ("no_grad",)
    torch_versions = ">=1.9"
    default_enabled = False

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a `with no_grad():` in a loop, around one, or in a function named for inference
        # (_evaluation's necessary conditions)
        withs = [node for node in index.nodes(ast.With) if any(
            isinstance(item.context_expr, ast.Call) and index.is_call(item.context_expr, "no_grad")
            for item in node.items) and (ast_calls_model(node) or _ast_calls_self(node))]
        if not withs:
            return False
        in_loops = ast_loop_lines(index)
        functions = index.nodes(ast.FunctionDef, ast.AsyncFunctionDef)
        modes = [call for call in index.calls("eval", "train") if isinstance(call.func, ast.Attribute)
                 and (call.args or call.keywords if call.func.attr == "train" else not call.args)]

        def evaluation(node: ast.With) -> bool:
            around = [f for f in functions if span(f)[0] <= node.lineno <= f.end_lineno]
            if in_loops[node.lineno] or any(INFERENCE_FUNCTION.search(f.name) for f in around):
                return True
            if not any(isinstance(n, AST_LOOPS) for n in ast.walk(node)):
                return False
            # a loop inside: in a function named for evaluation, or after an `.eval()`/`.train(False)`
            # in its function (_after_eval_call)
            start = max((span(f)[0] for f in around), default=0)
            return any(EVAL_FUNCTION.search(f.name) for f in around) \
                or any(start <= call.lineno < node.lineno for call in modes)
        return any(evaluation(node) for node in withs)

    def visit_With(self, node: cst.With) -> None:
        items = [item for item in node.items if isinstance(item.item, cst.Call) and not item.item.args
                 and self.ctx.qualified_name(item.item.func) in NO_GRAD and item.asname is None]
        if len(items) != 1 or not self._evaluation(node) or not self._runs_a_model(node.body):
            return
        why = leaks(node.body, self._after(node))
        if why:
            return
        call = items[0].item
        fix = self.fix_builder("Use `torch.inference_mode()`")
        torch = fix.ensure_import("torch")
        if torch is not None:
            fix.replace(call, cst.parse_expression(f"{torch}.inference_mode()"))
        self.report(call, "`torch.no_grad()` around inference whose results leave only as numbers or host copies: "
                          "`torch.inference_mode()` also skips version counting and view tracking (a small gain, "
                          "largest for models of many small operations)", fix.build())

    def _evaluation(self, node: cst.With) -> bool:
        """Inference by every sign the file gives: an evaluation loop around or inside the block,
        in a function that never backpropagates (nor calls something that does), outside a
        Lightning hook."""
        loops = self.ctx.loops
        function = self.ctx.enclosing_function()
        if loops.training_loop() is not None or self.ctx.lightning.method() is not None:
            return False
        if loops.runs_backward(function.body if function is not None else self.ctx.module):
            return False
        if loops.evaluation_loop() is not None:
            return True
        if function is not None and INFERENCE_FUNCTION.search(function.name.value):
            return True  # `predict`, `evaluate`: with or without a loop
        if not _has_loop(node.body):
            return False
        if function is not None and EVAL_FUNCTION.search(function.name.value):
            return True
        return self._after_eval_call(node)

    def _after_eval_call(self, node: cst.With) -> bool:
        """The last ``.eval()``/``.train()`` before the block, in its block or one around it up to
        the function, puts a model in eval mode."""
        chain = self.ctx.ancestors
        for i in range(len(chain) - 1, 0, -1):
            current, parent = chain[i], chain[i - 1]
            if isinstance(current, scope_types()) and current is not node:
                return False
            if isinstance(parent, (cst.IndentedBlock, cst.Module)):
                body = list(parent.body)
                mode = last_mode_call(body[: body.index(current)])
                if mode is not None:
                    return mode == "eval"
        return False

    def _runs_a_model(self, body: cst.BaseSuite) -> bool:
        if calls_model(body):
            return True
        finder = _CallsSelf()
        visit(body, finder)
        return finder.found

    def _after(self, node: cst.With) -> list[cst.CSTNode]:
        """The statements that may run after the block: those after it in each block around it up
        to its function, and the whole bodies of the loops around it (their next pass)."""
        after: list[cst.CSTNode] = []
        chain = self.ctx.ancestors
        for i in range(len(chain) - 1, 0, -1):
            current, parent = chain[i], chain[i - 1]
            if isinstance(current, scope_types()) and current is not node:
                break
            if isinstance(current, loop_types()):
                after += [s for s in current.body.body]
            if isinstance(parent, (cst.IndentedBlock, cst.Module)):
                body = list(parent.body)
                after += body[body.index(current) + 1:]
        return after


def _has_loop(body: cst.BaseSuite) -> bool:
    class Loops(Visitor):
        found = False

        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, loop_types()):
                self.found = True
            return not self.found and not isinstance(node, scope_types())

    finder = Loops()
    visit(body, finder)
    return finder.found


def _ast_calls_self(node: ast.AST) -> bool:
    """The precheck twin of ``_CallsSelf``."""
    return any(isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "self"
               for call in ast.walk(node))


class _CallsSelf(Visitor):
    """``self(x)``: a module calling itself (a ``predict`` method)."""

    def __init__(self) -> None:
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value == "self":
            self.found = True
