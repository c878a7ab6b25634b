"""Which convolutions a file's model has in the project's other files: what the file calls or
imports that the project's code defines (``UNet()``, ``from .net import Net``, a model looked up by
name in a module of the project) and the convolution layers that code builds, or, for a module
class, applies in its ``forward`` (``F.conv2d`` with a weight of its own). The layers a file builds
itself are ``Modules.convolution_dimensions``."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.summaries import Effect, FunctionSummary, Import
from torchlint.analysis.syntax import ast_dotted_name, dotted_name, scope_name
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst

if TYPE_CHECKING:
    from torchlint.analysis.calls import Calls  # calls.py reaches value_facts.py, which reads modules.py

# What the text of code that builds or applies a convolution contains (``nn.Conv2d``, ``F.conv2d``,
# ``torchvision.models``): project.WORDS, the cheap gate before the summaries are asked.
CONVOLUTION_WORDS = ("Conv", "conv1d", "conv2d", "conv3d", "conv_transpose", "torchvision")
ALL_DIMENSIONS = frozenset({1, 2, 3})

# (what a name means, where it is read): a dotted text and its function, or an import
Named = tuple[str | Import, str | None]


@dataclass(frozen=True)
class ProjectConvolution:
    """A convolution that the project's code builds for a file: ``name``, what the file calls or
    imports (``UNet``, ``models.resnet20``), and ``effect``, where the convolution is built."""

    name: str
    effect: Effect


def project_convolutions(module: cst.Module, calls: Callable[[], Calls] | None) -> dict[int, ProjectConvolution]:
    """The convolutions that the project's own modules build for this file, one of each
    dimension (see modules.convolution_dimension), each where it is built (in whichever file):
    those of what the file calls (``Net()``, ``models.build(cfg)``, through ``from models import *``
    too) or imports by name (``from .net import Net``) that is the project's, as the summaries
    resolve it (callgraph.Summaries.runs: a class's ``__init__`` and its bases', with the helpers and
    classes they call). A model looked up by name in a module of the project
    (``resnet.__dict__[args.arch]()``, ``getattr(models, name)()``) counts when that module declares
    ``__all__`` and each name in it builds a convolution (of that dimension). When they build none,
    a class among them whose ``forward`` applies a convolution itself or through the layers it calls
    (StyleGAN2's ``ModulatedConv2d`` calls ``F.conv2d`` with a weight of its own) counts: a module of
    such a class is a convolutional network, whereas a function that merely calls ``F.conv2d`` (a
    blur) builds none. A name of another package, an import that is not found or a call nothing
    resolves adds nothing; nothing is resolved at all when no module the file imports,
    transitively, has ``CONVOLUTION_WORDS`` in its text (Calls.mentions)."""
    if calls is None:
        return {}
    asked = calls()
    if not any(asked.mentions(word) for word in CONVOLUTION_WORDS):
        return {}
    named, looked_up = _called_and_imported(module)
    found = _found(named, looked_up, asked.runs, asked.exports)
    return {dimension: ProjectConvolution(what, convolution.effect) for dimension, (what, convolution) in found.items()}


def ast_project_convolutions(index: SyntaxIndex) -> frozenset[int]:
    """The precheck twin of ``project_convolutions``: the dimensions of the convolutions that what
    the file calls or imports by name builds in the project's modules; all three when the index
    knows no project (a precheck may only say no when it is sure)."""
    def compute() -> frozenset[int]:
        summaries = index.project_summaries()
        if summaries is None:
            return ALL_DIMENSIONS
        if not any(index.project_mentions(word) for word in CONVOLUTION_WORDS):
            return frozenset()
        named, looked_up = _ast_called_and_imported(index)
        return frozenset(_found(named, looked_up,
                                lambda name, scope, instance=False: summaries.runs(index.path, name, scope, instance),
                                lambda name, scope: summaries.exports(index.path, name, scope)))
    return index.memo("project-convolutions", compute)


def _found(named: list[Named], looked_up: list[tuple[str, str | None]],
           runs: Callable[..., tuple[FunctionSummary, ...]],
           exports: Callable[[str, str | None], tuple[str, ...] | None]) -> dict[int, tuple[str, object]]:
    """Dimension -> (the name, its convolution): the layers built first, then the forwards of the
    classes (see ``project_convolutions``)."""
    def built(name: str | Import, scope: str | None, instance: bool) -> dict[int, object]:
        layers: dict[int, object] = {}
        for summary in runs(name, scope, instance):
            for convolution in summary.convolutions:
                if convolution.dimension not in layers and (instance or not convolution.functional):
                    layers[convolution.dimension] = convolution
        return layers

    found: dict[int, tuple[str, object]] = {}
    for holder, scope in looked_up:
        names = exports(holder, scope)
        each = [built(f"{holder}.{name}", scope, False) for name in names or ()]
        for dimension in set.intersection(*(set(layers) for layers in each)) if each else ():
            found.setdefault(dimension, (holder, each[0][dimension]))
    for instance in (False, True):
        for name, scope in named:
            for dimension, convolution in built(name, scope, instance).items():
                found.setdefault(dimension, (name if isinstance(name, str) else name.name, convolution))
            if len(found) == 3:
                return found
        if found:
            return found
    return found


def _called_and_imported(module: cst.Module) -> tuple[list[Named], list[tuple[str, str | None]]]:
    """What the file calls (each dotted callee with the function it is read in, as the summaries
    name it: syntax.scope_name) and the names its ``from ... import`` statements bring in, in the
    order of the text, each once; and the modules it looks a callee up in by name
    (``resnet.__dict__[name](...)``, ``getattr(models, name)(...)``)."""
    found: dict[Named, None] = {}
    looked_up: dict[tuple[str, str | None], None] = {}
    scopes: list[cst.CSTNode] = []

    def on_visit(node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            scopes.append(node)
        elif isinstance(node, cst.Call):
            callee = dotted_name(node.func)
            if callee is not None:
                found.setdefault((callee, scope_name(scopes)), None)
            holder = _lookup_holder(node.func)
            if holder is not None:
                looked_up.setdefault((holder, scope_name(scopes)), None)
        elif isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
            base = dotted_name(node.module) if node.module is not None else ""
            for alias in node.names:
                name = dotted_name(alias.name)
                if base is not None and name is not None:
                    found.setdefault((Import(base, name, len(node.relative)), None), None)
        return True

    def on_leave(node: cst.CSTNode) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            scopes.pop()

    walk(module, on_visit, on_leave)
    return list(found), list(looked_up)


def _lookup_holder(func: cst.BaseExpression) -> str | None:
    """``resnet`` for ``resnet.__dict__[name]`` and ``getattr(resnet, name)``."""
    if isinstance(func, cst.Subscript) and isinstance(func.value, cst.Attribute) \
            and func.value.attr.value == "__dict__":
        return dotted_name(func.value.value)
    if isinstance(func, cst.Call) and isinstance(func.func, cst.Name) and func.func.value == "getattr" \
            and len(func.args) >= 2 and func.args[0].keyword is None and not func.args[0].star:
        return dotted_name(func.args[0].value)
    return None


def _ast_called_and_imported(index: SyntaxIndex) -> tuple[list[Named], list[tuple[str, str | None]]]:
    found: dict[Named, None] = {}
    looked_up: dict[tuple[str, str | None], None] = {}
    for node in index.nodes(ast.Call):
        callee = ast_dotted_name(node.func)
        if callee is not None:
            found.setdefault((callee, index.scope_of(node)), None)
        holder = _ast_lookup_holder(node.func)
        if holder is not None:
            looked_up.setdefault((holder, index.scope_of(node)), None)
    for node in index.nodes(ast.ImportFrom):
        for alias in node.names:
            if alias.name != "*":
                found.setdefault((Import(node.module or "", alias.name, node.level), None), None)
    return list(found), list(looked_up)


def _ast_lookup_holder(func: ast.AST) -> str | None:
    if type(func) is ast.Subscript and type(func.value) is ast.Attribute and func.value.attr == "__dict__":
        return ast_dotted_name(func.value.value)
    if type(func) is ast.Call and type(func.func) is ast.Name and func.func.id == "getattr" \
            and len(func.args) >= 2 and type(func.args[0]) is not ast.Starred:
        return ast_dotted_name(func.args[0])
    return None
