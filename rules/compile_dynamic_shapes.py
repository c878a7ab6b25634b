"""
## What it does

Finds a slice by a changing length inside compiled code, in a file that marks no shape dynamic:
a compiled function or module is called in a loop with an argument whose length changes every
iteration (a tensor that grows by `torch.cat`, a slice by the loop's counter, or the length itself
as a Python number), and the compiled code slices by that length (`x[:, :T]` with
`T = x.size(1)`, `cache[:, :length]`). The file has no `torch._dynamo.mark_dynamic`, no
`dynamic=True`, and no setting of Dynamo's shape options.

## Why is it slow

Dynamo compiles for the shapes it sees and guards on them. When a length changes, the guard
fails and the code compiles again. Measured on torch 2.13 (CPU, a counting backend, 12 calls with
12 lengths): with the default settings the second length compiles a second time (Dynamo then makes
that dimension symbolic), with `torch.compile(..., dynamic=False)` every length compiles again
until the recompile limit (8) makes Dynamo stop compiling the function, and with the dimension
marked by `torch._dynamo.mark_dynamic` (or `dynamic=True`) it compiles once. With CUDA graphs
(`mode="reduce-overhead"`) every new shape also records a new graph.

## Expected gain

It depends on how many lengths the loop sees: with Dynamo's defaults one extra compile, with
`dynamic=False` one compile per new length up to the recompile limit, and with CUDA graphs a new
graph per shape. No published measurement of the time lost found. `TORCH_LOGS=recompiles` prints
each recompile and its reason; compare the run time before and after marking the dimension.

## Example

```python
@torch.compile
def attend(x, mask):
    T = x.size(1)
    return x.softmax(-1) * mask[:T, :T]

for step in range(max_new_tokens):
    out = attend(tokens, mask)
    tokens = torch.cat((tokens, out[:, -1:]), dim=1)
```

## Use instead

```python
@torch.compile
def attend(x, mask):
    T = x.size(1)
    return x.softmax(-1) * mask[:T, :T]

for step in range(max_new_tokens):
    torch._dynamo.mark_dynamic(tokens, 1)
    out = attend(tokens, mask)
    tokens = torch.cat((tokens, out[:, -1:]), dim=1)
```
or compile with `torch.compile(attend, dynamic=True)`.

## Fix safety

No automatic fix: which dimension changes, and whether `dynamic=True` or a marked dimension suits
the program, is a choice. For a length passed as a Python number, `mark_dynamic` does not apply:
compile with `dynamic=True`.

Off by default: with Dynamo's default settings the cost is one extra compile (then the dimension
is symbolic), and the real code read for precision (bench/results/catalog-2026-compile.md) gave
it no finding, so its precision could not be shown. Enable it (`--extend-select TLC004`) for
generation loops and other code whose lengths change between calls.

## References

- https://pytorch.org/docs/stable/torch.compiler_dynamic_shapes.html
- https://pytorch.org/docs/stable/generated/torch.compile.html
- https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html#recompilation
"""

from __future__ import annotations

from torchlint.analysis.compiled import (CompileSite, ast_compiled_calls_in_loops, ast_marks_dynamic_by_text,
                                         compiled_code)
from torchlint.analysis.syntax import dotted_name, function_parameters
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

from torchlint.rules._recompile import ChangingValues, bound_parameter, parameter_uses, read_names


