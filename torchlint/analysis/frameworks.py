"""Training frameworks around the loop: Lightning's modules and hooks (the Trainer runs the loop)."""

from __future__ import annotations

from functools import cached_property

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.syntax import dotted_name, function_parameters
from torchlint.lazy import libcst as cst

LIGHTNING_PACKAGES = ("pytorch_lightning", "lightning.pytorch", "lightning")
LIGHTNING_MODULE_PATHS = ("LightningModule", "core.LightningModule", "core.module.LightningModule",
                          "core.lightning.LightningModule")


def lightning_names(qualified: str | None, *paths: str) -> bool:
    """Is ``qualified`` one of ``paths`` (``"LightningModule"``, ``"core.module.LightningModule"``)
    under any of Lightning's package names (``pytorch_lightning``, ``lightning.pytorch``,
    ``lightning``)?"""
    return qualified is not None and any(qualified == f"{package}.{path}"
                                         for package in LIGHTNING_PACKAGES for path in paths)


class Lightning:
    def __init__(self, bindings: Bindings, ancestors: list[cst.CSTNode]):
        self.bindings = bindings
        self.ancestors = ancestors

    @cached_property
    def module_classes(self) -> frozenset[str]:
        """Names of the file's LightningModule classes (through imports and in-file subclasses)."""
        return self.bindings.derived_classes(lambda name: lightning_names(name, *LIGHTNING_MODULE_PATHS))

    def method(self) -> tuple[cst.ClassDef, cst.FunctionDef, str] | None:
        """(class, method, name of ``self``) when the current node is inside a method of a
        LightningModule (functions nested in the method included, unless one rebinds ``self``);
        None for static and class methods."""
        method = None
        nested: list[cst.CSTNode] = []
        for node in reversed(self.ancestors[:-1]):
            if isinstance(node, cst.ClassDef):
                if method is None or node.name.value not in self.module_classes:
                    return None
                break
            if isinstance(node, (cst.FunctionDef, cst.Lambda)):
                if method is not None:
                    nested.append(method)
                method = node
        else:
            return None
        if not isinstance(method, cst.FunctionDef) or any(
                dotted_name(d.decorator) in ("staticmethod", "classmethod") for d in method.decorators):
            return None
        params = function_parameters(method)
        if not params or any(params[0] in function_parameters(inner) for inner in nested):
            return None
        return node, method, params[0]
