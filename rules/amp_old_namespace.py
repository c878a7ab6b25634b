"""
## What it does

Finds the device-specific AMP spellings that `torch.amp` replaced: `torch.cuda.amp.autocast(...)`,
`torch.cpu.amp.autocast(...)`, `torch.cuda.amp.GradScaler(...)`, `torch.cpu.amp.GradScaler(...)`
and the `torch.cuda.amp.custom_fwd`/`custom_bwd` decorators, however they are imported
(`from torch.cuda.amp import autocast, GradScaler`, `from torch.cuda import amp`), as calls, as
context managers (`with autocast():`) and as decorators (`@torch.cuda.amp.autocast()`,
`@custom_fwd`). The table of old names and replacements is data: `rules/amp_migrations.yaml`.

## Why is it wrong

Since torch 2.4 every one of these calls emits a `FutureWarning` ("`torch.cuda.amp.autocast(args...)`
is deprecated. Please use `torch.amp.autocast('cuda', args...)` instead."), once per call site, and
the old names are slated for removal. The replacements are the same classes: `torch.cuda.amp.autocast`
is a thin subclass of `torch.amp.autocast` that passes `"cuda"` as the device type.

The migration is not a rename, because the signatures differ: the new ones take the device type
first. `torch.cuda.amp.autocast(False)` renamed to `torch.amp.autocast(False)` passes `False` as
the device type and fails; `torch.cuda.amp.GradScaler(2.0**16)` renamed to
`torch.amp.GradScaler(2.0**16)` passes the scale as the device. The fix therefore moves every
positional argument to its keyword.

## Example

```python
from torch.cuda.amp import GradScaler, autocast

scaler = GradScaler(2.0**14)
with autocast(False):
    ...

class Square(torch.autograd.Function):
    @staticmethod
    @torch.cuda.amp.custom_fwd
    def forward(ctx, x):
        ...
```

## Use instead

```python
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**14)
with torch.amp.autocast("cuda", enabled=False):
    ...

class Square(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, x):
        ...
```

## Fix safety

Safe: the new call builds the same object with the same arguments (the old classes are
subclasses that only fill in the device type; their defaults, `float16` on CUDA and `bfloat16`
on the CPU for autocast, are also the defaults of the device-generic ones). The call sites are
rewritten and the `from torch.cuda.amp import ...` line is left in place, so no name is ever
left undefined; `import torch` is added above it when the file has no `torch` to refer to.

The fix is withheld, and the finding says what to write, when a call passes `*args` (which
parameter each value binds cannot be known), when more positional arguments are passed than the
old signature takes, and when the imported name is also bound to something else in the file
(`autocast = nullcontext` in some branch), where rewriting the call would change which object it
calls. It is marked unsafe when the import sits in a `try` block that catches `ImportError` (a
fallback for other torch versions). References that are not calls (`partial(torch.cuda.amp.autocast,
dtype=...)`) are reported without a fix.

## Versions

A replacement must exist in the target torch, or the spelling is not reported: `torch.amp.GradScaler`
since 2.3, `torch.amp.custom_fwd`/`custom_bwd` with `device_type` since 2.4, and
`torch.amp.autocast` (written `torch.autocast`, the same class, for targets 1.10 to 1.13). The
deprecation warnings start in torch 2.4.

## References

- https://pytorch.org/docs/stable/amp.html
- https://pytorch.org/docs/stable/amp.html#torch.autocast
- https://pytorch.org/docs/stable/amp.html#gradient-scaling
- https://github.com/pytorch/pytorch/issues/126527
"""

from __future__ import annotations

import ast
from functools import cache

from torchlint.analysis.compat import ast_surely_in_fallback
from torchlint.analysis.syntax import ast_dotted_name, dotted_name, positional_args
from torchlint.fixes import as_keyword, import_reference, insert_arg, keyword_argument
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex
from torchlint.rules._amp import amp_migration, amp_replacement, old_last_parts


# Where a bare reference to an old spelling is about to be called later (`partial(autocast, ...)`,
# `ctx = autocast if amp else nullcontext`); other places (annotations, isinstance, lists compared
# by identity) are left alone.
@cache
def reference_parent_types() -> tuple[type, ...]:
    return (cst.Arg, cst.Assign, cst.AnnAssign, cst.IfExp, cst.Return)


