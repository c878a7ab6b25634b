"""
## What it does

Finds a tensor sent to the CPU and straight back to an accelerator: `x.cpu().cuda()`,
`x.to("cpu").to(device)`, `x.cpu().float().cuda()` (with only device-neutral methods such as
`detach`, `float` or `contiguous` in between), and the same two moves on consecutive lines
(`x = x.cpu()` then `x = x.cuda()`).

## Why is it slow

Each move is a copy over PCIe, and a copy to the CPU also makes the host wait until the GPU has
finished everything queued before it. The round trip costs two transfers and a synchronization and
leaves the tensor where it was, or on the device it could have been copied to directly. PyTorch's
tuning guide lists avoidable CPU-GPU copies and synchronizations among the first things to remove;
the Lightning-fast guide calls `x.cpu()` followed by `x.cuda(0)` "very expensive".

## Expected gain

No published measurement found. Each round trip costs two copies over PCIe and a wait for the GPU to
finish its queued work, so the cost grows with the tensor's size and with how often the line runs:
in the training step it is paid every iteration, at start-up once. `torchlint verify --each
script.py` (with `--unsafe-fixes` for the unsafe fixes) measures the step time and memory before and
after the fix on your machine.

## Example

```python
features = encoder(images).cpu().cuda()
mask = torch.zeros(n).cpu().to(device)
```

## Use instead

```python
features = encoder(images).cuda()
mask = torch.zeros(n).to(device)  # then TL201: torch.zeros(n, device=device)
```

## Fix safety

The fix drops the move to the CPU. It is safe when the tensor that goes to the CPU is known: a
tensor just made by a factory (`torch.zeros(...)`, `torch.tensor(...)`) or `torch.from_numpy(...)`
(nothing else holds it, or it is already on the CPU). Otherwise it is unsafe: when the tensor is
already on the target device, `.cuda()`/`.to()` return the tensor itself rather than a copy, so
writing into the result in place would now also change the original. The two-line form is
reported without a fix: delete the line that moves the tensor to the CPU. A chain whose result
is not used (`norm.cpu().cuda()` as a statement) moves a module in place, on purpose, and is not
reported.

## References

- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization
- https://pytorch.org/docs/stable/generated/torch.Tensor.to.html
- https://pytorch.org/docs/stable/notes/cuda.html
"""

from __future__ import annotations

import ast

from torchlint.analysis.devices import ast_device_argument, ast_may_move, ast_moves_to_cpu, tensor_factory
from torchlint.analysis.syntax import ast_dotted_name, dotted_name
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

# Methods that do the same on every device: a round trip around them is still a round trip.
DEVICE_NEUTRAL = frozenset({
    "detach", "contiguous", "clone", "float", "half", "double", "bfloat16", "long", "int", "bool", "view",
    "reshape", "squeeze", "unsqueeze", "flatten", "permute", "transpose", "t",
})
CPU_SOURCES = frozenset({"torch.from_numpy"})


class DeviceRoundTrip(Rule):
    code = "TL202"
    name = "device-round-trip"
    kind = "performance"
    summary = "A tensor copied to the CPU and straight back (`x.cpu().cuda()`)"
    fix_applicability = "safe"
    triggers = (".cpu()", "cpu\")", "cpu')")

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a move back on a chain that holds a move to the CPU (`x.cpu().float().cuda()`)...
        for call in index.calls("cuda", "to"):
            inner = call.func.value if ast_may_move(index, call) else None
            while isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute):
                if ast_moves_to_cpu(index, inner):
                    return True
                inner = inner.func.value
        # ... or `x = x.cpu()` and, the next statement of its block, `x = x.cuda()`
        if not any(ast_moves_to_cpu(index, node.value) for node in index.nodes(ast.Assign)):
            return False
        for block in index.blocks():
            for first, second in zip(block, block[1:]):
                there, back = _ast_self_move(first), _ast_self_move(second)
                if there[0] is not None and there[0] == back[0] and ast_moves_to_cpu(index, there[1]) \
                        and ast_may_move(index, back[1]) and not (isinstance(ast_device_argument(back[1]), ast.Constant)
                                                                 and ast_moves_to_cpu(index, back[1])):
                    return True
        return False

    def visit_Call(self, node: cst.Call) -> None:
        back = self.ctx.devices.move(node)
        if back is None or back.method == "cpu" or back.to_cpu or isinstance(self.ctx.parent, cst.Expr):
            return  # a dropped result: a module moved in place (`model.cpu().cuda()`), not a tensor
        there = self._move_to_cpu_below(node.func.value)
        if there is None:
            return
        source = there.func.value
        known = tensor_factory(source, self.ctx.bindings) is not None or (
            isinstance(source, cst.Call) and self.ctx.qualified_name(source.func) in CPU_SOURCES)
        self.report(node, f"`{self._method_text(there)}` then `{self._method_text(node)}` copies the tensor to the "
                          f"CPU and straight back (two transfers and a sync); drop `{self._method_text(there)}`",
                    self.fix("Drop the move to the CPU", self.replace(there, source),
                             applicability="safe" if known else "unsafe"))

    def _method_text(self, call: cst.Call) -> str:
        """``.to("cpu")`` for a method call, on one line."""
        args = ", ".join((f"{a.keyword.value}=" if a.keyword else "") + self.ctx.code_for(a.value) for a in call.args)
        return f".{call.func.attr.value}({args})"

    def _move_to_cpu_below(self, expr: cst.BaseExpression) -> cst.Call | None:
        """The ``.cpu()``/``.to("cpu")`` call under a chain of device-neutral methods, if any."""
        while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            move = self.ctx.devices.move(expr)
            if move is not None:
                return expr if move.to_cpu and move.understood and move.dtype is None else None
            if expr.func.attr.value not in DEVICE_NEUTRAL:
                return None
            expr = expr.func.value
        return None

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        """``x = x.cpu()`` right before ``x = x.cuda()``."""
        name, move = self._self_move(node)
        if name is None or not move.to_cpu:
            return
        position = self.ctx.statement_position()
        if position is None:
            return
        _, body, index = position
        if index + 1 >= len(body):
            return
        next_name, back = self._self_move(body[index + 1])
        if next_name != name or back.to_cpu or back.method == "cpu":
            return
        self.report(node.body[0], f"`{name}` is moved to the CPU and on the next line straight back (two transfers "
                                  f"and a sync); delete `{self.ctx.code_for(node.body[0])}`")

    def _self_move(self, statement: cst.CSTNode):
        """(name, move) for a line ``name = name.<move>(...)``."""
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None, None
        small = statement.body[0]
        if not isinstance(small, cst.Assign) or len(small.targets) != 1 or not isinstance(small.value, cst.Call):
            return None, None
        move = self.ctx.devices.move(small.value)
        target = dotted_name(small.targets[0].target)
        if move is None or target is None or dotted_name(small.value.func.value) != target:
            return None, None
        return target, move


def _ast_self_move(statement: ast.stmt) -> tuple[str | None, ast.Call | None]:
    """The precheck twin of ``_self_move``: (name, call) for ``name = name.<method>(...)``."""
    value = statement.value if isinstance(statement, ast.Assign) and len(statement.targets) == 1 else None
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
        return None, None
    name = ast_dotted_name(statement.targets[0])
    return (name, value) if name is not None and ast_dotted_name(value.func.value) == name else (None, None)
