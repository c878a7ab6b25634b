"""
## What it does

Finds `torch.compile(...)` (and `model.compile()` on a module of the file) called again and again
with arguments the loop does not change: on every step of a training loop, on every batch of a
loop that runs a model, or in a loop of an optimizer's `step()` method (once per parameter, on
every training step).

## Why is it slow

`torch.compile` returns a new wrapper each time it is called. Dynamo finds the code it compiled
before in its cache, so on torch 2.13 nothing is compiled twice, but every call builds the
wrapper again and every step pays for it. Measured on CPU with torch 2.13
(`OMP_NUM_THREADS=1 python bench/compile_in_loop.py --steps 200`, a two-layer MLP, median step
after the first five, three runs): 6.7 to 7.5 ms a training step with `torch.compile(model)`
inside the loop, against 0.9 to 1.0 ms with the wrapper made once before it; the same single graph
was compiled either way. Compiling the compiled module again (`model = torch.compile(model)` in
the loop) is worse: the second call returns a plain function, which has no `state_dict()` or
`parameters()`.

## Expected gain

A fixed cost per call, which matters most for small, fast steps: in the measurement above
(bench/compile_in_loop.py; CPU, torch 2.13, a two-layer MLP) a step took 6.7 to 7.5 ms with the
call inside the loop against 0.9 to 1.0 ms with it before the loop. `torchlint verify --each
script.py` measures the fix on your script.

## Example

```python
for x, y in loader:
    compiled = torch.compile(model)
    loss = F.cross_entropy(compiled(x), y)
    loss.backward()
    optimizer.step()
```

## Use instead

```python
compiled = torch.compile(model)
for x, y in loader:
    loss = F.cross_entropy(compiled(x), y)
    loss.backward()
    optimizer.step()
```

## Fix safety

Safe when the call is a statement of its own, `name = torch.compile(...)`, whose arguments the
loop never rebinds, and `name` is bound nowhere else in the loop and not read before it: the fix
moves the statement before the outermost loop in which that holds. `torch.compile` compiles
lazily, on the first call of what it returns, so nothing runs earlier than before (only an error
`torch.compile` raises at once, such as an unknown `mode`, comes before the loop's first
statements). The same move is unsafe for `model = torch.compile(model)`, which compiles its own
result again on later iterations: moved, `model` stays a compiled module (with `state_dict()`)
where the original turned it into a function. The rule is silent when a condition inside the loop
guards the call (a one-time lazy compile: `if compiled is None:`), when the loop changes what is
compiled (`for mode in modes: torch.compile(model, mode=mode)`), and for loops over epochs (once
per epoch costs little).

## References

- https://pytorch.org/docs/stable/generated/torch.compile.html
- https://pytorch.org/tutorials/intermediate/torch_compile_tutorial.html
- https://pytorch.org/docs/stable/torch.compiler_faq.html
"""

from __future__ import annotations

import ast
from functools import cache

from torchlint.analysis.compiled import ast_compile_sites, compiled_code
from torchlint.analysis.loops import LOADER_NAME, ast_loop_lines, calls_model, iterated_name
from torchlint.analysis.syntax import contains, last_simple_statement
from torchlint.analysis.walk import walk
from torchlint.fixes import statement_edit
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

from torchlint.rules._recompile import bindings_in, bound_in, read_names


# Between the call and its loop: nodes under which the call does not run on every iteration.
@cache
def conditional_types() -> tuple[type, ...]:
    return (cst.If, cst.IfExp, cst.ExceptHandler, cst.ExceptStarHandler, cst.Lambda, cst.CompFor, cst.Match,
            cst.BooleanOperation)


