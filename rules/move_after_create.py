"""
## What it does

Finds a tensor made by a factory (`torch.zeros`, `torch.ones`, `torch.empty`, `torch.full`,
`torch.arange`, `torch.eye`, `torch.rand`, `torch.randn`, `torch.randint`, `torch.linspace`, ...)
that is moved to a device right away: `torch.zeros(n).cuda()`, `torch.randn(b, d).to("cuda:1")`.

Not reported, because the move costs nothing that `device=` would save: `torch.tensor(data)` and
`torch.as_tensor(data)` (the data is on the host and is copied to the device either way), and the
`*_like` factories (`torch.zeros_like(x)` is made on `x`'s device, so `.to(x.device)` does
nothing).

## Why is it slow

The tensor is first allocated and filled on the CPU, then copied over PCIe to the GPU, and the CPU
copy is thrown away: two allocations, a host fill and a blocking transfer instead of one kernel on
the device. PyTorch's performance tuning guide says to "create tensors directly on the target
device"; its profiler's pattern matcher flags the same thing as an extra CUDA copy.

A tensor made with `requires_grad=True` and then moved is worse than slow (its `.grad` stays
`None`): TL102 `requires-grad-then-move` reports that case, and this rule leaves it alone.

## Example

```python
mask = torch.zeros(batch, seq).cuda()
noise = torch.randn(batch, dim).to(device)
```

## Use instead

```python
mask = torch.zeros(batch, seq, device="cuda")
noise = torch.randn(batch, dim, device=device)
```

## Fix safety

Safe for deterministic factories: the values are the same, only where they are made changes.
Unsafe when the factory already names a device (`torch.linspace(..., device=a.device).to(b)`):
the values were computed on that device, and another may round them differently. A
`dtype` given to `.to()` moves into the factory (safe for `zeros`, `ones`, `empty` and `eye`,
whose values are exact in every dtype; unsafe otherwise, since rounding
once differs from rounding twice). Unsafe for random factories (`rand`, `randn`, `randint`,
`randperm`, ...): the CPU and CUDA generators produce different numbers for the same seed. Unsafe
for `.cuda(x)` with a non-literal `x`. No fix when the factory takes `**kwargs` (it may already
carry `device`), when both the factory and `.to()` give a dtype, when `.to()` has arguments the
factory does not take (`memory_format`, `copy`), when the factory is given a `generator=` (a CPU
generator cannot drive a factory on the GPU: it raises), or when a comment sits between the factory
and the move (the rewrite would drop it).

## Options

- `device-names` (list of strings): more variable names to treat as devices, besides names bound
  to a device in the file and names like `device`, `dev`, `*_device`.

## References

- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#create-tensors-directly-on-the-target-device
- https://github.com/pytorch/pytorch/blob/main/torch/profiler/_pattern_matcher.py
- https://pytorch.org/docs/stable/generated/torch.Tensor.is_leaf.html
- https://lightning.ai/docs/pytorch/stable/advanced/speed.html
"""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.devices import DETERMINISTIC_FACTORIES, RANDOM_FACTORIES
from torchlint.rule import Rule, SyntaxIndex
from torchlint.rules._factories import (MOVE_AFTER_CALL, NO_HOST_FILL, ast_moved_calls, create_on_device,
                                        creates_non_leaf, factory_move)


class MoveAfterCreate(Rule):
    code = "TL201"
    name = "move-after-create"
    kind = "performance"
    summary = "A factory-made tensor moved right away instead of created on the device (`device=`)"
    fix_applicability = "safe"
    options = {"device-names": (list, [], "More variable names to treat as devices")}

    @classmethod
    def applies(cls, text: str) -> bool:
        return MOVE_AFTER_CALL.search(text) is not None

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return bool(ast_moved_calls(index, *(DETERMINISTIC_FACTORIES | RANDOM_FACTORIES) - NO_HOST_FILL))

    def visit_Call(self, node: cst.Call) -> None:
        found = factory_move(self.ctx, node, tuple(self.option("device-names")))
        if found is None:
            return
        factory_call, factory, move = found
        if creates_non_leaf(self.ctx, factory_call) or factory in NO_HOST_FILL:
            return  # TL102 requires-grad-then-move; or a tensor the move does not make faster
        shown = f"torch.{factory}(...).{move.method}(...)"
        self.report(factory_call, f"`{shown}` fills the tensor on the CPU, then copies it; create it on the device "
                                  "with `device=`", create_on_device(self, node, factory_call, factory, move))
