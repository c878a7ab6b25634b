"""
## What it does

Finds gradient accumulation, a loop whose backward runs on every micro-batch while its optimizer
steps only every k-th (`if (i + 1) % k == 0: optimizer.step()`, `continue` unless it is time
to step, or a step after an inner loop `for micro in range(k): ... backward()`), where the loss
is not divided by the number of micro-batches.

## Why is it wrong

Each backward adds its gradients into `.grad`, so after k micro-batches the step applies the sum
of k mean gradients: k times the gradient of the batch the accumulation stands for. With SGD
that is a learning rate k times too high (the same learning rate no longer trains the same way
when k changes); with Adam the effect is smaller but not zero (the `eps` term, weight decay and
gradient clipping thresholds all see k times the gradient). Accumulating in place of a larger
batch means dividing each micro-batch's loss by k: Lightning's `accumulate_grad_batches` and
Hugging Face Accelerate both do it for you, and the DDP `no_sync` example shows the same loop.

## Example

```python
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    if (i + 1) % accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
```

## Use instead

```python
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accumulation_steps
    loss.backward()
    if (i + 1) % accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
```

## Fix safety

No fix: the division belongs where the author computes the loss, and the logged loss may or may
not be meant to include it. The rule stays silent when the loop already scales: the
backpropagated value is divided or multiplied (`(loss / k).backward()`, `loss = loss / k`,
`loss *= scale`), anything in the loop divides by the accumulation count, the gradients are
rescaled before the step (`p.grad /= k`, `p.grad.div_(k)`), or the loss is computed by a helper
of the file that mentions the count. It stays silent when the file sums on purpose
(`reduction="sum"`, `size_average=False`), when the backward belongs to a framework that scales
for you (`accelerator.backward(loss)`, a DeepSpeed engine's `backward(loss)`), for an inner
loop whose gradients are cleared before the step (an adversarial attack that backpropagates to
its perturbation, then `optimizer.zero_grad()` before the training's own backward), for a GAN's
`n_critic` schedule (the generator's backward and step are under the same test: not
accumulation), and in test code.

## References

- https://lightning.ai/docs/pytorch/stable/common/optimization.html#gradient-accumulation
- https://huggingface.co/docs/accelerate/usage_guides/gradient_accumulation
- https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync
"""

from __future__ import annotations

import ast
import re
from functools import cache

from torchlint.analysis.flow import function_of_call, path_to, reaching_assignments
from torchlint.analysis.conditions import ast_is_periodic_test
from torchlint.analysis.loops import AST_LOOPS, BACKWARD_CALLEES, ast_backwards_by_loop
from torchlint.analysis.steps import Accumulation, accumulation, ast_training_steps
from torchlint.analysis.syntax import ast_contains, ast_dotted_name, dotted_name, method_call, root_names
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, Severity, SyntaxIndex

SUMMED_ON_PURPOSE = re.compile(r"""reduction\s*=\s*["']sum["']|size_average\s*=\s*False""")


@cache
def scaling_operators() -> tuple[type, ...]:
    return (cst.Divide, cst.Multiply, cst.FloorDivide)


SCALING_METHODS = frozenset({"div", "div_", "mul", "mul_", "true_divide", "divide", "multiply"})


