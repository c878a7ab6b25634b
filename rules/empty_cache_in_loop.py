"""
## What it does

Finds `torch.cuda.empty_cache()` (and the `torch.mps`, `torch.xpu` and `torch.accelerator`
versions) called on every iteration of a loop: after each batch of a training, evaluation or
inference loop. It also sees the call behind the project's own helpers: a `free_memory()` that
empties the cache, called on every iteration (in this file or one it imports), is reported at the
call, with the place inside the helper as related information, and without a fix (removing the
call would remove the helper's other work too).

## Why is it slow

PyTorch's caching allocator keeps freed GPU memory to hand it out again without asking the
driver. `empty_cache()` gives all unused cached blocks back, which synchronizes with the device,
and the next iteration then allocates the same memory again through slow `cudaMalloc` calls. The
Lightning docs and the "9 tips" guide single it out: every call makes the GPUs wait. It does not
give your own program more memory (PyTorch's CUDA notes: the released memory only becomes
available to other processes), so it cannot cure an out-of-memory error in the loop either.

## Expected gain

Step time, traded against reserved memory. In PEFT's MetaMathQA training script, 250 steps took 65 s
with `empty_cache()` after every step and 45 s without it, while the average reserved memory rose
from 12.0 to 22.1 GB (https://github.com/huggingface/peft/pull/2894): the cache keeps memory that
other processes on the GPU then cannot use. `torchlint verify --profile script.py` charges the
calls' time to their line; `torchlint verify --each script.py` measures the fix.

## Example

```python
for images, labels in loader:
    loss = criterion(model(images.cuda()), labels.cuda())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch.cuda.empty_cache()
```

## Use instead

```python
for images, labels in loader:
    loss = criterion(model(images.cuda()), labels.cuda())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
```
If another process on the same GPU needs the memory, call `torch.cuda.empty_cache()` once, after
the loop.

## Fix safety

Safe: emptying the cache never changes a value, only when memory goes back to the driver. The fix
deletes the statement (a lone statement of a block becomes `pass`; a guard like
`if torch.cuda.is_available():` that holds only this call goes with it). The rule only looks at
loops over batches (a loop that calls backward, runs something named like a model, iterates
something named like a loader, or runs a model through the project's own code, such as a
`self.test()` per validation image, outside the methods of a model itself), and stays silent where the call is deliberate: in an `except`
block (freeing memory after an out-of-memory error before a retry), under a condition that holds
every k-th step (`if step % 100 == 0:`), once per pass of an inner loop over batches or once per
epoch (the loop variable or iterable is named like `epoch`), in loops over models, configurations
or benchmark candidates, in loops that measure memory per batch (`reset_peak_memory_stats`,
`max_memory_allocated`...), and in tests.

## References

- https://lightning.ai/docs/pytorch/stable/advanced/speed.html#clear-cache
- https://pytorch.org/docs/stable/notes/cuda.html#memory-management
- https://pytorch.org/docs/stable/generated/torch.cuda.empty_cache.html
- https://github.com/huggingface/peft/pull/2894
"""

from __future__ import annotations

import ast
import re

from torchlint.analysis.calls import ast_call_summary, ast_forward_in, ast_project_mentions, related, where
from torchlint.analysis.conditions import is_periodic_test
from torchlint.analysis.loops import (AST_LOOPS, LOADER_NAME, MODEL_NAME, ast_training_loop_lines, calls_model,
                                     iterated_name)
from torchlint.analysis.syntax import ast_dotted_name, dotted_name, has_loop_statement
from torchlint.fixes import removal_edit
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

EMPTY_CACHE = frozenset({
    "torch.cuda.empty_cache", "torch.cuda.memory.empty_cache", "torch.mps.empty_cache", "torch.xpu.empty_cache",
    "torch.accelerator.empty_cache",
})
EPOCH = re.compile(r"epoch", re.IGNORECASE)
MEASURES_MEMORY = re.compile(r"reset_peak_memory_stats|max_memory_(allocated|reserved)|memory_(allocated|reserved|stats)\(")


