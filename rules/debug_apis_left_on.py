"""
## What it does

Finds debugging and profiling switches left on in training code:
`torch.autograd.set_detect_anomaly(True)`, `with torch.autograd.detect_anomaly():`, and profilers
wrapped around training (`torch.autograd.profiler.profile`, `emit_nvtx`, `emit_itt`, and
`torch.profiler.profile` without a `schedule`).

## Why is it slow

Anomaly detection records a Python stack trace for every operation of the forward pass and checks
every gradient of the backward pass for NaN, which synchronizes with the GPU; PyTorch's tuning
guide lists it among the debugging APIs to turn off for regular training, and the autograd
documentation warns that its checks slow the program down. A profiler records every operator (and
`emit_nvtx`/`emit_itt` push a range around each one) for as long as it is active; without a
schedule that is the whole run.

## Expected gain

Large. In a benchmark by a PyTorch-Ignite maintainer, anomaly detection took an epoch of VGG16-BN
on CIFAR-10 from about 22 s to 52-57 s (https://github.com/pytorch/ignite/pull/219). A profiler
without a schedule slows every step it records, by an amount that depends on what it records.
`torchlint verify --each --unsafe-fixes script.py` measures the step time before and after on your
machine.

## Example

```python
torch.autograd.set_detect_anomaly(True)

with torch.autograd.profiler.profile():
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
```

## Use instead

```python
for x, y in loader:
    loss_fn(model(x), y).backward()
    optimizer.step()
```
Turn them on only while debugging (`if args.detect_anomaly:`), or give `torch.profiler.profile` a
`schedule` that profiles a few steps.

## Fix safety

Unsafe: a `set_detect_anomaly(True)` statement is deleted, and a `with` block of
`detect_anomaly()`, `set_detect_anomaly(True)` or a profiler whose result is not kept (no `as`
name) is unwrapped, its body kept at the outer indentation (or only that item is dropped when the
`with` has others). A run that trains without NaN computes the same values either way, but the
behaviour changes: a NaN in the backward pass no longer stops the run with an error, and a
profiler no longer writes its trace. No fix for a
profiler bound with `as` (the code that reads its results must go too; remove both by hand). The
rule does not fire for switches under an `if` (a debug flag) other than `if __name__ ==
"__main__":`, with a non-literal argument (`set_detect_anomaly(args.debug)`, `enabled=flag`),
inside a `try` block that handles errors (it relies on anomaly errors), in tests and in functions
that run `torch.autograd.gradcheck`, or (for
profilers and `with detect_anomaly()` blocks, which end with their block) away from any backward
pass. `set_detect_anomaly(True)` as a statement switches anomaly detection on for the whole
process, so it is reported wherever it is (in a model's `__init__` too).

## References

- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#disable-debugging-apis
- https://pytorch.org/docs/stable/autograd.html#anomaly-detection
- https://pytorch.org/docs/stable/autograd.html#profiler
- https://pytorch.org/docs/stable/profiler.html
- https://github.com/pytorch/ignite/pull/219
"""

from __future__ import annotations

import ast

from torchlint.analysis.index import span
from torchlint.analysis.loops import AST_FUNCTIONS, BACKWARD_CALLEES, ast_training_loop_lines
from torchlint.analysis.syntax import (ast_callee, ast_dotted_name, ast_find_keyword, ast_has_star_args,
                                       ast_is_literal, dotted_name, find_argument, find_keyword, is_literal,
                                       is_main_guard, positional_args)
from torchlint.fixes import removal_edit, statement_edit
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

ANOMALY_SWITCH = frozenset({"torch.autograd.set_detect_anomaly", "torch.autograd.anomaly_mode.set_detect_anomaly"})
ANOMALY_CONTEXT = frozenset({"torch.autograd.detect_anomaly", "torch.autograd.anomaly_mode.detect_anomaly"})
_AST_WITH_ELSE = (ast.For, ast.AsyncFor, ast.While, ast.Try, *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))
PROFILERS = frozenset({
    "torch.autograd.profiler.profile", "torch.autograd.profiler.emit_nvtx", "torch.autograd.profiler.emit_itt",
    "torch.autograd.profile", "torch.autograd.emit_nvtx", "torch.profiler.profile", "torch.profiler.profiler.profile",
    "torch.autograd.profiler_legacy.profile",
})


