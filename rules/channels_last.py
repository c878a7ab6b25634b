"""
## What it does

Finds convolutional training scripts (`nn.Conv2d` or an image network of `torchvision.models`,
not a video one, and `get_model(name)` only with the name written out; in the script or in the
project's module it imports the model from: see `cudnn-benchmark`) that train
on CUDA with mixed precision (autocast, a `GradScaler`, or a half/bfloat16 model) and never use the
channels-last memory format. It reports once per script (a file with an `if __name__ ==
"__main__":` block or a training loop outside any function), on its first training loop that running
the file reaches, or else on its first call of the project's code that trains (see
`cudnn-benchmark`); the mixed precision is read from the script's text (`autocast`, `GradScaler`,
`.half()`, `fp16`/`bf16` in an option's name).

## Why is it slow

Tensor cores compute convolutions in NHWC order (channels innermost). A model and a batch in
PyTorch's default NCHW layout make cuDNN transpose the input and output of every convolution, or
fall back to slower kernels. Converting the model's weights and the input batches to
`torch.channels_last` once avoids that; NVIDIA's performance guide recommends NHWC for all
tensor-core convolutions.

## Expected gain

Where it applies: PyTorch's memory-format tutorial reports over 22% for ResNet-50 trained with AMP,
and 8% to 35% for a list of torchvision models on Volta GPUs
(https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html#performance-gains). It needs
tensor cores and 16-bit precision (the rule fires only then) and shrinks when layers without
channels-last kernels convert back and forth. No fix: convert by hand and compare the median step
time `torchlint verify script.py` reports before and after.

## Example

```python
import torchvision

model = torchvision.models.resnet50().cuda()
scaler = torch.amp.GradScaler("cuda")
for images, labels in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(images.cuda()), labels.cuda())
    scaler.scale(loss).backward()
```

## Use instead

```python
import torchvision

model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
scaler = torch.amp.GradScaler("cuda")
for images, labels in loader:
    images = images.cuda(non_blocking=True).to(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(images), labels.cuda())
    scaler.scale(loss).backward()
```

## Fix safety

There is no automatic fix; the finding says what to write. Which variable holds the model and
which tensors are 4-D image batches is not something a linter can know (`.to(memory_format=
torch.channels_last)` raises on a tensor that is not 4-D), and code that calls `.view()` on a
convolution's output (`x.view(x.size(0), -1)` before a classifier) fails on channels-last tensors,
whose strides no longer allow a view: it must become `.reshape()` or `torch.flatten()`. Files that
mention `channels_last` anywhere are left alone.

## References

- https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html
- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#use-channels-last-memory-format-for-computer-vision-models
- https://docs.nvidia.com/deeplearning/performance/dl-performance-convolutional/index.html#tensor-layout
"""

from __future__ import annotations

from torchlint.analysis.devices import uses_reduced_precision
from torchlint.rule import Severity
from torchlint.rules._script import ConvolutionalScriptRule


class ChannelsLast(ConvolutionalScriptRule):
    code = "TL403"
    name = "channels-last"
    kind = "performance"
    summary = "Mixed-precision CNN training in NCHW instead of `memory_format=torch.channels_last`"
    severity = Severity.INFORMATION
    triggers = ("Conv2d", "torchvision")
    dimension = 2
    already_decided = ("channels_last",)
    message = ("this mixed-precision CNN trains in the NCHW layout; convert the model once with "
               "`model = model.to(memory_format=torch.channels_last)` and each 4-D input batch with "
               "`x = x.to(device, memory_format=torch.channels_last)` (use `.reshape()` instead of "
               "`.view()` on convolution outputs)")

    @classmethod
    def may_want(cls, code: str) -> bool:
        return uses_reduced_precision(code)

    def wanted(self) -> bool:
        return self.may_want(self.ctx.code) and self.convolutional()