def ast_batch_loop_lines(index: SyntaxIndex) -> bytearray:
    """The precheck twin of ``_batch_loop``: lines of the loops that train, call something named
    like a model, or iterate something named like a loader."""
    return index.memo("batch-loop-lines", lambda: _ast_batch_loop_lines(index))


def _ast_batch_loop_lines(index: SyntaxIndex) -> bytearray:
    training = ast_training_loop_lines(index)
    # a loop holds a call exactly when the call starts on one of its lines (no other statement
    # shares a compound statement's first or last line): one mask instead of a walk per loop
    models = bytearray(len(training))
    for call in index.nodes(ast.Call):
        name = ast_dotted_name(call.func)
        if name is not None and MODEL_NAME.search(name.rsplit(".", 1)[-1]):
            models[call.lineno] = 1

    def batch_loop(loop: ast.AST) -> bool:
        if training[loop.lineno]:
            return True
        iterated = ast_dotted_name(loop.iter) if isinstance(loop, ast.For) else None
        if iterated is None and isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call) and loop.iter.args:
            iterated = ast_dotted_name(loop.iter.args[0])  # enumerate(loader), tqdm(loader)
        if iterated is not None and LOADER_NAME.search(iterated.rsplit(".", 1)[-1]):
            return True
        return models.find(1, loop.lineno, loop.end_lineno + 1) != -1

    return index.lines(loop for loop in index.nodes(*AST_LOOPS) if batch_loop(loop))


def _ast_loop_runs_model(index: SyntaxIndex, call: ast.Call) -> bool:
    """The precheck twin of ``_batch_loop``'s last question: does the innermost loop around the
    call run a model through the project's code (``self.test()`` per validation image)?"""
    loop = index.place(call).loop
    return loop is not None and index.memo(("TL801 runs a model", id(loop)), lambda: ast_forward_in(index, loop))


def _clears_cache(summary) -> bool:
    """A helper whose every call empties the CUDA cache (directly or through its own callees)."""
    return summary is not None and bool(summary.clears_cache)