class CompileDynamicShapes(Rule):
    code = "TLC004"
    name = "compile-dynamic-shapes"
    kind = "performance"
    default_enabled = False
    summary = "compiled code slices by a length that changes from call to call, and no shape is marked dynamic"
    triggers = ("compile", "optimize")

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return not ast_marks_dynamic_by_text(index) and bool(ast_compiled_calls_in_loops(index))

    def __init__(self, ctx):
        super().__init__(ctx)
        self._reported: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        compiled = compiled_code(self.ctx.module, self.ctx.bindings, self.ctx.source)
        site = compiled.compiled_callable(node.func)
        if site is None or compiled.marks_dynamic or not node.args or self.ctx.programs.in_test_code():
            return
        for loop in self.ctx.loops.enclosing_loops():
            changing = ChangingValues(loop, self.ctx.bindings)
            for arg in node.args:
                if arg.star:
                    continue
                grows = changing.growing(arg.value)
                if grows is not None:
                    self._report_slices(site, node, self._sized_slices(site),
                                        f"`{self.ctx.code_for(node)}` gets a tensor whose length changes every "
                                        f"iteration ({grows})", mark_dynamic=True)
                elif changing.number(arg.value) is not None:
                    self._report_slices(site, node, self._length_slices(site, node, arg),
                                        f"`{self.ctx.code_for(arg.value)}` changes every iteration of the loop around "
                                        f"`{self.ctx.code_for(node.func)}(...)`", mark_dynamic=False)

    def _report_slices(self, site: CompileSite, call: cst.Call, slices: list[tuple[cst.CSTNode, str]], evidence: str,
                       mark_dynamic: bool) -> None:
        if site.dynamic is False:
            cost = "every new length compiles it again, until the recompile limit (8) makes Dynamo stop compiling it"
        else:
            cost = "with no dimension marked dynamic, the second length compiles it again"
        advice = ("mark the dimension dynamic before the call (`torch._dynamo.mark_dynamic(tensor, dim)`) or compile "
                  "with `dynamic=True`") if mark_dynamic else "compile with `dynamic=True`"
        for node, length in slices:
            if id(node) in self._reported:
                continue
            self._reported.add(id(node))
            self.report(node, f"`{self.ctx.code_for(node)}` in compiled code slices by `{length}`, and {evidence}: "
                              f"{cost}; {advice}")

    def _sized_slices(self, site: CompileSite) -> list[tuple[cst.CSTNode, str]]:
        """Slices, in the functions the site compiles, bounded by a size of one of that function's
        parameters (``T = x.size(1)`` ... ``bias[:, :T]``)."""
        compiled = compiled_code(self.ctx.module, self.ctx.bindings, self.ctx.source)
        found: list[tuple[cst.CSTNode, str]] = []
        for region in compiled.regions_of(site):
            parameters = set(function_parameters(region.function)) - {"self"}
            found += _slices_by(region.function, _sizes_of(region.function, parameters))
        return found

    def _length_slices(self, site: CompileSite, call: cst.Call, arg: cst.Arg) -> list[tuple[cst.CSTNode, str]]:
        """Slices in the compiled entry bounded by the parameter the changing number binds."""
        compiled = compiled_code(self.ctx.module, self.ctx.bindings, self.ctx.source)
        found: list[tuple[cst.CSTNode, str]] = []
        for entry in site.entries:
            parameter = bound_parameter(entry, call, arg, compiled.owner(entry) is not None)
            if parameter is not None and parameter_uses(entry, parameter)[1]:
                found += _slices_by(entry, {parameter})
        return found


def _sizes_of(function: cst.FunctionDef, parameters: set[str]) -> set[str]:
    """The names a function assigns a size of one of ``parameters``: ``T = x.size(1)``,
    ``B, T, C = x.shape``, ``n = len(x)``, ``T = x.shape[1]``."""
    found: set[str] = set()

    def on_visit(node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and node is not function:
            return False
        if isinstance(node, cst.Assign) and _reads_size(node.value, parameters):
            for target in node.targets:
                found.update(n for n in read_names(target.target) if "." not in n)
        return True

    walk(function.body, on_visit)
    return found


def _reads_size(expr: cst.BaseExpression, parameters: set[str]) -> bool:
    if isinstance(expr, cst.Subscript):
        expr = expr.value
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Name) and func.value == "len" and expr.args:
            return dotted_name(expr.args[0].value) in parameters
        if isinstance(func, cst.Attribute) and func.attr.value == "size":
            return dotted_name(func.value) in parameters
        return False
    return isinstance(expr, cst.Attribute) and expr.attr.value == "shape" and dotted_name(expr.value) in parameters


def _slices_by(function: cst.FunctionDef, lengths: set[str]) -> list[tuple[cst.CSTNode, str]]:
    """The subscripts in a function with a slice bound that reads one of ``lengths``."""
    found: list[tuple[cst.CSTNode, str]] = []
    if not lengths:
        return found

    def on_visit(node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and node is not function:
            return False
        if isinstance(node, cst.Subscript):
            for element in node.slice:
                if isinstance(element.slice, cst.Slice):
                    bounds = [b for b in (element.slice.lower, element.slice.upper) if b is not None]
                    used = sorted(lengths & set().union(*(read_names(b) for b in bounds))) if bounds else []
                    if used:
                        found.append((node, used[0]))
                        return False
        return True

    walk(function.body, on_visit)
    return found
