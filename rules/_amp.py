"""What the precision and AMP rules share (TL701 amp-old-namespace, TL702 apex-amp, TL703 no-amp,
TL704 clip-without-unscale): the table of old AMP spellings and their replacements, and the
rewrite of one float32 training step into a mixed-precision one."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from torchlint.analysis.syntax import bare_call, dotted_name, method_call, names_in, target_names
from torchlint.analysis.walk import Visitor, visit
from torchlint.fixes import NodeEdit, block_indentation, statement_code
from torchlint.lazy import libcst as cst
from torchlint.rule import RuleContext, data_table
from torchlint.analysis.versions import parse_version

CLIP_GRAD_FUNCTIONS = frozenset(
    f"torch.nn.utils{module}.{name}" for module in ("", ".clip_grad")
    for name in ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"))
OPTIMIZER_NAME = re.compile(r"^(opt|optim|optimizer|optimiser)(_\w+)?$|_(opt|optim|optimizer|optimiser)$")


# --- the table of old spellings (rules/amp_migrations.yaml) -----------------------------------------------

def amp_migration(qualified: str | None) -> dict | None:
    """The row of rules/amp_migrations.yaml for an old AMP spelling (``torch.cuda.amp.autocast``)."""
    if qualified is None or ".amp." not in qualified:
        return None
    for row in data_table("amp_migrations.yaml")["old_namespace"]:
        if qualified in row["old"]:
            return row
    return None


@lru_cache(maxsize=1)
def old_last_parts() -> frozenset[str]:
    """The last parts of the old AMP spellings (``autocast``, ``GradScaler``): what a precheck
    looks for before asking ``amp_migration``."""
    return frozenset(old.rsplit(".", 1)[-1] for row in data_table("amp_migrations.yaml")["old_namespace"]
                     for old in row["old"])


def amp_replacement(row: dict, target: tuple[int, ...]) -> str | None:
    """The qualified name that replaces an old AMP spelling on the target torch: ``new``, or the
    same object under its older name (``torch.autocast`` before ``torch.amp.autocast``); None
    when the target torch has neither."""
    if target >= parse_version(row["since"]):
        return row["new"]
    fallback = row.get("fallback")
    if fallback and target >= parse_version(fallback["since"]):
        return fallback["name"]
    return None


def amp_constructor(old: str, target: tuple[int, ...], torch_name: str, keywords: str = "") -> str | None:
    """Source that makes what the old spelling ``old`` made, for the target torch, with the given
    keyword arguments: ``torch.amp.GradScaler("cuda")`` on torch 2.3+, ``torch.cuda.amp.GradScaler()``
    before; ``torch.amp.autocast("cuda", dtype=torch.float16)``."""
    row = amp_migration(old)
    new = amp_replacement(row, target)
    if new is None:
        name, arguments = old, keywords
    elif row["device_as"] == "positional":
        name, arguments = new, ", ".join(filter(None, [f'"{row["device"]}"', keywords]))
    else:
        name, arguments = new, ", ".join(filter(None, [f'{row["device_as"]}="{row["device"]}"', keywords]))
    return f"{torch_name}{name[len('torch'):]}({arguments})"


# --- one training step, rewritten into mixed precision ----------------------------------------------------

@dataclass(frozen=True)
class MixedPrecisionStep:
    """What ``mixed_precision_step`` found and the edits it proposes."""

    edits: tuple[NodeEdit, ...]
    optimizer: str  # the code of the optimizer that the step statement steps
    clip: cst.SimpleStatementLine | None  # the gradient-clipping statement between backward and step


class _StepReader(Visitor):
    """Between backward and step: does the code read ``.grad`` (itself, or perhaps in a function
    it hands the optimizer or the parameters to) or clip gradients?"""

    def __init__(self, ctx: RuleContext):
        self.ctx = ctx
        self.reads_grad = False
        self.clips = False

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "grad":
            self.reads_grad = True

    def visit_Call(self, node: cst.Call) -> bool:
        if self.ctx.qualified_name(node.func) in CLIP_GRAD_FUNCTIONS:
            self.clips = True
            return False  # what it clips (`amp.master_params(optimizer)`) is its business
        if any(is_optimizer(self.ctx, arg.value) or method_call(arg.value, "parameters", "named_parameters")
                 for arg in node.args):
            # a function handed the optimizer or the parameters may read or change their `.grad`
            # (the SSD tutorial's `clip_gradient(optimizer, grad_clip)` clamps them in place)
            self.reads_grad = True
        return True


def is_optimizer(ctx: RuleContext, expr: cst.BaseExpression) -> bool:
    """A name bound to a ``torch.optim`` optimizer in this file, or named like one
    (``optimizer``, ``opt``, ``g_optim``); never a learning-rate scheduler."""
    name = dotted_name(expr)
    if name is None:
        return False
    for value in ctx.bindings.values(name):
        if isinstance(value, cst.Call):
            qualified = ctx.qualified_name(value.func) or ""
            if qualified.startswith("torch.optim.") and ".lr_scheduler." not in qualified:
                return True
    return bool(OPTIMIZER_NAME.search(name.rsplit(".", 1)[-1]))


def statement_targets(statement: cst.CSTNode) -> set[str] | None:
    """Names a simple statement line assigns (``out, aux = model(x)`` -> {out, aux}); None when
    the line is not made only of assignments."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return None
    names: set[str] = set()
    for small in statement.body:
        if isinstance(small, cst.Assign):
            targets = [t.target for t in small.targets]
        elif isinstance(small, (cst.AugAssign, cst.AnnAssign)) and getattr(small, "value", None) is not None:
            targets = [small.target]
        else:
            return None
        for target in targets:
            elements = target.elements if isinstance(target, (cst.Tuple, cst.List)) else [target]
            for element in elements:
                value = element.value if isinstance(element, (cst.Element, cst.StarredElement)) else element
                if isinstance(value, cst.Name):
                    names.add(value.value)
    return names


