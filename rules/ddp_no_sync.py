"""
## What it does

Finds gradient accumulation on a model that the file wraps in `DistributedDataParallel`: a loop
whose backward runs on every micro-batch while the optimizer steps only every k-th (`if (i + 1) %
k == 0: optimizer.step()`, `continue` unless it is time to step, or a step after an inner loop of
micro-batches), where nothing in the file turns DDP's gradient synchronization off for the
micro-batches that do not step (`model.no_sync()`, `model.require_backward_grad_sync`).

## Why is it slow

DDP all-reduces the gradients during every backward pass: each bucket of gradients is averaged
across all processes as soon as it is ready. With accumulation only the last micro-batch's
all-reduce is needed, because the optimizer reads the gradients only then; the all-reduces of the
k - 1 others move the full gradient across the network for nothing. With k = 4 that is four times
the communication of the training it stands for, and on a network-bound job (many nodes, a large
model, Ethernet instead of InfiniBand) the step time grows with it. `DistributedDataParallel.no_sync()`
is the context manager made for this: inside it, backward only accumulates the gradients
locally, and the first backward outside it synchronizes the accumulated gradients. The gradients
come out the same (up to rounding): averaging the locally accumulated sum once gives what adding
k averages gives.

## Expected gain

With accumulation over k micro-batches it saves k - 1 of every k all-reduces. Hugging Face
Accelerate measured, on T4 GPUs with accumulation every 4 steps, 2 s per batch without `no_sync` and
0.91 s with it across two nodes, and 0.50 s against 0.41 s on one node with two GPUs
(https://huggingface.co/docs/accelerate/concept_guides/gradient_synchronization). The slower the
link between processes, the larger the gain. No fix, and `torchlint verify` runs scripts as one
process: compare the step time under your launcher before and after the change.

## Example

```python
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(model, device_ids=[rank])
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accumulation_steps
    loss.backward()
    if (i + 1) % accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
```

## Use instead

```python
import contextlib

from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(model, device_ids=[rank])
for i, (x, y) in enumerate(loader):
    stepping = (i + 1) % accumulation_steps == 0
    with contextlib.nullcontext() if stepping else model.no_sync():
        loss = criterion(model(x), y) / accumulation_steps
        loss.backward()
    if stepping:
        optimizer.step()
        optimizer.zero_grad()
```
The forward pass must be inside `no_sync()` too: DDP decides during the forward whether the
backward synchronizes.

## Fix safety

No fix: the forward and the backward move into a `with` block whose context depends on whether the
iteration steps, and where the model is wrapped only under a condition (`if args.distributed:`)
the plain model has no `no_sync()`; the right spelling depends on the script.

The rule reports only a model it can see wrapped: a name the same function (or the module)
assigns `DistributedDataParallel(...)`, a parameter of a function that the file calls with such a
name, or an attribute (`self.model`) the file assigns one. It stays silent when the file mentions
`no_sync` or `require_backward_grad_sync` anywhere (through a helper, `contextlib.nullcontext`, or
the flag set by hand as nanoGPT does), when the backward runs inside a `with` block of something
other than torch (a helper that may turn synchronization off, `accelerator.accumulate(model)`),
for a model that comes from another module, for frameworks that handle it (Lightning's
`accumulate_grad_batches`, Accelerate, DeepSpeed engines, none of which wrap the model in this
file), for a GAN's `n_critic` schedule (not accumulation), and in test code.

## References

- https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync
- https://pytorch.org/docs/stable/notes/ddp.html#internal-design
- https://huggingface.co/docs/accelerate/concept_guides/gradient_synchronization
"""

from __future__ import annotations

from functools import cached_property

from torchlint.analysis.data import DISTRIBUTED_DATA_PARALLEL, DdpModels
from torchlint.analysis.flow import path_to
from torchlint.analysis.steps import accumulation, ast_steps_in_training_loops
from torchlint.analysis.syntax import dotted_name
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

# Words that say the file controls DDP's gradient synchronization itself.
SYNC_CONTROL = ("no_sync", "require_backward_grad_sync")


class DdpNoSync(Rule):
    code = "TL504"
    name = "ddp-no-sync"
    kind = "performance"
    summary = "Gradient accumulation under DDP without `no_sync()`: every micro-batch all-reduces the gradients"
    triggers = ("DistributedDataParallel",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return bool(index.calls_of(DISTRIBUTED_DATA_PARALLEL)) and ast_steps_in_training_loops(index)

    @cached_property
    def _models(self) -> DdpModels:
        return DdpModels(self.ctx.module, self.ctx.bindings)

    def visit_For(self, node: cst.CSTNode) -> None:
        if any(word in self.ctx.code for word in SYNC_CONTROL) or self.ctx.loops.backpropagated_names(node) is None:
            return
        found = accumulation(node, self.ctx.bindings)
        if found is None:
            return
        model = self._ddp_model(node)
        if model is None:
            return
        step = self.ctx.code_for(found.step)
        every = f"once every `{self.ctx.code_for(found.count)}` micro-batches" if found.count is not None \
            else "once every few micro-batches"
        for backward in found.backwards:
            if self._in_foreign_context(node, backward):
                continue
            self.report(backward, f"`{model}` is wrapped in DistributedDataParallel and `{step}` runs {every}, but "
                                  "this backward all-reduces the gradients on every micro-batch; run the forward and "
                                  f"backward of the micro-batches that do not step under `with {model}.no_sync():`")

    visit_While = visit_For

    def _ddp_model(self, loop: cst.CSTNode) -> str | None:
        """The DDP-wrapped model the loop runs: a name it calls or passes to a call."""
        scopes = self.ctx.enclosing(cst.ClassDef, cst.FunctionDef)
        candidates: list[cst.BaseExpression] = []

        def on_visit(node: cst.CSTNode) -> bool:
            if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return False
            if isinstance(node, cst.Call):
                candidates.append(node.func)
                candidates.extend(arg.value for arg in node.args)
            return True

        walk(loop.body, on_visit)
        seen: set[str] = set()
        for candidate in candidates:
            name = dotted_name(candidate)
            if name is None or name in seen:
                continue
            seen.add(name)
            if self._models.holds_ddp(candidate, scopes):
                return name
        return None

    def _in_foreign_context(self, loop: cst.CSTNode, backward: cst.Call) -> bool:
        """Is the backward inside a ``with`` block of something that is not torch's (a helper or a
        framework that may turn synchronization off)?"""
        for node in path_to(loop, backward) or []:
            if isinstance(node, cst.With):
                for item in node.items:
                    if not self._torch_context(item.item):
                        return True
        return False

    def _torch_context(self, expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.IfExp):
            return self._torch_context(expr.body) and self._torch_context(expr.orelse)
        if isinstance(expr, cst.Call):
            qualified = self.ctx.qualified_name(expr.func) or ""
            return qualified.startswith(("torch.", "contextlib."))
        if isinstance(expr, cst.Name):
            values = self.ctx.bindings.values(expr.value)
            return bool(values) and all(v is not None and self._torch_context(v) for v in values)
        return False
