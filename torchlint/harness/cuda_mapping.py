"""Run a script written for CUDA on the CPU, for ``torchlint verify`` on machines without a GPU.

Training scripts say ``.cuda()``, ``device="cuda"`` or ``torch.device("cuda")`` even when they
pick their device with ``torch.cuda.is_available()``. So that such a script can be verified where
there is no GPU (CI), the bootstrap maps those calls to the CPU:

- ``Tensor.cuda()`` and ``Tensor.pin_memory()`` return the tensor itself, as they do for a tensor
  already on the target device (so ``Module.cuda()``, which calls ``Tensor.cuda``, is a no-op);
- a ``device=`` argument naming CUDA (a string, a ``torch.device`` or a bare ordinal) becomes
  ``"cpu"`` in every torch function, factory functions included, and so does the device argument
  of ``Tensor.to`` (and so of ``Module.to``);
- ``torch.cuda.is_available()`` is False and ``torch.cuda.device_count()`` is 0, and the
  ``torch.cuda`` calls that need a device (``synchronize``, ``set_device``, ``current_device``)
  do nothing, so scripts that branch on them take their CPU path.

Not mapped: ``torch.device("cuda")`` itself stays a CUDA device object (only its use as an
argument is mapped), CUDA streams and events, and autocast/GradScaler on "cuda", which torch
itself disables with a warning when CUDA is absent. The mapping is a TorchFunctionMode, so it adds
a small per-operation cost; both runs of a verification pay it alike. The number of mapped calls
is counted and reported, so a report says plainly that CUDA calls ran on the CPU.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

_RETURNS_ITSELF_ON_CPU = (torch.Tensor.cuda, torch.Tensor.pin_memory)


def names_cuda(device: object) -> bool:
    """Whether a device argument designates a CUDA device (a bare int is a CUDA ordinal)."""
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.split(":", 1)[0].strip() == "cuda"
    return isinstance(device, int) and not isinstance(device, bool)


class CudaToCpu(TorchFunctionMode):
    """Rewrites CUDA device arguments of every torch call to the CPU, and counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.mapped_calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _RETURNS_ITSELF_ON_CPU:
            self.mapped_calls += 1
            return args[0]
        if names_cuda(kwargs.get("device")):
            self.mapped_calls += 1
            kwargs = {**kwargs, "device": "cpu"}
        # Tensor.to(device, dtype, non_blocking, ...): only the first argument after self can be
        # a device; it may also be a dtype or a tensor, which are left alone.
        if func is torch.Tensor.to and len(args) > 1 and names_cuda(args[1]):
            self.mapped_calls += 1
            args = (args[0], "cpu", *args[2:])
        return func(*args, **kwargs)


def _does_nothing(*args, **kwargs) -> None:
    return None


def install() -> CudaToCpu:
    """Turn the mapping on for the rest of the process; returns the mode, which counts calls."""
    torch.cuda.is_available = lambda: False
    torch.cuda.device_count = lambda: 0
    torch.cuda.synchronize = _does_nothing
    torch.cuda.set_device = _does_nothing
    torch.cuda.current_device = lambda: 0
    mode = CudaToCpu()
    mode.__enter__()  # stays on until the process ends
    return mode
