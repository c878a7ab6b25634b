"""
## What it does

Finds training loops (a loop that calls `backward()`) in scripts that train on CUDA entirely in
float32: nothing in the file uses autocast, a `GradScaler`, half or bfloat16 precision, apex, or a
library that manages precision itself (Accelerate, Lightning Fabric, DeepSpeed). A script is a file
with an `if __name__ == "__main__":` block or a training loop outside any function; modules that
other code imports (test helpers, libraries) are left alone, since the precision of a run is the
program's choice. It reports once per training loop, on its first `backward()` call. The file's
code decides, never its comments, docstrings or prose strings (a help text or a printed message:
"mixed precision is planned" is not autocast); strings that are values (`precision="bf16-mixed"`) count.

## Why is it slow

Matrix multiplications and convolutions in float16 or bfloat16 run on tensor cores, several times
faster than in float32, and move half the bytes. Automatic mixed precision runs each operation in
the precision that suits it (matmuls and convolutions in 16 bits, reductions and losses in 32) with
no change to the model. PyTorch's tuning guide reports speed-ups of up to 3x on Volta and newer
GPUs; Lightning's speed guide calls it the first thing to try.

## Expected gain

Large on GPUs with tensor cores: up to 3x overall speedup on Volta and newer GPUs per the tuning
guide (https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#use-mixed-precision-and-amp),
up to 3x on modern GPUs per Lightning's speed guide (https://lightning.ai/docs/pytorch/stable/advanced/speed.html).
Activations kept in 16 bits take half the bytes. Nothing on the CPU or before Volta, little for
small models whose step is mostly Python overhead. `torchlint verify --each --unsafe-fixes`
measures the step time and memory and checks that the loss still falls.

## Example

```python
for x, y in loader:
    optimizer.zero_grad()
    output = model(x.cuda())
    loss = criterion(output, y.cuda())
    loss.backward()
    optimizer.step()
```

## Use instead

```python
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    optimizer.zero_grad()
    with torch.amp.autocast("cuda", dtype=torch.float16):
        output = model(x.cuda())
        loss = criterion(output, y.cuda())
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
```
On Ampere and newer GPUs, `dtype=torch.bfloat16` needs no scaler.

## Fix safety

Unsafe, and the rule is off by default (enable it with `extend-select = ["TL703"]`): mixed
precision changes the numerics of every step, and whether a given model trains as well in float16
is for `torchlint verify --unsafe-fixes` (or the user) to show, not for a linter to assume; most
float32 loops are also fine as they are on the CPU or on GPUs without tensor cores. The fix writes
the float16 recipe of the PyTorch AMP examples, which runs on every CUDA GPU: a `GradScaler`
created before the loop, the assignment lines that compute the loss right before `backward()`
moved under `torch.amp.autocast("cuda", dtype=torch.float16)`, `scaler.scale(loss).backward()`,
`scaler.step(optimizer)` and `scaler.update()` in place of `optimizer.step()`, and
`scaler.unscale_(optimizer)` before gradient clipping. Without a GPU, autocast and the scaler turn
themselves off with a warning, so the script still runs. The fix is withheld when the loop calls
`backward()` more than once, when the file computes binary cross-entropy on probabilities
(`nn.BCELoss`, `F.binary_cross_entropy`: CUDA autocast raises on them; the message says to compute
the loss on logits with `nn.BCEWithLogitsLoss` first), when the optimizer step is not in the same
block as the backward call,
when code between them reads `.grad` or hands the optimizer or the parameters to a function (which
may read or clamp the gradients, then scaled), and when the lines before `backward()` are not the
assignments that compute the loss: when they call nothing, or when a loop or another block above
them computes part of it (autocast would then cover little or none of the forward pass), and when
the optimizer is an SGD built with `fused=True`, whose fused step advances its momentum on the steps
a `GradScaler` skips. In one `--fix` run this fix and TL302's `fused=True` are never applied
together: the round after one of them lints the file again, and the other then holds back. A scaler created in a function that is called once per epoch
starts from its initial scale each epoch; move it out if so.

## Versions

Reported for a target torch from 1.10 (`torch.autocast` with a `dtype`); the fix writes
`torch.amp.GradScaler("cuda")` from torch 2.3 and `torch.cuda.amp.GradScaler()` before.

## Target GPU

`target-gpu` tunes the advice: before Volta (`"p100"`, `"sm_61"`...) the rule is silent, since
those GPUs have no tensor cores; on Volta and Turing (`"v100"`, `"t4"`) the message advises
float16 with a `GradScaler` only, since bfloat16 needs Ampere; on Ampere and newer, or with no
target GPU, it also names bfloat16.

## References

- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#use-mixed-precision-and-amp
- https://pytorch.org/docs/stable/notes/amp_examples.html
- https://pytorch.org/tutorials/recipes/recipes/amp_recipe.html
- https://lightning.ai/docs/pytorch/stable/advanced/speed.html
"""

from __future__ import annotations

import re

from torchlint.analysis.devices import may_train_on_cuda, uses_reduced_precision
from torchlint.analysis.gpus import BF16, TENSOR_CORES
from torchlint.analysis.programs import ast_training_script
from torchlint.analysis.syntax import method_call, root_names
from torchlint.analysis.walk import Visitor, visit
from torchlint.fixes import block_indentation, imported_name, unused_name
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex
from torchlint.rules._amp import amp_constructor, mixed_precision_step