class CompileInLoop(Rule):
    code = "TLC002"
    name = "compile-in-loop"
    kind = "performance"
    summary = "`torch.compile(...)` called again on every step of a loop, with the same arguments"
    fix_applicability = "safe"
    triggers = ("compile",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        loops = ast_loop_lines(index)
        return any(isinstance(site.node, ast.Call) and loops[site.node.lineno] for site in ast_compile_sites(index))

    def visit_Call(self, node: cst.Call) -> None:
        compiled = compiled_code(self.ctx.module, self.ctx.bindings, self.ctx.source)
        site = next((site for site in compiled.sites if site.node is node), None)
        if site is None or self.ctx.programs.in_test_code():
            return
        loops = self.ctx.loops.enclosing_loops()
        if not loops or not self._every_iteration(loops[0]) or not self._per_batch(loops[0]):
            return
        arguments = set().union(*(read_names(arg.value) for arg in node.args))
        own = self._own_target()
        changed = arguments - own
        if changed & bound_in(loops[0]):
            return  # the loop changes what is compiled: compiling each time is the point
        target = loops[0]
        for outer in loops[1:]:
            if changed & bound_in(outer) or not self._every_iteration(outer):
                break
            target = outer
        rewraps = bool(arguments & own)
        message = (f"`{site.label}` runs on every step of the loop with the same arguments: each call builds the "
                   "compiled wrapper again (on torch 2.13 a small model's training step took about 7 ms instead of "
                   "1 ms)")
        if rewraps:
            message += "; compiling the compiled module again also turns it into a plain function"
        self.report(node, message + "; compile once, before the loop", self._fix(target, rewraps))

    def _every_iteration(self, loop: cst.CSTNode) -> bool:
        """No condition, handler, lambda or comprehension between the call and ``loop``."""
        chain = self.ctx.ancestors[:-1]
        return not any(isinstance(node, conditional_types()) for node in chain[chain.index(loop) + 1:])

    def _per_batch(self, loop: cst.CSTNode) -> bool:
        """Is the innermost loop around the call one that runs per training step or per batch (it
        backpropagates, runs a model, or iterates a loader), rather than per epoch, or a loop in an
        optimizer's ``step()`` (which runs on every training step)?"""
        if self.ctx.loops.step_loop() is loop or self._in_optimizer_step():
            return True
        if self.ctx.loops.backpropagated_names(loop) is not None:
            return False  # an epoch loop: the steps are in a loop inside it
        loader = iterated_name(loop, self.ctx.bindings) if isinstance(loop, cst.For) else None
        ancestors = {id(n) for n in self.ctx.ancestors}
        inner_batches = [inner for inner in self.ctx.loops.nested_loops(loop) if id(inner) not in ancestors
                         and calls_model(inner.body)]
        return not inner_batches and (calls_model(loop.body) or bool(
            loader and LOADER_NAME.search(loader.rsplit(".", 1)[-1])))

    def _in_optimizer_step(self) -> bool:
        function, owner = self.ctx.enclosing_function(), self.ctx.enclosing_class()
        if function is None or owner is None or function.name.value != "step":
            return False
        optimizers = self.ctx.bindings.derived_classes(lambda name: (name or "").startswith("torch.optim."))
        return owner.name.value in optimizers

    def _own_target(self) -> set[str]:
        """``{"model"}`` for ``model = torch.compile(model)``: the name the call's statement binds."""
        bound = self.ctx.bound_name()
        return {bound} if bound is not None else set()

    def _fix(self, loop: cst.CSTNode, rewraps: bool):
        statement = self.ctx.ancestors[-3] if len(self.ctx.ancestors) >= 3 else None
        assign = self.ctx.parent
        if not isinstance(assign, cst.Assign) or not isinstance(statement, cst.SimpleStatementLine) \
                or len(statement.body) != 1 or len(assign.targets) != 1 \
                or not isinstance(assign.targets[0].target, cst.Name):
            return None
        name = assign.targets[0].target.value
        block = self.ctx.ancestors[-4]
        if not isinstance(block, cst.IndentedBlock) or contains(statement, last_simple_statement(loop)) \
                or self._bound_elsewhere(loop, name) or self._read_before(loop, statement, name):
            return None
        rest = [s for s in block.body if s is not statement] or [cst.SimpleStatementLine([cst.Pass()])]
        moved = loop.deep_replace(block, block.with_changes(body=rest)).with_changes(leading_lines=[])
        edit = statement_edit(self.ctx, loop, [statement, moved])
        return self.fix("Compile once, before the loop", edit, applicability="unsafe" if rewraps else None)

    @staticmethod
    def _bound_elsewhere(loop: cst.CSTNode, name: str) -> bool:
        """Does anything in the loop but the compile statement bind ``name`` (an assignment, a
        ``for`` or ``with`` target, ``:=``)?"""
        return bindings_in(loop).count(name) > 1

    @staticmethod
    def _read_before(loop: cst.CSTNode, statement: cst.CSTNode, name: str) -> bool:
        """Is ``name`` read in the loop before the statement that binds it (the previous
        iteration's value, or an older one)?"""
        if name in read_names(loop.test if isinstance(loop, cst.While) else loop.iter):
            return True
        state = {"reached": False, "read": False}

        def on_visit(node: cst.CSTNode) -> bool:
            if node is statement:
                state["reached"] = True
            if state["reached"]:
                return False
            if isinstance(node, cst.Name) and node.value == name:
                state["read"] = True
            return True

        walk(loop.body, on_visit)
        return state["read"]
