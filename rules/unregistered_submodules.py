"""
## What it does

Finds an `nn.Module` (or `LightningModule`) whose `__init__` keeps layers in a plain Python
container: `self.layers = [nn.Linear(d, d), nn.Linear(d, d)]`, a list comprehension of layers, a
dict of layers (`self.heads = {"cls": nn.Linear(d, n)}`), or an empty list that `__init__` fills
with `append`. Only containers whose elements are provably new modules are reported: calls of
`torch.nn` layer classes (under any import spelling) or of the file's own module classes.

## Why is it wrong

`nn.Module` registers a submodule when it is assigned to an attribute directly, or through
`nn.ModuleList`, `nn.ModuleDict` or `nn.Sequential`. A list or a dict is a plain attribute: the
layers in it are invisible to the module. `model.parameters()` leaves their weights out, so an
optimizer built from it never updates them; `model.to(device)` and `.cuda()` leave them on the
CPU (a device-mismatch error in the forward pass, or silent CPU work); `model.eval()` leaves their
dropout and batch norm in training mode; `state_dict()` does not save them, so a checkpoint
reloads random weights without a warning; DDP does not synchronize their gradients. The PyTorch
docs describe `nn.ModuleList` as the container that holds submodules "in a list" so that "all
Module methods" see them.

## Example

```python
class Net(nn.Module):
    def __init__(self, d, depth):
        super().__init__()
        self.blocks = [nn.Linear(d, d) for _ in range(depth)]

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
```

## Use instead

```python
class Net(nn.Module):
    def __init__(self, d, depth):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(d, d) for _ in range(depth)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
```
(`nn.ModuleDict({...})` for a dict with string keys.)

## Fix safety

Unsafe, always: the fix wraps the container in `nn.ModuleList(...)` / `nn.ModuleDict(...)` (an
empty list becomes `nn.ModuleList()`), which is the point of the rule but changes the program.
`state_dict()` gains the layers' keys (`blocks.0.weight`...), so a checkpoint saved before the fix
no longer loads with `strict=True`; the optimizer now trains weights that stayed at their
initial values; `.to()`, `.eval()` and DDP now reach them. The fix is offered only when the
class (with its base and derived classes in the file) does nothing with the attribute but
iterate over it, index it with a number or a key, take its `len()`, test membership, read
`.items()`/`.keys()`/`.values()`, and add new layers to it with `append`/`extend`/`insert`: all
of which `ModuleList`/`ModuleDict` do the same way. Any other use (a slice, which returns a
`ModuleList` rather than a list; returning it; storing into it) leaves the finding without a fix.
No fix either before `super().__init__()` (a submodule cannot be assigned before it), for an
annotated assignment (`self.layers: list = [...]`, whose annotation would turn false), or for a
dict whose keys are not plain strings that `ModuleDict` accepts (not empty, no `.`, not the name
of a module attribute such as `"train"` or `"to"`, which raise there).

Not reported: a container handed to a call (`nn.Sequential(*self.layers)`,
`nn.ModuleList(self.layers)`, a helper), which registers or keeps the layers elsewhere, or one of
whose elements is assigned, returned or passed on (`self.backbone = self.candidates[name]`: the
chosen one is registered there, and registering the others would add unused parameters); a class
that registers submodules by hand (`add_module`, `register_module`, `setattr`); an attribute
assigned more than once; containers of anything that is not provably a new module (modules
already registered as attributes, tensors, functions such as `F.relu`, numbers); a list of one
module, the usual way to keep a helper model (a frozen teacher, a metric network) out of
`parameters()` and `state_dict()` on purpose; containers of layers without parameters, buffers or
train/eval behaviour (`nn.ReLU()`, pooling, losses, or classes of the file built only from such
layers), where registration changes nothing; and
classes that are not provably modules.

## References

- https://pytorch.org/docs/stable/generated/torch.nn.ModuleList.html
- https://pytorch.org/docs/stable/generated/torch.nn.ModuleDict.html
- https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_module
- https://pytorch.org/tutorials/beginner/saving_loading_models.html#what-is-a-state-dict
"""

from __future__ import annotations

import ast
import re
from functools import cache

from torchlint.analysis.loops import AST_FUNCTIONS
from torchlint.analysis.modules import MODULE_ATTRIBUTES, ast_module_classes
from torchlint.analysis.syntax import ast_callee, contains, dotted_name, function_parameters, string_value
from torchlint.fixes import imported_name, insert_after, insert_before
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex


@cache
def container_types() -> tuple[type, ...]:
    return (cst.List, cst.ListComp, cst.Dict, cst.DictComp)


