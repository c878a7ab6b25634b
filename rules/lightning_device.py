"""
## What it does

Finds code in the methods of a LightningModule that names the GPU itself instead of the module's
device: `x.cuda()`, `x.to("cuda")`, `x.to(torch.device("cuda:0"))`, `torch.zeros(n,
device="cuda")`, `torch.device("cuda")`.

## Why is it wrong

The Trainer decides where a LightningModule runs: the CPU, a GPU, the GPU of each DDP process, a
TPU or an Apple GPU. Code that names CUDA fails as soon as the Trainer runs anywhere else (a CPU
test run, a laptop); an explicit index (`"cuda:0"`, `.cuda(0)`) sends the tensors of every DDP
process to the first GPU; and in `__init__`, which runs before the Trainer picks each process's
device, `.cuda()` means GPU 0 in every process too. `self.device` is always the device the Trainer
put the module on. Lightning's speed guide: "LightningModules know what device they are on!
Construct tensors on the device directly to avoid CPU->Device transfer."

## Example

```python
import pytorch_lightning as pl

class Model(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        noise = torch.randn(batch.shape).cuda()
        mask = torch.ones(batch.shape[0], device="cuda")
        return self.loss(batch + noise, mask)
```

## Use instead

```python
import pytorch_lightning as pl

class Model(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        noise = torch.randn(batch.shape, device=self.device)
        mask = torch.ones(batch.shape[0], device=self.device)
        return self.loss(batch + noise, mask)
```
or `.type_as(batch)` to follow another tensor's device and dtype.

## Fix safety

The fix writes `self.device`: `x.cuda()` becomes `x.to(self.device)` (and TL201 then moves a
fresh tensor's device into its factory call), a CUDA device literal becomes `self.device`. It is
safe in the hooks that run after the Trainer has moved the module to its device (`forward`,
`training_step` and the other `*_step` methods, the `on_*_batch_*`, `on_*_epoch_*`,
`on_*_start`/`_end`, `on_before_*`/`on_after_*` hooks, `on_fit_start`): there `self.device` is
the GPU the code meant, or the right device where `cuda` was wrong. It is unsafe in other methods
of the class (helpers), which might run before the move, and withheld in `setup`,
`prepare_data`, `configure_model`, `configure_optimizers` and helpers they or `__init__` call:
there the module is still on the CPU, so `self.device` is the CPU, and the message asks for a
buffer instead (`self.register_buffer("t", tensor)`), which the Trainer moves with the module.
`__init__` itself is left to TL205 (register-buffer), which reports device tensors made there. `.cuda()`
with arguments other than a device and `non_blocking` gets no fix; `self.cuda()` is not reported.

## References

- https://lightning.ai/docs/pytorch/stable/advanced/speed.html#transferring-tensors-to-device
- https://lightning.ai/docs/pytorch/stable/accelerators/accelerator_prepare.html
- https://lightning.ai/docs/pytorch/stable/common/lightning_module.html#device
"""

from __future__ import annotations

import ast
import re

from torchlint.analysis.devices import written_device_kind
from torchlint.analysis.syntax import dotted_name, find_argument, find_keyword, positional_args
from torchlint.fixes import keyword_argument
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

# Hooks that run after the Trainer moved the module to its device.
ON_DEVICE_HOOK = re.compile(
    r"^(forward|(training|validation|test|predict)_step(_end)?|(training|validation|test)_epoch_end"
    r"|on_(train|validation|test|predict)_(batch|epoch)_(start|end)|on_(fit|train|validation|test|predict)_(start|end)"
    r"|on_(before|after)_(backward|optimizer_step|zero_grad|batch_transfer)|on_validation_model_(eval|train))$")
# Hooks that run before it (the module is still on the CPU).
BEFORE_MOVE_HOOKS = frozenset({"__init__", "setup", "prepare_data", "configure_model", "configure_sharded_model",
                               "configure_optimizers", "configure_callbacks"})


