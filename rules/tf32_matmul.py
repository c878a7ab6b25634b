"""
## What it does

Finds training scripts that run on CUDA in float32 (a loop that calls `backward()`, no autocast or
half precision anywhere in the file) and never allow TensorFloat-32 matrix multiplications:
neither `torch.set_float32_matmul_precision("high")` nor `torch.backends.cuda.matmul.allow_tf32 = True`
(nor the newer `fp32_precision` settings). It reports once per script (a file with an
`if __name__ == "__main__":` block or a training loop outside any function: process-wide settings
belong in the program, not in modules that other code imports), on its first training loop that running
the file reaches (a loop in a class or function that the script never names, such as a library
`Trainer` beside a `__main__` block that only samples, is not the script's).
The file's code decides, never its comments, docstrings or prose strings (help texts, printed
messages): a docstring that plans mixed precision silences nothing.

## Why is it slow

Since torch 1.12, float32 matrix multiplications on CUDA use full float32 precision by default.
Ampere and newer GPUs (A100, H100, RTX 30xx and later) have tensor cores that multiply float32
inputs in TensorFloat-32 (10 explicit mantissa bits, float32 range and accumulation) many times
faster: PyTorch's CUDA notes measure a 10240x10240 matmul at about 7x the speed on an A100 with
TF32 allowed. `torch.set_float32_matmul_precision("high")` lets matmuls and linear layers use it;
convolutions already do by default (`torch.backends.cudnn.allow_tf32` is True), so the rule is
quiet for a network of convolutions with no linear, recurrent or attention layers and no matmuls
in the file's code: there the setting buys nothing.

## Expected gain

Large for matmul-heavy models (transformers, MLPs, RNNs) on Ampere and newer GPUs: a 10240x10240
float32 matmul runs about 7x faster with TF32 on an A100
(https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices),
and a small GPT trained at 27,648 instead of 12,526 tokens/s on an A100 (https://github.com/rasbt/LLMs-from-scratch/tree/main/ch05/10_llm-training-speed).
Nothing before Ampere, on the CPU, or for convolution-only networks, which use TF32 already (the
rule is quiet there). `torchlint verify --each --unsafe-fixes` measures it on your machine.

## Example

```python
import torch

model = Net().cuda()
for x, y in loader:
    loss = criterion(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
```

## Use instead

```python
import torch
torch.set_float32_matmul_precision("high")
```

## Fix safety

Unsafe: TF32 rounds the inputs of every float32 matmul to 10 mantissa bits, which changes results
in the fourth significant digit; most training converges the same, but code that needs full
float32 products (some scientific computing, tests comparing to tight tolerances) does not want
it. The fix adds the call after the imports of the script (it is a process-wide setting), when the
script imports `torch` at the top. On GPUs older than Ampere, and on the CPU, the setting changes
nothing. Files that mention `allow_tf32` or the matmul precision at all, that use autocast or half
precision (their matmuls already run in 16 bits), or that never mention CUDA, are left alone.

## Versions

Reported for a target torch from 1.12, where TF32 for matmuls became opt-in (from 1.7 to 1.11
`torch.backends.cuda.matmul.allow_tf32` defaulted to True).

## Target GPU

With `target-gpu` set to a GPU before Ampere (`"v100"`, `"t4"`, `"sm_75"`...) the rule is silent:
those GPUs have no TF32 tensor cores. With an Ampere or newer target, or none, it reports as
described.

## References

- https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices
- https://pytorch.org/docs/stable/generated/torch.set_float32_matmul_precision.html
- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html
- https://github.com/rasbt/LLMs-from-scratch/tree/main/ch05/10_llm-training-speed
"""

from __future__ import annotations

import re

from torchlint.analysis.devices import uses_reduced_precision
from torchlint.analysis.gpus import TF32
from torchlint.rules._script import WholeScriptRule

# What multiplies matrices in float32 (convolutions run in TF32 by default already)
MATMULS = re.compile(r"\b(Linear|Bilinear|LSTM|GRU|RNN|Transformer\w*|MultiheadAttention|matmul|bmm|baddbmm|einsum|"
                     r"addmm|mm|scaled_dot_product_attention)\b|\w\s*@\s*\w")


class Tf32Matmul(WholeScriptRule):
    code = "TL705"
    name = "tf32-matmul"
    kind = "performance"
    summary = "float32 CUDA training without TF32 matmuls (`torch.set_float32_matmul_precision(\"high\")`)"
    fix_applicability = "unsafe"
    torch_versions = ">=1.12"
    already_decided = ("set_float32_matmul_precision", "allow_tf32", "fp32_precision")
    setting = '{torch}.set_float32_matmul_precision("high")'
    fix_title = "Allow TF32 matmuls"
    message = ("this float32 training runs its matmuls without TF32 tensor cores; add "
               "`torch.set_float32_matmul_precision(\"high\")` after the imports")

    def wanted(self) -> bool:
        if self.ctx.gpu_below(TF32):  # a known GPU before Ampere has no TF32 tensor cores
            return False
        code = self.ctx.code
        if uses_reduced_precision(code):
            return False
        # a network of convolutions gains nothing: cuDNN runs them in TF32 already
        return bool(MATMULS.search(code)) or not self.ctx.modules.convolution_dimensions