class EmptyCacheInLoop(Rule):
    code = "TL801"
    name = "empty-cache-in-loop"
    kind = "performance"
    summary = "`torch.cuda.empty_cache()` on every iteration of a loop"
    fix_applicability = "safe"

    triggers = ("empty_cache",)
    reaches = ("empty_cache",)  # a helper of another module empties it

    @classmethod
    def applies(cls, text: str) -> bool:
        return super().applies(text) and has_loop_statement(text)

    @classmethod
    def reachable(cls, text: str) -> bool:
        return has_loop_statement(text)  # the loop is the file's own, whoever empties the cache

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a call in a loop over batches (the loop around it is one, so its lines are)
        cleared = index.calls("empty_cache")
        if cleared and any(ast_batch_loop_lines(index)[call.lineno] or _ast_loop_runs_model(index, call)
                           for call in cleared):
            return True
        batches = ast_batch_loop_lines(index)  # a helper's call: no model run through another helper
        if not any(batches) or not ast_project_mentions(index, "empty_cache"):
            return False  # no loop over batches, or no code the file reaches empties the cache
        return any(batches[call.lineno] and _clears_cache(ast_call_summary(index, call))
                   for call in index.nodes(ast.Call) if isinstance(call.func, (ast.Name, ast.Attribute)))

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        helper = None
        if name not in EMPTY_CACHE:
            if not self.ctx.loops.enclosing_loops() or dotted_name(node.func) is None:
                return
            helper = self.ctx.calls.summary(node)
            if not _clears_cache(helper):
                return
        loops = self.ctx.loops.enclosing_loops()
        if not loops or not self._every_iteration(loops[0], helper is None):
            return
        if helper is not None:
            effect = helper.clears_cache[0]
            self.report(node, f"`{dotted_name(node.func)}(...)` empties the CUDA cache on every iteration "
                              f"(`{effect.what}` in `{helper.qualname}`, {where(effect)}): each iteration waits for "
                              "the GPU and gives back memory the next one allocates again; call it after the loop",
                        related=(related(effect, "the CUDA cache is emptied here"),))
            return
        self.report(node, f"`{self.ctx.code_for(node)}` in a loop makes every iteration wait for the GPU and hands "
                          "back memory the next iteration allocates again; remove it", self._fix(node))

    def _every_iteration(self, loop: cst.CSTNode, direct: bool) -> bool:
        """Does the call run on every iteration of its innermost loop, and is that a loop over
        batches (it trains, evaluates, runs a model, or iterates a loader) rather than over
        epochs, models or benchmark candidates? A helper that empties the cache (``direct``
        False) needs the loop's own code to say so: its summary cannot see a schedule kept in
        the object (``if self.control.should_evaluate:``), so a model run through another
        helper is too little evidence beside it."""
        for node in reversed(self.ctx.ancestors[:-1]):
            if node is loop:
                break
            if isinstance(node, (cst.ExceptHandler, cst.ExceptStarHandler)):
                return False  # recovery after an out-of-memory error
            if isinstance(node, cst.If) and is_periodic_test(node.test):
                return False
        described = self.ctx.code_for(loop.target) + " " + self.ctx.code_for(loop.iter) \
            if isinstance(loop, cst.For) else self.ctx.code_for(loop.test)
        if EPOCH.search(described):
            return False
        ancestors = {id(n) for n in self.ctx.ancestors}
        if any(id(inner) not in ancestors and self._batch_loop(inner) for inner in self.ctx.loops.nested_loops(loop)):
            return False  # beside (not inside) an inner loop over batches: once per pass of it
        if MEASURES_MEMORY.search(self.ctx.code_for(loop)):
            return False  # per-batch memory measurements: emptying the cache keeps them apart
        return self._batch_loop(loop, through_helpers=direct)

    def _batch_loop(self, loop: cst.CSTNode, through_helpers: bool = True) -> bool:
        if self.ctx.loops.backpropagated_names(loop) is not None or calls_model(loop.body):
            return True
        loader = iterated_name(loop, self.ctx.bindings) if isinstance(loop, cst.For) else None
        if loader is not None and LOADER_NAME.search(loader.rsplit(".", 1)[-1]):
            return True
        # a model run through the project's code (`self.test()` per validation image), unless the
        # loop is itself inside a model: a module's methods loop over frames, layers or chunks
        return through_helpers and not self._in_module_method() and self.ctx.calls.forward_in(loop.body) is not None

    def _in_module_method(self) -> bool:
        function, cls = self.ctx.enclosing_function(), self.ctx.enclosing_class()
        return function is not None and (function.name.value == "forward"
                                         or cls is not None and cls.name.value in self.ctx.modules.classes)

    def _fix(self, node: cst.Call):
        expression = self.ctx.parent
        if not isinstance(expression, cst.Expr) or not isinstance(self.ctx.ancestors[-3], cst.SimpleStatementLine):
            return None
        statement = self.ctx.ancestors[-3]
        # `if torch.cuda.is_available(): torch.cuda.empty_cache()` goes as a whole
        block, guard = self.ctx.ancestors[-4], self.ctx.ancestors[-5]
        if isinstance(guard, cst.If) and guard.orelse is None and len(block.body) == 1 \
                and _side_effect_free(guard.test, self.ctx):
            statement = guard
        edit = removal_edit(self.ctx, statement)
        return self.fix("Remove the call", edit) if edit else None


def _side_effect_free(test: cst.BaseExpression, ctx) -> bool:
    """A condition that only reads names or asks whether a device is there."""
    if isinstance(test, (cst.Name, cst.Attribute)) and dotted_name(test) is not None:
        return True
    if isinstance(test, cst.Call):
        return (ctx.qualified_name(test.func) or dotted_name(test.func) or "").endswith("is_available") \
            and not test.args
    if isinstance(test, cst.UnaryOperation):
        return _side_effect_free(test.expression, ctx)
    if isinstance(test, cst.BooleanOperation):
        return _side_effect_free(test.left, ctx) and _side_effect_free(test.right, ctx)
    if isinstance(test, cst.Comparison):
        return _side_effect_free(test.left, ctx) and all(
            _side_effect_free(c.comparator, ctx) or isinstance(c.comparator, (cst.SimpleString, cst.Integer))
            for c in test.comparisons)
    return False
