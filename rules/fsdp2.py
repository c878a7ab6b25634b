"""
## What it does

Finds models wrapped in FSDP1, `torch.distributed.fsdp.FullyShardedDataParallel(model, ...)`
(under any import spelling), where the target torch has FSDP2, `torch.distributed.fsdp.fully_shard`
(public since torch 2.6).

## Why is it wrong

Nothing is broken: FSDP1 still works. But PyTorch now points new and existing code to FSDP2. FSDP1
flattens the parameters of each wrapped unit into one `FlatParameter` and shards that, which
makes the parameters hard to inspect, constrains mixing frozen and trained parameters in one
unit, and needs all-gathers to produce a state dict. FSDP2 shards each parameter on its first
dimension as a `DTensor`, keeps the module's own parameters (no wrapper class: `fully_shard`
changes the module in place), gives sharded state dicts without communication, and manages
memory without `record_stream`, so memory use is deterministic (torchtitan measured 7%
lower peak memory than FSDP1 on Llama-7B at a higher throughput). It is also what
composes with tensor parallelism and `torch.compile` in current PyTorch. The migration is not a
rename: the arguments differ (`sharding_strategy` becomes `reshard_after_forward` and a device
mesh, `mixed_precision` becomes `MixedPrecisionPolicy`, auto-wrapping becomes calling
`fully_shard` on each block, then on the root), so PyTorch publishes a migration guide.

## Example

```python
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(model, device_id=local_rank)
```

## Use instead

```python
from torch.distributed.fsdp import fully_shard

for block in model.blocks:
    fully_shard(block)
fully_shard(model)
```

## Fix safety

No fix: the arguments, the wrapping of submodules, checkpointing and the optimizer set-up all
change, and their mapping is a design decision. The rule stays silent for a target torch older
than 2.6, in a file that already knows FSDP2 (it uses `fully_shard` or `FSDPModule`, or names
something `fsdp2`: code that supports both on purpose), in a function that wraps a module it is
given, or the children of one (a library's FSDP1 path, such as Lightning's `FSDPStrategy`,
Accelerate's or Composer's FSDP1 option, which sit beside an FSDP2 path elsewhere: whoever calls
it chose FSDP1), in test code (tests of
FSDP1 itself), and for classes of other libraries that share the name (fairscale's
`FullyShardedDataParallel`, Accelerate's `FullyShardedDataParallelPlugin`) or strategy strings
(`strategy="fsdp"`), which are not torch's FSDP1 call.

## References

- https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html
- https://docs.pytorch.org/tutorials/intermediate/FSDP_tutorial.html
- https://docs.pytorch.org/tutorials/intermediate/FSDP_tutorial.html#fsdp1-to-fsdp2-migration-guide
- https://github.com/pytorch/torchtitan/blob/main/docs/fsdp.md
"""

from __future__ import annotations

import ast
from functools import cached_property

from torchlint.analysis.data import FULLY_SHARD, FULLY_SHARDED_DATA_PARALLEL
from torchlint.analysis.syntax import (ast_find_keyword, ast_root_names, ast_target_names, find_argument,
                                      function_parameters, root_names, target_names)
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, Severity, SyntaxIndex

MIGRATION_GUIDE = "https://docs.pytorch.org/tutorials/intermediate/FSDP_tutorial.html#fsdp1-to-fsdp2-migration-guide"


class Fsdp2(Rule):
    code = "TL505"
    name = "fsdp2"
    kind = "migration"
    quiet_in_tests = True  # tests build FSDP1 models to test FSDP1
    summary = "FSDP1 `FullyShardedDataParallel(model)` where the target torch has FSDP2 (`fully_shard`)"
    severity = Severity.INFORMATION
    torch_versions = ">=2.6"
    triggers = ("FullyShardedDataParallel",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        calls = index.calls_of(FULLY_SHARDED_DATA_PARALLEL)
        if not calls or "fsdp2" in index.code_words.lower():
            return False  # none, or the file knows FSDP2 (see _knows_fsdp2)
        if "fully_shard(" in index.source and index.calls("fully_shard"):
            return False
        return not all(_ast_wraps_for_caller(index, call) for call in calls)

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified_name(node.func) not in FULLY_SHARDED_DATA_PARALLEL or self._knows_fsdp2 \
                or self._wraps_for_caller(node):
            return
        self.report(node.func, "`FullyShardedDataParallel` is FSDP1; this torch has FSDP2, `fully_shard(module)` from "
                               "`torch.distributed.fsdp`, which shards each parameter as a DTensor and changes the "
                               f"module in place; the arguments differ, see {MIGRATION_GUIDE}")

    @cached_property
    def _knows_fsdp2(self) -> bool:
        """Does the file already know FSDP2 (``fully_shard``, ``FSDPModule``, or anything named
        ``fsdp2``): then FSDP1 is kept on purpose, as one option of two."""
        aliases = self.ctx.bindings.imports.aliases.values()
        return any(name in FULLY_SHARD or name.startswith("torch.distributed._composable.fsdp")
                   or name == "torch.distributed.fsdp.FSDPModule" for name in aliases) \
            or "fully_shard(" in self.ctx.code or "fsdp2" in self.ctx.code.lower()

    def _wraps_for_caller(self, call: cst.Call) -> bool:
        """Does the call wrap a module the enclosing function is given (a parameter, or the
        children of one it loops over): a library's FSDP1 path, where the choice of FSDP1 is made
        by its caller (Lightning's ``FSDPStrategy.setup_module(module)``, Composer's
        ``prepare_fsdp_module(model, ...)``)?"""
        module = find_argument(call, "module", 0)
        function = self.ctx.enclosing_function()
        if module is None or function is None:
            return False
        parameters = set(function_parameters(function))
        names = root_names(module.value)
        for loop in self.ctx.enclosing(cst.For):  # `for name, child in model.named_children(): FSDP(child)`
            if names & target_names(loop.target):
                names |= root_names(loop.iter)
        return bool(names & parameters)


def _ast_wraps_for_caller(index: SyntaxIndex, call: ast.Call) -> bool:
    """The precheck twin of ``Fsdp2._wraps_for_caller``: yes only where that says yes."""
    keyword = ast_find_keyword(call, "module")
    module = keyword.value if keyword is not None else call.args[0] if call.args else None
    if module is None or isinstance(module, ast.Starred):
        return False
    around = [node for node in index.nodes(ast.FunctionDef, ast.AsyncFunctionDef)
              if node.lineno <= call.lineno <= node.end_lineno]
    if not around:
        return False
    function = max(around, key=lambda node: node.lineno)
    arguments = function.args
    parameters = {arg.arg for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
    names = ast_root_names(module)
    loops = [node for node in index.nodes(ast.For, ast.AsyncFor) if node.lineno <= call.lineno <= node.end_lineno]
    for loop in sorted(loops, key=lambda node: -node.lineno):  # innermost first, as the walk's ancestors
        if names & ast_target_names(loop.target):
            names |= ast_root_names(loop.iter)
    return bool(names & parameters)
