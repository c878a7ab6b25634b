"""
## What it does

Finds activation checkpointing calls that do not say which variant they want:
`torch.utils.checkpoint.checkpoint(fn, *args)` and `torch.utils.checkpoint.checkpoint_sequential(...)`
without `use_reentrant=`, however they are imported (`from torch.utils.checkpoint import
checkpoint as cp`, `import torch.utils.checkpoint as ckpt`). Other libraries' functions of the
same name (DeepSpeed's `deepspeed.checkpointing.checkpoint`, FairScale's, a project's own) are not
torch's and are left alone.

## Why is it wrong

`torch.utils.checkpoint` has two implementations. Left unsaid, `use_reentrant` falls back to the
older, reentrant one, and torch warns about it on every call (since 2.1 for `checkpoint`, 2.2 for
`checkpoint_sequential`), announcing that omitting the argument is to become an error. The
reentrant variant has pitfalls the PyTorch docs list: when none of the checkpointed inputs
requires grad, the parameters inside the checkpointed function get no gradient at all (silently);
it does not support `torch.autograd.grad`, keyword arguments to the function, or inputs nested in
containers; and under DDP it needs `static_graph=True` to be correct with unused parameters. The
docs recommend `use_reentrant=False`.

## Example

```python
from torch.utils.checkpoint import checkpoint

def forward(self, x):
    for block in self.blocks:
        x = checkpoint(block, x)
    return x
```

## Use instead

```python
from torch.utils.checkpoint import checkpoint

def forward(self, x):
    for block in self.blocks:
        x = checkpoint(block, x, use_reentrant=False)
    return x
```

## Fix safety

Unsafe: the fix passes `use_reentrant=False`, which changes how the backward pass recomputes the
function. The gradients are the same for code that works with both variants, but code that relied
on the reentrant one's behaviour changes: parameters now get gradients even when no input
requires grad, a checkpointed function that runs its own backward behaves differently, and the
recomputation stops as soon as the saved tensors are rebuilt. Write `use_reentrant=True` instead to
keep the current behaviour and silence the warning.

The rule stays silent when `**kwargs` is passed (it may carry `use_reentrant`), for
`checkpoint_sequential` also when `*args` or a fourth positional argument is passed (its
`use_reentrant` parameter may be given by position), in code for other torch versions, and when
the called name is bound to something else as well in the file. `use_reentrant` exists for
`checkpoint` since torch 1.11 and for `checkpoint_sequential` since 2.0: older targets are not
reported.

## References

- https://pytorch.org/docs/stable/checkpoint.html
- https://pytorch.org/docs/stable/checkpoint.html#torch.utils.checkpoint.checkpoint
- https://github.com/pytorch/pytorch/pull/100551
- https://github.com/pytorch/pytorch/pull/114158
"""

from __future__ import annotations

import re

from torchlint.analysis.syntax import ast_find_keyword, find_argument, has_star_args
from torchlint.fixes import set_keyword
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

TORCH_UTILS_IMPORT = re.compile(r"from\s+torch\.utils\s+import\s*(?:\([^)]*|[^\n]*)\bcheckpoint\b")

CHECKPOINT = "torch.utils.checkpoint.checkpoint"
CHECKPOINT_SEQUENTIAL = "torch.utils.checkpoint.checkpoint_sequential"
# checkpoint(function, *args, use_reentrant=None, ...): keyword-only;
# checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs): also fourth by position
POSITION = {CHECKPOINT: None, CHECKPOINT_SEQUENTIAL: 3}
SINCE = {CHECKPOINT: "1.11", CHECKPOINT_SEQUENTIAL: "2.0"}
WARNS_SINCE = {CHECKPOINT: "2.1", CHECKPOINT_SEQUENTIAL: "2.2"}  # pytorch#100551, pytorch#114158


class CheckpointUseReentrant(Rule):
    code = "TL105"
    name = "checkpoint-use-reentrant"
    kind = "deprecation"
    summary = "`torch.utils.checkpoint` without `use_reentrant=` (a warning every call; `False` is recommended)"
    fix_applicability = "unsafe"

    @classmethod
    def applies(cls, text: str) -> bool:
        # torch's checkpoint is named through `torch.utils.checkpoint` or `from torch.utils import
        # checkpoint`: other libraries' `checkpoint` functions are not it
        return "utils.checkpoint" in text or TORCH_UTILS_IMPORT.search(text) is not None
    torch_versions = ">=1.11"

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return any(ast_find_keyword(call, "use_reentrant") is None and all(k.arg is not None for k in call.keywords)
                   for call in index.calls_of(POSITION))

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        if name not in POSITION or not self.ctx.torch_at_least(SINCE[name]):
            return
        position = POSITION[name]
        if any(a.star == "**" for a in node.args) or position is not None and has_star_args(node) \
                or find_argument(node, "use_reentrant", position) is not None:
            return
        if self.ctx.bindings.ambiguous(node.func) or self.ctx.compat.in_fallback():
            return  # the name may mean another `checkpoint`; or code kept for other torch versions
        shown = name.rsplit(".", 1)[1]
        fix = self.fix("Pass `use_reentrant=False`",
                       self.replace(node, set_keyword(node, "use_reentrant", cst.Name("False"))))
        warns = " (and warns on every call)" if self.ctx.torch_at_least(WARNS_SINCE[name]) else ""
        self.report(node, f"`{shown}` without `use_reentrant=` uses the reentrant variant{warns}, "
                          "which gives no parameter gradients when no input requires grad; pass "
                          "`use_reentrant=False` (recommended), or `use_reentrant=True` to keep the current behaviour",
                    fix)
