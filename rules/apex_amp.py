"""
## What it does

Finds NVIDIA apex's mixed precision (`from apex import amp`): `amp.initialize(...)`,
`with amp.scale_loss(loss, optimizer) as scaled_loss: scaled_loss.backward()`,
`amp.master_params(optimizer)`, `amp.state_dict()` and the rest of `apex.amp`, including its
function decorators (`@amp.float_function`, `@amp.half_function`), and apex's older mixed
precision, `apex.fp16_utils` (`FP16_Optimizer`, `network_to_half`, the loss scalers), which
apex's own documentation calls deprecated in favour of `amp`. A file that imports `apex.amp` and
never calls it (an optional import whose uses live elsewhere) gets one finding, on the import.
apex's other parts (fused optimizers and norms, `apex.parallel`) are not mixed precision and are
left alone. What replaces each call is data: the `apex` table of `rules/amp_migrations.yaml`.

## Why is it wrong

apex's `amp` is deprecated by its authors ("Use PyTorch AMP"), who point to `torch.amp`, built
into PyTorch since 1.6. It needs apex compiled against the installed CUDA and torch, patches torch
functions at run time, and its `O1` level is what `torch.autocast` does natively (and faster,
without monkey-patching). Its `O2`/`O3` levels cast the model itself to float16 (with float32
master weights in `O2`), which `torch.amp` deliberately does not do.

## Example

```python
from apex import amp

model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
for x, y in loader:
    loss = criterion(model(x), y)
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
    optimizer.step()
```

## Use instead

```python
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.amp.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_([p for group in optimizer.param_groups for p in group["params"]], 1.0)
    scaler.step(optimizer)
    scaler.update()
```

## Fix safety

Unsafe: autocast chooses float16 for a different set of operations than apex's patched functions,
so the numbers differ (the training should not). The fix is one edit of the whole file, offered
on the `amp.initialize` call, and only for `opt_level="O1"`, the one level with an equivalent.
It replaces `amp.initialize` with a `GradScaler` (keeping any renaming of the model and
optimizer), each `with amp.scale_loss(loss, optimizer) as s: s.backward()` with
`scaler.scale(loss).backward()`, moves the assignment lines that compute the loss right before it
under `torch.amp.autocast("cuda", dtype=torch.float16)`, turns the following `optimizer.step()`
into `scaler.step(optimizer)` and `scaler.update()`, puts `scaler.unscale_(optimizer)` before
gradient clipping and clips the optimizer's own parameters instead of `amp.master_params(optimizer)`,
and removes `from apex import amp`. It is withheld, and each finding says what to write, for
`O2`/`O3` (no equivalent: float16 weights and master weights are not something autocast does),
for options other than `opt_level`, `loss_scale="dynamic"` and `verbosity`, when `amp` is used for
anything else (`amp.state_dict()` in checkpoints needs `scaler.state_dict()` and a new checkpoint
format), when the import is in a `try` block (an optional dependency with a fallback), when the
loop does not have the shape above, or when `amp.initialize` and the loop are in different
functions. The decorators, `apex.fp16_utils` and a lone import are reported without a fix: their
replacements depend on code the rule cannot rewrite (an autograd Function's `backward`, the
`.half()` model, the other file that uses the import).

## Versions

Reported for every torch version; the fix needs a target torch from 1.10 (`torch.autocast`) and
writes `torch.amp.GradScaler("cuda")` from torch 2.3, `torch.cuda.amp.GradScaler()` before.

## References

- https://github.com/NVIDIA/apex#amp-automatic-mixed-precision
- https://nvidia.github.io/apex/amp.html
- https://nvidia.github.io/apex/amp.html#transition-guide-for-old-api-users (`FP16_Optimizer` and
  the old `amp.init` API, deprecated)
- https://pytorch.org/docs/stable/notes/amp_examples.html
- https://pytorch.org/docs/stable/notes/amp_examples.html#functions-that-need-a-particular-dtype
  (`torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)` and `custom_bwd`, the
  replacement of `amp.float_function` on an autograd Function)
- https://pytorch.org/docs/stable/amp.html
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cache

from torchlint.analysis.syntax import (ast_dotted_name, dotted_name, find_argument, find_keyword, positional_args,
                                       root_names, string_value)
from torchlint.analysis.walk import Visitor, visit
from torchlint.fixes import NodeEdit, block_indentation, imported_name, unused_name
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex, data_table
from torchlint.rules._amp import amp_constructor, mixed_precision_step

ALLOWED_OPTIONS = {"opt_level", "verbosity", "loss_scale"}


@cache
def _apex() -> dict:
    """The apex part of the AMP table (read on first use: YAML costs start-up)."""
    return data_table("amp_migrations.yaml")["apex"]


@cache
def _fp16_utils() -> dict[str, str]:
    """apex's older mixed precision: qualified name -> what to write instead."""
    return {name: row["instead"] for row in _apex()["fp16_utils"] for name in row["names"]}