class AccumulationLossScale(Rule):
    code = "TL805"
    name = "accumulation-loss-scale"
    kind = "correctness"
    quiet_in_tests = True  # a test may sum losses on purpose
    summary = "Gradient accumulation whose loss is not divided by the number of micro-batches"
    severity = Severity.WARNING
    triggers = ("backward",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # what `accumulation` needs of a training loop around a step (the sum not asked for): a
        # remainder test around the step (or an `if <test>: continue` before it) with a backward of
        # the loop outside it, or an inner loop over micro-batches that calls backward while the
        # step is in no inner loop. A test that is a name needs a remainder assigned somewhere.
        steps = ast_training_steps(index)
        if not steps or SUMMED_ON_PURPOSE.search(index.source):
            return False
        remainder = index.memo("remainder_anywhere", lambda: any(
            ast_is_periodic_test(node) for node in index.nodes(ast.BinOp) if type(node.op) is ast.Mod))
        guards = [node for node in index.nodes(ast.If) if remainder and _ast_may_be_periodic(node.test)]
        skips = [node for node in guards if not node.orelse and len(node.body) == 1
                 and type(node.body[0]) is ast.Continue]
        backwards = index.calls(*BACKWARD_CALLEES)
        loops = index.nodes(*AST_LOOPS)
        micro = [loop for loop in loops if type(loop) in (ast.For, ast.AsyncFor) and _ast_micro_batches(loop.iter)
                 and any(ast_contains(loop, call) for call in backwards)]
        for step, around in steps:
            for loop in around:
                inside = ast_backwards_by_loop(index).get(id(loop), [])
                if any(ast_contains(guard, step) and ast_contains(loop, guard)
                       and any(not ast_contains(guard, call) for call in inside) for guard in guards):
                    return True
                if any(skip in loop.body and _before(skip, step) and any(_before(call, skip) for call in inside)
                       for skip in skips):
                    return True
                nested = any(other is not loop and ast_contains(other, step) and ast_contains(loop, other)
                             for other in loops)
                if not nested and any(inner is not loop and ast_contains(loop, inner) for inner in micro):
                    return True
        return False

    def visit_For(self, node: cst.CSTNode) -> None:
        if self.ctx.loops.backpropagated_names(node) is None or SUMMED_ON_PURPOSE.search(self.ctx.source):
            return
        found = accumulation(node, self.ctx.bindings)
        if found is None or self._scaled(found):
            return
        step = self.ctx.code_for(found.step)
        if found.count is not None:
            count = f"`{self.ctx.code_for(found.count)}`"
            message = (f"`{step}` runs once every {count} micro-batches and their gradients add up, but the loss is "
                       f"not divided by {count}: each step applies {count} times the mean gradient; divide the loss "
                       "by it before the backward")
        else:
            message = (f"`{step}` runs once every few micro-batches and their gradients add up, but the loss is not "
                       "divided by their number: each step applies that many times the mean gradient; divide the "
                       "loss by it before the backward")
        for backward in found.backwards:
            self.report(backward, message)

    visit_While = visit_For

    def _scaled(self, found: Accumulation) -> bool:
        """Does the loop already scale the loss or the gradients (see Fix safety)?"""
        count = dotted_name(found.count) if found.count is not None else None
        count_name = count.rsplit(".", 1)[-1] if count else None
        for backward in found.backwards:
            value = _backpropagated(backward)
            if value is None or _scales(value):
                return True
            for name in root_names(value):
                if self._name_scaled(found.loop, backward, name, count_name):
                    return True
        return self._divides_by(found.loop, count_name) or self._rescales_gradients(found.loop)

    def _name_scaled(self, loop: cst.CSTNode, backward: cst.Call, name: str, count: str | None) -> bool:
        """Is the loss name scaled in the loop (``loss /= k``, ``loss = x / k``), or computed by a
        helper of the file that mentions the count?"""
        scaled = []

        def on_visit(node: cst.CSTNode) -> bool:
            if isinstance(node, cst.AugAssign) and dotted_name(node.target) == name \
                    and isinstance(node.operator, (cst.DivideAssign, cst.MultiplyAssign, cst.FloorDivideAssign)):
                scaled.append(node)
            elif isinstance(node, cst.Assign) and any(dotted_name(t.target) == name for t in node.targets) \
                    and _scales(node.value):
                scaled.append(node)
            return not scaled

        walk(loop, on_visit)
        if scaled:
            return True
        chain = self._chain_to(loop, backward)
        for assigned in (reaching_assignments(name, chain) or []) if chain else []:
            if isinstance(assigned.value, cst.Call) and count is not None:
                helper = function_of_call(assigned.value, self.ctx.bindings)
                if helper is not None and re.search(rf"\b{re.escape(count)}\b", self.ctx.code_for(helper)):
                    return True
        return False

    def _chain_to(self, loop: cst.CSTNode, node: cst.CSTNode) -> list[cst.CSTNode] | None:
        """The nodes from the module down to ``node``, inside the loop the walk is at."""
        inside = path_to(loop, node)
        return list(self.ctx.ancestors) + inside[1:] if inside is not None else None

    def _divides_by(self, loop: cst.CSTNode, count: str | None) -> bool:
        """Does anything in the loop divide by the accumulation count (``scale = 1 / k``)?"""
        if count is None:
            return False
        found = []

        def on_visit(node: cst.CSTNode) -> bool:
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Divide, cst.FloorDivide)) \
                    and count in _names(node.right):
                found.append(node)
            elif isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.DivideAssign) \
                    and count in _names(node.value):
                found.append(node)
            elif method_call(node, "div", "div_", "true_divide") and any(count in _names(a.value) for a in node.args):
                found.append(node)
            return not found

        walk(loop, on_visit)
        return bool(found)

    def _rescales_gradients(self, loop: cst.CSTNode) -> bool:
        """``p.grad /= k``, ``p.grad.div_(k)``, ``p.grad.data.mul_(s)``: the gradients are scaled."""
        found = []

        def on_visit(node: cst.CSTNode) -> bool:
            if isinstance(node, cst.AugAssign) and ".grad" in (dotted_name(node.target) or "") + "." \
                    and isinstance(node.operator, (cst.DivideAssign, cst.MultiplyAssign)):
                found.append(node)
            elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                    and node.func.attr.value in SCALING_METHODS \
                    and (dotted_name(node.func.value) or "").endswith((".grad", ".grad.data")):
                found.append(node)
            return not found

        walk(loop, on_visit)
        return bool(found)


