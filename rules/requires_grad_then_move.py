"""
## What it does

Finds a tensor made by a factory with `requires_grad=True` and then moved to a device:
`torch.randn(3, requires_grad=True).cuda()`, `torch.zeros(n, requires_grad=True).to(device)`.

## Why is it wrong

`requires_grad=True` makes the CPU tensor a leaf of the autograd graph. `.cuda()` and `.to()` are
operations like any other: what they return is computed from that leaf, so it is not a leaf
itself. Autograd fills `.grad` only for leaves, so after `backward()` the moved tensor's `.grad`
stays `None` (PyTorch warns about reading it), an optimizer given the tensor never changes it, and
the CPU leaf that does get the gradient is no longer referenced by anyone. The code reads as "a
trainable tensor on the GPU" and trains nothing. It is also slow in the way TL201
`move-after-create` describes: the values are made on the CPU and then copied.

## Example

```python
weights = torch.randn(784, 10, requires_grad=True).cuda()
optimizer = torch.optim.SGD([weights], lr=0.1)  # weights.grad is None after backward
```

## Use instead

```python
weights = torch.randn(784, 10, requires_grad=True, device="cuda")
```

## Fix safety

Safe for deterministic factories (`zeros`, `ones`, `full`, `arange`, `tensor`...): the tensor
gets the same values, made on the device, and becomes the leaf the code meant it to be. Unsafe for
random factories (`rand`, `randn`, `randint`...): the CUDA generator gives other numbers than the
CPU one for the same seed. Like TL201, no fix when the factory takes `**kwargs` (it may already
carry `device`), when the move does more than move (`memory_format=`, `copy=`), or when both the
factory and `.to()` give a dtype. The rule does not fire when the moved tensor is wrapped in
`nn.Parameter(...)` (which makes a new leaf; TL201 reports the wasted copy) or detached. It
reads TL201's `device-names` option to know which variable names hold devices.

## References

- https://pytorch.org/docs/stable/generated/torch.Tensor.is_leaf.html
- https://pytorch.org/docs/stable/generated/torch.Tensor.grad.html
- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#create-tensors-directly-on-the-target-device
"""

from __future__ import annotations

import libcst as cst

from torchlint.diagnostics import Severity
from torchlint.rule import Rule
from torchlint.rules.move_after_create import MoveAfterCreate, create_on_device, creates_non_leaf, factory_move


class RequiresGradThenMove(Rule):
    code = "TL102"
    name = "requires-grad-then-move"
    kind = "correctness"
    summary = "A `requires_grad=True` tensor moved right after creation is not a leaf: its `.grad` stays None"
    severity = Severity.ERROR
    fix_applicability = "safe"
    triggers = ("requires_grad",)

    def visit_Call(self, node: cst.Call) -> None:
        names = self.ctx.settings.rule_option(MoveAfterCreate.name, "device-names", [])
        found = factory_move(self.ctx, node, tuple(names))
        if found is None:
            return
        factory_call, factory, move = found
        if not creates_non_leaf(self.ctx, factory_call):
            return
        shown = f"torch.{factory}(..., requires_grad=True).{move.method}(...)"
        self.report(factory_call, f"`{shown}` is not a leaf tensor: its `.grad` stays None after backward, so it "
                                  "is never trained; create it on the device with `device=`",
                    create_on_device(self, node, factory_call, factory, move))
