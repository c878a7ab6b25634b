"""
## What it does

Finds `self.log("name", value.item())` and `self.log_dict({"name": value.item(), ...})` in the
methods of a LightningModule (a class deriving from `pytorch_lightning.LightningModule`,
`lightning.pytorch.LightningModule` or `lightning.LightningModule`, under any alias, directly or
through other classes of the file).

## Why is it slow

`.item()` copies a GPU tensor's value to the host, which waits until every kernel queued before it
has finished: a synchronization of host and GPU at every step, which stops the CPU from queueing
the next step's work ahead of the GPU. `self.log` accepts the tensor itself: Lightning detaches it,
accumulates it on the device, and reads it back only when a logger or the progress bar needs the
number. Lightning's speed guide: "Don't call `.item()` anywhere in your code."

## Expected gain

No published measurement found. The fix removes one host sync per logged value per step: little for
models whose step is long, more for small models whose steps are short. `torchlint verify --each
script.py` measures the step time before and after on your machine.

## Example

```python
import pytorch_lightning as pl

class Classifier(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        loss = self.criterion(self(batch["x"]), batch["y"])
        self.log("train_loss", loss.item())
        return loss
```

## Use instead

```python
import pytorch_lightning as pl

class Classifier(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        loss = self.criterion(self(batch["x"]), batch["y"])
        self.log("train_loss", loss)
        return loss
```

## Fix safety

Safe: Lightning logs the same number either way (it converts a Python number into a float tensor,
and detaches a tensor and converts it to float). An integer tensor gets a one-time warning that it
is converted to float. The rule stays silent where the value may be a NumPy array rather than a
tensor (its expression or the assignment of its name uses NumPy or `.numpy()`), since `self.log`
refuses arrays.

## References

- https://lightning.ai/docs/pytorch/stable/advanced/speed.html#item-numpy-cpu
- https://lightning.ai/docs/pytorch/stable/extensions/logging.html#automatic-logging
- https://pytorch.org/docs/stable/generated/torch.Tensor.item.html
"""

from __future__ import annotations

import ast

from torchlint.analysis.syntax import ast_callee, dotted_name, find_argument, names_in, root_names
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex


class LightningLogItem(Rule):
    code = "TL903"
    name = "lightning-log-item"
    kind = "performance"
    summary = "`self.log(name, value.item())` in a LightningModule: a host sync every step; log the tensor"
    fix_applicability = "safe"
    triggers = ("LightningModule",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a LightningModule, and `.item()` inside a `log`/`log_dict` call
        return bool(index.classes_deriving("LightningModule")) and any(
            isinstance(node, ast.Call) and ast_callee(node) == "item" and not node.args
            for call in index.calls("log", "log_dict") for node in ast.walk(call))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in ("log", "log_dict")):
            return
        method = self.ctx.lightning.method()
        if method is None or dotted_name(func.value) != method[2]:
            return
        if func.attr.value == "log":
            value = find_argument(node, "value", 1)
            values = [value.value] if value is not None else []
        else:
            metrics = find_argument(node, "dictionary", 0)
            values = [element.value for element in metrics.value.elements
                      if isinstance(element, cst.DictElement)] if metrics and isinstance(metrics.value, cst.Dict) else []
        for value in values:
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
                    and value.func.attr.value == "item" and not value.args and not self._may_be_numpy(value.func.value):
                tensor = value.func.value
                shown = self.ctx.code_for(tensor)
                self.report(value, f"`{shown}.item()` waits for the GPU at every call; log the tensor "
                                   f"(`{shown}`) and Lightning reads it back only when needed",
                            self.fix("Log the tensor instead of `.item()`", self.replace(value, tensor)))

    def _may_be_numpy(self, expr: cst.BaseExpression) -> bool:
        numpy = {local for local, full in self.ctx.bindings.imports.aliases.items() if full.split(".")[0] == "numpy"}
        sources = [expr] + [value for name in root_names(expr) for value in self.ctx.bindings.values(name)
                            if value is not None]
        return any(names_in(source) & (numpy | {"numpy"}) for source in sources)
