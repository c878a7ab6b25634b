"""
## What it does

Finds the legacy TF32 switches, `torch.backends.cuda.matmul.allow_tf32 = ...` and
`torch.backends.cudnn.allow_tf32 = ...` (however `torch.backends` is imported), in code for a
torch that has the `fp32_precision` settings that replace them (2.9 and later). Code that picks
one spelling or the other by version (`if hasattr(torch.backends.cuda.matmul, "fp32_precision")`,
a `try`/`except` around the new one) is left alone.

## Why is it wrong

Since torch 2.9 the precision of float32 matmuls and cuDNN operations is set per backend and per
operation through `fp32_precision` (`"tf32"` allows TensorFloat-32, `"ieee"` keeps full float32),
and PyTorch's CUDA notes say the old `allow_tf32` flags are going to be deprecated. The two APIs
must not be mixed: the notes say mixing is unsupported, and torch raises a `RuntimeError` ("you
have used mix of the legacy and new APIs") when code, a library or torch itself reads the old
state after only the new one was set, and the two disagree. One spelling per program avoids that;
the new one is the one that stays.

The mapping, as the notes give it:

| old | new |
|---|---|
| `torch.backends.cuda.matmul.allow_tf32 = True` / `False` | `torch.backends.cuda.matmul.fp32_precision = "tf32"` / `"ieee"` |
| `torch.backends.cudnn.allow_tf32 = True` / `False` | `torch.backends.cudnn.conv.fp32_precision = "tf32"` / `"ieee"` and `torch.backends.cudnn.rnn.fp32_precision = "tf32"` / `"ieee"` |

The cuDNN flag covered convolutions and recurrent layers alike, so it becomes two settings.
(`torch.backends.cudnn.fp32_precision` is not its equivalent: it is the setting for all of CUDA,
matmuls included.)

## Example

```python
import torch

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
```

## Use instead

```python
import torch

torch.backends.cuda.matmul.fp32_precision = "tf32"
torch.backends.cudnn.conv.fp32_precision = "tf32"
torch.backends.cudnn.rnn.fp32_precision = "tf32"
```

## Fix safety

Unsafe. The fix rewrites an assignment of a literal `True` or `False` written alone on its line;
other values are reported without a fix (the finding shows the `"tf32" if ... else "ieee"` to
write). The new settings choose the same kernels, but the old setters also kept the old state
(what `torch.get_float32_matmul_precision()` and `allow_tf32` report) in step, and the new ones do
not. After the fix, code that still reads the old state raises a `RuntimeError` where the two
disagree: `allow_tf32 = True` for matmuls becomes `"tf32"` while `get_float32_matmul_precision()`
still says `"highest"` (Lightning's Trainer asks it when it starts on a GPU); `allow_tf32 = False`
for cuDNN becomes `"ieee"` while the old flag still says True (`torch.backends.cudnn.flags()` and
some `torch.compile` kernels read it). So the fix is withheld where the file itself reads the old
state (`get_float32_matmul_precision`, `torch.backends.cudnn.flags(...)`, a read of `allow_tf32`),
sets it through `torch.set_float32_matmul_precision` (for the matmul switch), or uses Lightning
(for `matmul.allow_tf32 = True`). Check what the rest of the program reads before applying it.

`torch.set_float32_matmul_precision("high")`, which TL705 tf32-matmul suggests, is not reported:
it sets the old and the new matmul state together.

## Versions

Reported for a target torch from 2.9, the first with the `fp32_precision` settings; older ones
have only `allow_tf32`.

## References

- https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices
- https://pytorch.org/docs/stable/backends.html#torch.backends.cuda.matmul.allow_tf32
- https://pytorch.org/docs/stable/backends.html#torch.backends.cudnn.allow_tf32
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from torchlint.analysis.syntax import is_literal
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

MATMUL = "torch.backends.cuda.matmul.allow_tf32"
CUDNN = "torch.backends.cudnn.allow_tf32"
# legacy switch -> the settings that replace it, relative to the object that holds it
REPLACEMENTS = {MATMUL: ("fp32_precision",), CUDNN: ("conv.fp32_precision", "rnn.fp32_precision")}
# Code that reads the legacy state (or sets it another way): mixed with the new settings, torch
# raises when the two disagree.
READS_LEGACY = ("get_float32_matmul_precision", "cudnn.flags(", "_get_cublas_allow_tf32", "_get_cudnn_allow_tf32")
LIGHTNING = ("import lightning", "from lightning", "pytorch_lightning")


@dataclass
class _Switch:
    target: cst.Attribute
    assign: cst.Assign
    line: cst.CSTNode | None  # the statement line when the assignment is alone on it
    legacy: str
    fix: object = None


class Tf32Api(Rule):
    code = "TL706"
    name = "tf32-api"
    kind = "deprecation"
    summary = "Legacy `allow_tf32` switches where torch has the `fp32_precision` settings"
    fix_applicability = "unsafe"
    triggers = ("allow_tf32",)
    torch_versions = ">=2.9"

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return any(isinstance(target, ast.Attribute) and target.attr == "allow_tf32"
                   for node in index.nodes(ast.Assign) for target in node.targets)

    def __init__(self, ctx):
        super().__init__(ctx)
        self.switches: list[_Switch] = []
        self.reads_legacy = any(text in ctx.code for text in READS_LEGACY)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            legacy = self.ctx.qualified_name(target.target)
            if legacy not in REPLACEMENTS or self.ctx.compat.in_fallback():
                continue
            line = self.ctx.parent
            alone = isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 and len(node.targets) == 1
            switch = _Switch(target.target, node, line if alone else None, legacy)
            switch.fix = self._fix(switch)
            self.switches.append(switch)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        parent = self.ctx.parent
        if node.attr.value == "allow_tf32" and not (isinstance(parent, cst.AssignTarget) and parent.target is node):
            self.reads_legacy = True  # `old = torch.backends.cudnn.allow_tf32`, `flags(allow_tf32=...)`

    def leave_Module(self, original_node: cst.Module) -> None:
        for switch in self.switches:
            self.report(switch.target, self._message(switch), None if self._withheld(switch) else switch.fix)

    # ----------------------------------------------------------------------------------------------
    def _spellings(self, switch: _Switch, value: str) -> list[str]:
        holder = self.ctx.code_for(switch.target.value)
        return [f"{holder}.{setting} = {value}" for setting in REPLACEMENTS[switch.legacy]]

    def _message(self, switch: _Switch) -> str:
        old = self.ctx.code_for(switch.target)
        value = switch.assign.value
        if is_literal(value, True) or is_literal(value, False):
            new = '"tf32"' if is_literal(value, True) else '"ieee"'
        else:
            new = f'"tf32" if {self.ctx.code_for(value)} else "ieee"'
        return (f"`{old}` is the legacy TF32 switch, to be deprecated in favour of the `fp32_precision` "
                f"settings (do not mix the two); write " + " and ".join(
                    f"`{spelling}`" for spelling in self._spellings(switch, new)))

    def _fix(self, switch: _Switch):
        value = switch.assign.value
        if switch.line is None or not (is_literal(value, True) or is_literal(value, False)):
            return None
        new = '"tf32"' if is_literal(value, True) else '"ieee"'
        statements = [cst.parse_statement(spelling + "\n") for spelling in self._spellings(switch, new)]
        fix = self.fix_builder("Use the `fp32_precision` settings")
        return fix.replace_statement(switch.line, statements).build()

    def _withheld(self, switch: _Switch) -> bool:
        """Would the new setting leave the old state disagreeing with code of this file that
        reads it or sets it another way?"""
        if self.reads_legacy:
            return True
        code = self.ctx.code
        if switch.legacy == MATMUL and "set_float32_matmul_precision" in code:
            return True
        return switch.legacy == MATMUL and is_literal(switch.assign.value, True) \
            and any(text in code for text in LIGHTNING)
