"""What the loss rules share (TL407 softmax-before-cross-entropy, TL408 bce-logits-mismatch): how a
message names the value given to the loss, and the edit that drops an activation applied before
the loss when nothing else uses its output."""

from __future__ import annotations

import re
from functools import cache

from torchlint.analysis.losses import Activation
from torchlint.analysis.syntax import atom_types
from torchlint.fixes import NodeEdit, replace
from torchlint.lazy import libcst as cst
from torchlint.rule import RuleContext


def drop_activation(ctx: RuleContext, found: Activation) -> NodeEdit | None:
    """The edit that puts the activation's input in its place: in the loss's own arguments, or in
    the one assignment the value came through when the name is used nowhere else. None when the
    activation is the model's own (its output has other uses) or the name is used again."""
    if found.source is None:
        return None
    if found.through is not None and not _used_once(ctx, found):
        return None
    code = ctx.code_for(found.source)
    return replace(found.node, code if isinstance(found.source, atom_types()) else f"({code})")


def _used_once(ctx: RuleContext, found: Activation) -> bool:
    """The name the value came through is bound once, in the function of the loss, by the one
    assignment that applies the activation, and read once (by the loss)."""
    if found.assigned is None:
        return False
    function = ctx.enclosing_function() or ctx.module
    names = ctx.bindings.scope(function)
    assigned = names.assigned.get(found.through, [])
    return len(assigned) == 1 and names.references.get(found.through, 0) == 2


@cache
def _no_comments() -> type:
    """A transformer that drops comments (a class built on first use: see torchlint/lazy.py)."""

    class NoComments(cst.CSTTransformer):
        def leave_Comment(self, original_node: cst.Comment, updated_node: cst.Comment) -> cst.RemovalSentinel:
            return cst.RemovalSentinel.REMOVE

    return NoComments


def one_line(node: cst.CSTNode) -> str:
    """The code of a node on one line, as a message quotes it: comments dropped, line breaks and
    indentation inside brackets closed up (``F.softmax(\n    z, dim=1)`` -> ``F.softmax(z, dim=1)``)."""
    code = " ".join(cst.Module([]).code_for_node(node.visit(_no_comments()())).split())
    return re.sub(r"([(\[{]) | ([)\]}])", lambda m: m.group(1) or m.group(2), code)


def given_value(ctx: RuleContext, found: Activation) -> str:
    """The value a loss is given, as a message names it: ```F.softmax(z, 1)```, ```probs`
    (`F.softmax(z, 1)`)``, or ``the output of `model`, whose last step is `nn.Softmax()```."""
    code = one_line(found.node)
    if found.source is None:
        return f"the output of `{found.through}`, whose last step is `{code}`," if found.through else f"`{code}`"
    if found.through is not None:
        return f"`{found.through}` (`{code}`)"
    return f"`{code}`"
