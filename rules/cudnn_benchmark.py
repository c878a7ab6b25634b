"""
## What it does

Finds training scripts with a convolutional model (`nn.Conv1d`/`Conv2d`/`Conv3d`, their
transposed and lazy forms, or a `torchvision.models` network, with `get_model(name)` counted
only when the name is written out, and not a layer built only under an option,
`nn.Conv2d(...) if flag else None`; in the script or in the project's module it imports the model
from) that train on CUDA and never set
`torch.backends.cudnn.benchmark`. It reports once per script (a file with an `if __name__ ==
"__main__":` block or a training loop outside any function; a module that other code imports
should not change process-wide settings), on its first training loop (a loop that calls
`backward()`) that running the file reaches: a loop outside any function, or in a function or
class that the reached code names (calls it, or passes it as `mp.spawn(main_worker, ...)` does),
starting from the module's statements and its `__main__` block. A library module whose `__main__`
block only samples does not run its `Trainer.train` loop. A script whose own loops do not train,
but that calls the project's code that does (`simclr.train(train_loader)`, `fit(model, loader)`
imported from `engine`, or `model.train(loader)` where `model` is one of several trainer classes of
the project and the `train` of each backpropagates), is reported at its first such call that
running it reaches.

A model built in another module of the project counts as if the script defined it: a class or
factory function of the project that the script calls (`UNet()`, `models.resnet20()`, a name that
`from models import *` brings) or imports by name (`from .net import Net`), and that builds
convolution layers itself or through the helpers, classes and base classes it calls in the
project's code. A model looked up by name in a module of the project
(`resnet.__dict__[args.arch]()`, `getattr(models, name)()`) counts when that module's `__all__`
names only models that build convolutions; a module class whose own `forward` applies
`F.conv2d` (StyleGAN2's modulated convolutions), when nothing the script names builds a
convolution layer. The finding then names the file and line of one of them. A model of another
package (`timm.create_model(...)`) is not the project's; an import that cannot be resolved, a
lookup in a module without `__all__`, a function that applies `F.conv2d` to the data (a blur)
and a training loop that runs in another package (`trainer.fit(...)` of Lightning) are not seen.

## Why is it slow

For each convolution, cuDNN has several algorithms whose speed depends on the shapes, the layout
and the GPU. By default PyTorch picks one with a heuristic. With `cudnn.benchmark = True`, the
first call for each new input shape times the candidates and caches the fastest, and every later
call with that shape uses it. The PyTorch tuning guide recommends it for convolutional networks.

## Expected gain

No published measurement found that holds in general (the tuning guide gives no figure): what it
buys depends on how far cuDNN's heuristic pick is from the fastest kernel for the model's shapes,
the GPU and the cuDNN version. Nothing without convolutions, and a loss when input shapes change
every batch (the rule stays silent there). `torchlint verify --each --unsafe-fixes script.py`
measures the step time before and after; the first steps include the benchmarking, so measure more
than a few.

## Example

```python
import torchvision

model = torchvision.models.resnet50().cuda()
for images, labels in loader:
    loss = criterion(model(images.cuda()), labels.cuda())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
```

## Use instead

```python
import torchvision

torch.backends.cudnn.benchmark = True

model = torchvision.models.resnet50().cuda()
for images, labels in loader:
    loss = criterion(model(images.cuda()), labels.cuda())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
```

## Fix safety

Unsafe: the chosen algorithms may differ from run to run (timing noise), so results are no longer
bitwise reproducible, and each new input shape pays a benchmarking pass, which makes inputs whose
shape changes every batch (variable-length sequences, multi-scale training) slower, not faster.
The rule stays silent when the file's code (not a comment, docstring or printed message) mentions `cudnn.benchmark`
or `cudnn.deterministic` at all, or
calls `torch.use_deterministic_algorithms` (deterministic mode is detected through any import
spelling, so this rule and `deterministic-algorithms` never give contradicting advice), when a
project module the script imports sets them (a `set_seed()` helper that calls
`torch.use_deterministic_algorithms` or assigns `cudnn.deterministic` or `cudnn.benchmark`), and when it shows signs of inputs of varying shape
(`pad_sequence`, `pack_padded_sequence`, a custom `collate_fn`, multi-scale or random-size
training). The fix adds the setting after the script's imports, when it imports `torch` at the top.

## References

- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#enable-cudnn-auto-tuner
- https://pytorch.org/docs/stable/backends.html#torch.backends.cudnn.benchmark
- https://pytorch.org/docs/stable/notes/randomness.html#cuda-convolution-benchmarking
"""

from __future__ import annotations

import re

from torchlint.analysis.reproducibility import deterministic_settings
from torchlint.rules._script import ConvolutionalScriptRule

VARIABLE_SHAPES = re.compile(r"pad_sequence|pack_padded_sequence|PackedSequence|collate_fn|multi_?scale|"
                             r"random_?size|RandomResize\b|varlen", re.IGNORECASE)


class CudnnBenchmark(ConvolutionalScriptRule):
    code = "TL402"
    name = "cudnn-benchmark"
    kind = "performance"
    summary = "Convolutional CUDA training without `torch.backends.cudnn.benchmark = True`"
    fix_applicability = "unsafe"
    triggers = ("Conv", "torchvision")
    already_decided = ("cudnn.benchmark", "cudnn.deterministic", "use_deterministic_algorithms")
    setting = "{torch}.backends.cudnn.benchmark = True"
    fix_title = "Enable the cuDNN auto-tuner"
    message = ("this convolutional network trains with cuDNN's default algorithm choice; add "
               "`torch.backends.cudnn.benchmark = True` after the imports to pick the fastest per shape")

    @classmethod
    def may_want(cls, code: str) -> bool:
        return not VARIABLE_SHAPES.search(code)

    def wanted(self) -> bool:
        # a file that sets deterministic mode in any spelling (`cb.deterministic = True` after
        # `import torch.backends.cudnn as cb`) has chosen reproducibility: never advise against it;
        # the project's other modules are read last, for a script that otherwise qualifies
        return self.may_want(self.ctx.code) \
            and not deterministic_settings(self.ctx.module, self.ctx.bindings) and self.convolutional() \
            and not self._decided_in_the_project()

    def _decided_in_the_project(self) -> bool:
        """Does a project module the script imports set the flags (a `set_seed()` helper that calls
        `torch.use_deterministic_algorithms(True)`, or assigns `cudnn.deterministic`/`benchmark`)?
        Its text says so; the choice is the project's. Reading the flags does not count."""
        project = self.ctx.calls.project  # the file's own code was read by `already_decided`
        return any(project.mentions(self.ctx.path, word, self.ctx.source, imported_only=True)
                   for word in ("use_deterministic_algorithms(", "cudnn.deterministic =", "cudnn.benchmark ="))