def _ast_may_be_periodic(test: ast.AST) -> bool:
    """May ``steps._periodic_guard`` find a remainder in an ``if`` test: written out, or a name
    (then the one value the file assigns it must hold one)?"""
    if type(test) is ast.UnaryOp and type(test.op) is ast.Not:
        test = test.operand
    return type(test) is ast.Name or ast_is_periodic_test(test)


def _before(node: ast.AST, other: ast.AST) -> bool:
    return (node.lineno, node.col_offset) < (other.lineno, other.col_offset)


def _ast_micro_batches(iterated: ast.AST) -> bool:
    """May ``steps._micro_batch_count`` read the iterated value as micro-batches (``range(k)``,
    ``batch.chunk(k)``, ``torch.split(x, n)``, inside ``enumerate(...)``)?"""
    if type(iterated) is not ast.Call:
        return False
    name = ast_dotted_name(iterated.func) or ""
    if name == "enumerate":
        return any(_ast_micro_batches(a.value if type(a) is ast.Starred else a)
                   for a in (*iterated.args, *(k.value for k in iterated.keywords)))
    return name == "range" or name.rsplit(".", 1)[-1] in ("chunk", "split")


def _backpropagated(call: cst.Call) -> cst.BaseExpression | None:
    """The value a backward call backpropagates: ``loss`` of ``loss.backward()`` and of
    ``scaler.scale(loss).backward()``; None for a framework's ``engine.backward(loss)``, which may
    scale by itself."""
    func = call.func
    if not isinstance(func, cst.Attribute) or func.attr.value != "backward":
        return None  # `self.manual_backward(loss)` and the like
    if call.args:
        return None  # accelerator.backward(loss), model_engine.backward(loss)
    target = func.value
    if method_call(target, "scale") and target.args:
        target = target.args[0].value
    return target


def _scales(value: cst.BaseExpression) -> bool:
    """A value that is scaled as a whole: ``loss / k``, ``loss * w``, ``loss.div(k)``."""
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, scaling_operators()):
        return True
    return method_call(value, *SCALING_METHODS) is not None


def _names(node: cst.CSTNode) -> set[str]:
    """The last parts of the names in a subtree (``args.accum_steps`` -> ``accum_steps``, ``args``)."""
    found: set[str] = set()

    def on_visit(child: cst.CSTNode) -> bool:
        if isinstance(child, cst.Name):
            found.add(child.value)
        elif isinstance(child, cst.Attribute):
            found.add(child.attr.value)
        return True

    walk(node, on_visit)
    return found
