"""What the loop-correctness rules share (TL804 missing-zero-grad, TL807 step-before-backward): the
training loop around an optimizer step, and whether a loop binds a name."""

from __future__ import annotations

from torchlint.analysis.flow import target_binds
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst
from torchlint.rule import RuleContext


def innermost_training_loop(ctx: RuleContext) -> cst.CSTNode | None:
    """The innermost loop around the current node (in its function) that calls backward."""
    return next((loop for loop in ctx.loops.enclosing_loops() if ctx.loops.backpropagated_names(loop) is not None),
                None)


def assigned_in(tree: cst.CSTNode, name: str) -> bool:
    """Is ``name`` (dotted: ``self.optimizer``) assigned anywhere inside ``tree``?"""
    found = []

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.AssignTarget and target_binds(node.target, name) is not None:
            found.append(node)
        elif type(node) is cst.AnnAssign and target_binds(node.target, name) is not None:
            found.append(node)
        return not found

    walk(tree, on_visit)
    return bool(found)