def computation_run(body: Sequence[cst.CSTNode], end: int, names: set[str]) -> int:
    """The start of the run of assignment lines right before ``body[end]`` that compute ``names``
    (the forward pass and loss before a backward): walking up, each line must assign a name that
    a later line of the run (or ``names``) reads. ``optimizer.zero_grad()`` lines right before
    ``body[end]`` are passed over (the PyTorch examples put it there) and end up inside the run,
    where they are harmless. Returns ``end`` when there is none."""
    needed = set(names)
    start = end
    position = end
    while position > 0:
        statement = body[position - 1]
        call = bare_call(statement)
        if start == end and call is not None and method_call(call, "zero_grad") is not None:
            position -= 1
            continue
        targets = statement_targets(statement)
        if not targets or not targets & needed:
            break
        needed |= names_in(statement)
        position -= 1
        start = position
    return start


class _Calls(Visitor):
    found = False

    def visit_Call(self, node: cst.Call) -> bool:
        self.found = True
        return False


class _Assigned(Visitor):
    """Names a block of statements assigns: ``x = ...``, ``x += ...``, ``for x in ...``."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.names |= target_names(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.names |= target_names(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.names |= target_names(node.target)

    def visit_For(self, node: cst.For) -> None:
        self.names |= target_names(node.target)


def _computes_under_autocast(body: Sequence[cst.CSTNode], start: int, end: int, loss_names: set[str]) -> bool:
    """Does the run ``body[start:end]`` hold the computation that autocast is for? It must call
    something (a forward, a loss function), and no compound statement above it in the block
    (a loop that accumulates a regulariser, an ``if`` that picks one of two terms) may assign a
    name that the lines assigning the loss read: the loss would then be computed partly outside
    the run, and the fix would put little or nothing in float16 (stylegan2-ada's projector: only
    ``loss = dist + reg_loss * weight``). Inputs prepared in a block (``if ...: labels = None``)
    are fine."""
    calls = _Calls()
    for statement in body[start:end]:
        visit(statement, calls)
    if not calls.found:
        return False
    read = set(loss_names).union(*(names_in(statement) for statement in body[start:end]
                                   if (statement_targets(statement) or set()) & loss_names))
    for statement in body[:start]:
        if not isinstance(statement, cst.SimpleStatementLine):
            assigned = _Assigned()
            visit(statement, assigned)
            if assigned.names & read:
                return False
    return True


def _fused_sgd(ctx: RuleContext, optimizer: cst.BaseExpression) -> bool:
    """Is the optimizer built in the file as ``torch.optim.SGD(..., fused=True)``?"""
    name = dotted_name(optimizer)
    return name is not None and any(
        isinstance(value, cst.Call) and ctx.qualified_name(value.func) in ("torch.optim.SGD", "torch.optim.sgd.SGD")
        and any(a.keyword is not None and a.keyword.value == "fused" and dotted_name(a.value) == "True"
                for a in value.args)
        for value in ctx.bindings.values(name))


def mixed_precision_step(ctx: RuleContext, block: cst.IndentedBlock, index: int, loss_names: set[str], scaler: str,
                         autocast: str, optimizer: str | None = None) -> MixedPrecisionStep | None:
    """Edits that turn one float32 training step of ``block`` (an ancestor of the current
    node) into a mixed-precision one. ``block.body[index]`` runs the backward pass (the caller
    rewrites that statement). The assignment lines right before it that compute
    ``loss_names`` move under ``with <autocast>:``; the first ``optimizer.step()`` after it in
    the block becomes ``scaler.step(optimizer)`` and ``scaler.update()``; a gradient-clipping
    statement in between gets ``scaler.unscale_(optimizer)`` before it. None when the step
    does not have that shape: no forward lines right before the backward, no optimizer step
    in the same block (``optimizer`` names it, else any name ``is_optimizer`` accepts), or
    code in between that reads ``.grad`` or clips inside a nested block."""
    body = block.body
    start = computation_run(body, index, loss_names)
    if start == index or not _computes_under_autocast(body, start, index, loss_names):
        return None
    step = None
    for position in range(index + 1, len(body)):
        call = bare_call(body[position])
        target = method_call(call, "step") if call is not None and not call.args else None
        if target is not None and (ctx.code_for(target.value) == optimizer if optimizer is not None
                                   else is_optimizer(ctx, target.value)):
            step = position
            break
    if step is None:
        return None
    clip = None
    for statement in body[index + 1:step]:
        finder = _StepReader(ctx)
        visit(statement, finder)
        if finder.reads_grad or (finder.clips and not isinstance(statement, cst.SimpleStatementLine)):
            return None
        if finder.clips and clip is None:
            clip = statement
    indent = block_indentation(ctx, block)
    unit = ctx.module.default_indent
    step_call = bare_call(body[step])
    optimizer = ctx.code_for(step_call.func.value)
    if _fused_sgd(ctx, step_call.func.value):
        return None  # a fused SGD step advanced its momentum on the steps a GradScaler skips (TL302)
    edits = []
    for position in range(start, index):
        statement = body[position]
        code = statement_code(ctx, statement, block, unit)
        if position == start:
            edits.append(NodeEdit(statement, f"with {autocast}:\n{indent}{unit}{code}"))
        else:
            edits += [NodeEdit(statement, unit, "line_before"), NodeEdit(statement, code)]
    edits.append(NodeEdit(step_call, f"{scaler}.step({optimizer})"))
    edits.append(NodeEdit(body[step], f"{indent}{scaler}.update()\n", "line_after"))
    if clip is not None:
        edits.append(NodeEdit(clip, f"{indent}{scaler}.unscale_({optimizer})\n", "line_before"))
    return MixedPrecisionStep(tuple(edits), optimizer, clip)
