"""What every rule sees of the file being linted: its text and tree, the settings, the place the
walk is at, and the semantic model's analyses, each built the first time a rule asks for it.

Knowledge lives in the analyses (``torchlint/analysis/``, a file per question); this class only
holds the file and hands them out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.calls import Calls
from torchlint.analysis.compat import Compatibility
from torchlint.analysis.devices import Devices
from torchlint.analysis.frameworks import Lightning
from torchlint.analysis.gpus import Capability, Gpu
from torchlint.analysis.loops import Loops
from torchlint.analysis.losses import Losses
from torchlint.analysis.modules import Modules
from torchlint.analysis.project import ProjectModules
from torchlint.analysis.programs import Programs
from torchlint.analysis.syntax import code_text, dotted_name, function_parameters
from torchlint.analysis.versions import at_least
from torchlint.lazy import libcst as cst

if TYPE_CHECKING:
    from torchlint.parsing import StatementCache
    from torchlint.rule import Report


_PROJECTS: dict[tuple, ProjectModules] = {}


def project_modules(settings: Any) -> ProjectModules:
    """The project's modules as the settings place them (its root and ``src`` folders), one per
    process: helpers imported by many files are read and summarized once."""
    root = getattr(settings, "root", None) or "."
    key = (str(root), tuple(str(p) for p in getattr(settings, "src", ())))
    if key not in _PROJECTS:
        _PROJECTS[key] = ProjectModules(root, getattr(settings, "src", ()))
    return _PROJECTS[key]


@dataclass
class RuleContext:
    path: str
    source: str
    module: cst.Module
    settings: Any  # torchlint.config.Settings
    ancestors: list[cst.CSTNode] = field(default_factory=list)  # the module ... the current node
    reports: list[Report] = field(default_factory=list)
    statements: StatementCache | None = None  # the document's parsed statements (the language server)

    # the semantic model ---------------------------------------------------------------------------
    @cached_property
    def bindings(self) -> Bindings:
        return Bindings(self.module)

    @cached_property
    def loops(self) -> Loops:
        return Loops(self.module, self.bindings, self.ancestors, lambda: self.calls, self.source)

    @cached_property
    def devices(self) -> Devices:
        return Devices(self.bindings)

    @cached_property
    def compat(self) -> Compatibility:
        return Compatibility(self.module, self.bindings, self.ancestors)

    @cached_property
    def programs(self) -> Programs:
        return Programs(self.path, lambda: self.code, self.module, self.loops, getattr(self.settings, "root", None),
                        self.ancestors, self.bindings, lambda: self.calls, self.source)

    @cached_property
    def modules(self) -> Modules:
        return Modules(self.module, self.bindings, lambda: self.calls)

    @cached_property
    def losses(self) -> Losses:
        return Losses(self.module, self.bindings)

    @cached_property
    def lightning(self) -> Lightning:
        return Lightning(self.bindings, self.ancestors)

    @cached_property
    def calls(self) -> Calls:
        """What a call does, from the summaries of the functions it calls (in this file or the
        project's own modules)."""
        return Calls(self.path, self.source, project_modules(self.settings), self.ancestors)

    # versions ---------------------------------------------------------------------------------------
    @property
    def target_torch(self) -> tuple[int, ...]:
        return self.settings.target_torch

    def torch_at_least(self, version: str) -> bool:
        """The torch the code targets is ``version`` or newer."""
        return at_least(self.settings.target_torch, version)

    def lightning_at_least(self, version: str) -> bool:
        return at_least(self.settings.target_lightning, version)

    # the GPU ------------------------------------------------------------------------------------------
    @property
    def target_gpu(self) -> Gpu | None:
        """The GPU the code runs on (``target-gpu``); None when the configuration does not say."""
        return getattr(self.settings, "target_gpu", None)

    def gpu_at_least(self, spec: str | Capability) -> bool:
        """The target GPU is known and has compute capability ``spec`` (``"sm_80"``, ``gpus.BF16``)
        or newer. False when it is unknown: advice that needs a new GPU stays as it was."""
        return self.target_gpu is not None and self.target_gpu.at_least(spec)

    def gpu_below(self, spec: str | Capability) -> bool:
        """The target GPU is known and older than ``spec``: advice that needs ``spec`` does not
        apply there. False when it is unknown."""
        return self.target_gpu is not None and not self.target_gpu.at_least(spec)

    # the code ----------------------------------------------------------------------------------------
    @cached_property
    def code(self) -> str:
        """The source without its comments and docstrings (see syntax.code_text): what rules that
        decide from the presence of a word read, so that a comment never decides."""
        return code_text(self.source) if self.statements is None else self.statements.code(self.source)

    def qualified_name(self, expr: cst.BaseExpression) -> str | None:
        """``torch.nn.Conv2d`` for ``nn.Conv2d`` after ``import torch.nn as nn``, through the imports;
        None when the enclosing function takes the name as a parameter (``def f(torch): ...``)."""
        qualified = self.bindings.qualified_name(expr)
        if qualified is not None:
            function = self.enclosing_function()
            if function is not None and dotted_name(expr).split(".", 1)[0] in function_parameters(function):
                return None
        return qualified

    def code_for(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    # the place the walk is at ----------------------------------------------------------------------
    @property
    def node(self) -> cst.CSTNode:
        return self.ancestors[-1]

    @property
    def parent(self) -> cst.CSTNode | None:
        return self.ancestors[-2] if len(self.ancestors) > 1 else None

    def enclosing(self, *types: type) -> list[cst.CSTNode]:
        """Enclosing nodes of the given types, innermost first (the current node excluded)."""
        exact = _leaf_types(types)
        if exact is not None:  # a set lookup: LibCST's classes are ABCs, slow in isinstance
            return [n for n in reversed(self.ancestors[:-1]) if type(n) in exact]
        return [n for n in reversed(self.ancestors[:-1]) if isinstance(n, types)]

    def parameters_around(self) -> set[str]:
        """The parameters of the functions (and lambdas) around the current node: names a binding
        of the module does not reach there."""
        return {name for function in self.enclosing(cst.FunctionDef, cst.Lambda) for name in function_parameters(function)}

    def enclosing_function(self) -> cst.FunctionDef | None:
        found = self.enclosing(cst.FunctionDef)
        return found[0] if found else None

    def enclosing_class(self) -> cst.ClassDef | None:
        found = self.enclosing(cst.ClassDef)
        return found[0] if found else None

    def block_of(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The block (or module) that holds ``node``, an ancestor of the current node."""
        for i in range(1, len(self.ancestors)):
            if self.ancestors[i] is node:
                return self.ancestors[i - 1]
        return None

    def statement_position(self) -> tuple[cst.CSTNode, tuple[cst.CSTNode, ...], int] | None:
        """The innermost statement around the current node, its block's statements, its index."""
        for i in range(len(self.ancestors) - 1, 0, -1):
            node, parent = self.ancestors[i], self.ancestors[i - 1]
            if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and \
                    isinstance(parent, (cst.Module, cst.IndentedBlock)):
                body = tuple(parent.body)
                return node, body, body.index(node)
        return None

    def bound_name(self) -> str | None:
        """The dotted name the current node is assigned to: ``loader`` for the call in
        ``loader = DataLoader(...)``."""
        parent, node = self.parent, self.ancestors[-1]
        if isinstance(parent, cst.Assign) and parent.value is node and len(parent.targets) == 1:
            return dotted_name(parent.targets[0].target)
        if isinstance(parent, cst.AnnAssign) and parent.value is node:
            return dotted_name(parent.target)
        return None


@lru_cache(maxsize=None)
def _leaf_types(types: tuple[type, ...]) -> frozenset[type] | None:
    """The types as a set when none has a subclass (``type(n) in`` it is then ``isinstance``)."""
    return frozenset(types) if not any(kind.__subclasses__() for kind in types) else None
