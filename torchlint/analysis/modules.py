"""Models: the file's ``torch.nn`` module classes and the layers it builds."""

from __future__ import annotations

import ast
from functools import cached_property

import libcst as cst

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.frameworks import LIGHTNING_MODULE_PATHS, lightning_names
from torchlint.analysis.syntax import ast_dotted_name, dotted_name
from torchlint.analysis.walk import visit

CONVOLUTIONS = {f"torch.nn.{module}{kind}{dim}d": dim for module in ("", "modules.conv.")
                for kind in ("Conv", "ConvTranspose", "LazyConv", "LazyConvTranspose") for dim in (1, 2, 3)}


def convolution_dimension(qualified: str | None) -> int | None:
    """1, 2 or 3 for ``nn.Conv1d``/``Conv2d``/``Conv3d`` and their transposed and lazy forms; 2
    for a ``torchvision.models`` network (image models: 2-D convolutions); else None."""
    if qualified is None:
        return None
    if qualified.startswith("torchvision.models."):
        return 2
    return CONVOLUTIONS.get(qualified)


class Modules:
    def __init__(self, module: cst.Module, bindings: Bindings):
        self.module = module
        self.bindings = bindings

    @cached_property
    def classes(self) -> frozenset[str]:
        """Names of the classes in the file that are ``torch.nn`` modules: deriving from a
        ``torch.nn`` class (``nn.Module``, ``nn.Sequential``...), from ``LightningModule``, or from
        another such class of the file."""
        return self.bindings.derived_classes(lambda name: (name or "").startswith("torch.nn.")
                                             or lightning_names(name, *LIGHTNING_MODULE_PATHS))

    def holds_module(self, name: str | None) -> bool:
        """Is a (dotted) name bound to a module: an instance of one of the file's ``nn.Module``
        classes or of a ``torch.nn`` layer (``self.G = Generator()``, ``net = nn.Linear(2, 2)``)?"""
        for value in self.bindings.values(name):
            if isinstance(value, cst.Call):
                qualified = self.bindings.qualified_name(value.func) or ""
                if dotted_name(value.func) in self.classes or qualified.startswith("torch.nn.") \
                        and qualified.rsplit(".", 1)[-1][:1].isupper():
                    return True
        return False

    @cached_property
    def convolution_dimensions(self) -> frozenset[int]:
        """The dimensions of the convolutions the file builds (see convolution_dimension)."""
        found: set[int] = set()
        bindings = self.bindings

        class Convolutions(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                dimension = convolution_dimension(bindings.qualified_name(node.func))
                if dimension is not None:
                    found.add(dimension)

        visit(self.module, Convolutions())
        return frozenset(found)


def ast_module_holders(index: SyntaxIndex) -> frozenset[str]:
    """The precheck twin of ``Modules.holds_module``: names assigned a call of a class of the file
    that derives from a ``Module`` (by name), or of a capitalized ``nn.`` layer."""
    def compute() -> frozenset[str]:
        classes = {node.name for node in index.classes_deriving("Module", "LightningModule")}
        found = set()
        for node in index.nodes(ast.Assign):
            if isinstance(node.value, ast.Call):
                callee = ast_dotted_name(node.value.func) or ""
                last = callee.rsplit(".", 1)[-1]
                if callee in classes or "." in callee and last[:1].isupper():
                    found.update(name for target in node.targets if (name := ast_dotted_name(target)))
        return frozenset(found)
    return index.memo("module-holders", compute)
