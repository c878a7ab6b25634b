"""
## What it does

Finds a tensor made by a factory (`torch.zeros`, `torch.ones`, `torch.empty`, `torch.full`,
`torch.arange`, `torch.eye`, `torch.tensor`, `torch.rand`, `torch.randn`, `torch.randint`,
`torch.linspace`, the `*_like` factories, ...) that is moved to a device right away:
`torch.zeros(n).cuda()`, `torch.tensor(x).to(device)`, `torch.randn(b, d).to("cuda:1")`.

## Why is it slow

The tensor is first allocated and filled on the CPU, then copied over PCIe to the GPU, and the CPU
copy is thrown away: two allocations, a host fill and a blocking transfer instead of one kernel on
the device. PyTorch's performance tuning guide says to "create tensors directly on the target
device"; its profiler's pattern matcher flags the same thing as an extra CUDA copy.

A tensor made with `requires_grad=True` and then moved is worse than slow: the moved tensor is not
a leaf of the graph, so after `backward()` its `.grad` stays `None` and an optimizer given it
never updates it.

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

Safe for deterministic factories: the values are the same, only where they are made changes. A
`dtype` given to `.to()` moves into the factory (safe for `zeros`, `ones`, `empty`, `eye` and
their `*_like` forms, whose values are exact in every dtype; unsafe otherwise, since rounding
once differs from rounding twice). Unsafe for random factories (`rand`, `randn`, `randint`,
`randperm`, ...): the CPU and CUDA generators produce different numbers for the same seed. Unsafe
for `.cuda(x)` with a non-literal `x`. No fix when the factory takes `**kwargs` (it may already
carry `device`), when both the factory and `.to()` give a dtype, or when `.to()` has arguments the
factory does not take (`memory_format`, `copy`).

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

from dataclasses import dataclass

import libcst as cst

from torchlint.matching import (argument, is_literal, keyword_arg, positional_args, set_keyword, string_value)
from torchlint.diagnostics import Severity
from torchlint.rule import Rule

DETERMINISTIC = frozenset({
    "zeros", "ones", "empty", "full", "arange", "range", "eye", "tensor", "as_tensor", "linspace", "logspace",
    "zeros_like", "ones_like", "empty_like", "full_like", "scalar_tensor", "tril_indices", "triu_indices",
})
RANDOM = frozenset({"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal"})
# Values exact in every dtype, so merging a dtype from .to() changes nothing.
EXACT = frozenset({"zeros", "ones", "empty", "eye", "zeros_like", "ones_like", "empty_like"})
FACTORIES = {f"torch.{name}": name for name in DETERMINISTIC | RANDOM}
TO_KEYWORDS = {"device", "dtype", "non_blocking"}  # .to() arguments the fix understands


@dataclass(frozen=True)
class Move:
    device: cst.BaseExpression
    dtype: cst.BaseExpression | None
    understood: bool  # every argument of the move is one the fix can carry over
    certain: bool  # the device is known to mean the same on the factory (not `.cuda(x)`)


class MoveAfterCreate(Rule):
    code = "TL201"
    name = "move-after-create"
    kind = "performance"
    summary = "A factory-made tensor moved right away instead of created on the device (`device=`)"
    fix_applicability = "safe"
    triggers = (".cuda(", ".to(")
    options = {"device-names": (list, [], "More variable names to treat as devices")}

    def visit_Call(self, node: cst.Call) -> None:
        move = node.func
        if not (isinstance(move, cst.Attribute) and move.attr.value in ("cuda", "to")
                and isinstance(move.value, cst.Call)):
            return
        factory_call = move.value
        factory = FACTORIES.get(self.ctx.qualified_name(factory_call.func) or "")
        if factory is None:
            return
        target = self._cuda_target(node) if move.attr.value == "cuda" else self._to_target(node)
        if target is None:
            return
        grad = keyword_arg(factory_call, "requires_grad")
        leaf_bug = grad is not None and is_literal(grad.value, True)
        shown = f"torch.{factory}(...).{move.attr.value}(...)"
        if leaf_bug:
            message = (f"`{shown}` is not a leaf tensor: its `.grad` stays None after backward, so it is "
                       "never trained; create it on the device with `device=`")
        else:
            message = f"`{shown}` fills the tensor on the CPU, then copies it; create it on the device with `device=`"
        self.report(factory_call, message, self._fix(node, factory_call, factory, target),
                    severity=Severity.ERROR if leaf_bug else None)

    @staticmethod
    def _cuda_target(node: cst.Call) -> Move | None:
        """``.cuda()``, ``.cuda(1)``, ``.cuda(device=d, non_blocking=True)``."""
        understood = not any(a.star for a in node.args) and len(positional_args(node)) <= 2 and all(
            a.keyword is None or a.keyword.value in ("device", "non_blocking") for a in node.args)
        index = argument(node, "device", 0)
        if index is None or is_literal(index.value, None):
            return Move(cst.SimpleString('"cuda"'), None, understood, certain=True)
        if isinstance(index.value, cst.Integer):
            return Move(cst.SimpleString(f'"cuda:{index.value.evaluated_value}"'), None, understood, certain=True)
        return Move(index.value, None, understood, certain=False)  # an int variable, or a device

    def _to_target(self, node: cst.Call) -> Move | None:
        """``.to(device)``, ``.to(device, dtype)``, ``.to(device=d, non_blocking=True)``; None for
        ``.to(torch.float16)``, ``.to(other_tensor)`` and anything not clearly a device."""
        if any(a.star for a in node.args):
            return None
        positional = positional_args(node)
        device_arg = keyword_arg(node, "device") or (positional[0] if positional else None)
        if device_arg is None or not self.ctx.is_device(device_arg.value, tuple(self.option("device-names"))):
            return None
        if string_value(device_arg.value) == "cpu":
            return None  # already there
        dtype_arg = keyword_arg(node, "dtype")
        if dtype_arg is None and len(positional) > 1 and positional[0] is device_arg:
            dtype_arg = positional[1]
        if dtype_arg is not None and not self.ctx.is_dtype(dtype_arg.value):
            return None
        understood = len(positional) <= 2 and all(a.keyword is None or a.keyword.value in TO_KEYWORDS
                                                   for a in node.args)
        return Move(device_arg.value, dtype_arg.value if dtype_arg else None, understood, certain=True)

    def _fix(self, node: cst.Call, factory_call: cst.Call, factory: str, move: Move):
        if not move.understood or any(a.star == "**" for a in factory_call.args) \
                or keyword_arg(factory_call, "pin_memory") is not None:
            return None  # the factory may already carry `device`, or .to() does more than move
        safe = factory in DETERMINISTIC and move.certain
        new = set_keyword(factory_call, "device", move.device)
        if move.dtype is not None:
            if keyword_arg(factory_call, "dtype") is not None:
                return None  # two conversions: their order matters
            new = set_keyword(new, "dtype", move.dtype)
            safe = safe and factory in EXACT
        new = new.with_changes(lpar=node.lpar, rpar=node.rpar)
        return self.fix("Create the tensor on the device", self.replace(node, new),
                        applicability="safe" if safe else "unsafe")
