"""What the whole-script rules share (TL402 cudnn-benchmark, TL403 channels-last, TL705
tf32-matmul): advice about a whole training run, given once per CUDA training script at its first
training loop, usually a process-wide setting added after the imports."""

from __future__ import annotations

from typing import ClassVar

import libcst as cst

from torchlint.analysis.devices import may_train_on_cuda
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.programs import ast_training_script
from torchlint.fixes import module_setting
from torchlint.rule import Rule


class WholeScriptRule(Rule):
    """A rule about a CUDA training script as a whole. Subclasses say what the script must not have
    decided already (``already_decided``: text that shows the choice was made), whether the advice
    applies (``wanted``), the message, and the setting the fix adds (``setting``, with ``{torch}``
    for the file's name of torch; empty for advice without a fix)."""

    already_decided: ClassVar[tuple[str, ...]] = ()
    setting: ClassVar[str] = ""
    fix_title: ClassVar[str] = ""
    message: ClassVar[str]

    @classmethod
    def applies(cls, text: str) -> bool:
        return (not cls.triggers or super().applies(text)) and may_train_on_cuda(text)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return ast_training_script(index)  # see Programs.cuda_training_script

    def wanted(self) -> bool:
        """Does the advice apply to this script (beyond being a CUDA training script)?"""
        return True

    def leave_Module(self, original_node: cst.Module) -> None:
        loop = self.ctx.programs.cuda_training_script()
        if loop is None or any(text in self.ctx.code for text in self.already_decided) or not self.wanted():
            return
        edit = module_setting(self.ctx, self.setting) if self.setting else None
        self.report(loop, self.message, self.fix(self.fix_title, edit) if edit else None)
