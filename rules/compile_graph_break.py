"""
## What it does

Finds code that makes `torch.compile` break its graph, inside the code a file compiles: functions
decorated with `@torch.compile`, functions and modules passed to `torch.compile(...)` or compiled
with `model.compile()`, and what they call in the same file (the file's own functions, methods on
`self`, the `forward` of the submodules a compiled module builds). It reports:

- reads of tensor values into Python: `.item()`, `.tolist()`, `float(t)`, `int(t)`, `bool(t)`,
  `str(t)`, and `torch.equal`/`torch.allclose`, which return a Python bool;
- control flow on tensor values: `if x.sum() > 0:`, `while mask.any():`, `a if t.max() > 0 else b`;
- operations whose output shape depends on the values: `.nonzero()`, `torch.unique`,
  `torch.masked_select`, one-argument `torch.where(cond)`, reading through a boolean mask
  (`x[x > 0]`; writing through one, `x[x > 0] = 0`, stays in the graph);
- calls Dynamo does not trace: `print`, logging and `warnings.warn`, Python's `random` (all but
  `randint`, `randrange` and `uniform`), PIL, the clock (`time.time()`), `loss.backward()`;
- on older torch: `torch.cuda.synchronize()` (before 2.12) and NumPy calls and `.numpy()` (before
  2.1; newer Dynamo traces NumPy code into the graph).

Code under `if not torch.compiler.is_compiling():` and functions marked
`@torch.compiler.disable` are not compiled, and not reported. Each message names the break and
what to write instead.

TLC is a family of its own, torch.compile readiness (TLC001-TLC005): its rules are about the code
`torch.compile` compiles, a question across the TL families (memory, devices, loops...), answered
once by torchlint/analysis/compiled.py.

## Why is it slow

At a graph break Dynamo ends the graph it has traced, runs the offending code in plain Python, and
starts a new graph after it. Each break costs a return to the interpreter, splits the code the
compiler could fuse into separate kernels, and with `fullgraph=True` is an error. In a helper
function every break counts: `torch._dynamo.explain` counts three breaks for a helper with three
`.item()` calls, and one for the same helper marked `@torch.compiler.disable`. The torch.compile
documentation calls graph breaks the first thing to remove when compiled code is slow, and
`torch._dynamo.explain(fn)(*args)` lists them with their reasons.

Every kind of break reported here is checked against `torch._dynamo.explain` on torch 2.13 by
torchlint's tests (tests/test_compile_explain.py).

## Expected gain

No published measurement found for breaks in general: each costs a return to Python and splits the
code the compiler could fuse, so the cost grows with the number of breaks in the per-step code and
shrinks with the size of the graphs between them. `torch._dynamo.explain` counts them; compare the
median step time `torchlint verify script.py` reports before and after removing them.

## Example

```python
@torch.compile
def train_step(model, x, y):
    loss = F.cross_entropy(model(x), y)
    print(loss.item())
    return loss
```

## Use instead

```python
@torch.compile
def train_step(model, x, y):
    return F.cross_entropy(model(x), y)

loss = train_step(model, x, y)
print(loss.item())
```

## Fix safety

No automatic fix: each break asks for a choice (where to read the value, how to select without a
branch). The messages name the alternatives: keep the value a tensor, `torch.where` instead of a
branch, the work moved out of the compiled code, `@torch.compiler.disable` on a helper (one break
at its call instead of one per statement), and Dynamo's settings that capture some of these
(`capture_scalar_outputs`, `capture_dynamic_output_shape_ops`, `reorderable_logging_functions`).

Only one file is read: a model class imported from another file is not followed into. A value
counts as a tensor when the rule can tell: what torch's functions and data-dependent tensor
methods return, a layer's output, a parameter or buffer, a parameter annotated `Tensor`, and a
name whose last assignment before the place holds one of these. A parameter without annotation is
not taken for a tensor, so a branch on it is not reported (the tests state how many of
`explain`'s breaks the rule misses on its programs). Test files are left out: tests compile code
with breaks on purpose.

## References

- https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html
- https://pytorch.org/docs/stable/torch.compiler_faq.html#graph-breaks
- https://pytorch.org/docs/stable/generated/torch.compiler.disable.html
- https://pytorch.org/docs/stable/torch.compiler_dynamo_overview.html
"""

from __future__ import annotations

from torchlint.analysis.compiled import ast_may_run_compiled, compiled_code
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

from torchlint.rules._compile import describe_region, graph_breaks


class CompileGraphBreak(Rule):
    code = "TLC001"
    name = "compile-graph-break"
    kind = "performance"
    summary = "code that breaks the graph inside a function or module that `torch.compile` compiles"
    triggers = ("compile", "optimize")

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return ast_may_run_compiled(index)

    def leave_Module(self, original_node: cst.Module) -> None:
        if self.ctx.programs.in_test_code():
            return  # tests compile code with breaks on purpose
        compiled = compiled_code(self.ctx.module, self.ctx.bindings, self.ctx.source)
        for found in graph_breaks(self.ctx, compiled):
            advice = found.kind.advice
            if not found.region.is_entry:
                advice += (f", or mark `{found.region.function.name.value}` with `@torch.compiler.disable` "
                           "(one break at its call instead of one for each inside it)")
            self.report(found.node, f"`{found.shown}` breaks the graph of {describe_region(compiled, found.region)}: "
                                    f"{found.kind.why}; {advice}")
