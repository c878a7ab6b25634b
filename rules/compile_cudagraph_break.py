"""
## What it does

Finds `torch.compile(..., mode="reduce-overhead")` (and `mode="max-autotune"`, which also records
CUDA graphs) whose compiled code breaks its graph: the breaks TLC001 compile-graph-break reports
(`.item()`, `print`, a branch on tensor values...), counted in the function or module this
compile call compiles and what it reaches. The finding is at the compile call and names the
breaks.

## Why is it slow

These modes exist to remove launch overhead: Inductor records the compiled graph's kernels once
as a CUDA graph and replays them with one launch. A graph break cuts the region into several
graphs, each recorded and replayed on its own, with the code between them run eagerly, one
kernel launch at a time: the overhead the mode was chosen to remove comes back at every break.
Host reads such as `.item()` also make the host wait for the GPU between the graphs. The CUDA
graph trees documentation describes how each graph of a broken region becomes its own CUDA
graph; gpt-fast, the reference for `reduce-overhead` decoding, compiles its decoding step with
`fullgraph=True` so that any break is an error.

## Expected gain

What is at stake is what `mode="reduce-overhead"` buys over eager, which is large for launch-bound
code: the gpt-fast post reports Llama-7B decoding at batch size 1 on an A100 going from 25.5 to
107.0 tokens/s with `torch.compile(mode="reduce-overhead", fullgraph=True)` and a static KV cache
(https://pytorch.org/blog/accelerating-generative-ai-2/). No published measurement found of what
each break gives back; compare the step time before and after removing the breaks.

## Example

```python
def decode_one_token(model, token, pos):
    logits = model(token, pos)
    if logits.max() > 100:
        print("large logits")
    return logits.argmax(-1)

decode = torch.compile(decode_one_token, mode="reduce-overhead")
```

## Use instead

```python
def decode_one_token(model, token, pos):
    logits = model(token, pos)
    return logits.argmax(-1)

decode = torch.compile(decode_one_token, mode="reduce-overhead", fullgraph=True)
```

## Fix safety

No automatic fix: remove the breaks TLC001 names (or compile with a mode without CUDA graphs,
`mode="max-autotune-no-cudagraphs"` or the default, if they must stay). Passing
`fullgraph=True` turns any remaining break into an error at compile time.

## References

- https://pytorch.org/docs/stable/generated/torch.compile.html
- https://pytorch.org/docs/stable/torch.compiler_cudagraph_trees.html
- https://github.com/pytorch-labs/gpt-fast/blob/main/generate.py
- https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html
- https://pytorch.org/blog/accelerating-generative-ai-2/
"""

from __future__ import annotations

import ast

from torchlint.analysis.compiled import ast_compile_sites, compiled_code
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

from torchlint.rules._compile import graph_breaks

CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
SHOWN = 3  # breaks named in a message


class CompileCudagraphBreak(Rule):
    code = "TLC005"
    name = "compile-cudagraph-break"
    kind = "performance"
    summary = "`mode=\"reduce-overhead\"` (CUDA graphs) on compiled code that breaks its graph"
    triggers = CUDA_GRAPH_MODES

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a site that runs a function of the file compiled (whose breaks TLC001 finds) in such a mode
        return any(isinstance(k.value, ast.Constant) and k.value.value in CUDA_GRAPH_MODES
                   for site in ast_compile_sites(index) if site.may_run and site.options is not None
                   for k in site.options.keywords if k.arg == "mode")

    def leave_Module(self, original_node: cst.Module) -> None:
        compiled = compiled_code(self.ctx.module, self.ctx.bindings, self.ctx.source)
        sites = [site for site in compiled.sites if site.mode in CUDA_GRAPH_MODES]
        if not sites or self.ctx.programs.in_test_code():
            return
        breaks = graph_breaks(self.ctx, compiled)
        for site in sites:
            functions = {id(region.function) for region in compiled.regions_of(site)}
            inside = [found for found in breaks if id(found.region.function) in functions]
            if not inside:
                continue
            named = ", ".join(f"`{found.shown}` in `{compiled.display_name(found.region.function)}`"
                              for found in inside[:SHOWN])
            more = f" and {len(inside) - SHOWN} more" if len(inside) > SHOWN else ""
            count = "once" if len(inside) == 1 else f"{len(inside)} times"
            self.report(site.node, f"`mode=\"{site.mode}\"` records CUDA graphs, but the code `{site.label}` compiles "
                                   f"breaks its graph {count} ({named}{more}): each break ends a CUDA graph and runs "
                                   "the code up to the next one eagerly, a kernel launch at a time; remove the breaks "
                                   "(TLC001) and pass `fullgraph=True`, or compile without CUDA graphs")
