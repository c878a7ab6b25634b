"""
## What it does

Finds models wrapped in `torch.nn.DataParallel` (under any import alias). In a file that trains
nothing, it says so: for inference the advice is one process per GPU (or one GPU), not DDP; but a
helper that hands the wrapped model to its caller (returns it, or sets it on `self`, as a training
library's `model_to_device` does) gets the DDP advice, since the caller trains it. A network put in
eval mode (`DataParallel(inception).eval()`, or `.eval()` on the name bound to it) in a file with no
backward pass is not reported: evaluation code such as an FID script has no training to move to
DDP. In a script that already has a `DistributedDataParallel` path (`if args.distributed: ... else:
nn.DataParallel(...)`), it points to that path.

## Why is it slow

`DataParallel` runs one Python process that drives every GPU from a single thread. Each step it
copies the model's parameters from the first GPU to the others, scatters the batch, gathers the
outputs back onto the first GPU and computes the loss there. The interpreter lock, the replication
and the lopsided memory use on GPU 0 make it slower than `DistributedDataParallel` (DDP) even on a
single machine; PyTorch's own documentation recommends DDP "even if there is only a single node".
DDP runs one process per GPU and overlaps the gradient all-reduce with the backward pass.

## Expected gain

On one machine it depends on the link between the GPUs: Hugging Face's GPT-2 fine-tuning on two
TITAN RTX took 110 s with DataParallel and 101 s with DDP, both over NVLink, and 131 s with DDP and
NVLink off
(https://huggingface.co/docs/transformers/perf_train_gpu_many#dataparallel-vs-distributeddataparallel).
Across machines only DDP applies. `torchlint verify --unsafe-fixes` checks that the rewrite trains
under torchrun but does not compare multi-GPU throughput: time an epoch of both on your machine.

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

Unsafe. The fix inserts three small functions after the imports and uses them: the model is
wrapped by `_distributed_data_parallel(model)` instead of `DataParallel`, and every DataLoader that a
training loop iterates gets `sampler=_distributed_sampler(dataset, shuffle=...)` in place of its
`shuffle=`, so that each process trains on its own shard (a DDP rewrite without sharding trains
every process on the whole dataset). Launched by `torchrun`, the helpers join the process group
(NCCL on GPU, gloo on CPU) and pin the process to its `LOCAL_RANK` GPU; run as a plain
`python script.py`, they create a one-process group, so the script still runs and `model.module`
still works. The values change: the sampler shuffles with its own generator, each process now runs
the whole loop, and logging or checkpointing should be restricted to rank 0; `device_ids` and
`output_device` are dropped. TL502 `ddp-sampler` then adds `sampler.set_epoch(epoch)` to the epoch
loop in the same `--fix` run. `torchlint verify --nproc 2 --unsafe-fixes` checks the rewritten script
under `torchrun` (world size 2) and as plain python. No fix when a training loader cannot be
sharded (it has a sampler of its own, takes `**kwargs` or a positional `shuffle`, or builds its
dataset inside the call, which would then be built twice), for a `DataParallel(...)` call with
`dim=` or `**kwargs`, in a file that trains nothing, or in a script that already has a DDP path.

## References

- https://pytorch.org/docs/stable/generated/torch.nn.DataParallel.html
- https://pytorch.org/docs/stable/notes/cuda.html#use-nn-parallel-distributeddataparallel-instead-of-multiprocessing-or-nn-dataparallel
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
- https://pytorch.org/docs/stable/elastic/run.html
- https://huggingface.co/docs/transformers/perf_train_gpu_many#dataparallel-vs-distributeddataparallel
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from torchlint.analysis.data import DISTRIBUTED_DATA_PARALLEL, dataloader_argument, is_dataloader_call
from torchlint.analysis.syntax import dotted_name, find_argument, find_keyword, has_star_args, returns_of
from torchlint.fixes import NodeEdit, keyword_argument, remove_arg, set_keyword
from torchlint.rule import Rule, SyntaxIndex
from torchlint.rules._distributed import HELPERS_SOURCE, SAMPLER_HELPER, WRAP_HELPER

DATA_PARALLEL = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel",
})
DROPPED_KEYWORDS = {"device_ids", "output_device"}
# what may be chained on the wrapped module before it is bound: `DataParallel(m).eval().to(device)`
CHAINED_METHODS = frozenset({"to", "cuda", "eval", "float", "half", "requires_grad_"})


@dataclass
class _Site:
    """A `DataParallel(...)` call, and where the helpers would go (the last top-level import
    before the statement that calls it)."""

    call: cst.Call
    anchor: cst.CSTNode | None
    evaluated: bool  # put in eval mode: `DataParallel(m).eval()`, or `.eval()` on the name bound to it
    leaves: bool  # given to the caller: returned, or set on `self`


@dataclass
class _Loader:
    """A DataLoader call of the file, and what sharding it for DDP takes."""

    call: cst.Call
    trains: bool  # a training loop iterates it
    edit: NodeEdit | None  # the rewrite with a distributed sampler; None when it cannot be written


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

    def __init__(self, ctx):
        super().__init__(ctx)
        self.sites: list[_Site] = []
        self.loaders: list[_Loader] = []
        self.uses_ddp = False

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.ctx.qualified_name(node.func)
        if qualified in DATA_PARALLEL:
            self.sites.append(self._site(node))
        elif qualified in DISTRIBUTED_DATA_PARALLEL:
            self.uses_ddp = True
        elif is_dataloader_call(node, self.ctx.bindings):
            trains = any(self.ctx.loops.runs_backward(loop)
                         for loop in self.ctx.loops.iterating_loops(self.ctx.bound_name()))
            self.loaders.append(_Loader(node, trains, self._sharded(node) if trains else None))

    def leave_Module(self, original_node: cst.Module) -> None:
        training = bool(self.ctx.loops.training_loops) or any(loader.trains for loader in self.loaders)
        for site in self.sites:
            if site.evaluated and "backward" not in self.ctx.code:
                continue  # a network for inference only (FID's Inception): there is no training to move to DDP
            if not training and site.leaves:
                # a helper that wraps the caller's model (`model_to_device`): the training is elsewhere
                self.report(site.call, "`DataParallel` drives every GPU from one process and is slower than "
                                       "`DistributedDataParallel` even on one machine; use DDP launched by "
                                       "torchrun, with a `DistributedSampler` for the training data")
            elif not training:
                self.report(site.call, "`DataParallel` here only runs the model forward (nothing in this file "
                                       "trains); for inference, run one process per GPU on its own share of the "
                                       "inputs, or one GPU, instead of scattering every batch from one process")
            elif self.uses_ddp:
                self.report(site.call, "`DataParallel` drives every GPU from one process and is slower than "
                                       "`DistributedDataParallel` even on one machine; this script already has a "
                                       "DDP path: launch that one with torchrun")
            else:
                self.report(site.call, "`DataParallel` drives every GPU from one process and is slower than "
                                       "`DistributedDataParallel` even on one machine; use DDP launched by "
                                       "torchrun, with a `DistributedSampler` for the training data",
                            self._fix(site))

    def _site(self, call: cst.Call) -> _Site:
        """The call, with what the code does with the module it wraps: the chain of methods on it
        (`.eval().to(device)`), the name that chain is bound to, and whether it leaves the function."""
        ancestors = self.ctx.ancestors
        top, position, evaluated = call, len(ancestors) - 1, False
        while position >= 2:
            attribute, outer = ancestors[position - 1], ancestors[position - 2]
            if not (isinstance(attribute, cst.Attribute) and attribute.value is top and isinstance(outer, cst.Call)
                    and outer.func is attribute and attribute.attr.value in CHAINED_METHODS):
                break
            evaluated |= attribute.attr.value == "eval"
            top, position = outer, position - 2
        parent = ancestors[position - 1]
        bound = None
        if isinstance(parent, cst.Assign) and parent.value is top and len(parent.targets) == 1:
            bound = dotted_name(parent.targets[0].target)
        if bound is not None and re.search(rf"(?<![\w.]){re.escape(bound)}\.eval\(\)", self.ctx.code):
            evaluated = True
        leaves = isinstance(parent, cst.Return) or (bound is not None and bound.startswith("self."))
        if not leaves and bound is not None:
            function = self.ctx.enclosing_function()
            leaves = function is not None and any(
                returned.value is not None and dotted_name(returned.value) == bound
                for returned in returns_of(function))
        return _Site(call, self._last_import_before_use(), evaluated, leaves)

    def _fix(self, site: _Site):
        node = site.call
        module_arg = find_argument(node, "module", 0)
        if module_arg is None or has_star_args(node) or find_keyword(node, "dim") is not None:
            return None
        extra = [a for a in node.args if a is not module_arg]
        if any(a.keyword is None or a.keyword.value not in DROPPED_KEYWORDS for a in extra):
            return None
        training_loaders = [loader for loader in self.loaders if loader.trains]
        if any(loader.edit is None for loader in training_loaders):
            return None  # a training loader that cannot be sharded: DDP would train on every sample per rank
        call = cst.Call(func=cst.Name(WRAP_HELPER), args=[cst.Arg(module_arg.value)])
        edits = [self.replace(node, call), *(loader.edit for loader in training_loaders)]
        if f"def {WRAP_HELPER}(" not in self.ctx.source:
            if site.anchor is None:
                return None
            body = self.ctx.module.body
            following = body[body.index(site.anchor) + 1]
            blank_lines = sum(1 for line in following.leading_lines if line.comment is None)
            edits.append(self.insert_lines_after(site.anchor, HELPERS_SOURCE + "\n" * max(0, 2 - blank_lines)))
        return self.fix("Train with DistributedDataParallel and a DistributedSampler (runs under torchrun and as "
                        "plain python)", *edits)

    def _sharded(self, call: cst.Call) -> NodeEdit | None:
        """The loader rewritten to read its shard: ``sampler=_distributed_sampler(dataset,
        shuffle=...)`` in place of ``shuffle=``; None when it has a sampler of its own or arguments
        that cannot be seen."""
        dataset = dataloader_argument(call, "dataset")
        if dataset is None or has_star_args(call) or dataloader_argument(call, "sampler") is not None \
                or dataloader_argument(call, "batch_sampler") is not None \
                or not isinstance(dataset.value, (cst.Name, cst.Attribute)):
            return None  # a dataset built in the call would be built twice
        shuffle = dataloader_argument(call, "shuffle")
        if shuffle is not None and shuffle.keyword is None:
            return None  # positional: the arguments after it would shift
        shuffled = shuffle.value if shuffle is not None else cst.Name("False")
        sampler = cst.Call(cst.Name(SAMPLER_HELPER), [
            cst.Arg(dataset.value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            keyword_argument("shuffle", shuffled)])
        new = remove_arg(call, shuffle) if shuffle is not None else call
        return self.replace(call, set_keyword(new, "sampler", sampler))

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
