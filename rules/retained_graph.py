"""
## What it does

Finds a tensor that carries autograd history being kept across the iterations of a training loop:
`losses.append(loss)`, `history["loss"].append(loss)`, `total_loss += loss`,
`total_loss = total_loss + loss`, where `loss` is the value the loop backpropagates and the
container or accumulator lives outside the loop. It also sees the graph kept behind the project's
own helpers: a meter's `update(loss)` or a history's `add(loss)` that stores its argument in the
object (`self.sum += val * n`, `self.values.append(value)`), in this file or in one it imports, is
reported at the call, with the place inside the helper as related information; the fix detaches
the argument there.

## Why is it wrong

A loss tensor references the whole autograd graph that produced it. Keeping it past the iteration
keeps that graph (its `grad_fn` chain, and every tensor the chain still holds) alive, so memory
grows every step until the process runs out of it. PyTorch's FAQ names this first among the
causes of running out of memory: "Don't accumulate history across your training loop." The
`+=` form is worse, because the sum builds one ever-longer graph.

## Example

```python
losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss)
```

## Use instead

```python
losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss.detach())
```
or `loss.item()` where a Python number is wanted (it synchronizes with the GPU each step).

## Fix safety

Safe. `.detach()` returns the same values without the graph, so everything that reads the values
later (averages, logging, plots) is unchanged. The rule does not fire when the value is already a
number (`.item()`, `float(...)`) or detached, under `torch.no_grad()`, when the container is
rebuilt inside the loop, or when the accumulated value is itself backpropagated (gradient
accumulation needs the graph).

## References

- https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory
- https://pytorch.org/docs/stable/generated/torch.Tensor.detach.html
- https://pytorch.org/docs/stable/generated/torch.Tensor.item.html
"""

from __future__ import annotations

import ast

from torchlint.analysis.calls import ast_call_summary, ast_project_mentions, related, where
from torchlint.analysis.loops import ast_backpropagated_names, ast_training_loop_lines
from torchlint.analysis.summaries import PARAMETER
from torchlint.analysis.syntax import ast_root_names, dotted_name, root_names, target_names
from torchlint.analysis.walk import Visitor, visit
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

# Calls and attributes after which a value no longer holds the graph.
DETACHING_METHODS = frozenset({"item", "detach", "detach_", "tolist", "numpy", "data"})
NUMBER_BUILTINS = frozenset({"float", "int", "bool", "str", "round", "len", "repr", "format"})


def graph_names(expr: cst.BaseExpression) -> set[str]:
    """Names whose autograd graph the value of expr still holds: ``loss * n`` -> {loss, n};
    ``loss.item() * n`` -> {n}; ``float(loss)``, ``loss.detach()``, ``loss.data`` -> {}."""
    return root_names(expr, DETACHING_METHODS)


def ast_graph_names(expr: ast.AST) -> set[str]:
    """The twin of ``graph_names`` on CPython's tree."""
    return ast_root_names(expr, DETACHING_METHODS)


def _ast_kept(index: SyntaxIndex) -> list[tuple[ast.AST, ast.AST, ast.AST]]:
    """The precheck twin of what ``visit_Call``, ``visit_AugAssign`` and ``visit_Assign`` give
    ``_check``: (statement or call, container, value) for ``c.append(v)``, ``c += v``, ``c -= v``
    and ``c = c + v`` (or ``v + c``)."""
    kept = [(call, call.func.value, call.args[0]) for call in index.calls("append")
            if isinstance(call.func, ast.Attribute) and call.func.attr == "append" and len(call.args) == 1
            and not call.keywords and not isinstance(call.args[0], ast.Starred)]
    kept += [(node, node.target, node.value) for node in index.nodes(ast.AugAssign)
             if isinstance(node.op, (ast.Add, ast.Sub))]
    for node in index.nodes(ast.Assign):
        value = node.value
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and isinstance(value, ast.BinOp) \
                and isinstance(value.op, ast.Add):
            for own, other in ((value.left, value.right), (value.right, value.left)):
                if isinstance(own, ast.Name) and own.id == node.targets[0].id:
                    kept.append((node, node.targets[0], other))
                    break
    return kept


def is_detached(expr: cst.BaseExpression) -> bool:
    """Explicitly turned into a number or detached: ``loss.item()``, ``float(loss)``,
    ``loss.detach().cpu()``."""
    while True:
        if isinstance(expr, cst.Call):
            if isinstance(expr.func, cst.Name):
                return expr.func.value in NUMBER_BUILTINS
            if not isinstance(expr.func, cst.Attribute):
                return False
            if expr.func.attr.value in DETACHING_METHODS:
                return True
            expr = expr.func.value
        elif isinstance(expr, cst.Attribute):
            if expr.attr.value in DETACHING_METHODS:
                return True
            expr = expr.value
        else:
            return False


class _LoopBindings(Visitor):
    """Names reset inside a loop (``losses = []``; not ``total = total + loss``, which
    accumulates), and those rebound to a detached value (``loss = loss.item()``)."""

    def __init__(self) -> None:
        self.reset: set[str] = set()
        self.detached: set[str] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            for name in target_names(target.target):
                if name not in root_names(node.value):
                    self.reset.add(name)
                if is_detached(node.value):
                    self.detached.add(name)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.reset.update(target_names(node.target))

    def visit_For(self, node: cst.For) -> None:
        self.reset.update(target_names(node.target))