CONTAINER_ATTRIBUTE = re.compile(r"\.\s*\w+\s*(?::[^=\n]*)?=\s*[\[{(]")
AST_CONTAINERS = (ast.List, ast.ListComp, ast.Dict, ast.DictComp)


def _ast_may_build_layer(expr: ast.expr | None, classes: set[str]) -> bool:
    """The precheck twin of Modules.constructed_class: a call of a capitalised name (torch.nn's
    layers are) or of a class of the file, maybe moved or cast (`nn.Linear(2, 2).cuda()`), or both
    branches of a conditional; not `dict(...)` or another lower-case function."""
    if isinstance(expr, ast.IfExp):
        return _ast_may_build_layer(expr.body, classes) and _ast_may_build_layer(expr.orelse, classes)
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) \
            and isinstance(expr.func.value, ast.Call) \
            and expr.func.attr in ("to", "cuda", "cpu", "float", "half", "double", "bfloat16"):
        expr = expr.func.value
    if not isinstance(expr, ast.Call):
        return False
    name = ast_callee(expr)
    return name is not None and (name[:1].isupper() or name in classes)


def _ast_fills(index: SyntaxIndex, classes: set[str], attribute: str) -> bool:
    """Could the list in ``<obj>.<attribute>`` be filled with layers (Modules.attribute_uses'
    `added`): `.append(<layer>)`, `.insert(i, <layer>)`, `.extend([<layers>])` or `+= [<layers>]`."""
    def layers(value: ast.expr) -> bool:
        return isinstance(value, (ast.List, ast.Tuple)) and bool(value.elts) \
            and all(_ast_may_build_layer(e, classes) for e in value.elts)

    def on_it(call: ast.Call) -> bool:
        owner = call.func.value if isinstance(call.func, ast.Attribute) else None
        return isinstance(owner, ast.Attribute) and owner.attr == attribute

    return any(on_it(c) and len(c.args) == 1 and _ast_may_build_layer(c.args[0], classes)
               for c in index.calls("append")) \
        or any(on_it(c) and len(c.args) == 2 and _ast_may_build_layer(c.args[1], classes)
               for c in index.calls("insert")) \
        or any(on_it(c) and len(c.args) == 1 and layers(c.args[0]) for c in index.calls("extend")) \
        or any(isinstance(node.target, ast.Attribute) and node.target.attr == attribute and layers(node.value)
               for node in index.nodes(ast.AugAssign))


def _ast_elements(value: ast.expr) -> list[ast.expr | None]:
    """The precheck's view of what a container literal holds: its items, a dict's values, a
    comprehension's element (None for `**spread` and `*starred`)."""
    if isinstance(value, ast.List):
        return [None if isinstance(e, ast.Starred) else e for e in value.elts]
    if isinstance(value, ast.Dict):
        return list(value.values) if all(k is not None for k in value.keys) else [None]
    if isinstance(value, ast.ListComp):
        return [value.elt]
    return [value.value]


