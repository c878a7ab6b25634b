"""What the whole-script rules share (TL402 cudnn-benchmark, TL403 channels-last, TL705
tf32-matmul): advice about a whole training run, given once per CUDA training script at its first
training loop, usually a process-wide setting added after the imports."""

from __future__ import annotations

from typing import ClassVar

from torchlint.analysis.calls import related, where
from torchlint.analysis.devices import may_train_on_cuda, mentions_cuda
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.convolutions import ProjectConvolution, ast_project_convolutions
from torchlint.analysis.loops import ast_training_loop_lines
from torchlint.analysis.programs import ProjectTraining, ast_is_script, ast_project_training, ast_training_script
from torchlint.fixes import module_setting
from torchlint.lazy import libcst as cst
from torchlint.rule import Related, Rule


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

    def explanation(self) -> tuple[str, tuple[Related, ...]]:
        """The finding's message and related locations, once ``wanted`` said yes."""
        return self.message, ()

    def training(self) -> cst.CSTNode | None:
        """Where the script trains on CUDA, and the finding goes (Programs.cuda_training_script)."""
        return self.ctx.programs.cuda_training_script()

    def leave_Module(self, original_node: cst.Module) -> None:
        loop = self.training()
        if loop is None or any(text in self.ctx.code for text in self.already_decided) or not self.wanted():
            return
        edit = module_setting(self.ctx, self.setting) if self.setting else None
        message, places = self.explanation()
        self.report(loop, message, self.fix(self.fix_title, edit) if edit else None, related=places)


class ConvolutionalScriptRule(WholeScriptRule):
    """A whole-script rule for convolutional networks (TL402, TL403). The convolutions may be built
    in the file (``triggers`` name their text there) or by the project's own code that the file
    calls or imports (``Modules.project_convolutions``: ``from models import UNet``); the finding
    then says where. ``dimension``: the convolutions that count (None: any)."""

    dimension: ClassVar[int | None] = None

    @classmethod
    def applies(cls, text: str) -> bool:
        # a convolution of the file or of a project module comes through an import either way; the
        # training (its `backward`) may run in the project's code (Programs.project_training)
        return mentions_cuda(text) and "import" in text

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        if not ast_is_script(index):
            return False
        trains_here = any(ast_training_loop_lines(index))
        if trains_here and any(trigger in index.source for trigger in cls.triggers):
            return True  # the file may build them itself
        # the project's modules are read only for a script that qualifies otherwise (as
        # leave_Module and ``wanted`` read its code)
        code = index.code
        if not mentions_cuda(code) or any(text in code for text in cls.already_decided) or not cls.may_want(code):
            return False
        # training before convolutions: both read the project's summaries, but the convolutions
        # resolve every call and import of the file twice, and TL402 and TL403 reach this line
        # for different files (their triggers and ``may_want`` differ), where the one answer that
        # the other rule already memoized (``ast_project_training``) often decides
        if not trains_here and not ast_project_training(index):
            return False
        if not any(trigger in index.source for trigger in cls.triggers):
            found = ast_project_convolutions(index)
            return bool(found if cls.dimension is None else cls.dimension in found)
        return True

    @classmethod
    def may_want(cls, code: str) -> bool:
        """What ``wanted`` requires of the code's text (comments and docstrings left out), checked
        before the precheck reads the project's modules: a necessary condition only."""
        return True

    def __init__(self, ctx):
        super().__init__(ctx)
        self.elsewhere: ProjectConvolution | None = None
        self.trained_by: ProjectTraining | None = None

    def training(self) -> cst.CSTNode | None:
        """The script's first training loop, or else, for a script that qualifies otherwise, its
        first call of the project's code that trains (Programs.project_training)."""
        loop = super().training()
        if loop is not None or any(text in self.ctx.code for text in self.already_decided) or not self.wanted():
            return loop
        self.trained_by = self.ctx.programs.project_training()
        return self.trained_by.call if self.trained_by is not None else None

    def convolutional(self) -> bool:
        """Does the script build convolutions (of ``dimension``): in the file, or else through the
        project's modules (then kept in ``elsewhere`` for the finding)?"""
        dimensions = self.ctx.modules.convolution_dimensions
        if dimensions if self.dimension is None else self.dimension in dimensions:
            return True
        found = self.ctx.modules.project_convolutions
        self.elsewhere = next(iter(found.values()), None) if self.dimension is None else found.get(self.dimension)
        return self.elsewhere is not None

    def explanation(self) -> tuple[str, tuple[Related, ...]]:
        message, places = self.message, []
        if self.elsewhere is not None:
            effect = self.elsewhere.effect
            message += (f"; the convolutions are built by the project's `{self.elsewhere.name}` (`{effect.what}`, "
                        f"{where(effect)})")
            places.append(related(effect, "a convolution of the model is built here"))
        if self.trained_by is not None:
            effect = self.trained_by.backward
            message += (f"; `{self.trained_by.name}(...)` here trains it in the project's code (`{effect.what}`, "
                        f"{where(effect)})")
            places.append(related(effect, "the training backpropagates here"))
        return message, tuple(places)
