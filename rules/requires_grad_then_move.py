"""
## What it does

Finds a tensor made by a factory with `requires_grad=True` and then moved to a device:
`torch.randn(3, requires_grad=True).cuda()`, `torch.zeros(n, requires_grad=True).to(device)`; and
a parameter moved on its own: `self.w = nn.Parameter(torch.randn(n)).cuda()`.

## Why is it wrong

`requires_grad=True` makes the CPU tensor a leaf of the autograd graph. `.cuda()` and `.to()` are
operations like any other: what they return is computed from that leaf, so it is not a leaf
itself. Autograd fills `.grad` only for leaves, so after `backward()` the moved tensor's `.grad`
stays `None` (PyTorch warns about reading it), an optimizer given the tensor never changes it, and
the CPU leaf that does get the gradient is no longer referenced by anyone. The code reads as "a
trainable tensor on the GPU" and trains nothing. A moved `nn.Parameter` is worse still: the copy
is a plain tensor, so a module does not even register it (it is missing from `parameters()` and
the `state_dict`). It is also slow in the way TL201
`move-after-create` describes: the values are made on the CPU and then copied.

## Example

```python
weights = torch.randn(784, 10, requires_grad=True).cuda()
optimizer = torch.optim.SGD([weights], lr=0.1)  # weights.grad is None after backward
self.w = nn.Parameter(torch.randn(n)).cuda()  # not in model.parameters()
```

## Use instead

```python
weights = torch.randn(784, 10, requires_grad=True, device="cuda")
self.w = nn.Parameter(torch.randn(n, device="cuda"))  # or build the module, then `model.to(device)`
```

## Fix safety

Unsafe, because it repairs a bug and so changes what the run computes: the tensor becomes the leaf
the code meant it to be, so its `.grad` is filled and an optimizer given it now updates it (before
the fix it never changed). For deterministic factories (`zeros`, `ones`, `full`, `arange`,
`tensor`...) the starting values are the same; for random ones (`rand`, `randn`, `randint`...) they
differ too, since the CUDA generator gives other numbers than the CPU one for the same seed.
`torchlint verify --unsafe-fixes` judges the fixed script by whether it still trains. Like TL201, no fix when the factory takes `**kwargs` (it may already
carry `device`), when the move does more than move (`memory_format=`, `copy=`), or when both the
factory and `.to()` give a dtype. For a moved `nn.Parameter(...)`, the fix gives the device to the
factory inside it (same safety as above) and is withheld when the data is not a factory call.
The rule does not fire when the moved tensor is wrapped in `nn.Parameter(...)` (which makes a new
leaf; TL201 reports the wasted copy), is detached, or is a parameter made with
`requires_grad=False`. It
reads TL201's `device-names` option to know which variable names hold devices.

## References

- https://pytorch.org/docs/stable/generated/torch.Tensor.is_leaf.html
- https://pytorch.org/docs/stable/generated/torch.Tensor.grad.html
- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#create-tensors-directly-on-the-target-device
"""

from __future__ import annotations

from torchlint.analysis.devices import DETERMINISTIC_FACTORIES, RANDOM_FACTORIES, tensor_factory
from torchlint.analysis.syntax import ast_callee, find_argument, find_keyword, has_star_args, is_literal
from torchlint.fixes import replace_arg_value, set_keyword
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, Severity, SyntaxIndex
from torchlint.rules._factories import PARAMETER, ast_moved_calls, create_on_device, creates_non_leaf, factory_move

# TL201's option, which this rule reads too
DEVICE_NAMES_OPTION = ("move-after-create", "device-names")


class RequiresGradThenMove(Rule):
    code = "TL102"
    name = "requires-grad-then-move"
    kind = "correctness"
    summary = "A `requires_grad=True` tensor moved right after creation is not a leaf: its `.grad` stays None"
    severity = Severity.ERROR
    fix_applicability = "unsafe"
    triggers = ("requires_grad", "Parameter")

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a factory given requires_grad=, or an nn.Parameter, moved right away
        parameter = index.names(["Parameter"])
        return any(ast_callee(call) in parameter or any(k.arg == "requires_grad" for k in call.keywords)
                   for call in ast_moved_calls(index, *DETERMINISTIC_FACTORIES, *RANDOM_FACTORIES, "Parameter"))

    def visit_Call(self, node: cst.Call) -> None:
        names = tuple(self.ctx.settings.rule_option(*DEVICE_NAMES_OPTION, []))
        found = factory_move(self.ctx, node, names)
        if found is None:
            self._moved_parameter(node, names)
            return
        factory_call, factory, move = found
        if not creates_non_leaf(self.ctx, factory_call):
            return
        shown = f"torch.{factory}(..., requires_grad=True).{move.method}(...)"
        self.report(factory_call, f"`{shown}` is not a leaf tensor: its `.grad` stays None after backward (an "
                                  "optimizer given it never updates it); create it on the device with `device=`",
                    create_on_device(self, node, factory_call, factory, move, repairs=True))

    def _moved_parameter(self, node: cst.Call, names: tuple[str, ...]) -> None:
        """``nn.Parameter(data).cuda()``: the copy is a plain tensor, not a Parameter."""
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in ("cuda", "to") and isinstance(func.value, cst.Call)
                and self.ctx.qualified_name(func.value.func) in PARAMETER):
            return
        move = self.ctx.devices.move(node, names)
        parameter = func.value
        grad = find_argument(parameter, "requires_grad", 1)
        if move is None or move.to_cpu or (grad is not None and is_literal(grad.value, False)):
            return
        self.report(parameter, f"`nn.Parameter(...).{move.method}(...)` is a plain tensor, not a Parameter: a module "
                               "does not register it and its `.grad` stays None, so it is never trained; create the data "
                               "on the device inside `nn.Parameter(...)` (or move the whole module)",
                    self._parameter_fix(node, parameter, move))

    def _parameter_fix(self, node: cst.Call, parameter: cst.Call, move):
        data = find_argument(parameter, "data", 0)
        factory = tensor_factory(data.value, self.ctx.bindings) if data is not None else None
        if factory is None or not move.understood or move.dtype is not None or has_star_args(parameter) \
                or has_star_args(data.value) or find_keyword(data.value, "device") is not None:
            return None
        made_there = set_keyword(data.value, "device", move.device)
        new = replace_arg_value(parameter, data, made_there).with_changes(lpar=node.lpar, rpar=node.rpar)
        return self.fix("Create the parameter's data on the device", self.replace(node, new))
