"""
## What it does

In scripts that train or run in float16/bfloat16 (autocast, a `GradScaler`, `.half()`, a 16-bit
dtype; a script has an `if __name__ == "__main__":` block or a training loop outside any
function), finds `nn.Linear` and `nn.Embedding` layers whose sizes are integer literals that are not
multiples of 8: `in_features` and `out_features` of a `Linear`, `embedding_dim` of an `Embedding`.
Sizes below 64 are left alone (an input of 3 features or a 10-class head is set by the data, and
such small matrix multiplications cost little either way); the `min-size` option changes that.

## Why is it slow

Tensor cores multiply 16-bit matrices in tiles whose sides are multiples of 8 elements (16 bytes).
cuBLAS uses them fully only when the dimensions of the multiplication (batch x in_features times
in_features x out_features) are multiples of 8; otherwise it pads internally or falls back to
slower kernels. NVIDIA's Deep Learning Performance Guide shows the same layer running several
times slower at a size one off a multiple of 8, and recommends padding vocabulary and hidden sizes
(GPT-2's vocabulary of 50257 padded to 50304 is the well-known case). PyTorch's profiler pattern
matcher flags the same sizes.

## Expected gain

It depends on the share of the step the misaligned layers take. The known large case is a vocabulary
layer: padding nanoGPT's from 50257 to 50304 gave about a 25% speedup
(https://x.com/karpathy/status/1621578354024677377), and took a small GPT on an A100 from 112,046 to
127,345 tokens/s (https://github.com/rasbt/LLMs-from-scratch/tree/main/ch05/10_llm-training-speed).
Small layers gain little, GPUs without tensor cores nothing. No fix: change the size by hand and
compare the median step time `torchlint verify script.py` reports before and after.

## Example

```python
encoder = nn.Sequential(nn.Linear(1000, 500), nn.ReLU(), nn.Linear(500, 250)).cuda()
for x in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = encoder(x.cuda()).sum()
    loss.backward()
```

## Use instead

```python
encoder = nn.Sequential(nn.Linear(1000, 504), nn.ReLU(), nn.Linear(504, 256)).cuda()
for x in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = encoder(x.cuda()).sum()
    loss.backward()
```

## Fix safety

There is no automatic fix: changing a layer's size changes the model (its parameters, its
checkpoints, and a size that is dictated by the data or by another layer). The finding names the
nearest multiple of 8 above each size. Only literal sizes are checked, and only in scripts: a
module that other code imports (a model library, a test helper) does not show whether its layers
run in 16 bits.

## Options

- `min-size` (int, default 64): sizes below it are not reported.

## Target GPU

With `target-gpu` set to a GPU before Volta (`"p100"`, `"sm_61"`...), which has no tensor cores,
the rule is silent; with any other target, or none, it reports as described.

## References

- https://docs.nvidia.com/deeplearning/performance/dl-performance-fully-connected/index.html
- https://docs.nvidia.com/deeplearning/performance/mixed-precision-training/index.html#tensor-core-shape
- https://github.com/pytorch/pytorch/blob/main/torch/profiler/_pattern_matcher.py
- https://x.com/karpathy/status/1621578354024677377
- https://github.com/rasbt/LLMs-from-scratch/tree/main/ch05/10_llm-training-speed
"""

from __future__ import annotations

import ast

from torchlint.analysis.devices import uses_reduced_precision
from torchlint.analysis.gpus import TENSOR_CORES
from torchlint.analysis.programs import ast_is_script
from torchlint.analysis.syntax import find_argument
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, Severity, SyntaxIndex

# layer -> the (parameter, positional index) pairs whose sizes feed a matrix multiplication
LAYERS = {
    "Linear": (("in_features", 0), ("out_features", 1)),
    "Embedding": (("embedding_dim", 1),),
}
QUALIFIED = {f"torch.nn.{module}{name}": name for name in LAYERS
             for module in ("", "modules.linear." if name == "Linear" else "modules.sparse.")}


class TensorCoreAlignment(Rule):
    code = "TL404"
    name = "tensor-core-alignment"
    kind = "performance"
    summary = "Linear/Embedding sizes that are not multiples of 8 under float16/bfloat16"
    severity = Severity.INFORMATION
    triggers = ("Linear", "Embedding")
    options = {"min-size": (int, 64, "Sizes below this are not reported")}

    @classmethod
    def applies(cls, text: str) -> bool:
        return super().applies(text) and ("__main__" in text or "backward" in text) and uses_reduced_precision(text)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a script that builds a layer with an integer size that is not a multiple of 8
        return ast_is_script(index) and any(
            isinstance(arg, ast.Constant) and type(arg.value) is int and arg.value % 8
            for call in index.calls(*LAYERS) for arg in [*call.args, *(k.value for k in call.keywords)])

    def visit_Call(self, node: cst.Call) -> None:
        layer = QUALIFIED.get(self.ctx.qualified_name(node.func) or "")
        if layer is None or not uses_reduced_precision(self.ctx.code) or not self.ctx.programs.is_script \
                or self.ctx.gpu_below(TENSOR_CORES):  # a known GPU without tensor cores: nothing to align to
            return
        minimum = self.option("min-size")
        odd = []
        for parameter, index in LAYERS[layer]:
            arg = find_argument(node, parameter, index)
            if arg is not None and isinstance(arg.value, cst.Integer):
                size = arg.value.evaluated_value
                if size >= minimum and size % 8:
                    odd.append(f"{parameter}={size} (use {size + 8 - size % 8})")
        if odd:
            self.report(node, f"`{layer}` sizes that are not multiples of 8 keep float16/bfloat16 matmuls off "
                              f"the tensor cores' full speed: {', '.join(odd)}")