# Binary cross-entropy on probabilities: CUDA autocast raises on it (it is not numerically safe in
# float16), so a loop that computes it cannot simply be wrapped.
BCE_ON_PROBABILITIES = frozenset({"torch.nn.BCELoss", "torch.nn.modules.loss.BCELoss",
                                  "torch.nn.functional.binary_cross_entropy", "torch.binary_cross_entropy"})
# Libraries that own the precision of the loop (their own flags turn mixed precision on).
PRECISION_MANAGERS = re.compile(r"\bAccelerator\b|\baccelerate\b|\bFabric\b|\bdeepspeed\b|\bapex\b|\bGradScaler\b")


class _BackwardCounter(Visitor):
    def __init__(self) -> None:
        self.count = 0

    def visit_Call(self, node: cst.Call) -> None:
        if method_call(node, "backward"):
            self.count += 1

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False


class NoAmp(Rule):
    code = "TL703"
    name = "no-amp"
    kind = "performance"
    summary = "A float32 CUDA training loop without autocast (mixed precision)"
    fix_applicability = "unsafe"
    fix_conflicts = ("TL302",)  # a GradScaler beside the fused SGD that fix writes: see mixed_precision_step
    torch_versions = ">=1.10"
    default_enabled = False

    @classmethod
    def applies(cls, text: str) -> bool:
        return may_train_on_cuda(text)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return ast_training_script(index)  # see Programs.cuda_training_script

    def __init__(self, ctx):
        super().__init__(ctx)
        self.seen: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        backward = method_call(node, "backward")
        if backward is None:
            return
        loop = self.ctx.loops.training_loop()
        if loop is None or id(loop) in self.seen:
            return
        self.seen.add(id(loop))
        source = self.ctx.code
        if self.ctx.programs.cuda_training_script() is None or uses_reduced_precision(source) \
                or PRECISION_MANAGERS.search(source):
            return
        if self.ctx.gpu_below(TENSOR_CORES):  # no tensor cores: 16-bit matmuls gain little
            return
        autocast = amp_constructor("torch.cuda.amp.autocast", self.ctx.target_torch, "torch", "dtype=torch.float16")
        scaler = amp_constructor("torch.cuda.amp.GradScaler", self.ctx.target_torch, "torch")  # as the fix writes them
        message = (f"this CUDA training loop runs in float32; run the forward pass and the loss under `{autocast}` "
                   f"with a `{scaler}` (`scaler.scale(loss).backward()`, `scaler.step(optimizer)`, `scaler.update()`)")
        if not self.ctx.gpu_below(BF16):  # bfloat16 needs Ampere; unknown GPU: say both
            message += ", or with `dtype=torch.bfloat16` and no scaler on Ampere and newer GPUs"
        if self._binary_cross_entropy_on_probabilities():
            # CUDA autocast rejects BCE on probabilities ("unsafe to autocast") at run time
            self.report(node, message + "; first compute the loss on logits with `nn.BCEWithLogitsLoss` (or "
                                        "`F.binary_cross_entropy_with_logits`): autocast refuses `nn.BCELoss` and "
                                        "`F.binary_cross_entropy`, so no fix is offered")
            return
        self.report(node, message, self._fix(node, loop))

    def _binary_cross_entropy_on_probabilities(self) -> bool:
        """Does the file compute binary cross-entropy on probabilities (``nn.BCELoss``,
        ``F.binary_cross_entropy``), which CUDA autocast refuses to run?"""
        bindings = self.ctx.bindings

        class Finder(Visitor):
            found = False

            def visit_Attribute(self, node: cst.Attribute) -> None:
                self.found |= bindings.qualified_name(node) in BCE_ON_PROBABILITIES

            def visit_Name(self, node: cst.Name) -> None:
                self.found |= bindings.qualified_name(node) in BCE_ON_PROBABILITIES

        finder = Finder()
        visit(self.ctx.module, finder)
        return finder.found

    def _fix(self, node: cst.Call, loop: cst.CSTNode):
        counter = _BackwardCounter()
        visit(loop, counter)
        position = self.ctx.statement_position()
        torch = imported_name(self.ctx, "torch")
        scaler = unused_name(self.ctx, "scaler", "grad_scaler", "amp_scaler")
        if counter.count != 1 or position is None or torch is None or scaler is None:
            return None
        statement, body, index = position
        block = self.ctx.block_of(statement)
        if not isinstance(block, cst.IndentedBlock) or not isinstance(statement, cst.SimpleStatementLine) \
                or len(statement.body) != 1 or getattr(statement.body[0], "value", None) is not node:
            return None
        autocast = amp_constructor("torch.cuda.amp.autocast", self.ctx.target_torch, torch, f"dtype={torch}.float16")
        step = mixed_precision_step(self.ctx, block, index, root_names(node.func.value), scaler, autocast)
        if step is None:
            return None
        outer = self.ctx.block_of(loop)
        indent = block_indentation(self.ctx, outer) if isinstance(outer, cst.IndentedBlock) else ""
        create = amp_constructor("torch.cuda.amp.GradScaler", self.ctx.target_torch, torch)
        return self.fix("Train in mixed precision (float16 autocast and a GradScaler)",
                        self.insert_lines_before(loop, f"{indent}{scaler} = {create}\n"),
                        *step.edits,
                        self.replace(node.func.value, f"{scaler}.scale({self.ctx.code_for(node.func.value)})"))