class DebugApisLeftOn(Rule):
    code = "TL803"
    name = "debug-apis-left-on"
    kind = "performance"
    summary = "Anomaly detection or a profiler left on in training code"
    fix_applicability = "unsafe"
    triggers = ("anomaly", "profile", "emit_nvtx", "emit_itt")

    @classmethod
    def applies(cls, text: str) -> bool:
        # the process-wide switch anywhere; the rest only near a backward pass or a Lightning fit
        return "set_detect_anomaly" in text or super().applies(text) and any(
            word in text for word in ("backward", ".fit(", "training_step"))

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # `set_detect_anomaly(True)`, or a `with` over one of these APIs
        for call in index.calls("set_detect_anomaly"):
            mode = ast_find_keyword(call, "mode")
            mode = mode.value if mode is not None else call.args[0] if call.args else None
            if not ast_has_star_args(call) and ast_is_literal(mode, True) and _ast_left_on(index, call):
                return True
        # (a `with set_detect_anomaly(...)` is on only with a literal True: the loop above)
        names = {name.rsplit(".", 1)[1] for name in ANOMALY_CONTEXT | PROFILERS}
        return any(index.is_call(item.context_expr, *names) and index.may_be_imported(item.context_expr.func)
                   and _ast_may_be_on(item.context_expr) and not _ast_scheduled(item.context_expr)
                   and _ast_left_on(index, node) and _ast_near_backward(index, node)
                   for node in index.nodes(ast.With, ast.AsyncWith) for item in node.items)

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        if name not in ANOMALY_SWITCH or isinstance(self.ctx.parent, cst.WithItem):
            return
        if not self._switched_on(node, name) or not self._left_on():
            return  # the switch is process-wide: wherever it is called, training runs with it
        fix = None
        statement = self.ctx.ancestors[-3] if len(self.ctx.ancestors) > 2 else None
        if isinstance(self.ctx.parent, cst.Expr) and isinstance(statement, cst.SimpleStatementLine):
            edit = removal_edit(self.ctx, statement)
            fix = self.fix("Remove the call", edit) if edit else None
        self.report(node, "`set_detect_anomaly(True)` records a stack trace for every operation and checks every "
                          "gradient for NaN, slowing training a lot; remove it (or enable it behind a debug flag)",
                    fix)

    def visit_With(self, node: cst.With) -> None:
        for item in node.items:
            call = item.item
            name = self.ctx.qualified_name(call.func) if isinstance(call, cst.Call) else None
            if name is None or not self._switched_on(call, name) or not self._left_on():
                continue
            if name in PROFILERS:
                if find_keyword(call, "schedule") is not None or not self._near_backward(node):
                    continue
                what = f"`{dotted_name(call.func)}(...)` records every operator of the training it wraps"
            elif name in ANOMALY_CONTEXT | ANOMALY_SWITCH:
                function = self.ctx.enclosing_function()
                if not self._near_backward(node if function is None else function.body):
                    continue
                what = f"`{dotted_name(call.func)}(...)` records a stack trace for every operation and checks " \
                       "every gradient for NaN"
            else:
                continue
            if item.asname is not None:
                self.report(item, f"{what}; remove the `with` (and the code that reads "
                                  f"`{self.ctx.code_for(item.asname.name)}`) once done profiling")
            else:
                edit = self._unwrap(node, item)
                self.report(item, f"{what}, slowing training a lot; remove the `with` and keep its body",
                            self.fix("Remove the wrapper, keep the body", edit) if edit else None)

    def _switched_on(self, call: cst.Call, name: str) -> bool:
        """The switch is literally on: ``set_detect_anomaly(True)``; ``detect_anomaly()`` and the
        profilers unless ``enabled=`` says otherwise (or is not a literal)."""
        if any(a.star for a in call.args):
            return False
        if name in ANOMALY_SWITCH:
            mode = find_argument(call, "mode", 0)
            return mode is not None and is_literal(mode.value, True)
        enabled = find_keyword(call, "enabled")
        if enabled is None and name in PROFILERS and name != "torch.profiler.profile" and positional_args(call):
            enabled = positional_args(call)[0]  # the legacy profilers take `enabled` first
        return enabled is None or is_literal(enabled.value, True)

    def _left_on(self) -> bool:
        """Not behind a debug flag, not relied on by an error handler, not a gradient
        check (``torch.autograd.gradcheck`` in the same function); tests are left to Rule.report."""
        function = self.ctx.enclosing_function()
        if function is not None and "gradcheck" in self.ctx.code_for(function):
            return False
        for parent, child in zip(self.ctx.ancestors, self.ctx.ancestors[1:]):
            if isinstance(parent, (cst.If, cst.Else)) and not (isinstance(parent, cst.If) and is_main_guard(parent)):
                return False
            if isinstance(parent, (cst.Try, cst.TryStar)) and child is parent.body and parent.handlers:
                return False
            if isinstance(parent, cst.IfExp):
                return False
        return True

    def _near_backward(self, scope: cst.CSTNode) -> bool:
        """Does the scope run a backward pass (a training loop, a Lightning fit)?"""
        if self.ctx.loops.backpropagated_names(scope) is not None or self.ctx.loops.in_training_loop():
            return True
        code = self.ctx.code_for(scope)
        return ".fit(" in code or "training_step" in code

    def _unwrap(self, node: cst.With, item: cst.WithItem):
        items = [i for i in node.items if i is not item]
        if items:
            items[-1] = items[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return statement_edit(self.ctx, node, [node.with_changes(items=items, leading_lines=[])])
        body = list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else None
        if body is None:
            return None
        header = node.body.header
        if header.comment is not None:  # `with detect_anomaly():  # why` keeps its comment above the body
            body[0] = body[0].with_changes(leading_lines=[
                cst.EmptyLine(comment=header.comment), *body[0].leading_lines])
        return statement_edit(self.ctx, node, body)


def _ast_scheduled(call: ast.Call) -> bool:
    """A profiler given a ``schedule=`` (it records only the steps the schedule picks)."""
    return ast_callee(call) != "detect_anomaly" and ast_find_keyword(call, "schedule") is not None


def _ast_near_backward(index: SyntaxIndex, node: ast.AST) -> bool:
    """The precheck twin of ``_near_backward``, judged on the function around the ``with`` (the
    module at its top level), which holds both scopes the rule reads: a backward call in it, the
    ``with`` inside a training loop, or a Lightning fit or ``training_step`` in its text."""
    if ast_training_loop_lines(index)[node.lineno]:
        return True
    lines = index.memo("source_lines", index.source.splitlines)
    around = [f for f in index.nodes(*AST_FUNCTIONS) if f.lineno <= node.lineno <= f.end_lineno]
    first, last = span(min(around, key=lambda f: f.end_lineno - f.lineno)) if around else (1, len(lines))
    if any(first <= call.lineno <= last for call in index.calls(*BACKWARD_CALLEES)):
        return True
    text = "\n".join(lines[first - 1:last])
    return ".fit(" in text or "training_step" in text


def _ast_left_on(index: SyntaxIndex, node: ast.AST) -> bool:
    """The precheck twin of ``_left_on``, by lines: not inside an ``if`` (but ``if __name__ ==
    "__main__":``), an ``else:`` block, or the body of a ``try`` with handlers."""
    line = node.lineno
    for statement in index.nodes(ast.If):
        if statement.lineno <= line <= statement.end_lineno and not _ast_main_guard(statement.test):
            return False
    for statement in index.nodes(*_AST_WITH_ELSE):
        if statement.orelse and statement.orelse[0].lineno <= line <= statement.orelse[-1].end_lineno:
            return False
        if getattr(statement, "handlers", None) and statement.body[0].lineno <= line <= statement.body[-1].end_lineno:
            return False
    return True


def _ast_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either operand order), as ``is_main_guard`` reads it."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = {ast_dotted_name(side) or (side.value if isinstance(side, ast.Constant) else None)
             for side in (test.left, test.comparators[0])}
    return sides == {"__name__", "__main__"}


def _ast_may_be_on(call: ast.Call) -> bool:
    """The precheck twin of ``_switched_on`` for the contexts: ``enabled=`` absent or literally
    True (a legacy profiler's first positional is ``enabled`` too, but `torch.profiler.profile`'s
    is not, and CPython's tree does not tell them apart: positionals are not read)."""
    if ast_has_star_args(call):
        return False
    enabled = ast_find_keyword(call, "enabled")
    return enabled is None or ast_is_literal(enabled.value, True)