TYPE_CHECKS = frozenset({"isinstance", "issubclass"})


def _ast_reported_places(index: SyntaxIndex) -> tuple[set[int], set[int], set[int]]:
    """The precheck twin of where the walk reports an old spelling: the ids of the expressions
    that are called (``visit_Call``), bare decorators (``visit_Decorator``), and references in
    ``reference_parent_types()`` (an argument other than one of ``isinstance``/``issubclass``, a class's
    base, an assigned or returned value, a part of a conditional expression: ``_reference``)."""
    def compute() -> tuple[set[int], set[int], set[int]]:
        called, decorators, references = set(), set(), set()
        for call in index.nodes(ast.Call):
            called.add(id(call.func))
            if ast_dotted_name(call.func) not in TYPE_CHECKS:
                arguments = [arg.value if type(arg) is ast.Starred else arg for arg in call.args]
                references.update(id(arg) for arg in (*arguments, *(k.value for k in call.keywords)))
        for definition in index.nodes(ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            decorators.update(id(d) for d in definition.decorator_list if type(d) is not ast.Call)
        for definition in index.nodes(ast.ClassDef):
            bases = [base.value if type(base) is ast.Starred else base for base in definition.bases]
            references.update(id(base) for base in (*bases, *(k.value for k in definition.keywords)))
        references.update(id(node.value) for node in index.nodes(ast.Assign, ast.AnnAssign, ast.Return))
        references.update(id(part) for node in index.nodes(ast.IfExp) for part in (node.test, node.body, node.orelse))
        return called, decorators, references
    return index.memo("amp-reported-places", compute)


class AmpOldNamespace(Rule):
    code = "TL701"
    name = "amp-old-namespace"
    kind = "deprecation"
    summary = "`torch.cuda.amp.*`/`torch.cpu.amp.*` instead of `torch.amp.*` with the device type first"
    fix_applicability = "safe"
    triggers = ("cuda.amp", "cpu.amp", "import amp")
    torch_versions = ">=1.10"

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a name or attribute that the imports make an old spelling (every finding is one), where
        # the walk reports it: called, a decorator, or a reference about to be called
        last = index.names(old_last_parts())
        found = [(node, row) for node in (*(n for n in index.nodes(ast.Attribute) if n.attr in last),
                                          *(n for n in index.nodes(ast.Name) if n.id in last))
                 for name in index.qualified_names(node) if (row := amp_migration(name)) is not None]
        if not found:
            return False
        called, decorators, references = _ast_reported_places(index)
        reported = [node for node, row in found if id(node) in called or id(node) in references
                    or id(node) in decorators and row.get("bare_decorator")]
        return any(not ast_surely_in_fallback(index, node) for node in reported)  # as _migration asks

    def __init__(self, ctx):
        super().__init__(ctx)
        self.guarded_imports: set[str] = set()  # local names imported inside `try: ... except ImportError`

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if not isinstance(node.names, cst.ImportStar) and self.ctx.compat.in_import_guard():
            self.guarded_imports |= {dotted_name(a.asname.name if a.asname else a.name) for a in node.names}

    def visit_Import(self, node: cst.Import) -> None:
        if self.ctx.compat.in_import_guard():
            self.guarded_imports |= {dotted_name(a.asname.name if a.asname else a.name).split(".")[0]
                                     for a in node.names}

    # calls, and decorators written without a call ----------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        row, new = self._migration(node.func)
        if row is None:
            return
        shown = f"{self._old(node.func)}(...)"
        arguments = f'"{row["device"]}", ...' if row["device_as"] == "positional" else \
            f'..., {row["device_as"]}="{row["device"]}"'
        message = f"`{shown}` is the old spelling: use `{new}({arguments})`"
        if row["device_as"] == "positional" and positional_args(node):
            message += ", passing the other arguments by keyword"
        self.report(node, message, self._fix(node, row, new))

    def visit_Decorator(self, node: cst.Decorator) -> None:
        if isinstance(node.decorator, cst.Call):
            return
        row, new = self._migration(node.decorator)
        if row is None or not row.get("bare_decorator"):
            return
        written = f'{new}({row["device_as"]}="{row["device"]}")'
        fix = None
        spelling = self._spelling(node.decorator, new)
        if spelling is not None:
            callee, edits, applicability = spelling
            edits.append(self.replace(node.decorator, f'{callee}({row["device_as"]}="{row["device"]}")'))
            fix = self.fix(f"Use `{new}`", *edits, applicability=applicability)
        self.report(node.decorator, f"`@{self._old(node.decorator)}` is the old spelling: use `@{written}`", fix)

    # references that will be called elsewhere -------------------------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._reference(node)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.ctx.bindings.imports.aliases:
            self._reference(node)

    def _reference(self, node: cst.BaseExpression) -> None:
        parent = self.ctx.parent
        if not isinstance(parent, reference_parent_types()) or getattr(parent, "keyword", None) is node:
            return
        if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is not node:
            return
        row, new = self._migration(node)
        if row is None:
            return
        calls = self.ctx.enclosing(cst.Call)
        if isinstance(parent, cst.Arg) and calls and dotted_name(calls[0].func) in TYPE_CHECKS:
            return
        prefix = f'"{row["device"]}"' if row["device_as"] == "positional" else f'{row["device_as"]}="{row["device"]}"'
        self.report(node, f"`{self._old(node)}` is the old spelling: call `{new}` with {prefix} instead "
                          f"(`functools.partial({new}, {prefix})` where a callable is passed)")

    # helpers -------------------------------------------------------------------------------------
    def _migration(self, expr: cst.BaseExpression) -> tuple[dict | None, str | None]:
        row = amp_migration(self.ctx.qualified_name(expr))
        if row is None or self.ctx.compat.in_fallback():
            return None, None
        new = amp_replacement(row, self.ctx.target_torch)
        return (row, new) if new is not None else (None, None)

    def _old(self, expr: cst.BaseExpression) -> str:
        return amp_migration(self.ctx.qualified_name(expr))["old"][0]

    def _spelling(self, expr: cst.BaseExpression, new: str) -> tuple[str, list, str] | None:
        """How to write ``new`` where ``expr`` was written, the edits that make that name exist,
        and how safe the change is; None when it cannot be done safely."""
        head = dotted_name(expr).split(".")[0]
        bindings = self.ctx.bindings
        if bindings.count(head) > 1:
            return None  # the name is bound to something else somewhere: which one runs is unknown
        applicability = "unsafe" if head in self.guarded_imports else "safe"
        if bindings.imports.aliases.get(head) == "torch":  # written through the torch module itself
            return head + new[len("torch"):], [], applicability
        reference = import_reference(self.ctx, "torch")
        if reference is not None:
            local, edit = reference
            return local + new[len("torch"):], [edit] if edit else [], applicability
        if bindings.count("torch") == 0:
            statement = self._import_statement(head)
            if statement is not None:  # `from torch.cuda.amp import autocast` with no `import torch`
                return new, [self.insert_lines_before(statement, "import torch\n")], applicability
        return None

    def _import_statement(self, local: str) -> cst.SimpleStatementLine | None:
        """The module-level import line that binds ``local``."""
        for statement in self.ctx.module.body:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
                        for alias in small.names:
                            bound = alias.asname.name if alias.asname else alias.name
                            if dotted_name(bound).split(".")[0] == local:
                                return statement
        return None

    def _fix(self, node: cst.Call, row: dict, new: str):
        if any(a.star == "*" for a in node.args):
            return None  # which parameter each value binds is unknown
        positional = positional_args(node)
        if len(positional) > len(row["parameters"]):
            return None
        spelling = self._spelling(node.func, new)
        if spelling is None:
            return None
        callee, edits, applicability = spelling
        call = node.with_changes(func=cst.parse_expression(callee))
        device = cst.SimpleString(f'"{row["device"]}"')
        if row["device_as"] == "positional":
            names = dict(zip((id(a) for a in positional), row["parameters"]))
            call = call.with_changes(args=[as_keyword(a, names[id(a)]) if id(a) in names else a for a in call.args])
            call = insert_arg(call, 0, cst.Arg(device))
        else:
            call = insert_arg(call, len(positional), keyword_argument(row["device_as"], device))
        edits.append(self.replace(node, call))
        return self.fix(f"Use `{new}`", *edits, applicability=applicability)
