"""
## What it does

Finds models wrapped in `torch.nn.DataParallel` (under any import alias).

## Why is it slow

`DataParallel` runs one Python process that drives every GPU from a single thread. Each step it
copies the model's parameters from the first GPU to the others, scatters the batch, gathers the
outputs back onto the first GPU and computes the loss there. The interpreter lock, the replication
and the lopsided memory use on GPU 0 make it slower than `DistributedDataParallel` (DDP) even on a
single machine; PyTorch's own documentation recommends DDP "even if there is only a single node".
DDP runs one process per GPU and overlaps the gradient all-reduce with the backward pass.

## Example

```python
model = nn.DataParallel(model)
```

## Use instead

```python
# launched with: torchrun --nproc_per_node=NUM_GPUS train.py
dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
model = DistributedDataParallel(model.cuda(local_rank), device_ids=[local_rank])
```
and give the DataLoader a `DistributedSampler` so that each process sees its own shard.

## Fix safety

Unsafe. The fix inserts a small function `_distributed_data_parallel` after the imports and calls
it instead of `DataParallel`. Launched by `torchrun`, it joins the process group (NCCL on GPU, gloo
on CPU), pins the process to its `LOCAL_RANK` GPU and wraps the model in DDP; run as a plain
`python script.py`, it creates a one-process group, so the script still runs as before and
`model.module` still works. The semantics change: each process now runs the whole loop, so the data
must be sharded (`DistributedSampler`) and logging or checkpointing restricted to rank 0 before
multi-GPU runs train faster; `device_ids`/`output_device` are dropped. `torchlint verify
--nproc 2 --unsafe-fixes` checks the rewritten script under `torchrun` and as plain python. A call
with `dim=` or `**kwargs` is reported without a fix.

## References

- https://pytorch.org/docs/stable/generated/torch.nn.DataParallel.html
- https://pytorch.org/docs/stable/notes/cuda.html#use-nn-parallel-distributeddataparallel-instead-of-multiprocessing-or-nn-dataparallel
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
- https://pytorch.org/docs/stable/elastic/run.html
"""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.syntax import find_argument, find_keyword, has_star_args
from torchlint.rule import Rule, SyntaxIndex

DATA_PARALLEL = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel",
})
HELPER = "_distributed_data_parallel"
HELPER_SOURCE = f'''

def {HELPER}(module):
    """Wrap `module` in DistributedDataParallel (written by torchlint's TL501 fix).

    Under torchrun, each process joins the process group and uses its own GPU; run as a plain
    `python` script, a one-process group is created so the script still runs as before.
    """
    import os

    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if "LOCAL_RANK" in os.environ:
            dist.init_process_group(backend)
        else:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count()
        torch.cuda.set_device(local_rank)
        module = module.cuda(local_rank)
        return torch.nn.parallel.DistributedDataParallel(module, device_ids=[local_rank])
    return torch.nn.parallel.DistributedDataParallel(module)
'''
DROPPED_KEYWORDS = {"device_ids", "output_device"}


class DataParallel(Rule):
    code = "TL501"
    name = "data-parallel"
    kind = "performance"
    summary = "`nn.DataParallel` instead of `DistributedDataParallel`"
    fix_applicability = "unsafe"
    triggers = ("DataParallel",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return bool(index.calls_of(DATA_PARALLEL))

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified_name(node.func) not in DATA_PARALLEL:
            return
        self.report(node, "`DataParallel` drives every GPU from one process and is slower than "
                          "`DistributedDataParallel` even on one machine; use DDP launched by torchrun",
                    self._fix(node))

    def _fix(self, node: cst.Call):
        module_arg = find_argument(node, "module", 0)
        if module_arg is None or has_star_args(node) or find_keyword(node, "dim") is not None:
            return None
        extra = [a for a in node.args if a is not module_arg]
        if any(a.keyword is None or a.keyword.value not in DROPPED_KEYWORDS for a in extra):
            return None
        call = cst.Call(func=cst.Name(HELPER), args=[cst.Arg(module_arg.value)])
        edits = [self.replace(node, call)]
        if f"def {HELPER}(" not in self.ctx.source:
            anchor = self._last_import_before_use()
            if anchor is None:
                return None
            body = self.ctx.module.body
            following = body[body.index(anchor) + 1]
            blank_lines = sum(1 for line in following.leading_lines if line.comment is None)
            edits.append(self.insert_lines_after(anchor, HELPER_SOURCE + "\n" * max(0, 2 - blank_lines)))
        return self.fix("Wrap the model in DistributedDataParallel (runs under torchrun and as plain python)",
                        *edits)

    def _last_import_before_use(self) -> cst.CSTNode | None:
        """The helper goes after the last top-level import that precedes the statement using it."""
        body = self.ctx.module.body
        using = self.ctx.ancestors[1]  # the top-level statement around the call
        anchor = None
        for statement in body[: body.index(using)]:
            if isinstance(statement, cst.SimpleStatementLine) and any(
                    isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body):
                anchor = statement
        return anchor
