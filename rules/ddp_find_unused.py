"""
## What it does

Finds `DistributedDataParallel(..., find_unused_parameters=True)` written as a literal keyword,
and the same flag on Lightning's `DDPStrategy(find_unused_parameters=True)`.

## Why is it slow

With `find_unused_parameters=True`, DDP traverses the autograd graph from the outputs of every
forward pass to mark the parameters that will get no gradient; the DDP documentation warns that
this traversal adds overhead and should be enabled only when needed. The flag also changes how
gradients are bucketed for the all-reduce: the buckets follow the order in which the layers were
constructed rather than the order in which backward produces their gradients, so when the two
orders differ, a bucket waits for its last gradient and less communication overlaps with the
backward pass (PyTorch tuning guide). Lightning turned the flag off by default in its DDP strategy
for the same reason.

## Expected gain

No published measurement found. The cost is a traversal of the autograd graph after every forward
pass, plus less overlap of the all-reduce with the backward pass when the layers' construction order
differs from their backward order; it grows with the number of parameters and layers and with slow
links between processes. `torchlint verify` runs such a script as one process and cannot show it:
compare the step time under your launcher with and without the flag.

## Example

```python
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(model, device_ids=[rank], find_unused_parameters=True)
```

## Use instead

```python
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(model, device_ids=[rank])
```
If some parameters really get no gradient in some iterations (conditional branches, frozen
heads), DDP names them in its error; then keep the flag, or use `static_graph=True` when the set of
used parameters is the same every iteration.

## Fix safety

Unsafe. When the model does leave parameters without a gradient in some iteration, DDP without
the flag raises an error at the next backward ("Expected to have finished reduction in the prior
iteration..."). The flag is only reported when its value is the literal `True`, and not when the wrapped model
is built from a class of the file whose `forward` branches (`if`, a conditional expression,
`match`) or never uses a submodule that `__init__` creates: there some parameters may well get no
gradient.

## References

- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#match-the-order-of-layers-in-constructors-and-during-the-execution-if-using-distributeddataparallel-find-unused-parameters-true
- https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
- https://lightning.ai/docs/pytorch/stable/advanced/model_parallel.html
- https://pytorch.org/docs/stable/notes/ddp.html#internal-design
"""

from __future__ import annotations

import ast

from torchlint.analysis.data import DISTRIBUTED_DATA_PARALLEL
from torchlint.analysis.frameworks import lightning_names
from torchlint.analysis.syntax import ast_is_literal, dotted_name, find_argument, find_keyword, is_literal
from torchlint.analysis.walk import Visitor, visit
from torchlint.fixes import remove_arg
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

DDP_STRATEGY_PATHS = ("strategies.DDPStrategy", "strategies.ddp.DDPStrategy")


class DdpFindUnused(Rule):
    code = "TL503"
    name = "ddp-find-unused"
    kind = "performance"
    summary = "`find_unused_parameters=True` makes DDP search the graph for unused parameters every step"
    fix_applicability = "unsafe"
    triggers = ("find_unused_parameters",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # `find_unused_parameters=True` given to what an import may name DDP or Lightning's DDPStrategy
        return any(k.arg == "find_unused_parameters" and ast_is_literal(k.value, True)
                   and any(_wraps_ddp(name) for name in index.qualified_names(call.func))
                   for call in index.nodes(ast.Call) for k in call.keywords)

    def visit_Call(self, node: cst.Call) -> None:
        if not _wraps_ddp(self.ctx.qualified_name(node.func)):
            return
        flag = find_keyword(node, "find_unused_parameters")
        if flag is None or not is_literal(flag.value, True):
            return
        module = find_argument(node, "module", 0)
        if module is not None and self._may_skip_parameters(module.value):
            return
        self.report(flag, "`find_unused_parameters=True` makes DDP traverse the autograd graph every iteration; "
                          "drop it unless some parameters really get no gradient",
                    self.fix("Drop `find_unused_parameters=True`", self.replace(node, remove_arg(node, flag))))

    def _may_skip_parameters(self, module: cst.BaseExpression) -> bool:
        """Is the wrapped model built from a class of this file whose ``forward`` branches
        (``if``, a conditional expression) or never touches one of the submodules that
        ``__init__`` assigns? Then some parameters may get no gradient and the flag is needed."""
        for name in self._model_classes(module):
            for cls in self.ctx.bindings.defined(name, cst.ClassDef):
                methods = {f.name.value: f for f in cls.body.body if isinstance(f, cst.FunctionDef)}
                forward = methods.get("forward")
                if forward is None:
                    continue
                code = self.ctx.code_for(forward)
                if _branches(forward):
                    return True
                init = methods.get("__init__")
                assigned = _self_attributes(init) if init is not None else set()
                if any(f"self.{attribute}" not in code for attribute in assigned):
                    return True
        return False

    def _model_classes(self, module: cst.BaseExpression, seen: frozenset[str] = frozenset()) -> set[str]:
        """Class names the wrapped model may be built from: ``Net(...)``, ``Net().cuda(rank)``,
        ``copy.deepcopy(model)``, or a name assigned such a value in the same function, followed
        once per name (``model = model.cuda()`` leads back to ``model``)."""
        while isinstance(module, cst.Call):
            if isinstance(module.func, cst.Attribute) and module.func.attr.value in ("cuda", "to", "float", "half"):
                module = module.func.value  # Net().cuda(rank)
            elif (dotted_name(module.func) or "").split(".")[-1] == "deepcopy" and module.args:
                module = module.args[0].value  # copy.deepcopy(model)
            else:
                break
        if isinstance(module, cst.Call):
            return {dotted_name(module.func) or ""}
        if not isinstance(module, cst.Name) or module.value in seen:
            return set()
        seen |= {module.value}
        scope = self.ctx.enclosing_function() or self.ctx.module
        values: list[cst.BaseExpression] = []
        wanted = module.value

        class Assignments(Visitor):
            def visit_Assign(self, node: cst.Assign) -> None:
                if any(isinstance(t.target, cst.Name) and t.target.value == wanted for t in node.targets):
                    values.append(node.value)

        visit(scope, Assignments())
        return set().union(*(self._model_classes(v, seen) for v in values if not isinstance(v, cst.Name))) if values else set()


def _wraps_ddp(qualified: str | None) -> bool:
    """Does a qualified name name DDP, or Lightning's strategy that builds it?"""
    return qualified in DISTRIBUTED_DATA_PARALLEL or lightning_names(qualified, *DDP_STRATEGY_PATHS)


class _Branches(Visitor):
    found = False

    def visit_If(self, node: cst.If) -> None:
        self.found = True

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self.found = True

    def visit_Match(self, node: cst.Match) -> None:
        self.found = True


def _branches(function: cst.FunctionDef) -> bool:
    finder = _Branches()
    visit(function.body, finder)
    return finder.found


def _self_attributes(function: cst.FunctionDef) -> set[str]:
    """Attributes ``__init__`` assigns a call to (``self.head = nn.Linear(...)``): submodules,
    parameters, or plain values made by a call."""
    found: set[str] = set()

    class Assignments(Visitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            if isinstance(node.value, cst.Call):
                for target in node.targets:
                    name = dotted_name(target.target) or ""
                    if name.startswith("self.") and name.count(".") == 1:
                        found.add(name[5:])

    visit(function.body, Assignments())
    return found
