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
  ``torch.cuda`` calls that need a device (``synchronize``, ``set_device``, ``current_device``,
  resetting the allocator's peak statistics) do nothing, and its memory counters
  (``memory_allocated``, ``max_memory_allocated``, ``memory_reserved``, ``max_memory_reserved``)
  read 0, so scripts that branch on them take their CPU path and scripts that print them run;
- a CUDA autocast region (``torch.autocast("cuda")``, ``torch.amp.autocast("cuda")``,
  ``torch.cuda.amp.autocast()``, as a context or a decorator) keeps CUDA autocast's op policy:
  torch would disable it with a warning where CUDA is absent; here the region turns on the
  dispatcher's AutocastCUDA key for CPU tensors, so an op that CUDA autocast rejects fails the
  run with PyTorch's own error (binary cross-entropy on probabilities: "torch.nn.functional
  .binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast"), as it would on a GPU. CUDA
  autocast casts only CUDA tensors, so the CPU tensors keep float32: the numerics stay the CPU's.

What the mapping catches of the failures a CUDA run would have: the ops CUDA autocast rejects
(the only banned op in torch 2.13's CUDA autocast table is binary cross-entropy, functional and
module). What it cannot catch, because nothing here is half precision or on a device: float16
overflow and underflow (inf/NaN losses, a GradScaler that skips steps; GradScaler("cuda") is
disabled by torch itself on the CPU), dtype mismatches between autocast's float16 outputs and
float32 tensors made outside the region (``index_add_``, ``scatter``, hand-written matmuls),
tensors left on the wrong device (everything is on the CPU), ``non_blocking`` copies read too
early, pinned-memory errors, bfloat16 on GPUs that lack it, CUDA out-of-memory, NCCL-only
behaviour (gloo runs the distributed rewrites on the CPU), and nondeterminism of GPU kernels.

Not mapped: ``torch.device("cuda")`` itself stays a CUDA device object (only its use as an
argument is mapped), and CUDA streams and events. The mapping is a TorchFunctionMode, so it adds
a small per-operation cost; both runs of a verification pay it alike. The number of mapped calls
is counted and reported, so a report says plainly that CUDA calls ran on the CPU.
"""

from __future__ import annotations

import warnings
from typing import Callable

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


def _does_nothing() -> Callable[..., None]:
    """A new function each time: torch._dynamo, when imported later, refuses one function object
    standing for two torch functions."""
    return lambda *args, **kwargs: None


def keep_cuda_autocast_policy(mode: CudaToCpu) -> None:
    """Make CUDA autocast regions apply CUDA autocast's op policy to CPU tensors (see above); each
    region entered counts as a mapped call."""
    autocast = torch.amp.autocast_mode.autocast
    original_init, original_enter, original_exit = autocast.__init__, autocast.__enter__, autocast.__exit__

    def init(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="CUDA is not available", category=UserWarning)
            original_init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
        self._torchlint_cuda_policy = device_type == "cuda" and bool(enabled)
        self._torchlint_guards = []

    def enter(self):
        result = original_enter(self)
        if getattr(self, "_torchlint_cuda_policy", False):
            mode.mapped_calls += 1
            guard = torch._C._IncludeDispatchKeyGuard(torch._C.DispatchKey.AutocastCUDA)
            guard.__enter__()
            self._torchlint_guards.append(guard)
            torch.set_autocast_enabled("cuda", True)  # the original __exit__ restores the previous state
        return result

    def exit(self, *args):
        if getattr(self, "_torchlint_guards", None):
            self._torchlint_guards.pop().__exit__(None, None, None)
        return original_exit(self, *args)

    autocast.__init__, autocast.__enter__, autocast.__exit__ = init, enter, exit


def install() -> CudaToCpu:
    """Turn the mapping on for the rest of the process; returns the mode, which counts calls."""
    torch.cuda.is_available = lambda: False
    torch.cuda.device_count = lambda: 0
    torch.cuda.synchronize = _does_nothing()
    torch.cuda.set_device = _does_nothing()
    torch.cuda.current_device = lambda: 0
    for name in ("reset_peak_memory_stats", "reset_max_memory_allocated", "reset_max_memory_cached"):
        setattr(torch.cuda, name, _does_nothing())
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        setattr(torch.cuda, name, lambda *args, **kwargs: 0)
    mode = CudaToCpu()
    keep_cuda_autocast_policy(mode)
    mode.__enter__()  # stays on until the process ends
    return mode