class LightningDevice(Rule):
    code = "TL902"
    name = "lightning-device"
    kind = "correctness"
    summary = "`.cuda()`/`\"cuda\"` inside a LightningModule instead of `self.device`"
    fix_applicability = "safe"
    triggers = ("LightningModule",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a LightningModule, and a `.cuda()` call or a string that names CUDA
        return bool(index.classes_deriving("LightningModule")) and (bool(index.calls("cuda")) or any(
            isinstance(node.value, str) and node.value.startswith("cuda") for node in index.nodes(ast.Constant)))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
            self._check_cuda_call(node)
        elif isinstance(func, cst.Attribute) and func.attr.value == "to":
            target = find_keyword(node, "device") or (positional_args(node) or [None])[0]
            if target is not None:
                self._check_literal(target.value)
        elif self.ctx.qualified_name(func) == "torch.device" and not self._is_reported_argument():
            self._check_literal(node)
        device = find_keyword(node, "device")
        if device is not None and not (isinstance(func, cst.Attribute) and func.attr.value == "to"):
            self._check_literal(device.value)

    def _check_cuda_call(self, node: cst.Call) -> None:
        """``x.cuda()`` -> ``x.to(self.device)``."""
        method = self.ctx.lightning.method()
        if method is None or dotted_name(node.func.value) == method[2]:
            return  # not in a LightningModule, or `self.cuda()`
        this = method[2]
        non_blocking = find_argument(node, "non_blocking", 1)
        understood = not any(a.star for a in node.args) and all(
            a is non_blocking or a.keyword is None or a.keyword.value == "device" for a in node.args)
        arguments = [cst.Arg(cst.parse_expression(f"{this}.device"))]
        if non_blocking is not None:
            arguments.append(keyword_argument("non_blocking", non_blocking.value))
        new = node.with_changes(func=node.func.with_changes(attr=cst.Name("to")), args=_separated(arguments))
        shown = self.ctx.code_for(node.func.value)
        self._report(node, method, f"`{shown}.cuda()`", f"use `{shown}.to({this}.device)`, or create the tensor "
                                                        f"with `device={this}.device`", new if understood else None)

    def _check_literal(self, expr: cst.BaseExpression) -> None:
        """A CUDA device written out (``"cuda"``, ``"cuda:0"``, ``torch.device("cuda")``,
        ``"cuda" if available else "cpu"``) -> ``self.device``."""
        if isinstance(expr, (cst.Name, cst.Attribute)) or written_device_kind(expr, self.ctx.bindings) != "cuda":
            return
        method = self.ctx.lightning.method()
        if method is None:
            return
        this = method[2]
        self._report(expr, method, f"`{self.ctx.code_for(expr)}`", f"use `{this}.device`, the module's device",
                     cst.parse_expression(f"{this}.device"))

    def _is_reported_argument(self) -> bool:
        """``torch.device("cuda")`` given to ``.to(...)`` or as ``device=``: reported there."""
        index = len(self.ctx.ancestors) - 2
        while index > 0 and isinstance(self.ctx.ancestors[index], cst.IfExp):
            index -= 1  # `torch.device("cuda") if ... else ...`: the conditional is the argument
        arg, call = self.ctx.ancestors[index], self.ctx.ancestors[index - 1]
        if not isinstance(arg, cst.Arg) or not isinstance(call, cst.Call):
            return False
        if arg.keyword is not None:
            return arg.keyword.value == "device"
        return isinstance(call.func, cst.Attribute) and call.func.attr.value == "to" and call.args[0] is arg

    def _report(self, node: cst.CSTNode, method, shown: str, advice: str, new: cst.CSTNode | None) -> None:
        cls, function, _ = method
        hook = function.name.value
        if hook == "__init__":
            return  # tensors made in __init__ belong in buffers: TL205 (register-buffer) reports them
        if hook in BEFORE_MOVE_HOOKS or self._called_before_move(cls, hook):
            self.report(node, f"{shown} in a LightningModule hard-codes the GPU, and in `{hook}` the module is not "
                              "on its device yet; create the tensor on the CPU and register it as a buffer "
                              "(`self.register_buffer(name, tensor)`) so the Trainer moves it with the module")
            return
        fix = None
        if new is not None:
            fix = self.fix("Use the module's device (`self.device`)", self.replace(node, new),
                           applicability="safe" if ON_DEVICE_HOOK.match(hook) else "unsafe")
        self.report(node, f"{shown} in a LightningModule hard-codes the GPU, which fails when the Trainer runs "
                          f"elsewhere; {advice}", fix)

    def _called_before_move(self, cls: cst.ClassDef, name: str) -> bool:
        """Is the helper ``name`` called from ``__init__``/``setup``/... of the class?"""
        for statement in cls.body.body:
            if isinstance(statement, cst.FunctionDef) and statement.name.value in BEFORE_MOVE_HOOKS \
                    and re.search(rf"\.{re.escape(name)}\(", self.ctx.code_for(statement)):
                return True
        return False


def _separated(arguments: list[cst.Arg]) -> list[cst.Arg]:
    return [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) if i < len(arguments) - 1
            else a for i, a in enumerate(arguments)]
