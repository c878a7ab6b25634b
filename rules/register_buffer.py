"""
## What it does

Finds a tensor attribute that an `nn.Module` (or `LightningModule`) creates in `__init__` on a
given device: `self.mask = torch.ones(n, device="cuda")`, `self.table = torch.arange(n).to(device)`,
`self.t = torch.rand(2, 2, device=self.device)`.

## Why is it wrong

A plain tensor attribute is invisible to the module machinery. `model.to(device)`, `.cuda()`,
`.half()` and Lightning's device placement move parameters and buffers, not attributes, so the
tensor stays on the device it was made on: every rank of a DDP job keeps it on `cuda:0` (or
wherever `__init__` ran), and the forward pass either fails with a device mismatch or copies it on
every step. Naming a device in `__init__` is the tell-tale attempt to work around this. The
Lightning speed guide recommends registering such tensors as buffers, which follow the module to
its device.

## Example

```python
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.mask = torch.tril(torch.ones(n, n)).to("cuda")
        self.positions = torch.arange(n, device="cuda")
```

## Use instead

```python
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("mask", torch.tril(torch.ones(n, n)), persistent=False)
        self.register_buffer("positions", torch.arange(n), persistent=False)
```
(`persistent=False` keeps it out of the `state_dict`, so checkpoints keep their keys.)

## Fix safety

The fix writes `self.register_buffer("<name>", <value>, persistent=False)` and keeps the value as
it is. With `persistent=False` the `state_dict` keys do not change. The fix is safe when the tensor
is not floating point (an explicit integer or bool `dtype`, or `randint`, `randperm`, `arange` of
integers...), and unsafe otherwise: a buffer follows `model.half()` / `.to(torch.bfloat16)` and
shows up in `model.buffers()` (EMA copies, buffer broadcasts under DDP), which a plain attribute
did not. No fix when `register_buffer` would raise: before `super().__init__()`, or when the
name is already an attribute of the class (set earlier in `__init__`, in a base class of the file,
or at class level) or is later assigned something that is not a tensor; nor for a target torch
older than 1.6 (no `persistent` argument). The rule does not fire for classes that are not modules
(caches, samplers, logits processors keep tensors on purpose), nor when the name is already
registered as a buffer, nor for a value that mentions the rank, in itself or through the names of
`__init__` it reads (`r = dist.get_rank()`, then `torch.full((1,), r, ...)`): under DDP, buffers
are broadcast from rank 0, so every rank would get rank 0's value.

## References

- https://lightning.ai/docs/pytorch/stable/advanced/speed.html#transferring-tensors-to-device
- https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_buffer
- https://lightning.ai/docs/pytorch/stable/accelerators/accelerator_prepare.html#init-tensors-using-tensor-to-and-register-buffer
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_left, bisect_right
from functools import cache

from torchlint.analysis.devices import INTEGER_DTYPES, INTEGER_FACTORIES, TENSOR_FACTORIES, ast_may_move, tensor_factory
from torchlint.analysis.index import span
from torchlint.analysis.loops import AST_FUNCTIONS
from torchlint.analysis.modules import ast_module_classes
from torchlint.analysis.syntax import (ast_callee, ast_dotted_name, ast_find_keyword, ast_is_literal, contains, dotted_name, find_keyword,
                                       function_parameters, is_literal, names_in, positional_args)
from torchlint.analysis.walk import Visitor, visit
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex


@cache
def literal_types() -> tuple[type, ...]:
    return (cst.List, cst.Dict, cst.Set, cst.Tuple, cst.ListComp, cst.DictComp, cst.SetComp, cst.Integer,
            cst.Float, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


AUTOGRAD_FUNCTIONS = frozenset({"torch.autograd.Function", "torch.autograd.function.Function"})
# torch functions that do not return a tensor
NOT_TENSORS = frozenset({"device", "dtype", "load", "compile", "manual_seed", "no_grad", "is_tensor", "numel",
                         "get_default_dtype", "is_floating_point", "finfo", "iinfo", "cuda"})
CASTS = {"bool": "int", "long": "int", "int": "int", "short": "int", "byte": "int", "char": "int",
         "float": "float", "half": "float", "double": "float", "bfloat16": "float"}
TENSOR_FACTORY_NAMES = frozenset(TENSOR_FACTORIES.values())


MOVE_CALL = re.compile(r"\.\s*(?:to|cuda)\s*\(")
# A value computed from the process's rank: under DDP each rank holds its own.
PER_RANK = re.compile(r"rank", re.IGNORECASE)


def _ast_tensor_origin(index: SyntaxIndex, init: ast.AST, expr: ast.AST, depth: int) -> bool:
    """The precheck twin of ``_tensor_origin``: could the moved value come from a torch function
    (``torch.tril(...)``, through methods and indexing, or a name ``__init__`` assigns)? Not a
    module (``nn.Linear(...).to(device)``, ``SkipModule().cuda()``) nor a parameter of ``__init__``."""
    if depth > 4:
        return False
    if isinstance(expr, ast.Call):
        for name in index.qualified_names(expr.func):
            function = name[len("torch."):] if name.startswith("torch.") else ""
            if function.isidentifier() and function.islower() and function not in NOT_TENSORS:
                return True
        if isinstance(expr.func, ast.Attribute) and expr.func.attr not in ("to", "cuda", "cpu"):
            return _ast_tensor_origin(index, init, expr.func.value, depth + 1)
        return False
    if isinstance(expr, ast.Subscript):
        return _ast_tensor_origin(index, init, expr.value, depth + 1)
    if isinstance(expr, ast.Name):  # a name the function binds (its values are not followed here)
        return any(isinstance(node, ast.Name) and node.id == expr.id and isinstance(node.ctx, ast.Store)
                   for node in ast.walk(init))
    return False


class RegisterBuffer(Rule):
    code = "TL205"
    name = "register-buffer"
    kind = "correctness"
    summary = "A tensor attribute made on a device in a module's `__init__`: register it as a buffer"
    fix_applicability = "safe"
    triggers = ("__init__", "Module")  # `Module`: keeps in-file base classes in view

    @classmethod
    def applies(cls, text: str) -> bool:
        # a tensor made on a device in `__init__`: `device=...`, `.to(...)` or `.cuda(...)`
        return "__init__" in text and ("device" in text or MOVE_CALL.search(text) is not None)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # `x.attr = <a torch factory given a device, or .to()/.cuda()>` inside an `__init__`
        classes = ast_module_classes(index)
        modules = [node for node in index.nodes(ast.ClassDef) if node.name in classes or (  # see _is_module
            node.bases and any(isinstance(f, AST_FUNCTIONS) and f.name == "forward" for f in node.body)
            and "object" not in {ast_dotted_name(base) for base in node.bases})]
        factories = index.names(name.rsplit(".", 1)[1] for name in TENSOR_FACTORIES)
        inits = [f for cls in modules for f in cls.body if isinstance(f, AST_FUNCTIONS) and f.name == "__init__"]
        if not inits:
            return False
        # the assignments of the file by their lines: a statement on an `__init__`'s lines is in it
        assignments = sorted((node for node in index.nodes(ast.Assign) if len(node.targets) == 1
                              and isinstance(node.targets[0], ast.Attribute) and isinstance(node.value, ast.Call)),
                             key=lambda node: node.lineno)
        lines = [node.lineno for node in assignments]
        for init in inits:
            start, end = span(init)
            for node in assignments[bisect_left(lines, start):bisect_right(lines, end)]:
                value = node.value
                device = ast_find_keyword(value, "device")
                if ast_callee(value) in factories and device is not None and not ast_is_literal(device.value, None):
                    return True
                if ast_may_move(index, value) and _ast_tensor_origin(index, init, value.func.value, 0):
                    return True
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        function = self.ctx.enclosing_function()
        if function is None or function.name.value != "__init__" or len(node.targets) != 1:
            return
        cls = self.ctx.enclosing_class()
        if cls is None or self.ctx.enclosing(cst.FunctionDef)[0] is not function \
                or self.ctx.enclosing(cst.ClassDef, cst.FunctionDef)[1] is not cls or not self._is_module(cls):
            return
        params = function_parameters(function)
        target = node.targets[0].target
        if not params or not isinstance(target, cst.Attribute) or dotted_name(target.value) != params[0]:
            return
        value, self_name, attribute = node.value, params[0], target.attr.value
        factory = self._factory_on_device(value)
        if factory is None or self._registered(cls, attribute) or self._per_rank(value, function):
            return  # a value that differs per rank must not become a buffer: DDP broadcasts rank 0's
        written = f'{self_name}.register_buffer("{attribute}", ..., persistent=False)'
        self.report(node, f"`{self_name}.{attribute}` is a plain tensor attribute made on a device: `.to()`/`.cuda()` "
                          f"and DDP do not move it with the module; write `{written}`",
                    self._fix(node, cls, function, self_name, attribute, factory))

    def _per_rank(self, value: cst.BaseExpression, function: cst.FunctionDef) -> bool:
        """Does the value mention the rank, itself or through the names of ``__init__`` it reads
        (``r = dist.get_rank()``, ``gpu = int(os.environ["LOCAL_RANK"])``), a few assignments deep?"""
        assigned = self.ctx.bindings.scope(function).assigned
        pending, seen = [value], set()
        while pending and len(seen) < 32:
            expr = pending.pop()
            if PER_RANK.search(self.ctx.code_for(expr)):
                return True
            for name in _names_read(expr):
                if name not in seen:
                    seen.add(name)
                    pending += [v for v in assigned.get(name, ()) if v is not None]
        return False

    def _is_module(self, cls: cst.ClassDef) -> bool:
        if cls.name.value in self.ctx.modules.classes:
            return True
        # a base the file cannot see (`PreTrainedModel`, a project base class): a class with a
        # forward method is a module, unless it is an autograd Function
        defines_forward = any(isinstance(s, cst.FunctionDef) and s.name.value == "forward" for s in cls.body.body)
        bases = [self.ctx.qualified_name(b.value) or dotted_name(b.value) for b in cls.bases if b.keyword is None]
        return defines_forward and bool(bases) and not any(b in AUTOGRAD_FUNCTIONS for b in bases) \
            and "object" not in bases

    def _factory_on_device(self, value: cst.BaseExpression) -> tuple[cst.Call | None, str] | None:
        """(origin, kind) for a tensor made on a device: ``torch.<factory>(..., device=d)``, or a
        tensor expression moved right away (``torch.tril(...).to(device)``, ``pe.unsqueeze(0).cuda()``
        with ``pe`` made by torch earlier in ``__init__``). ``kind`` is the factory's name, or
        "int"/"float" after a cast; ``origin`` the call it comes from."""
        factory = tensor_factory(value, self.ctx.bindings)
        if factory is not None:
            device = find_keyword(value, "device")
            return (value, factory) if device is not None and not is_literal(device.value, None) else None
        move = self.ctx.devices.move(value)
        if move is None or move.method == "cpu":
            return None
        return self._tensor_origin(value.func.value, 0)

    def _tensor_origin(self, expr: cst.BaseExpression, depth: int) -> tuple[cst.Call | None, str] | None:
        if depth > 4:
            return None
        if isinstance(expr, cst.Call):
            name = self.ctx.qualified_name(expr.func) or ""
            function = name[len("torch."):] if name.startswith("torch.") else ""
            if function.isidentifier() and function.islower() and function not in NOT_TENSORS:
                return expr, function
            method = expr.func.attr.value if isinstance(expr.func, cst.Attribute) else None
            if method is not None and method not in ("to", "cuda", "cpu"):
                inner = self._tensor_origin(expr.func.value, depth + 1)
                if inner is not None and method in CASTS:
                    return expr, CASTS[method]
                return inner
            return None
        if isinstance(expr, cst.Subscript):
            return self._tensor_origin(expr.value, depth + 1)
        if isinstance(expr, cst.Name):
            values = self.ctx.bindings.scope(self.ctx.enclosing_function()).assigned.get(expr.value, [])
            return self._tensor_origin(values[0], depth + 1) if len(values) == 1 and values[0] is not None else None
        return None

    def _registered(self, cls: cst.ClassDef, attribute: str) -> bool:
        code = self.ctx.code_for(cls)
        return f'register_buffer("{attribute}"' in code or f"register_buffer('{attribute}'" in code

    def _fix(self, node: cst.Assign, cls: cst.ClassDef, function: cst.FunctionDef, self_name: str,
             attribute: str, factory: tuple[cst.Call, str]):
        position = self.ctx.statement_position()
        if not self.ctx.torch_at_least("1.6") or position is None or len(position[0].body) != 1 \
                or self.ctx.enclosing(cst.BaseCompoundStatement)[0] is not function:
            return None  # only a plain line of __init__'s own body
        statement, body, index = position
        if not any(_calls_super_init(s) for s in body[:index]):
            return None  # register_buffer needs Module.__init__ to have run
        if self._attribute_taken(cls, function, statement, self_name, attribute):
            return None
        call = cst.Call(func=cst.Attribute(cst.Name(self_name), cst.Name("register_buffer")), args=[
            cst.Arg(cst.SimpleString(f'"{attribute}"'), comma=_comma()),
            cst.Arg(node.value, comma=_comma()),
            cst.Arg(cst.Name("False"), keyword=cst.Name("persistent"),
                    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))),
        ])
        return self.fix("Register the tensor as a non-persistent buffer", self.replace(node, cst.Expr(call)),
                        applicability="safe" if _not_floating(*factory, self.ctx) else "unsafe")

    def _attribute_taken(self, cls: cst.ClassDef, function: cst.FunctionDef, statement: cst.CSTNode,
                         self_name: str, attribute: str) -> bool:
        """Would ``register_buffer`` find the name taken, or a later assignment store a
        non-tensor in the buffer?"""
        for item in cls.body.body:
            if isinstance(item, (cst.FunctionDef, cst.ClassDef)) and item.name.value == attribute:
                return True
            if isinstance(item, cst.SimpleStatementLine) and any(
                    isinstance(s, (cst.Assign, cst.AnnAssign)) and attribute in _plain_targets(s) for s in item.body):
                return True
        finder = _SelfAssignments(self_name, attribute)
        visit(cls, finder)
        earlier = finder.statements_before(function, statement)
        if earlier or any(isinstance(v, literal_types()) for v in finder.values):
            return True
        for base in cls.bases:  # a base class of this file that sets the attribute itself
            for other in self.ctx.module.body:
                if isinstance(other, cst.ClassDef) and other.name.value == dotted_name(base.value):
                    base_finder = _SelfAssignments("self", attribute)
                    visit(other, base_finder)
                    if base_finder.values:
                        return True
        return False


class _SelfAssignments(Visitor):
    """Assignments to ``self.<attribute>`` in a class: their values and the statements."""

    def __init__(self, self_name: str, attribute: str):
        self.self_name, self.attribute = self_name, attribute
        self.values: list[cst.BaseExpression] = []
        self.lines: list[cst.SimpleStatementLine] = []
        self._line: cst.SimpleStatementLine | None = None

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._line = node

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if dotted_name(target.target) == f"{self.self_name}.{self.attribute}":
                self.values.append(node.value)
                self.lines.append(self._line)

    def statements_before(self, function: cst.FunctionDef, statement: cst.CSTNode) -> bool:
        """Is the attribute assigned in ``function`` before ``statement`` (or on its line twice)?"""
        body = list(function.body.body)
        before = body[: body.index(statement)] if statement in body else body
        return any(line is not None and any(contains(b, line) for b in before) for line in self.lines)


def _names_read(expr: cst.BaseExpression) -> set[str]:
    """The names an expression reads, but for its ``device=`` argument: a tensor made on each
    rank's own device holds the same values on every rank."""
    if isinstance(expr, cst.Call):
        parts = [expr.func, *(arg.value for arg in expr.args if not (arg.keyword and arg.keyword.value == "device"))]
        return {name for part in parts for name in names_in(part)}
    return names_in(expr)


def _plain_targets(small: cst.BaseSmallStatement) -> set[str]:
    targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
    return {t.value for t in targets if isinstance(t, cst.Name)}


def _calls_super_init(statement: cst.CSTNode) -> bool:
    """``super().__init__(...)``, ``super(Cls, self).__init__(...)``, ``nn.Module.__init__(self)``."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) \
                and isinstance(small.value.func, cst.Attribute) and small.value.func.attr.value == "__init__":
            return True
    return False


def _not_floating(call: cst.Call, factory: str, ctx) -> bool:
    """The tensor is an integer or bool tensor, whatever the default dtype."""
    if factory in ("int", "float"):
        return factory == "int"
    if factory not in TENSOR_FACTORY_NAMES:
        return False
    dtype = find_keyword(call, "dtype")
    if dtype is not None:
        name = ctx.qualified_name(dtype.value) or ""
        return name.startswith("torch.") and name[6:] in INTEGER_DTYPES
    if factory in INTEGER_FACTORIES:
        return True
    if factory == "arange":  # integer literals only: arange(0.5) or arange(n) may be floating
        return all(isinstance(a.value, cst.Integer) for a in positional_args(call))
    return False


def _comma() -> cst.Comma:
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
