"""
## What it does

Finds models wrapped in `torch.nn.DataParallel` (under any import alias), or in a class of the
project derived from it (`BalancedDataParallel(gpu0_bsz, model)`, defined in the file or in a
project module it imports; reported without a fix, since its constructor takes other arguments).
A `DataParallel` over one listed device (`device_ids=[0]`, `[args.gpu]`, or a parameter whose
default is such a list, `gpu_ids=[0]`, that the function does not bind again) is not reported:
DataParallel then calls the module itself on that device, and nothing runs in parallel; a caller
that passes several devices to such a parameter is not seen. In a file that trains
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

Unsafe. The fix writes no helper function: before the first statement that needs the process group
(the `DataParallel` call, or a training DataLoader that comes before it in the same block), it
inserts seven lines, and the imports they use:

```python
if not dist.is_initialized() and "LOCAL_RANK" in os.environ:  # under torchrun (torchlint TL501)
    dist.init_process_group()
elif not dist.is_initialized():  # run as plain python: a process group of this one process
    dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)
if torch.cuda.is_available():  # one GPU per process
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
gpu = torch.cuda.current_device() if torch.cuda.is_available() else None
```

The model is then wrapped as `DistributedDataParallel(model.to(gpu), device_ids=None if gpu is None
else [gpu])`, and every DataLoader that a training loop iterates gets `sampler=DistributedSampler(
dataset, shuffle=...)` in place of its `shuffle=`, so that each process trains on its own shard (a
DDP rewrite without sharding trains every process on the whole dataset); a loader built in another
function gets the first four lines before it. The lines run where the model and the data are set
up, so importing the file joins no process group. Launched by `torchrun`, the script joins the group
torchrun set up and each process takes its `LOCAL_RANK` GPU; run as a plain `python script.py`, it
creates a group of one process, so the script still runs, `model.module` still works and a
checkpoint keeps DataParallel's `module.` keys. Without a backend, torch (2.0 and later) uses NCCL
for CUDA tensors and gloo for CPU ones; for an older `target-torch` the fix names the backend. The
values change: the sampler shuffles with its own generator, each process now runs the whole loop,
and logging or checkpointing should be restricted to rank 0; `device_ids` and `output_device` are
dropped. TL502 `ddp-sampler` then adds `sampler.set_epoch(epoch)` to the epoch loop in the same
`--fix` run. `torchlint verify --nproc 2 --unsafe-fixes` checks the rewritten script under
`torchrun` (world size 2) and as plain python. No fix when a training loader cannot be sharded (it
has a sampler of its own, takes `**kwargs` or a positional `shuffle`, or builds its dataset inside
the call, which would then be built twice), when the rule cannot follow a loader to the loop
that trains on it (the loop iterates a parameter or a name bound twice, or a loader built in
another module, or the loader is drawn with `next(iter(...))`), when the file tests for
DataParallel (`isinstance(m, nn.DataParallel)`) or a project module it imports names it (code that
unwraps `module.module` for DataParallel only would keep DDP's wrapper), for a `DataParallel(...)` call with `dim=` or
`**kwargs` or in a class body, in a file that trains nothing, or in a script that already has a DDP
path.

## References

- https://pytorch.org/docs/stable/generated/torch.nn.DataParallel.html
- https://pytorch.org/docs/stable/notes/cuda.html#use-nn-parallel-distributeddataparallel-instead-of-multiprocessing-or-nn-dataparallel
- https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
- https://pytorch.org/docs/stable/elastic/run.html
- https://huggingface.co/docs/transformers/perf_train_gpu_many#dataparallel-vs-distributeddataparallel
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cached_property

from torchlint.analysis.calls import ast_external_bases
from torchlint.analysis.loops import iterated_value
from torchlint.analysis.data import (DISTRIBUTED_DATA_PARALLEL, DISTRIBUTED_SAMPLERS, dataloader_argument,
                                    is_dataloader_call)
from torchlint.analysis.syntax import (atom_types, dotted_name, find_argument, find_keyword, function_parameters,
                                       has_star_args, returns_of)
from torchlint.fixes import (block_indentation, import_reference, imported_name, keyword_argument, remove_arg,
                             set_keyword)
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex
from torchlint.rules._distributed import MARK, is_sampler_helper, setup_lines

DATA_PARALLEL = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel",
})
DROPPED_KEYWORDS = {"device_ids", "output_device"}
# what may be chained on the wrapped module before it is bound: `DataParallel(m).eval().to(device)`
CHAINED_METHODS = frozenset({"to", "cuda", "eval", "float", "half", "requires_grad_"})


@dataclass
class _Place:
    """The statement a call runs in that sits in a block (the module's body or an indented block):
    where a line that must run before the call goes."""

    statement: cst.BaseStatement
    block: cst.Module | cst.IndentedBlock
    index: int  # of the statement in its block
    indent: str
    top: cst.CSTNode  # the module-level statement around it
    in_class: bool  # the block is a class body (its names are not seen by the functions within)


@dataclass
class _Site:
    """A `DataParallel(...)` call, and what the code does with the module it wraps."""

    call: cst.Call
    place: _Place | None
    evaluated: bool  # put in eval mode: `DataParallel(m).eval()`, or `.eval()` on the name bound to it
    leaves: bool  # given to the caller: returned, or set on `self`
    one_device: bool  # `device_ids=[0]`: DataParallel then calls the module itself, on that device
    subclass: str | None = None  # the project's class derived from DataParallel that the call builds


@dataclass
class _Loader:
    """A DataLoader call of the file, and what sharding it for DDP takes."""

    call: cst.Call
    place: _Place | None
    loops: list[cst.For]  # the loops seen iterating it (through the name it is bound to once)
    trains: bool  # a training loop iterates it
    sharded: bool  # it has a DistributedSampler already
    shard: tuple[cst.BaseExpression, cst.Arg | None] | None  # its dataset and `shuffle=`; None: cannot be sharded


class DataParallel(Rule):
    code = "TL501"
    name = "data-parallel"
    kind = "performance"
    summary = "`nn.DataParallel` instead of `DistributedDataParallel`"
    fix_applicability = "unsafe"
    triggers = ("DataParallel",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        if index.calls_of(DATA_PARALLEL):
            return True
        # a class of the project derived from DataParallel (see Calls.external_bases)
        if not index.project_mentions("DataParallel"):
            return False
        for call in index.nodes(ast.Call):
            bases = ast_external_bases(index, call)
            if bases is None or DATA_PARALLEL & bases:
                return True
        return False

    def __init__(self, ctx):
        super().__init__(ctx)
        self.sites: list[_Site] = []
        self.loaders: list[_Loader] = []
        self.data_loops: list[cst.For] = []  # loops over something else than a range that backpropagate
        self.uses_ddp = False

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.ctx.qualified_name(node.func)
        if qualified in DATA_PARALLEL:
            self.sites.append(self._site(node))
        elif self._project_subclasses and DATA_PARALLEL & self.ctx.calls.external_bases(node):
            self.sites.append(self._site(node, dotted_name(node.func)))
        elif qualified in DISTRIBUTED_DATA_PARALLEL:
            self.uses_ddp = True
        elif is_dataloader_call(node, self.ctx.bindings):
            loops = self.ctx.loops.iterating_loops(self.ctx.bound_name())
            trains = any(self.ctx.loops.runs_backward(loop) for loop in loops)
            sampler = dataloader_argument(node, "sampler")
            sampler = sampler.value if sampler is not None else None
            sharded = is_sampler_helper(sampler) or (
                isinstance(sampler, cst.Call) and self.ctx.qualified_name(sampler.func) in DISTRIBUTED_SAMPLERS)
            self.loaders.append(_Loader(node, self._place(), loops, trains, sharded,
                                        _shard(node) if trains else None))

    def visit_For(self, node: cst.For) -> None:
        iterated = iterated_value(node, self.ctx.bindings)
        if not (isinstance(iterated, cst.Call) and dotted_name(iterated.func) == "range") \
                and not _unbound(self.ctx, iterated) and self.ctx.loops.backpropagated_names(node) is not None:
            self.data_loops.append(node)

    @cached_property
    def _project_subclasses(self) -> bool:
        """May a call of the file build a class of the project derived from DataParallel
        (``BalancedDataParallel``)? Only where the project's code it imports names DataParallel."""
        return self.ctx.calls.mentions("DataParallel")

    def leave_Module(self, original_node: cst.Module) -> None:
        training = bool(self.ctx.loops.training_loops) or any(loader.trains for loader in self.loaders)
        # the DDP calls TL501's fix wrote do not make a DDP path of the script's own
        uses_ddp = self.uses_ddp and MARK not in self.ctx.source
        for site in self.sites:
            if site.evaluated and "backward" not in self.ctx.code:
                continue  # a network for inference only (FID's Inception): there is no training to move to DDP
            if site.one_device:
                continue  # over one device DataParallel runs the module as it is: nothing is parallel
            if site.subclass is not None:
                self.report(site.call, f"`{site.subclass}` derives from `DataParallel`, which drives every GPU from "
                                       "one process and is slower than `DistributedDataParallel` even on one "
                                       "machine; use DDP launched by torchrun, with a `DistributedSampler` for the "
                                       "training data")
                continue
            if not training and site.leaves:
                # a helper that wraps the caller's model (`model_to_device`): the training is elsewhere
                self.report(site.call, "`DataParallel` drives every GPU from one process and is slower than "
                                       "`DistributedDataParallel` even on one machine; use DDP launched by "
                                       "torchrun, with a `DistributedSampler` for the training data")
            elif not training:
                self.report(site.call, "`DataParallel` here only runs the model forward (nothing in this file "
                                       "trains); for inference, run one process per GPU on its own share of the "
                                       "inputs, or one GPU, instead of scattering every batch from one process")
            elif uses_ddp:
                # a DDP path whose processes the script starts itself (`mp.spawn(main_worker, ...)`,
                # behind a flag such as `--multiprocessing-distributed`) is not launched by torchrun
                launch = "use that one (the script starts its processes with `spawn(...)`)" \
                    if "spawn(" in self.ctx.code else "launch that one with torchrun"
                self.report(site.call, "`DataParallel` drives every GPU from one process and is slower than "
                                       "`DistributedDataParallel` even on one machine; this script already has a "
                                       f"DDP path: {launch}")
            else:
                self.report(site.call, "`DataParallel` drives every GPU from one process and is slower than "
                                       "`DistributedDataParallel` even on one machine; use DDP launched by "
                                       "torchrun, with a `DistributedSampler` for the training data",
                            self._fix(site))

    def _every_data_loop_is_seen(self) -> bool:
        """Is every loader of the file seen where it is iterated, and every loop that trains on
        data known to iterate one of them? A loader handed on under another name (``train(loader)``
        whose parameter is rebound, ``loader = tqdm(loader)``), built in another file, or drawn
        with ``next(iter(loader))`` would get no sampler, and each process would train on the
        whole dataset."""
        if any(not loader.loops and not loader.sharded for loader in self.loaders):
            return False
        seen = {id(loop) for loader in self.loaders for loop in loader.loops}
        return all(id(loop) in seen for loop in self.data_loops)

    def _site(self, call: cst.Call, subclass: str | None = None) -> _Site:
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
        devices = find_keyword(call, "device_ids") if subclass else find_argument(call, "device_ids", 1)
        one_device = devices is not None and self.ctx.devices.one_device(devices.value, self.ctx.enclosing_function())
        return _Site(call, self._place(), evaluated, leaves, one_device, subclass)

    def _place(self) -> _Place | None:
        position = self.ctx.statement_position()
        if position is None:
            return None
        statement, _, index = position
        block = self.ctx.block_of(statement)
        indent = block_indentation(self.ctx, block) if isinstance(block, cst.IndentedBlock) else ""
        owner = self.ctx.block_of(block) if isinstance(block, cst.IndentedBlock) else None
        return _Place(statement, block, index, indent, self.ctx.ancestors[1], isinstance(owner, cst.ClassDef))

    def _fix(self, site: _Site):
        """DDP at the call and a `DistributedSampler` for each training loader, with the lines that
        join the process group before them (in each block, before the first of them)."""
        node = site.call
        module_arg = find_argument(node, "module", 0)
        if module_arg is None or has_star_args(node) or find_keyword(node, "dim") is not None:
            return None
        extra = [a for a in node.args if a is not module_arg]
        if any(a.keyword is None or a.keyword.value not in DROPPED_KEYWORDS for a in extra):
            return None
        loaders = [loader for loader in self.loaders if loader.trains and not loader.sharded]
        if any(loader.shard is None or loader.place is None for loader in loaders):
            return None  # a training loader that cannot be sharded: DDP would train on every sample per rank
        if not self._every_data_loop_is_seen() or _unwrapped_elsewhere(self.ctx):
            return None
        if site.place is None or site.place.in_class:
            return None
        # the other DataParallel calls of the block count as places too: each fix then writes its
        # lines before the first of them, so that the fixes overlap and one fix takes them; the
        # others reuse its name for the GPU in the next round
        neighbours = [other.place for other in self.sites if other is not site and other.place is not None
                      and other.place.block is site.place.block]
        fix = self.fix_builder("Train with DistributedDataParallel and a DistributedSampler (runs under torchrun "
                               "and as plain python)")
        places = [site.place, *(loader.place for loader in loaders)]
        first = min(self.ctx.module.body.index(place.top) for place in places)  # the first statement to run them
        imports: list[str] = []
        torch = self._import("torch", None, "torch", imports)
        os_name = self._import_os(fix, first, imports)
        if torch is None or os_name is None:
            return None
        # torch 2.0 and later pick the backend: NCCL for CUDA tensors, gloo for the others
        backend = "" if self.ctx.torch_at_least("2.0") else f'"nccl" if {torch}.cuda.is_available() else "gloo", '
        names = {"torch": torch, "os": os_name, "backend": backend,
                 "dist": self._import("torch.distributed", None, "dist", imports) or f"{torch}.distributed"}
        ddp = self._import("torch.nn.parallel", "DistributedDataParallel", None, imports) \
            or f"{torch}.nn.parallel.DistributedDataParallel"
        sampler = (self._import("torch.utils.data", "DistributedSampler", None, imports)
                   or f"{torch}.utils.data.DistributedSampler") if loaders else None
        gpu, lines = self._process_group_lines(names, site.place, places + neighbours)
        if gpu is None or not self._add_imports(fix, imports, first, lines):
            return None
        for statement, text in lines.values():
            fix.add(self.insert_lines_before(statement, text))
        wrapped = module_arg.value
        if not isinstance(wrapped, atom_types()) and not wrapped.lpar:
            wrapped = wrapped.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        moved = cst.Call(cst.Attribute(wrapped, cst.Name("to")), [cst.Arg(cst.Name(gpu))])
        fix.replace(node, cst.Call(cst.parse_expression(ddp), [
            cst.Arg(moved, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            keyword_argument("device_ids", cst.parse_expression(f"None if {gpu} is None else [{gpu}]"))]))
        for loader in loaders:
            dataset, shuffle = loader.shard
            shard = cst.Call(cst.parse_expression(sampler), [
                cst.Arg(dataset, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                keyword_argument("shuffle", shuffle.value if shuffle is not None else cst.Name("False"))])
            unshuffled = remove_arg(loader.call, shuffle) if shuffle is not None else loader.call
            fix.replace(loader.call, set_keyword(unshuffled, "sampler", shard))
        return fix.build()

    def _process_group_lines(self, names: dict[str, str], wrap: _Place, places: list[_Place]
                             ) -> tuple[str | None, dict[int, tuple[cst.BaseStatement, str]]]:
        """The lines that join the process group, before the first of ``places`` in each block
        (unless lines before it there do already, as a former fix of this file wrote), and in
        ``wrap``'s block those that pick this process's GPU: by statement, the statement and the
        lines that go before it; and the name the GPU is bound to (None: no name is free)."""
        firsts: dict[int, _Place] = {}
        for place in places:
            if id(place.block) not in firsts or place.index < firsts[id(place.block)].index:
                firsts[id(place.block)] = place
        gpu, lines = None, {}
        for place in firsts.values():
            joined, bound = self._joined_before(place.block, place.index)
            new_gpu = None
            if place.block is wrap.block:
                gpu = bound or next((name for name in ("gpu", "local_gpu", "ddp_gpu")
                                     if self._free(name) or self._only_ours(name)), None)
                if gpu is None:
                    return None, {}
                new_gpu = None if bound else gpu
            if not joined or new_gpu:
                lines[id(place.statement)] = (place.statement, setup_lines(
                    names, place.indent, self.ctx.module.default_indent, not joined, new_gpu))
        return gpu, lines

    def _add_imports(self, fix, imports: list[str], first: int, lines: dict[int, tuple[cst.BaseStatement, str]]
                     ) -> bool:
        """Add the import lines after the last module-level import before the module's statement
        ``first``; False when there is none. Lines that go right after that import (before the
        next statement, with no blank line) take the imports in front of them instead: two
        insertions at one point would come out in no set order."""
        if not imports:
            return True
        body = self.ctx.module.body
        anchor = next((statement for statement in reversed(body[:first])
                       if isinstance(statement, cst.SimpleStatementLine)
                       and any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body)), None)
        if anchor is None:
            return False
        imports.sort(key=lambda line: (line.startswith("from "), line))  # as isort orders them
        following = body[body.index(anchor) + 1]
        if id(following) in lines and not following.leading_lines:
            lines[id(following)] = (following, "".join(imports) + lines[id(following)][1])
        else:
            fix.add(self.insert_lines_after(anchor, "".join(imports)))
        return True

    def _joined_before(self, block: cst.Module | cst.IndentedBlock, index: int) -> tuple[bool, str | None]:
        """Whether statements of ``block`` before ``index`` join the process group (``if not
        dist.is_initialized() ...``), and the name one of them binds this process's GPU to."""
        joined, bound = False, None
        for statement in block.body[:index]:
            if isinstance(statement, cst.If) and "is_initialized()" in self.ctx.code_for(statement.test):
                joined = True
            elif isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
                    and isinstance(statement.body[0], cst.Assign) and len(statement.body[0].targets) == 1 \
                    and isinstance(statement.body[0].targets[0].target, cst.Name) \
                    and ".cuda.current_device()" in self.ctx.code_for(statement.body[0].value):
                bound = statement.body[0].targets[0].target.value
        return joined, bound

    def _import(self, module: str, name: str | None, alias: str | None, imports: list[str]) -> str | None:
        """The file's name for ``module`` (or ``module.name``); when the file lacks it, the import
        line goes into ``imports`` (``import module as alias`` for a module). None when the name is
        taken (the caller spells it through torch)."""
        local = imported_name(self.ctx, module, name)
        if local is not None or not self._free(alias or name):
            return local
        if name is not None:
            imports.append(f"from {module} import {name}\n")
        else:
            imports.append(f"import {module}\n" if alias == module else f"import {module} as {alias}\n")
        return alias or name

    def _import_os(self, fix, first: int, imports: list[str]) -> str | None:
        """The file's name for ``os``: ``import os`` goes first among the imports, as isort puts it,
        or after them (a comment mentions the word, or the first import comes too late)."""
        reference = import_reference(self.ctx, "os")
        if reference is None or (reference[1] is not None and self.ctx.module.body.index(reference[1].node) > first):
            return self._import("os", None, "os", imports)
        local, edit = reference
        if edit is not None:
            fix.add(edit)
        return local

    def _only_ours(self, name: str) -> bool:
        """Only lines this fix writes mention ``name``: the GPU's, in other functions of the file."""
        lines = [line for line in self.ctx.code.splitlines() if re.search(rf"(?<![\w.]){name}\b", line)]
        return all((line.lstrip().startswith(f"{name} = ") and ".cuda.current_device()" in line)
                   or f"device_ids=None if {name} is None else [{name}]" in line for line in lines)

    def _free(self, name: str) -> bool:
        """Nothing in the file binds ``name`` or reads it (comments, docstrings and the names of
        modules in import statements aside: ``import torch.nn as nn`` leaves ``torch`` free)."""
        return not self.ctx.bindings.is_bound(name) and re.search(
            rf"^(?![ \t]*(?:import|from)[ \t]).*(?<![\w.]){name}\b", self.ctx.code, re.MULTILINE) is None


def _shard(call: cst.Call) -> tuple[cst.BaseExpression, cst.Arg | None] | None:
    """What the loader's ``sampler=DistributedSampler(dataset, shuffle=...)`` is made of: its
    dataset and its ``shuffle=`` argument; None when it has a sampler of its own or arguments
    that cannot be seen."""
    dataset = dataloader_argument(call, "dataset")
    if dataset is None or has_star_args(call) or dataloader_argument(call, "sampler") is not None \
            or dataloader_argument(call, "batch_sampler") is not None \
            or not isinstance(dataset.value, (cst.Name, cst.Attribute)):
        return None  # a dataset built in the call would be built twice
    shuffle = dataloader_argument(call, "shuffle")
    if shuffle is not None and shuffle.keyword is None:
        return None  # positional: the arguments after it would shift
    return dataset.value, shuffle


def _unbound(ctx, iterated: cst.BaseExpression) -> bool:
    """A name that nothing in the file binds (no assignment, parameter, import, or star import
    that may bring it): the script cannot run as written, and no loader of it is missed."""
    function = ctx.enclosing_function()
    return type(iterated) is cst.Name and not ctx.bindings.is_bound(iterated.value) and not ctx.bindings.imports.star \
        and (function is None or iterated.value not in function_parameters(function))


def _unwrapped_elsewhere(ctx) -> bool:
    """Does the file test for DataParallel (`isinstance(m, nn.DataParallel)`), or a project module
    it imports name it (ddim's EMA helper unwraps `module.module` only for DataParallel)? DDP
    is no DataParallel: that code would then keep the wrapper and its `module.` keys."""
    return re.search(r"isinstance\([^)]*DataParallel", ctx.code) is not None \
        or ctx.calls.project.mentions(ctx.path, "DataParallel", ctx.source, imported_only=True)