class UnregisteredSubmodules(Rule):
    code = "TL405"
    name = "unregistered-submodules"
    kind = "correctness"
    summary = "Layers kept in a plain list or dict in a module's `__init__`: they are not registered submodules"
    fix_applicability = "unsafe"

    @classmethod
    def applies(cls, text: str) -> bool:
        # an attribute assigned a list, dict or comprehension (`self.layers = [`), in an `__init__`
        return "__init__" in text and CONTAINER_ATTRIBUTE.search(text) is not None

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # `x.attr = [...]` / `{...}` / a comprehension inside an `__init__`
        # whose elements are all calls (a layer is built by one), or that starts empty and is filled
        # by calls (`.append(nn.Linear(...))`)
        modules = [node for node in index.nodes(ast.ClassDef) if node.name in ast_module_classes(index)]
        if not modules:
            return False  # only an nn.Module's __init__ counts (Modules.classes)
        inits = index.lines(f for cls in modules for f in cls.body
                            if isinstance(f, AST_FUNCTIONS) and f.name == "__init__")
        classes = {node.name for node in index.nodes(ast.ClassDef)}
        for node in index.nodes(ast.Assign, ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if not (inits[node.lineno] and isinstance(node.value, AST_CONTAINERS)
                    and any(isinstance(t, ast.Attribute) for t in targets)):
                continue
            elements = _ast_elements(node.value)
            if elements and all(_ast_may_build_layer(e, classes) for e in elements):
                return True
            if not elements and isinstance(node.value, ast.List) \
                    and any(isinstance(t, ast.Attribute) and _ast_fills(index, classes, t.attr) for t in targets):
                return True
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1:
            self._check(node.targets[0].target, node.value, annotated=False)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._check(node.target, node.value, annotated=True)

    def _check(self, target: cst.BaseExpression, value: cst.BaseExpression, annotated: bool) -> None:
        if not isinstance(value, container_types()) or not isinstance(target, cst.Attribute):
            return
        function, cls = self.ctx.enclosing_function(), self.ctx.enclosing_class()
        if function is None or cls is None or function.name.value != "__init__" \
                or cls.name.value not in self.ctx.modules.classes:
            return
        scopes = self.ctx.enclosing(cst.ClassDef, cst.FunctionDef)
        if len(scopes) < 2 or scopes[0] is not function or scopes[1] is not cls:
            return  # a nested function or class
        params = function_parameters(function)
        if not params or dotted_name(target.value) != params[0]:
            return
        attribute = target.attr.value
        uses = self.ctx.modules.attribute_uses(cls, attribute)
        if uses.handed or len(uses.assigned) != 1:
            return  # registered or kept elsewhere, or reassigned: nothing provable
        layers = self._layers(value, uses.added)
        if layers is None or all(self.ctx.modules.stateless(layer) for layer in layers):
            return
        container = "ModuleDict" if isinstance(value, (cst.Dict, cst.DictComp)) else "ModuleList"
        kind = "dict" if container == "ModuleDict" else "list"
        written = f"{params[0]}.{attribute}"
        self.report(value, f"`{written}` keeps layers in a plain {kind}, so they are not submodules: "
                           "`parameters()` (and the optimizer), `.to()`, `.eval()` and `state_dict()` never see "
                           f"them; make it an `nn.{container}`",
                    None if uses.other or annotated else self._fix(function, value, container))

    def _layers(self, value: cst.BaseExpression, added: list[cst.BaseExpression | None]) -> list[str] | None:
        """The classes of the layers the container holds (with those added later), or None unless
        every element is provably a new module."""
        modules = self.ctx.modules
        if isinstance(value, cst.List):
            elements = [e.value if isinstance(e, cst.Element) else None for e in value.elements]
            if len(elements) == 1 and not added:
                return None  # one helper module kept out of parameters() on purpose
        elif isinstance(value, cst.Dict):
            elements = [e.value if isinstance(e, cst.DictElement) else None for e in value.elements]
            if added:
                return None
        elif isinstance(value, cst.ListComp):
            elements = [value.elt]
        else:
            elements = [value.value]
        classes = [modules.constructed_class(e) if e is not None else None for e in (*elements, *added)]
        if not classes or None in classes:
            return None
        return classes

    def _fix(self, function: cst.FunctionDef, value: cst.BaseExpression, container: str):
        if not self._after_super_init(function) or isinstance(value, cst.DictComp) \
                or isinstance(value, cst.Dict) and not all(_module_dict_key(e) for e in value.elements):
            return None
        reference = self._reference(container)
        fix = self.fix_builder(f"Wrap the layers in `{container}`")
        if reference is None:
            reference = fix.ensure_import("torch.nn", container)
            if reference is None:
                return None
        if isinstance(value, cst.List) and not value.elements:
            return fix.replace(value, f"{reference}()").build()
        return fix.add(insert_before(value, f"{reference}("), insert_after(value, ")")).build()

    def _reference(self, container: str) -> str | None:
        """How the file can name ``torch.nn.<container>`` here without a new import."""
        for module, name, suffix in (("torch.nn", None, f".{container}"), ("torch", "nn", f".{container}"),
                                     ("torch.nn", container, ""), ("torch", None, f".nn.{container}")):
            local = imported_name(self.ctx, module, name)
            if local is not None and self.ctx.bindings.count(local.split(".")[0]) == 1:
                return local + suffix
        return None

    def _after_super_init(self, function: cst.FunctionDef) -> bool:
        """Does ``__init__`` call ``super().__init__(...)`` (or a base's ``__init__``) before the
        statement the walk is at?"""
        statements = list(function.body.body)
        here = next((i for i, s in enumerate(statements) if contains(s, self.ctx.node)), len(statements))
        return any(_calls_init(s) for s in statements[:here])


def _calls_init(statement: cst.CSTNode) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    return any(isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)
               and isinstance(small.value.func, cst.Attribute) and small.value.func.attr.value == "__init__"
               for small in statement.body)


def _module_dict_key(element: cst.BaseDictElement) -> bool:
    """A key that ``ModuleDict`` accepts: a plain string, not empty, without a dot, not an
    attribute of the module (``"train"``, ``"to"``, ``"_modules"``), which raise there."""
    key = string_value(element.key) if isinstance(element, cst.DictElement) else None
    return bool(key) and "." not in key and not key.startswith("_") and key not in MODULE_ATTRIBUTES