class RetainedGraph(Rule):
    code = "TL101"
    name = "retained-graph"
    kind = "correctness"
    summary = "A tensor with autograd history kept across training iterations (memory grows every step)"
    fix_applicability = "safe"
    triggers = ("backward",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # an append, `+=`/`-=` or `total = total + ...` in a loop that calls backward, keeping a
        # value that holds the graph of a name some backward backpropagates
        training = ast_training_loop_lines(index)
        if not any(training):
            return False
        backpropagated = ast_backpropagated_names(index)
        if any(training[node.lineno] and ast_root_names(container) and ast_graph_names(value) & backpropagated
               for node, container, value in _ast_kept(index)):
            return True
        # a helper called in the loop keeps an argument that holds such a graph (`meter.update(loss)`)
        if not (ast_project_mentions(index, "append") or ast_project_mentions(index, "+=")):
            return False
        return any(training[call.lineno] and any(
                       ast_graph_names(argument) & backpropagated
                       for argument in (*call.args, *(keyword.value for keyword in call.keywords if keyword.arg)))
                   and (summary := ast_call_summary(index, call)) is not None
                   and any(keep.with_graph for keep in summary.keeps) for call in index.nodes(ast.Call))

    def __init__(self, ctx):
        super().__init__(ctx)
        self._bindings: dict[int, _LoopBindings] = {}

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "append" and len(node.args) == 1
                and node.args[0].keyword is None and not node.args[0].star):
            self._helper_keeps(node)
            return
        self._check(node, container=func.value, value=node.args[0].value, verb="appends")

    def _helper_keeps(self, node: cst.Call) -> None:
        """``meter.update(loss)`` where ``update`` keeps its argument with the graph
        (``self.sum += val * n``): memory grows at the call, every iteration."""
        if dotted_name(node.func) is None or not self.ctx.loops.enclosing_loops() or self.ctx.loops.grad_disabled():
            return
        resolved = self.ctx.calls.resolve(node)
        if resolved is None or not resolved.function.keeps:
            return
        positional = [a for a in node.args if a.keyword is None and not a.star]
        keywords = [a.keyword.value for a in node.args if a.keyword is not None]
        for keep in resolved.function.keeps:
            if not keep.with_graph or keep.value.kind != PARAMETER or keep.value.index is None:
                continue
            slot = resolved.argument_for(keep.value.index, len(positional), keywords)
            argument = positional[slot] if isinstance(slot, int) and 0 <= slot < len(positional) else \
                next((a for a in node.args if a.keyword is not None and a.keyword.value == slot), None)
            if argument is None:
                continue
            names = graph_names(argument.value)
            loop = self._backpropagating_loop(names) if names else None
            if loop is None:
                continue
            backpropagated = self.ctx.loops.backpropagated_names(loop)
            kept = names & backpropagated
            receiver = root_names(node.func.value) if isinstance(node.func, cst.Attribute) else set()
            bindings = self._loop_bindings(loop)
            if kept <= bindings.detached or receiver & bindings.reset:
                continue  # a number by now, or the holder is rebuilt every iteration
            value = argument.value
            detached = f"{self.ctx.code_for(value)}.detach()" if isinstance(
                value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) else f"({self.ctx.code_for(value)}).detach()"
            effect = keep.effect
            self.report(node, f"`{dotted_name(node.func)}(...)` keeps `{sorted(kept)[0]}` with its autograd graph on "
                              f"every iteration (`{effect.what}` in `{resolved.function.qualname}`, {where(effect)}), "
                              f"so memory grows each step; pass `{detached}`",
                        self.fix("Detach the value before passing it", self.replace(value, detached)),
                        related=(related(effect, "the value is kept here, with its graph"),))
            return

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)):
            self._check(node, container=node.target, value=node.value, verb="adds")

    def visit_Assign(self, node: cst.Assign) -> None:
        # total = total + loss
        value = node.value
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name) \
                or not isinstance(value, cst.BinaryOperation) or not isinstance(value.operator, cst.Add):
            return
        total = node.targets[0].target.value
        for own, other in ((value.left, value.right), (value.right, value.left)):
            if isinstance(own, cst.Name) and own.value == total:
                self._check(node, container=node.targets[0].target, value=other, verb="adds")
                return

    def _check(self, node: cst.CSTNode, container: cst.BaseExpression, value: cst.BaseExpression,
               verb: str) -> None:
        names = graph_names(value)
        if not names or self.ctx.loops.grad_disabled():
            return
        holders = root_names(container)
        if not names or not holders:
            return
        loop = self._backpropagating_loop(names)
        if loop is None:
            return
        bindings = self._loop_bindings(loop)
        backpropagated = self.ctx.loops.backpropagated_names(loop)
        kept = names & backpropagated
        if kept <= bindings.detached or holders & backpropagated:
            return  # a number by now, or the accumulator is itself backpropagated (gradient accumulation)
        if holders & bindings.reset:
            return  # rebuilt every iteration: nothing survives it
        name = sorted(kept)[0]
        detached = f"{self.ctx.code_for(value)}.detach()" if isinstance(
            value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) else f"({self.ctx.code_for(value)}).detach()"
        self.report(node, f"`{self.ctx.code_for(container)}` {verb} `{name}` with its autograd graph on every "
                          f"iteration, so memory grows each step; use `{detached}`",
                    self.fix("Detach the value before keeping it", self.replace(value, detached)))

    def _backpropagating_loop(self, names: set[str]) -> cst.CSTNode | None:
        """The innermost enclosing loop (in this function) that backpropagates one of names."""
        for loop in self.ctx.loops.enclosing_loops():
            backpropagated = self.ctx.loops.backpropagated_names(loop)
            if backpropagated and names & backpropagated:
                return loop
        return None

    def _loop_bindings(self, loop: cst.CSTNode) -> _LoopBindings:
        if id(loop) not in self._bindings:
            bindings = _LoopBindings()
            visit(loop.body, bindings)
            self._bindings[id(loop)] = bindings
        return self._bindings[id(loop)]
