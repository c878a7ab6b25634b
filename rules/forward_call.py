"""
## What it does

Finds `module.forward(x)` called directly on something that is provably an `nn.Module`: a name
the file assigns a `torch.nn` layer, an instance of one of its own module classes, or a model
wrapped in `DistributedDataParallel` / `FullyShardedDataParallel`; a submodule that a module
class of the file assigns in `__init__` (`self.encoder.forward(x)`), or an element of its
`nn.ModuleList` (`self.blocks[i].forward(x)`).

## Why is it wrong

Calling a module, `module(x)`, runs `nn.Module.__call__`, which runs `forward` between the hooks
registered on the module and the global ones: forward pre-hooks, forward hooks, and the
backward hooks they set up. `module.forward(x)` skips all of them, and a good deal of PyTorch
works through them: `torch.nn.utils.prune` and the old `weight_norm` / `spectral_norm`
recompute the weight in a pre-hook (skipped, the forward uses a stale weight); FSDP2
(`fully_shard`) all-gathers the sharded parameters in a pre-hook (its documentation says to call
`model(input)`, not `model.forward(input)`); quantization observers, activation checkpointing
wrappers, profilers and feature extractors hook modules too. `module.compile()` compiles
`__call__`, so `module.forward(x)` runs the uncompiled model. The PyTorch docs say to call the
module instance "instead of this since the former takes care of running the registered hooks
while the latter silently ignores them".

## Example

```python
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(8, 8)

    def forward(self, x):
        return self.encoder.forward(x)
```

## Use instead

```python
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(8, 8)

    def forward(self, x):
        return self.encoder(x)
```

## Fix safety

Unsafe: the fix writes `module(x)` for `module.forward(x)`, with the same arguments. When the
module has no hooks the two compute the same values, but the rule cannot know that: hooks can be
registered anywhere (by a library, a pruning call, FSDP2, `module.compile()`), and the fixed call
runs them, which is the point of the fix and changes what the program does. Under
`DistributedDataParallel` the wrapper's own `forward` still prepares the gradient synchronization,
so the fix changes nothing there but the hooks.

Not reported: `super().forward(x)` and `self.forward(x)` (a class calling its own forward, often
on purpose); `SomeClass.forward(self, x)` (an unbound call); anything not provably a module,
such as a parameter of the function (a hook's `module` argument, where `module(x)` would call the
hook again and recurse), a model loaded or built by another module, a `torch.compile` result,
a class of the file that defines its own `__call__`; and test code, which calls `forward`
directly on purpose (to test it without the hooks).

## References

- https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.forward
- https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_pre_hook
- https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html
- https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.compile
"""

from __future__ import annotations

import ast
import re
from functools import cached_property

from torchlint.analysis.bindings import ast_scope_bindings
from torchlint.analysis.index import span
from torchlint.analysis.loops import AST_FUNCTIONS
from torchlint.analysis.modules import ast_module_classes
from torchlint.analysis.syntax import ast_dotted_name
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex


FORWARD_CALL = re.compile(r"\.\s*forward\s*\(")


class ForwardCall(Rule):
    code = "TL506"
    name = "forward-call"
    kind = "correctness"
    quiet_in_tests = True  # tests call forward directly on purpose (to test it without hooks)
    summary = "`module.forward(x)` instead of `module(x)`: the module's hooks (FSDP2, pruning, compile) are skipped"
    fix_applicability = "unsafe"

    @classmethod
    def applies(cls, text: str) -> bool:
        return FORWARD_CALL.search(text) is not None

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # `<something>.forward(...)` that is not `super().forward(...)`, on a receiver that
        # Modules.is_module_here can prove a module: `self...` only in a class of the file that is
        # an nn.Module, a name only in a file that imports torch or defines such a class
        calls = [call for call in index.calls("forward")
                 if isinstance(call.func, ast.Attribute) and not isinstance(call.func.value, ast.Call)]
        if not calls:
            return False
        classes = ast_module_classes(index)
        lines = index.lines(node for node in index.nodes(ast.ClassDef) if node.name in classes)
        named = bool(classes or index.imported_from("torch"))
        # a module is provable only from an assignment of a call to the receiver (`model = Net()`,
        # `self.encoder = nn.Linear(...)`): a parameter, or `self.module = module`, is not one
        built = {ast_dotted_name(target) for node in index.nodes(ast.Assign, ast.AnnAssign, ast.NamedExpr)
                 if isinstance(node.value, ast.Call)
                 for target in (node.targets if isinstance(node, ast.Assign) else [node.target])}
        for call in calls:
            receiver = call.func.value
            if isinstance(receiver, ast.Name) and not _ast_may_hold_module_here(index, receiver.id, call):
                continue
            receiver = receiver.value if isinstance(receiver, ast.Subscript) else receiver  # `self.blocks[i]`
            name = ast_dotted_name(receiver) or ""
            root = name.partition(".")[0]
            if name in built and (root == "self" and lines[call.lineno] or root != "self" and named):
                return True
        return False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "forward" or self._defines_call:
            return
        receiver = func.value
        if not self.ctx.modules.is_module_here(receiver, self.ctx.enclosing(cst.ClassDef, cst.FunctionDef)):
            return
        written = self.ctx.code_for(receiver)
        self.report(node, f"`{written}.forward(...)` skips the module's hooks (FSDP2's all-gather, pruning, spectral "
                          f"norm, observers) and `module.compile()`; call the module: `{written}(...)`",
                    self.fix(f"Call `{written}` instead of its `forward`", self.replace(func, receiver)))

    @cached_property
    def _defines_call(self) -> bool:
        """Does a module class of the file define its own ``__call__`` (then ``m(x)`` is not
        ``m.forward(x)`` with hooks)?"""
        classes = self.ctx.modules.classes
        return any(isinstance(item, cst.FunctionDef) and item.name.value == "__call__"
                   for name in classes for cls in self.ctx.bindings.defined(name, cst.ClassDef)
                   for item in cls.body.body)



def _ast_may_hold_module_here(index: SyntaxIndex, name: str, place: ast.AST) -> bool:
    """The precheck twin of the start of ``Modules._name_holds_module``: the innermost function
    around ``place`` that binds ``name`` (or else the module) binds it only to values, never as a
    parameter or without one (a ``for`` target, unpacking)."""
    functions = sorted((f for f in index.nodes(*AST_FUNCTIONS) if span(f)[0] <= place.lineno <= f.end_lineno),
                       key=lambda f: span(f)[0], reverse=True)
    for scope in (*functions, index.tree):
        values = ast_scope_bindings(index, scope).get(name)
        if values is not None or scope is index.tree:
            return bool(values) and None not in values
    return True
