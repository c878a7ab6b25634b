"""
## What it does

Finds `torch.optim.Adam`, `AdamW` and `SGD` built without `fused=` or `foreach=` in a script that
trains on CUDA.

## Why is it slow

Without either flag, PyTorch picks the `foreach` implementation on CUDA: it updates all the
parameters of a group with a handful of multi-tensor kernels per operation of the update rule
(multiply, add, square root, divide...), each reading and writing every parameter and state
tensor again. `fused=True` does the whole update in one kernel per group, reading each tensor
once. The optimizer step is a visible part of every iteration for large models; torchtitan
measured +2.6% end-to-end throughput from turning it on (pytorch/torchtitan#881), and the
PyTorch docs list `fused` as the fastest implementation where it exists.

## Expected gain

Small: a few percent of the step on large models. torchtitan measured an average speedup of 2.64% on
Llama 8B (1.63% to 3.62%, https://github.com/pytorch/torchtitan/pull/881); a small GPT on an A100
went from 27,648 to 28,399 tokens/s (https://github.com/rasbt/LLMs-from-scratch/tree/main/ch05/10_llm-training-speed).
On the zoo's ResNet-20 on an H200: step time within noise, memory growth 6.5 MiB lower
(bench/results/verify-zoo-gpu.md). `torchlint verify --each --unsafe-fixes` measures it for you.

## Example

```python
model = model.cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
for x, y in loader:
    loss = criterion(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
```

## Use instead

```python
model = model.cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
for x, y in loader:
    loss = criterion(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
```

## Fix safety

Unsafe: the fused kernel computes the same update in a different order of floating-point
operations, so parameters drift apart from the unfused run in the last bits, and it requires every
parameter to be a floating-point tensor on a supported device (CUDA, or the CPU from torch 2.4).
For targets before 2.4 the fix writes `fused=torch.cuda.is_available()`, so the script still runs
on a machine without a GPU. The rule stays silent when the call already chooses an implementation
(`fused=`, `foreach=`), passes `differentiable=` (not supported by the fused kernels) or
`**kwargs` (which may carry either), in files that never mention CUDA or have no training loop
(a loop that calls `backward()`), for an optimizer built anew inside the training loop (a
one-step numerical check, not training), and, for `SGD`, in files
that use a `GradScaler` (a fused SGD step advanced the momentum buffer on the steps the scaler
skipped after an overflow: LibreYOLO/libreyolo#771) or sparse gradients.

A run resumed from a checkpoint saved before the fix does not use the fused kernel: the
optimizer's `load_state_dict` takes each parameter group's options from the checkpoint, and a
group saved without `fused` gets `fused=None` (checked with torch 2.13). Set
`group["fused"] = True` on each of `optimizer.param_groups` after loading, or save a new checkpoint.

## Versions

`fused=True` exists for `Adam` and `AdamW` from torch 2.0 and for `SGD` from torch 2.3; the rule
is silent for older targets.

## References

- https://pytorch.org/docs/stable/optim.html#algorithms
- https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html
- https://github.com/pytorch/torchtitan/pull/881
- https://github.com/pytorch/pytorch/pull/116585
- https://github.com/LibreYOLO/libreyolo/pull/771
- https://github.com/rasbt/LLMs-from-scratch/tree/main/ch05/10_llm-training-speed
"""

from __future__ import annotations

from torchlint.analysis.devices import may_train_on_cuda, mentions_cuda
from torchlint.analysis.loops import ast_training_loop_lines
from torchlint.analysis.syntax import ast_find_keyword, ast_has_star_args, find_keyword, has_star_args
from torchlint.fixes import imported_name, parse_expression, set_keyword
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

# optimizer -> the first torch release whose constructor takes fused=True
FUSED_SINCE = {"Adam": "2.0", "AdamW": "2.0", "SGD": "2.3"}
OPTIMIZERS = {f"torch.optim.{module}{name}": name for name in FUSED_SINCE
              for module in ("", f"{name.lower()}.")}
CPU_FUSED_SINCE = "2.4"
CHOSEN = ("fused", "foreach", "differentiable")


class FusedOptimizer(Rule):
    code = "TL302"
    name = "fused-optimizer"
    kind = "performance"
    summary = "Adam/AdamW/SGD on CUDA without `fused=True` (one kernel per update instead of many)"
    fix_applicability = "unsafe"
    triggers = ("Adam", "SGD")
    torch_versions = ">=2.0"

    @classmethod
    def applies(cls, text: str) -> bool:
        return super().applies(text) and may_train_on_cuda(text)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # an optimizer that has not chosen its implementation, in a file with a training loop
        return any(ast_training_loop_lines(index)) and any(
            not ast_has_star_args(call) and not any(ast_find_keyword(call, name) for name in CHOSEN)
            for call in index.calls(*FUSED_SINCE))

    def visit_Call(self, node: cst.Call) -> None:
        optimizer = OPTIMIZERS.get(self.ctx.qualified_name(node.func) or "")
        if optimizer is None or not self.ctx.torch_at_least(FUSED_SINCE[optimizer]):
            return
        if has_star_args(node) or any(find_keyword(node, name) is not None for name in CHOSEN):
            return
        source = self.ctx.code
        if not mentions_cuda(source) or not self.ctx.loops.training_loops or self.ctx.loops.training_loop() is not None:
            return  # a CPU-only script, no training here, or a new optimizer every step (a numerical check)
        if optimizer == "SGD" and ("GradScaler" in source or "sparse=True" in source):
            return
        value = "True"
        if not self.ctx.torch_at_least(CPU_FUSED_SINCE):
            torch = imported_name(self.ctx, "torch")
            value = f"{torch}.cuda.is_available()" if torch is not None else None
        fix = None
        if value is not None:
            fix = self.fix("Pass `fused=True`", self.replace(node, set_keyword(node, "fused", parse_expression(value))))
        self.report(node, f"`{optimizer}` updates the parameters with many kernels per step; pass `fused=True` "
                          "to do the whole update in one kernel (a small gain: a few percent of a step, most on "
                          "large models)", fix)
