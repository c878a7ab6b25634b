"""
## What it does

Finds gradient clipping (`torch.nn.utils.clip_grad_norm_`, `clip_grad_value_`) that runs after
`scaler.scale(loss).backward()` without `scaler.unscale_(optimizer)` in between.

## Why is it wrong

`GradScaler` multiplies the loss by the current loss scale (65536 to start with) before backward,
so every gradient comes out multiplied by that scale, and `scaler.step` divides it out only when
it steps. Clipping in between compares the scaled gradients with the threshold: with a norm of
`max_norm=1.0` and a scale of 65536, every step is clipped to a tiny fraction of its size, and
since the scale changes during training (halved on overflow, doubled every 2000 good steps), so
does the effective clipping. PyTorch's AMP examples: "If you wish to modify or inspect the
parameters' `.grad` attributes between `backward()` and `scaler.step(optimizer)`, you should
unscale them first."

## Example

```python
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
scaler.step(optimizer)
scaler.update()
```

## Use instead

```python
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
scaler.step(optimizer)
scaler.update()
```

## Fix safety

Unsafe, because it repairs a bug and so changes what the run computes: clipping then applies to
the true gradients at the threshold written, instead of to gradients multiplied by the loss scale
(where it almost never triggers, or always does). `torchlint verify --unsafe-fixes` judges it by
whether the run still trains. `scaler.step` knows the gradients were unscaled and does not unscale
them twice. The optimizer is the one the
same scaler steps (`scaler.step(optimizer)`) in the same function; the fix is withheld when there
is no such call or more than one optimizer, and when the function calls `unscale_` anywhere else
(a second `unscale_` before `update()` raises a RuntimeError). The order is followed through
`if`/`else` branches, so clipping in the branch that did not scale is not reported.

## References

- https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-clipping
- https://pytorch.org/docs/stable/amp.html#torch.amp.GradScaler.unscale_
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ast

from torchlint.analysis.syntax import ast_callee, dotted_name, method_call
from torchlint.fixes import block_indentation
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, Severity, SyntaxIndex
from torchlint.rules._amp import CLIP_GRAD_FUNCTIONS


@dataclass
class _Clip:
    call: cst.Call
    scaler: str
    statement: cst.CSTNode
    indent: str


@dataclass
class _Scope:
    """What one function (or the module) has done so far, in source order."""

    pending: set[str] = field(default_factory=set)  # scalers whose scaled gradients are not unscaled yet
    optimizers: dict[str, set[str]] = field(default_factory=dict)  # scaler -> what it steps
    unscales: set[str] = field(default_factory=set)
    clips: list[_Clip] = field(default_factory=list)
    branches: list[dict] = field(default_factory=list)  # per open `if`: the state before it, after its body


class ClipWithoutUnscale(Rule):
    code = "TL704"
    name = "clip-without-unscale"
    kind = "correctness"
    summary = "Gradients clipped while still multiplied by the GradScaler's loss scale (`unscale_` first)"
    severity = Severity.ERROR
    fix_applicability = "unsafe"
    triggers = ("clip_grad",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a scaled backward: `scaler.scale(loss).backward()`
        return any(isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Call)
                   and ast_callee(call.func.value) == "scale" for call in index.calls("backward"))

    def __init__(self, ctx):
        super().__init__(ctx)
        self.scopes = [_Scope()]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.append(_Scope())

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._report(self.scopes.pop())

    def leave_Module(self, original_node: cst.Module) -> None:
        self._report(self.scopes.pop())

    # if/else: each branch starts from the state before the `if`; after it, either may have run
    def visit_If(self, node: cst.If) -> None:
        scope = self.scopes[-1]
        parent = self.ctx.parent
        if isinstance(parent, cst.If) and parent.orelse is node:  # elif: an else branch of the parent
            self._enter_else(scope)
        scope.branches.append({"before": set(scope.pending), "body": None})

    def visit_Else(self, node: cst.Else) -> None:
        if isinstance(self.ctx.parent, cst.If):  # not the else of a for, while or try
            self._enter_else(self.scopes[-1])

    @staticmethod
    def _enter_else(scope: _Scope) -> None:
        branch = scope.branches[-1]
        branch["body"] = set(scope.pending)
        scope.pending = set(branch["before"])

    def leave_If(self, original_node: cst.If) -> None:
        scope = self.scopes[-1]
        branch = scope.branches.pop()
        after_body = branch["body"]
        if after_body is None:  # no else: the body may or may not have run
            scope.pending |= branch["before"]
        else:
            scope.pending |= after_body

    def visit_Call(self, node: cst.Call) -> None:
        scope = self.scopes[-1]
        backward = method_call(node, "backward")
        if backward is not None and method_call(backward.value, "scale"):
            scaler = dotted_name(backward.value.func.value)
            if scaler is not None:
                scope.pending.add(scaler)
            return
        step = method_call(node, "unscale_", "step", "update")
        if step is not None:
            scaler = dotted_name(step.value)
            if step.attr.value == "unscale_":
                scope.unscales.add(scaler)
            elif step.attr.value == "step" and node.args and scaler in scope.pending | set(scope.optimizers):
                scope.optimizers.setdefault(scaler, set()).add(self.ctx.code_for(node.args[0].value))
            if step.attr.value != "step" or node.args:  # optimizer.step() is not the scaler's
                scope.pending.discard(scaler)
            return
        if scope.pending and self.ctx.qualified_name(node.func) in CLIP_GRAD_FUNCTIONS:
            position = self.ctx.statement_position()
            if position is None:
                return
            statement = position[0]
            block = self.ctx.ancestors[self._index(statement) - 1]
            indent = block_indentation(self.ctx, block) if isinstance(block, cst.IndentedBlock) else ""
            for scaler in sorted(scope.pending):
                scope.clips.append(_Clip(node, scaler, statement, indent))

    def _index(self, node: cst.CSTNode) -> int:
        for i, ancestor in enumerate(self.ctx.ancestors):
            if ancestor is node:
                return i
        raise ValueError("not an ancestor")

    def _report(self, scope: _Scope) -> None:
        for clip in scope.clips:
            optimizers = scope.optimizers.get(clip.scaler, set())
            optimizer = next(iter(optimizers)) if len(optimizers) == 1 else "optimizer"
            function = self.ctx.qualified_name(clip.call.func).rsplit(".", 1)[1]
            unscale = f"{clip.scaler}.unscale_({optimizer})"
            fix = None
            if len(optimizers) == 1 and clip.scaler not in scope.unscales:
                fix = self.fix(f"Call `{unscale}` before clipping",
                               self.insert_lines_before(clip.statement, f"{clip.indent}{unscale}\n"))
            self.report(clip.call, f"`{function}` clips the gradients while `{clip.scaler}` still has them "
                                   f"multiplied by the loss scale; call `{unscale}` before it", fix)
