"""
## What it does

Finds `zero_grad` calls that write zeros into every gradient instead of dropping the gradients:
`optimizer.zero_grad(set_to_none=False)` and `model.zero_grad(False)` on any torch version, and a
bare `optimizer.zero_grad()` when the target torch is older than 2.0 (where `set_to_none`
defaulted to `False`).

## Why is it slow

Writing zeros launches a memset for every parameter's gradient every step and keeps the
gradient memory allocated between steps. With `set_to_none=True` the next backward pass allocates
the gradients afresh and assigns them instead of adding to zeros, which saves the memset and one
read per gradient. The PyTorch tuning guide lists this under "use parameter.grad = None instead of
model.zero_grad()"; since torch 2.0, `set_to_none=True` is the default (pytorch#92731).

## Expected gain

Small, mostly memory. PyTorch's `zero_grad` documentation says gradients set to None lower the
memory footprint and can modestly improve performance; nnU-Net measured little change in run time
and GPU memory falling from 7800 to 7500 MB on one task
(https://github.com/MIC-DKFZ/nnUNet/pull/1630). Since torch 2.0 it is the default, so on current
torch the rule fires only where code asks for zeros explicitly. `torchlint verify --each
--unsafe-fixes script.py` measures the step time and memory before and after on your machine.

## Example

```python
optimizer.zero_grad(set_to_none=False)
```

## Use instead

```python
optimizer.zero_grad()  # torch >= 2.0; write set_to_none=True on older versions
```

## Fix safety

Unsafe. A gradient of `None` is not a gradient of zeros: optimizers skip parameters whose
`.grad` is `None` (so momentum and weight decay do not move a parameter that got no gradient this
step), and code that reads `p.grad` before the next backward finds `None`. The rule stays silent
when the statements right after the call read `.grad` before the next `backward()`, and in files
that capture CUDA graphs (`torch.cuda.graph`, `CUDAGraph`, `make_graphed_callables`), which need
gradients that stay allocated. No fix in a file that writes into `.grad` in place
(`p.grad += g`, `p.grad.add_(g)`, `p.grad[mask] = 0`): after `zero_grad()` those gradients must
be zeros, and on `None` the write raises a `TypeError` (the message says so). Versions: `set_to_none` exists since torch 1.7; a bare
`zero_grad()` is reported only for a target torch from 1.7 up to (not including) 2.0.

## References

- https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html
- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#use-parameter-grad-none-instead-of-model-zero-grad-or-optimizer-zero-grad
- https://github.com/pytorch/pytorch/pull/92731
- https://github.com/pytorch/pytorch/blob/main/torch/profiler/_pattern_matcher.py
- https://github.com/MIC-DKFZ/nnUNet/pull/1630
"""

from __future__ import annotations

import ast

from torchlint.analysis.syntax import ast_find_keyword, ast_has_star_args, ast_is_literal, find_argument, is_literal
from torchlint.analysis.walk import Visitor, visit
from torchlint.fixes import remove_arg, replace_arg_value, set_keyword
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

CUDA_GRAPH_MARKERS = ("CUDAGraph", "cuda.graph(", "make_graphed_callables")


class _GradReader(Visitor):
    def __init__(self) -> None:
        self.reads_grad = False
        self.backward = False

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "grad":
            self.reads_grad = True
        elif node.attr.value == "backward":
            self.backward = True


def _is_grad(expr: cst.BaseExpression) -> bool:
    """``p.grad``, ``p.grad.data``, ``p.grad[i]``."""
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        if isinstance(expr, cst.Attribute) and expr.attr.value == "grad":
            return True
        expr = expr.value
    return False


class _GradWriter(Visitor):
    def __init__(self) -> None:
        self.found = False

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.found |= _is_grad(node.target)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.found |= isinstance(node.target, cst.Subscript) and _is_grad(node.target)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        self.found |= isinstance(func, cst.Attribute) and func.attr.value.endswith("_") \
            and not func.attr.value.startswith("_") and func.attr.value != "zero_" and _is_grad(func.value)


class ZeroGradSetToNone(Rule):
    code = "TL301"
    name = "zero-grad-set-to-none"
    kind = "performance"
    summary = "`zero_grad` that writes zeros instead of dropping the gradients (`set_to_none=True`)"
    fix_applicability = "unsafe"
    triggers = ("zero_grad",)
    torch_versions = ">=1.7"

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # `.zero_grad(set_to_none=False)`, or a bare `.zero_grad()` before torch 2.0
        for call in index.calls("zero_grad"):
            flag = ast_find_keyword(call, "set_to_none")
            flag = flag.value if flag is not None else call.args[0] if call.args else None
            if isinstance(call.func, ast.Attribute) and not ast_has_star_args(call) and (
                    ast_is_literal(flag, False) or not call.args and not call.keywords
                    and not index.torch_at_least("2.0")):
                return True
        return False

    def visit_Call(self, node: cst.Call) -> None:
        if not (isinstance(node.func, cst.Attribute) and node.func.attr.value == "zero_grad"):
            return
        if any(a.star for a in node.args) or any(marker in self.ctx.code for marker in CUDA_GRAPH_MARKERS):
            return
        flag = find_argument(node, "set_to_none", 0)
        if flag is None and not node.args and not self.ctx.torch_at_least("2.0"):
            message = ("`zero_grad()` writes zeros into every gradient before torch 2.0 (a small cost, mostly "
                       "memory); pass `set_to_none=True` to drop them instead")
            new = set_keyword(node, "set_to_none", cst.Name("True"))
        elif flag is not None and is_literal(flag.value, False):
            message = ("`zero_grad(set_to_none=False)` writes zeros into every gradient (a small cost, mostly memory); "
                       "let it drop them instead")
            # drop the argument (the default is True since 2.0) unless the call spans lines,
            # where the argument may carry a comment
            one_line = "\n" not in self.ctx.code_for(node)
            new = remove_arg(node, flag) if self.ctx.torch_at_least("2.0") and one_line else \
                replace_arg_value(node, flag, cst.Name("True"))
        else:
            return
        if self._grad_read_next():
            return  # the code right after relies on zeroed (not None) gradients
        fix = self.fix("Set gradients to None", self.replace(node, new))
        if self._writes_grad_in_place():
            # `p.grad += g` after zero_grad: with None gradients that raises a TypeError
            fix = None
            message += " (no fix: this file writes into `.grad` in place, which needs zeroed gradients)"
        self.report(node, message, fix)

    def _writes_grad_in_place(self) -> bool:
        """Does the file add to or write into a ``.grad`` in place (``p.grad += g``,
        ``p.grad.add_(g)``, ``p.grad[mask] = 0``)? That works on zeros and fails on None."""
        if not hasattr(self, "_in_place"):
            finder = _GradWriter()
            visit(self.ctx.module, finder)
            self._in_place = finder.found
        return self._in_place

    def _grad_read_next(self) -> bool:
        """Do the statements after this one read `.grad` before the next backward?"""
        position = self.ctx.statement_position()
        if position is None:
            return False
        _, body, index = position
        for statement in body[index + 1:]:
            reader = _GradReader()
            visit(statement, reader)
            if reader.reads_grad:
                return True
            if reader.backward:
                return False
        return False
