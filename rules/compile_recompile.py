"""
## What it does

Finds a compiled function or module (`f = torch.compile(step)`, `@torch.compile`,
`model = torch.compile(model)`, `model.compile()`) called in a loop with a Python number that
changes on every iteration: the loop's counter (`for step in range(n)`, the index of
`enumerate`, `step += 1`), a number computed from it (`step / total_steps`), or a learning rate
the loop changes (`optimizer.param_groups[0]["lr"]` next to a scheduler's `step()`).

## Why is it slow

Dynamo specializes the compiled code on the Python numbers it is given and guards on their value:
a new value fails the guard and compiles the code again. Measured on torch 2.13 (CPU, a counting
backend, 12 calls with 12 values): with the default settings the second value compiles a second
time (after which Dynamo treats the number as symbolic), and with `torch.compile(...,
dynamic=False)` every new value compiles again until the recompile limit (8) makes Dynamo give up
and run the function uncompiled. A 0-d tensor holding the same number compiles once: tensor
values are inputs of the graph, not constants in it.

## Expected gain

It depends on how many values the number takes: with Dynamo's defaults one extra compile, with
`dynamic=False` one compile per new value up to the recompile limit, after which the function runs
uncompiled. No published measurement of the time lost found. `TORCH_LOGS=recompiles` prints each
recompile and its reason; compare the run time before and after the change.

## Example

```python
compiled_step = torch.compile(train_step)
for step in range(num_steps):
    loss = compiled_step(model, batch, step)
```

## Use instead

```python
compiled_step = torch.compile(train_step)
for step in range(num_steps):
    loss = compiled_step(model, batch, torch.tensor(step, device=device))
```

## Fix safety

No automatic fix: the compiled function must accept a tensor where it had a number (Python-side
uses such as `range(step)` or `if step > 10:` need rewriting, or a 0-d tensor changes their
meaning). The rule is silent where nothing recompiles: under `torch.compile(..., dynamic=True)`,
when the compiled function of the file never reads the parameter, and when it uses it as a
length (a slice bound or a size): TLC004 compile-dynamic-shapes covers lengths, for which a 0-d
tensor is no answer.

Off by default: with Dynamo's default settings the cost is one extra compile (then the number is
symbolic), and on the real code read for precision (bench/results/catalog-2026-compile.md) the
rule's three findings were wrong before it was tightened and it found nothing after, so its
precision could not be shown. Enable it (`--extend-select TLC003`) where a program compiles with
`dynamic=False` or watches its recompiles.

## References

- https://pytorch.org/docs/stable/torch.compiler_dynamic_shapes.html
- https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html#recompilation
- https://pytorch.org/docs/stable/generated/torch.compile.html
"""

from __future__ import annotations

from torchlint.analysis.compiled import CompileSite, ast_compiled_calls_in_loops, ast_configures_dynamic, compiled_code
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

from torchlint.rules._recompile import ChangingValues, bound_parameter, parameter_uses


class CompileRecompile(Rule):
    code = "TLC003"
    name = "compile-recompile"
    kind = "performance"
    default_enabled = False
    summary = "a compiled function called with a Python number that changes every step (pass a 0-d tensor)"
    triggers = ("compile", "optimize")

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return not ast_configures_dynamic(index) and bool(ast_compiled_calls_in_loops(index))

    def __init__(self, ctx):
        super().__init__(ctx)
        self._changing: dict[int, ChangingValues] = {}

    def visit_Call(self, node: cst.Call) -> None:
        if not node.args:
            return
        compiled = compiled_code(self.ctx.module, self.ctx.bindings, self.ctx.source)
        site = compiled.compiled_callable(node.func)
        if site is None or site.dynamic not in (None, False) or compiled.configures_dynamic \
                or self.ctx.programs.in_test_code():
            return
        for loop in self.ctx.loops.enclosing_loops():
            changing = self._changing.setdefault(id(loop), ChangingValues(loop, self.ctx.bindings))
            for arg in node.args:
                if arg.star:
                    continue
                counter = changing.number(arg.value)
                if counter is not None and self._recompiles_on(site, node, arg):
                    self.report(arg.value, self._message(site, node, arg, counter))
                    return

    def _recompiles_on(self, site: CompileSite, call: cst.Call, arg: cst.Arg) -> bool:
        """Does the compiled code read the argument as a value (a guard on it), as far as the file
        shows? Unknown code (imported, ``*args``) counts as reading it."""
        compiled = compiled_code(self.ctx.module, self.ctx.bindings, self.ctx.source)
        for entry in site.entries:
            skip_self = compiled.owner(entry) is not None
            parameter = bound_parameter(entry, call, arg, skip_self)
            if parameter is None:
                return True
            read, as_length = parameter_uses(entry, parameter)
            if read and not as_length:
                return True
        return not site.entries

    def _message(self, site: CompileSite, call: cst.Call, arg: cst.Arg, counter: str) -> str:
        shown = self.ctx.code_for(arg.value)
        if counter == "the learning rate":
            changes = "is the learning rate, which changes"
        else:
            changes = "changes" if shown == counter else f"changes with `{counter}`"
        if site.dynamic is False:
            cost = ("with `dynamic=False` every new value compiles it again, until the recompile limit (8) makes "
                    "Dynamo stop compiling it")
        else:
            cost = "Dynamo specializes on the number, so its second value compiles the code again"
        return (f"`{shown}` {changes} every iteration and goes to the compiled `{self.ctx.code_for(call.func)}` as a "
                f"Python number: {cost}; pass it as a 0-d tensor (`torch.tensor(value, device=...)`)")
