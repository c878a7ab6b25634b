"""
## What it does

Finds a `torch.utils.data.DataLoader` with worker processes (`num_workers` > 0) that feeds a
training loop which copies its batches to a CUDA device (`.cuda()`, `.to(device)`), but does not
pass `pin_memory`. The loop may iterate the loader where it is built, or in a function of the same
file the loader is handed to (`train(model, loader)`).

## Why is it slow

A copy from ordinary (pageable) host memory to the GPU is staged by the CUDA driver through a
pinned buffer, and the copy blocks the host even with `non_blocking=True`. With
`pin_memory=True`, the DataLoader's pinning thread puts each batch into page-locked memory while
the model trains on the previous one, so the copy to the GPU is a single DMA transfer that can
run asynchronously (`x.to(device, non_blocking=True)`) and overlap with compute. The PyTorch
tuning guide and Lightning's speed guide both recommend it for GPU training.

## Expected gain

It grows with the bytes copied per step. Copies from pinned memory are much faster than from
pageable memory (PyTorch's CUDA notes) and only they can overlap with compute, so large image, audio
or video batches gain the most; batches of a few token ids gain nothing measurable: a small GPT on
an A100 ran at 28,399 tokens/s without and 28,402 with `pin_memory=True`
(https://github.com/rasbt/LLMs-from-scratch/tree/main/ch05/10_llm-training-speed). `torchlint verify
--each script.py` measures the step time before and after on your machine.

## Example

```python
device = torch.device("cuda")
loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=8)
for x, y in loader:
    x, y = x.to(device), y.to(device)
    loss = criterion(model(x), y)
    loss.backward()
```

## Use instead

```python
device = torch.device("cuda")
loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=8, pin_memory=True)
for x, y in loader:
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    loss = criterion(model(x), y)
    loss.backward()
```

## Fix safety

Safe: pinning changes where a batch lives on the host, not its values, and on a machine without
CUDA the DataLoader skips pinning with a warning. The rule applies only where pinning pays off:

- the loader has workers: with `num_workers=0` (or a name bound only to 0) the pinning copy runs on the training thread
  itself, the pattern that the PyTorch pinned-memory tutorial measures as slower than a plain
  copy (see TL601, whose fix adds workers first);
- a training loop (a loop that calls `backward`) iterates the loader and copies to a CUDA device;
  copies to the CPU or MPS are not host-to-GPU transfers. A loader returned to code in another
  module (a `build_dataloader(...)` factory) is left alone: where its batches go, and whether a
  configuration turns pinning on, is not in the file;
- an explicit `pin_memory=` (either value) is left alone, as is a call with `**kwargs`.

It stays silent when the dataset or the `collate_fn` may already produce CUDA tensors (their code
mentions `cuda`, `device` or `.to(`): pinning a CUDA tensor raises an error. In a DDP script that
never calls `torch.cuda.set_device`, the pinning thread of every process opens a context on GPU 0,
so there the fix is marked unsafe.

## References

- https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html
- https://pytorch.org/docs/stable/data.html#memory-pinning
- https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers
- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#enable-async-data-loading-and-augmentation
- https://lightning.ai/docs/pytorch/stable/advanced/speed.html#dataloaders
- https://github.com/rasbt/LLMs-from-scratch/tree/main/ch05/10_llm-training-speed
"""

from __future__ import annotations

import re

from torchlint.analysis.data import (ast_dataloader_argument, ast_dataloader_calls, dataloader_argument, handed_to,
                                    is_dataloader_call, without_workers)
from torchlint.analysis.devices import mentions_cuda
from torchlint.analysis.loops import ast_training_loop_lines
from torchlint.analysis.walk import walk
from torchlint.analysis.syntax import (ast_find_keyword, ast_is_literal, dotted_name, has_star_args)
from torchlint.fixes import set_keyword
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

# Code that may put tensors on a device before the loader sees them.
DEVICE_CODE = re.compile(r"cuda|device|\.to\(")


class PinMemory(Rule):
    code = "TL602"
    name = "pin-memory"
    kind = "performance"
    summary = "`DataLoader` feeding a CUDA training loop without `pin_memory=True`"
    fix_applicability = "safe"
    triggers = ("DataLoader",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # workers, no pin_memory= (nor its positional place), and a loop that trains
        return any(ast_training_loop_lines(index)) and any(
            ast_dataloader_argument(call, "num_workers") is not None
            and not ast_is_literal(ast_dataloader_argument(call, "num_workers"), 0)
            and ast_find_keyword(call, "pin_memory") is None and len(call.args) < 8 for call in ast_dataloader_calls(index))

    def visit_Call(self, node: cst.Call) -> None:
        if not is_dataloader_call(node, self.ctx.bindings) or has_star_args(node) \
                or dataloader_argument(node, "pin_memory") is not None or not mentions_cuda(self.ctx.code):
            return
        if without_workers(node, self.ctx.bindings, self.ctx.parameters_around()):
            return  # pinning on the training thread does not pay (TL601 adds workers first)
        if not any(self.ctx.loops.backpropagated_names(loop) is not None and self.ctx.devices.moves_to_cuda(loop.body)
                   for loop in self._loops(node)):
            return
        if any(self._may_hold_cuda_tensors(arg.value) for arg in (dataloader_argument(node, "dataset"),
                                                                 dataloader_argument(node, "collate_fn")) if arg):
            return
        distributed_without_device = "DistributedDataParallel" in self.ctx.code and "set_device" not in self.ctx.code
        self.report(node, "`DataLoader` feeds batches to CUDA from pageable memory; pass `pin_memory=True` "
                          "(and copy with `non_blocking=True`) so the copies overlap with compute",
                    self.fix("Pin the loader's batches (`pin_memory=True`)",
                             self.replace(node, set_keyword(node, "pin_memory", cst.Name("True"))),
                             applicability="unsafe" if distributed_without_device else "safe"))

    def _loops(self, node: cst.Call) -> list[cst.For]:
        """The loops over the loader: where the file iterates it (``for x in loader``), and in a
        function of the file it is handed to (``train(model, loader)`` with ``def train(net, data):
        for x, y in data: ...``)."""
        bound = self.ctx.bound_name()
        loops = self.ctx.loops.iterating_loops(bound)
        if bound is None or "." in bound or self.ctx.bindings.value_of(bound) is not node:
            return loops
        for function, parameter in handed_to(self.ctx.module, self.ctx.bindings, bound):
            inside: set[int] = set()
            walk(function.body, lambda n: inside.add(id(n)) if type(n) is cst.For else None)
            loops += [loop for loop in self.ctx.loops.loops_over(parameter) if id(loop) in inside]
        return loops

    def _may_hold_cuda_tensors(self, expr: cst.BaseExpression, depth: int = 2) -> bool:
        """Does the expression, or what its names are bound to (two levels), or a class or
        function of this file that it calls or names, mention a device?"""
        if DEVICE_CODE.search(self.ctx.code_for(expr)):
            return True
        if depth == 0:
            return False
        names = {dotted_name(expr)} if isinstance(expr, (cst.Name, cst.Attribute)) else set()
        if isinstance(expr, cst.Call):
            names.add(dotted_name(expr.func))
            names |= {dotted_name(a.value) for a in expr.args}
        for name in names - {None}:
            for value in self.ctx.bindings.values(name):
                if value is not None and self._may_hold_cuda_tensors(value, depth - 1):
                    return True
            if any(DEVICE_CODE.search(self.ctx.code_for(definition)) for definition in self.ctx.bindings.defined(name)):
                return True
        return False