def mixed_precision(name: str) -> bool:
    """Does a qualified name reach apex's mixed precision (`apex.amp` and what is in it, the
    classes and functions of apex's older `fp16_utils`)? apex's fused optimizers and norms do not."""
    return name == "apex.amp" or name.startswith("apex.amp.") or name in _fp16_utils()


def _ast_imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The qualified names an import statement brings (not relative ones, not `*`)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level or not node.module:
        return []
    return [f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*"]


@dataclass
class _Site:
    """One `with amp.scale_loss(loss, optimizer) as s: s.backward()` and its rewrite."""

    function: cst.CSTNode | None
    edits: tuple[NodeEdit, ...] | None
    clip_calls: frozenset[int] = frozenset()  # ids of the master_params calls the rewrite replaces


@dataclass
class _Initialize:
    call: cst.Call
    function: cst.CSTNode | None
    opt_level: str | None
    edit: NodeEdit | None
    problems: list[str] = field(default_factory=list)


class ApexAmp(Rule):
    code = "TL702"
    name = "apex-amp"
    kind = "migration"
    summary = "NVIDIA apex `amp` instead of `torch.amp` (autocast and GradScaler)"
    fix_applicability = "unsafe"
    fix_conflicts = ("TL302",)  # a GradScaler beside the fused SGD that fix writes: see mixed_precision_step
    triggers = ("apex",)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # an import of apex's mixed precision (reported itself when nothing else is), or a call or a
        # bare decorator of what an import of apex may name so (`apex.amp.scale_loss(...)` after
        # `import apex`): what visit_Call, visit_Decorator and leave_Module report
        heads = index.imported_from("apex")
        if not heads:
            return False
        if any(mixed_precision(name) for node in index.nodes(ast.Import, ast.ImportFrom) for name in _ast_imported(node)):
            return True
        used = [call.func for call in index.nodes(ast.Call)]
        used += [decorator for node in index.nodes(ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
                 for decorator in node.decorator_list]
        return any((ast_dotted_name(expr) or "").partition(".")[0] in heads
                   and any(mixed_precision(name) for name in index.qualified_names(expr)) for expr in used)

    def __init__(self, ctx):
        super().__init__(ctx)
        self.calls: list[tuple[cst.Call, str]] = []
        self.initialize: list[_Initialize] = []
        self.sites: list[_Site] = []
        self.master_params: list[cst.Call] = []
        self.other_uses = False
        self.import_statement: cst.SimpleStatementLine | None = None
        self.import_guarded = False
        self.first_import: cst.CSTNode | None = None  # the first import of apex's mixed precision
        self.scaler = None
        self.torch = None
        self.target_ok = ctx.torch_at_least("1.10")

    # the import ---------------------------------------------------------------------------------
    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = dotted_name(node.module)
        if self.first_import is None and any(mixed_precision(f"{module}.{dotted_name(a.name)}") for a in node.names):
            self.first_import = node
        if module == "apex" and any(dotted_name(a.name) == "amp" for a in node.names):
            statement = self.ctx.parent
            whole = isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
                and len(node.names) == 1 and node.names[0].asname is None
            self.import_statement = statement if whole and self.ctx.ancestors[-3] is self.ctx.module else None
            self.import_guarded = self.ctx.compat.in_import_guard()

    def visit_Import(self, node: cst.Import) -> None:
        if any((dotted_name(a.name) or "").startswith("apex") for a in node.names):
            self.other_uses = True  # `import apex`: other parts of apex may be in use; leave the import to the user
        if self.first_import is None and any(mixed_precision(dotted_name(a.name) or "") for a in node.names):
            self.first_import = node

    # apex.amp calls ---------------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func) or ""
        if name in _fp16_utils():
            self.calls.append((node, name))
            self.other_uses = True
            return
        if not name.startswith("apex.amp."):
            return
        self.calls.append((node, name))
        if name == "apex.amp.initialize":
            self.initialize.append(self._initialize(node))
        elif name == "apex.amp.scale_loss":
            self.sites.append(self._scale_loss(node))
        elif name == "apex.amp.master_params":
            self.master_params.append(node)
        else:
            self.other_uses = True

    def visit_Decorator(self, node: cst.Decorator) -> None:
        # a bare decorator (`@amp.float_function`) is a call of it with the function
        if isinstance(node.decorator, cst.Call):
            return  # `@amp.half_function(...)`-style calls are visit_Call's
        name = self.ctx.qualified_name(node.decorator) or ""
        if name.startswith("apex.amp.") or name in _fp16_utils():
            self.calls.append((node.decorator, name))
            self.other_uses = True

    def visit_Attribute(self, node: cst.Attribute) -> None:
        # `amp` used other than by calling it (`amp._amp_state`, `handle = amp.init(...)`)
        parent = self.ctx.parent
        if not (isinstance(parent, cst.Call) and parent.func is node) and \
                (self.ctx.qualified_name(node) or "").startswith("apex.amp.") and \
                not isinstance(parent, cst.Attribute):
            self.other_uses = True

    def _names(self) -> tuple[str, str] | None:
        """(torch's local name, the scaler's name), once per file."""
        if self.scaler is None:
            self.torch = imported_name(self.ctx, "torch") or ""
            self.scaler = unused_name(self.ctx, "scaler", "grad_scaler", "amp_scaler") or ""
        return (self.torch, self.scaler) if self.torch and self.scaler else None

    def _initialize(self, node: cst.Call) -> _Initialize:
        level = find_keyword(node, "opt_level")
        opt_level = string_value(level.value) if level is not None else None
        found = _Initialize(node, self.ctx.enclosing_function(), opt_level, None)
        scale = find_keyword(node, "loss_scale")
        if any(a.star for a in node.args) or any(a.keyword is not None and a.keyword.value not in ALLOWED_OPTIONS
                                                 for a in node.args):
            found.problems.append("it passes options that autocast and GradScaler do not have")
        if scale is not None and string_value(scale.value) != "dynamic":
            found.problems.append("a fixed `loss_scale` needs `GradScaler(init_scale=..., growth_interval=...)` "
                                  "chosen by hand")
        names = self._names()
        statement = self.ctx.parent if isinstance(self.ctx.parent, cst.Assign) else None
        positional = positional_args(node)
        if statement is None or len(statement.targets) != 1 or not isinstance(statement.targets[0].target, cst.Tuple) \
                or len(positional) != 2 or names is None or not self.target_ok:
            found.problems.append("its result is not unpacked into a model and an optimizer")
            return found
        targets = [dotted_name(e.value) for e in statement.targets[0].target.elements]
        values = [self.ctx.code_for(a.value) for a in positional]
        if len(targets) != 2 or None in targets:
            found.problems.append("its result is not unpacked into a model and an optimizer")
            return found
        torch, scaler = names
        create = f"{scaler} = {amp_constructor('torch.cuda.amp.GradScaler', self.ctx.target_torch, torch)}"
        if targets != values:
            block = self.ctx.ancestors[-4]
            indent = block_indentation(self.ctx, block) if isinstance(block, cst.IndentedBlock) else ""
            create = f"{', '.join(targets)} = {', '.join(values)}\n{indent}{create}"
        found.edit = self.replace(statement, create)
        return found

    def _scale_loss(self, node: cst.Call) -> _Site:
        site = _Site(self.ctx.enclosing_function(), None)
        names = self._names()
        loss, optimizer = find_argument(node, "loss", 0), find_argument(node, "optimizers", 1)
        with_item, with_statement = self.ctx.parent, self.ctx.ancestors[-3] if len(self.ctx.ancestors) > 2 else None
        if names is None or not self.target_ok or loss is None or optimizer is None or len(node.args) != 2 \
                or not isinstance(with_item, cst.WithItem) or not isinstance(with_statement, cst.With) \
                or len(with_statement.items) != 1 or with_item.asname is None:
            return site
        scaled = dotted_name(with_item.asname.name)
        body = with_statement.body.body if isinstance(with_statement.body, cst.IndentedBlock) else ()
        call = body[0].body[0].value if len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) \
            and len(body[0].body) == 1 and isinstance(body[0].body[0], cst.Expr) else None
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
                and call.func.attr.value == "backward" and dotted_name(call.func.value) == scaled):
            return site
        block = self.ctx.ancestors[-4]
        index = next((i for i, s in enumerate(block.body) if s is with_statement), None) \
            if isinstance(block, cst.IndentedBlock) else None
        if index is None:
            return site
        torch, scaler = names
        autocast = amp_constructor("torch.cuda.amp.autocast", self.ctx.target_torch, torch, f"dtype={torch}.float16")
        step = mixed_precision_step(self.ctx, block, index, root_names(loss.value), scaler, autocast,
                                             optimizer=self.ctx.code_for(optimizer.value))
        if step is None:
            return site
        arguments = self.ctx.code_for(call)[len(self.ctx.code_for(call.func)):]
        edits = [*step.edits,
                 self.replace(with_statement, f"{scaler}.scale({self.ctx.code_for(loss.value)}).backward{arguments}")]
        replaced = set()
        if step.clip is not None:
            for master in _master_params_calls(step.clip, self.ctx):
                if len(master.args) != 1:
                    return site
                held = self.ctx.code_for(master.args[0].value)
                edits.append(self.replace(master, f'[p for group in {held}.param_groups for p in group["params"]]'))
                replaced.add(id(master))
        site.edits = tuple(edits)
        site.clip_calls = frozenset(replaced)
        return site

    # report, with the one fix for the whole file ----------------------------------------------------
    def leave_Module(self, original_node: cst.Module) -> None:
        fix = self._fix()
        levels = _apex()["fixable_opt_levels"]
        if not self.calls and self.first_import is not None:
            # imported and never called here: the import is the one place to say it, once
            self.report(self.first_import, "apex's mixed precision is deprecated in favour of torch.amp: move what "
                        "this import is for to `torch.autocast` and `torch.amp.GradScaler`, then drop it")
        for node, name in self.calls:
            entry = _apex()["calls"].get(name)
            instead = entry["instead"] if entry else _fp16_utils().get(name, "the `torch.amp` equivalent (autocast and "
                                                                              "GradScaler)")
            message = f"apex `{name[5:]}` is deprecated in favour of torch.amp: {instead}"
            this_fix = None
            if name == "apex.amp.initialize":
                found = next(i for i in self.initialize if i.call is node)
                if found.opt_level is not None and found.opt_level not in levels:
                    message = (f"apex `amp.initialize(..., opt_level=\"{found.opt_level}\")` casts the model itself to "
                               "float16, which torch.amp does not do; migrate to autocast: " + instead +
                               ", then check the accuracy, since the numerics change")
                this_fix = fix
            self.report(node, message, this_fix)

    def _fix(self):
        if len(self.initialize) != 1 or not self.sites or self.other_uses or self.import_guarded \
                or self.import_statement is None:
            return None
        initialize = self.initialize[0]
        if initialize.problems or initialize.edit is None \
                or initialize.opt_level not in _apex()["fixable_opt_levels"]:
            return None
        handled = set()
        # the import's whole line goes: the statement, then its comment and newline
        edits = [initialize.edit, self.replace(self.import_statement, ""),
                 self.replace(self.import_statement.trailing_whitespace, "")]
        for site in self.sites:
            if site.edits is None or (initialize.function is not None and site.function is not initialize.function):
                return None
            edits += site.edits
            handled |= site.clip_calls
        if any(id(call) not in handled for call in self.master_params):
            return None
        return self.fix("Use torch.amp autocast and GradScaler instead of apex", *edits)


def _master_params_calls(statement: cst.CSTNode, ctx) -> list[cst.Call]:
    found = []

    class Finder(Visitor):
        def visit_Call(self, node: cst.Call) -> None:
            if ctx.qualified_name(node.func) == "apex.amp.master_params":
                found.append(node)

    visit(statement, Finder())
    return found
