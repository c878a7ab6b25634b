"""Test-only rules for the harness tests: "fixes" that change what a script learns, which
``torchlint verify`` must catch. They go through the real engine (``fix_source(..., rules=...)``),
so the harness sees them exactly as it sees a shipped rule's fixes."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from torchlint.analysis.syntax import find_argument as argument
from torchlint.rule import Rule

OPTIMIZERS = ("torch.optim.SGD", "torch.optim.Adam", "torch.optim.AdamW")


class _RewriteLearningRate(Rule):
    """Rewrites a literal learning rate passed to an optimizer as ``template`` (with ``{lr}``), once:
    the engine re-lints fixed code until nothing is left to fix, so a rewrite that is still a
    literal must be recognised as done (``done``)."""

    kind = "correctness"
    triggers = ("lr",)
    fix_applicability = "unsafe"
    template: ClassVar[str]

    def done(self, value: float) -> bool:
        return False

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified_name(node.func) not in OPTIMIZERS:
            return
        lr = argument(node, "lr", 1)
        if lr is None or not isinstance(lr.value, (cst.Float, cst.Integer)) or \
                self.done(float(lr.value.evaluated_value)):
            return
        self.report(node, f"planted: lr becomes {self.template}",
                    self.fix("Rewrite the learning rate", self.replace(lr.value, self.template.format(lr=lr.value.value))))


class _SetLearningRate(_RewriteLearningRate):
    """Replaces a literal learning rate passed to an optimizer by ``new_lr``."""

    new_lr: ClassVar[float]

    @property
    def template(self) -> str:
        return repr(self.new_lr)

    def done(self, value: float) -> bool:
        return value == self.new_lr


class LowerLearningRateClaimedSafe(_SetLearningRate):
    """A wrong fix that claims to be safe: the loss trajectory changes from the second step on."""

    code = "TL998"
    name = "planted-lower-learning-rate"
    summary = "test only: lowers the learning rate and calls that safe"
    fix_applicability = "safe"
    new_lr = 0.01


class ZeroLearningRate(_SetLearningRate):
    """An unsafe fix that stops training altogether: the loss no longer falls."""

    code = "TL999"
    name = "planted-zero-learning-rate"
    summary = "test only: sets the learning rate to zero"
    fix_applicability = "unsafe"
    new_lr = 0.0


class MultiplyLearningRate(_RewriteLearningRate):
    """An unsafe fix that makes training diverge: the learning rate times 1e4."""

    code = "TL997"
    name = "planted-huge-learning-rate"
    summary = "test only: multiplies the learning rate by 1e4"
    template = "({lr} * 1e4)"


class RespellLearningRate(_RewriteLearningRate):
    """An unsafe fix that changes nothing the run computes: the same learning rate, spelled otherwise."""

    code = "TL996"
    name = "planted-respelled-learning-rate"
    summary = "test only: writes the learning rate as float('...')"
    template = "float('{lr}')"


class EnableCudaAutocast(Rule):
    """An unsafe fix like TL703's: it turns on a CUDA autocast region (``enabled=False`` -> ``True``)."""

    code = "TL995"
    name = "planted-enable-autocast"
    summary = "test only: enables a disabled CUDA autocast region"
    kind = "performance"
    fix_applicability = "unsafe"
    triggers = ("autocast",)

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified_name(node.func) not in ("torch.autocast", "torch.amp.autocast"):
            return
        enabled = argument(node, "enabled")
        if enabled is not None and isinstance(enabled.value, cst.Name) and enabled.value.value == "False":
            self.report(node, "planted: enable autocast", self.fix("Enable autocast", self.replace(enabled.value, "True")))


def with_no_measured_change(monkeypatch) -> None:
    """Make every fix measure the same as the original, so that what a test checks does not hang on
    how busy the machine is: no fix measures slower, so verify runs nothing again (the keep decision
    on measures has its own tests in test_verify_units)."""
    from torchlint.harness import measures

    same = measures.Comparison(1.0, 0.0, measures.NO_CHANGE)
    for name in ("step_time", "peak_memory", "memory_growth"):
        monkeypatch.setattr(measures, name, lambda *args: same)
