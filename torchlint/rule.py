"""The anatomy of a rule (see DESIGN.md "A rule") and the per-file context every rule reads.

A rule is a class in its own module under ``rules/``. The module docstring is the rule's user
documentation; the class carries the metadata and the ``visit_<Node>``/``leave_<Node>`` methods
that the engine runs, batched with every other enabled rule, in one traversal of the file.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import libcst as cst

from torchlint import matching
from torchlint.diagnostics import NO_FIX, SAFE, UNSAFE, Severity
from torchlint.precheck import SyntaxIndex
from torchlint.walk import visit

KINDS = ("performance", "correctness", "deprecation", "migration")


# --- fixes as rules write them: edits anchored to nodes; the engine turns them into offsets ---

@dataclass(frozen=True)
class NodeEdit:
    node: cst.CSTNode
    text: str | cst.CSTNode  # replacement text, or a node rendered in the file's own style
    where: str = "replace"  # replace | before | after | line_before | line_after


@dataclass(frozen=True)
class FixSpec:
    title: str
    applicability: str
    edits: tuple[NodeEdit, ...]


@dataclass
class Report:
    rule: "Rule"
    node: cst.CSTNode
    message: str
    fix: FixSpec | None
    severity: Severity | None = None  # overrides the rule's default for this finding


# --- version specifiers: ">=2.0", "<2.0", ">=1.7,<2.4" ---

def parse_version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in str(text).strip().split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
        if digits != piece:
            break
    if not parts:
        raise ValueError(f"not a version: {text!r}")
    return tuple(parts)


def version_matches(spec: str, version: tuple[int, ...]) -> bool:
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        for op in (">=", "<=", "==", "!=", ">", "<"):
            if clause.startswith(op):
                bound = parse_version(clause[len(op):])
                have = version[: len(bound)] if op in ("==", "!=") else version
                ok = {">=": have >= bound, "<=": have <= bound, "==": have == bound,
                      "!=": have != bound, ">": have > bound, "<": have < bound}[op]
                if not ok:
                    return False
                break
        else:
            raise ValueError(f"bad version specifier: {clause!r}")
    return True


@dataclass(frozen=True)
class MixedPrecisionStep:
    """What ``RuleContext.mixed_precision_step`` found and the edits it proposes."""

    edits: tuple[NodeEdit, ...]
    optimizer: str  # the code of the optimizer that the step statement steps
    clip: cst.SimpleStatementLine | None  # the gradient-clipping statement between backward and step


class Rule:
    """Base class. Subclasses set the metadata below and define visit_/leave_ methods."""

    code: ClassVar[str]
    name: ClassVar[str]
    kind: ClassVar[str]
    summary: ClassVar[str]  # one line, shown by `torchlint rules`
    severity: ClassVar[Severity] = Severity.WARNING
    fix_applicability: ClassVar[str] = NO_FIX  # the best applicability this rule's fixes have
    torch_versions: ClassVar[str] = ""  # e.g. "<2.0": the rule is silent outside it
    lightning_versions: ClassVar[str] = ""
    triggers: ClassVar[tuple[str, ...]] = ()  # the file's raw text must contain one of these
    default_enabled: ClassVar[bool] = True
    # option name -> (type, default, description); read with self.option(name)
    options: ClassVar[dict[str, tuple[type, Any, str]]] = {}

    def __init__(self, ctx: "RuleContext"):
        self.ctx = ctx

    # reporting -------------------------------------------------------------------------
    def report(self, node: cst.CSTNode, message: str, fix: FixSpec | None = None,
               severity: Severity | None = None) -> None:
        self.ctx.reports.append(Report(self, node, message, fix, severity))

    def fix(self, title: str, *edits: NodeEdit, applicability: str | None = None) -> FixSpec:
        return FixSpec(title, applicability or self.fix_applicability, tuple(edits))

    @staticmethod
    def replace(node: cst.CSTNode, new: str | cst.CSTNode) -> NodeEdit:
        return NodeEdit(node, new, "replace")

    @staticmethod
    def insert_before(node: cst.CSTNode, text: str) -> NodeEdit:
        return NodeEdit(node, text, "before")

    @staticmethod
    def insert_after(node: cst.CSTNode, text: str) -> NodeEdit:
        return NodeEdit(node, text, "after")

    @staticmethod
    def insert_lines_after(statement: cst.CSTNode, text: str) -> NodeEdit:
        """Whole lines after the statement's last line (text should end with a newline)."""
        return NodeEdit(statement, text, "line_after")

    @staticmethod
    def insert_lines_before(statement: cst.CSTNode, text: str) -> NodeEdit:
        return NodeEdit(statement, text, "line_before")

    def option(self, name: str) -> Any:
        return self.ctx.settings.rule_option(self.name, name, self.options[name][1])

    # metadata helpers ------------------------------------------------------------------
    @classmethod
    def applies(cls, text: str) -> bool:
        """The raw-text prefilter: may the rule fire on a file with this text? It may say yes to text
        the rule ends up silent on, never no to text it would fire on. Override it for a sharper test
        than "contains one of the triggers"."""
        return any(trigger in text for trigger in cls.triggers)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        """The cheap first pass, on CPython's syntax tree of a file whose text passed ``applies``
        (see torchlint/precheck.py): can the shapes the rule reports occur in the file? Like
        ``applies`` it may say yes wrongly, never no wrongly."""
        return True

    @classmethod
    def docs(cls) -> str:
        return inspect.cleandoc(sys.modules[cls.__module__].__doc__ or "")

    @classmethod
    def applies_to(cls, target_torch: tuple[int, ...], target_lightning: tuple[int, ...]) -> bool:
        return (not cls.torch_versions or version_matches(cls.torch_versions, target_torch)) and (
            not cls.lightning_versions or version_matches(cls.lightning_versions, target_lightning))


@dataclass
class RuleContext:
    """What every rule sees of the file being linted, plus the shared matching helpers."""

    path: str
    source: str
    module: cst.Module
    settings: Any  # torchlint.config.Settings
    imports: matching.ImportMap
    ancestors: list[cst.CSTNode] = field(default_factory=list)  # root ... current node
    reports: list[Report] = field(default_factory=list)
    _loop_cache: dict[int, frozenset[str] | None] = field(default_factory=dict)

    @property
    def target_torch(self) -> tuple[int, ...]:
        return self.settings.target_torch

    def qualified_name(self, expr: cst.BaseExpression) -> str | None:
        return self.imports.qualified_name(expr)

    def code_for(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    # ancestry ---------------------------------------------------------------------------
    @property
    def parent(self) -> cst.CSTNode | None:
        return self.ancestors[-2] if len(self.ancestors) > 1 else None

    def enclosing(self, *types: type) -> list[cst.CSTNode]:
        """Enclosing nodes of the given types, innermost first (the current node excluded)."""
        return [n for n in reversed(self.ancestors[:-1]) if isinstance(n, types)]

    def enclosing_function(self) -> cst.FunctionDef | None:
        found = self.enclosing(cst.FunctionDef)
        return found[0] if found else None

    def enclosing_class(self) -> cst.ClassDef | None:
        found = self.enclosing(cst.ClassDef)
        return found[0] if found else None

    def statement_position(self) -> tuple[cst.CSTNode, tuple[cst.CSTNode, ...], int] | None:
        """The innermost statement around the current node, its block's statements, its index."""
        for i in range(len(self.ancestors) - 1, 0, -1):
            node, parent = self.ancestors[i], self.ancestors[i - 1]
            if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and \
                    isinstance(parent, (cst.Module, cst.IndentedBlock)):
                body = tuple(parent.body)
                return node, body, body.index(node)
        return None

    def _loops_in_function(self) -> list[cst.CSTNode]:
        """Enclosing loops, innermost first, up to the enclosing function (its callers' loops
        are not visible)."""
        loops = []
        for node in reversed(self.ancestors[:-1]):
            if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                break
            if isinstance(node, matching.LOOPS):
                loops.append(node)
        return loops

    # training and evaluation loops --------------------------------------------------------
    def backpropagated_names(self, loop: cst.CSTNode) -> frozenset[str] | None:
        """Names the loop backpropagates (``loss`` in ``loss.backward()``); None if it never calls
        backward, so the loop is not a training loop."""
        key = id(loop)
        if key not in self._loop_cache:
            finder = matching._BackwardFinder(self.imports)
            visit(loop, finder)
            self._loop_cache[key] = frozenset(finder.names) if finder.found else None
        return self._loop_cache[key]

    def training_loop(self) -> cst.CSTNode | None:
        """The outermost enclosing for/while loop that calls ``.backward(``, if any."""
        found = None
        for loop in self._loops_in_function():
            if self.backpropagated_names(loop) is not None:
                found = loop
        return found

    def in_training_step(self) -> bool:
        """Inside a Lightning ``training_step`` (the loop runs in the Trainer)."""
        function = self.enclosing_function()
        return function is not None and function.name.value == "training_step"

    def in_training_loop(self) -> bool:
        return self.training_loop() is not None or self.in_training_step()

    def evaluation_loop(self) -> cst.CSTNode | None:
        """The loop that evaluates a model around the current node, or None. Its enclosing loops
        from the innermost out must call no backward (an epoch loop that also trains further out
        is fine), and either the last ``.eval()``/``.train()`` call before one of these loops (in
        its block, or in an enclosing block up to the function) puts a model in eval mode: the
        loop right after it; or there is no such call, the function calls no backward at all and
        is named like evaluation (``validate``, ``evaluate``, ``test_epoch``...): the outermost
        such loop."""
        found = self._evaluation()
        return found[0] if found else None

    def eval_mode_set(self) -> bool:
        """The evaluation loop around the current node follows a ``model.eval()`` call (rather
        than being known only by its function's name)."""
        found = self._evaluation()
        return bool(found and found[1])

    def _evaluation(self) -> tuple[cst.CSTNode, bool] | None:
        candidates = []
        for loop in self._loops_in_function():
            if self.backpropagated_names(loop) is not None:
                break
            candidates.append(loop)
        if not candidates:
            return None
        # walk out from the innermost loop: the statements before it in each enclosing block
        chain = self.ancestors[:-1]
        loop_here = candidates[0]
        for i in range(chain.index(loop_here), 0, -1):
            node, parent = chain[i], chain[i - 1]
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                break
            if isinstance(node, matching.LOOPS):
                if self.backpropagated_names(node) is not None:
                    break
                loop_here = node
            if isinstance(parent, (cst.IndentedBlock, cst.Module)):
                body = list(parent.body)
                mode = matching.last_mode_call(body[: body.index(node)])
                if mode is not None:
                    return (loop_here, True) if mode == "eval" else None
        function = self.enclosing_function()
        if function is not None and matching.EVAL_FUNCTION.search(function.name.value) \
                and len(candidates) == len(self._loops_in_function()) \
                and self.backpropagated_names(function.body) is None:
            return candidates[-1], False
        return None

    def grad_disabled(self) -> bool:
        """Under ``torch.no_grad()``/``inference_mode()``/``set_grad_enabled(False)``: as a with
        block, as a decorator of an enclosing function, or after a ``torch.set_grad_enabled(False)``
        statement earlier in the function (with no ``set_grad_enabled(True)`` after it)."""
        chain = self.ancestors[:-1]
        for node in chain:
            if isinstance(node, cst.With) and any(
                    matching.with_item_disables_grad(item, self.imports) for item in node.items):
                return True
            if isinstance(node, cst.FunctionDef) and any(
                    matching.decorator_disables_grad(d, self.imports)
                    or matching.is_grad_switch_off(d.decorator, self.imports) for d in node.decorators):
                return True
        for i in range(len(self.ancestors) - 1, 0, -1):
            node, parent = self.ancestors[i], self.ancestors[i - 1]
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                break
            if isinstance(parent, (cst.IndentedBlock, cst.Module)):
                body = list(parent.body)
                for statement in reversed(body[: body.index(node)]):
                    switch = self._grad_switch(statement)
                    if switch is not None:
                        return switch
        return False

    def _grad_switch(self, statement: cst.CSTNode) -> bool | None:
        """A statement line that is a ``torch.set_grad_enabled(...)`` call: True for False, False
        for True."""
        if isinstance(statement, cst.SimpleStatementLine):
            for small in reversed(statement.body):
                if isinstance(small, cst.Expr):
                    switch = matching.is_grad_switch_off(small.value, self.imports)
                    if switch is not None:
                        return switch
        return None

    # devices ------------------------------------------------------------------------------
    def is_device(self, expr: cst.BaseExpression, extra_names: tuple[str, ...] = ()) -> bool:
        """Clearly a device: a device literal, ``torch.device(...)``, ``x.device``, or a name that
        is bound to a device in this file or is named like one (``device``, ``dev``,
        ``*_device``)."""
        if matching.is_device_value(expr, self.imports):
            return True
        if isinstance(expr, cst.Attribute) and expr.attr.value == "device":
            return True
        if isinstance(expr, cst.Name):
            return expr.value in self.device_names or bool(matching.DEVICE_NAMES.match(expr.value)) \
                or expr.value in extra_names
        return False

    @property
    def device_names(self) -> frozenset[str]:
        """Names assigned a device value somewhere in the file."""
        if not hasattr(self, "_device_names"):
            names = set()
            for small in matching.small_statements(self.module):
                if isinstance(small, cst.Assign) and matching.is_device_value(small.value, self.imports):
                    for target in small.targets:
                        if isinstance(target.target, cst.Name):
                            names.add(target.target.value)
            self._device_names = frozenset(names)
        return self._device_names

    def is_dtype(self, expr: cst.BaseExpression) -> bool:
        return matching.is_dtype(expr, self.imports)

    # --- distributed training, data loading and Lightning (TL5xx, TL6xx, TL9xx) -----------------
    @property
    def bindings(self) -> dict[str, list[cst.BaseExpression | None]]:
        """Every value assigned to each dotted name in the file (see matching.assigned_names)."""
        if not hasattr(self, "_bindings"):
            self._bindings = matching.assigned_names(self.module)
        return self._bindings

    def binding_of(self, name: str | None) -> cst.BaseExpression | None:
        """The value of a name assigned exactly once in the file, else None."""
        return matching.binding_of(name, self.bindings)

    def bound_name(self) -> str | None:
        """The dotted name the current node is assigned to: ``loader`` for the call in
        ``loader = DataLoader(...)``."""
        parent = self.parent
        node = self.ancestors[-1]
        if isinstance(parent, cst.Assign) and parent.value is node and len(parent.targets) == 1:
            return matching.dotted_name(parent.targets[0].target)
        if isinstance(parent, cst.AnnAssign) and parent.value is node:
            return matching.dotted_name(parent.target)
        return None

    def loops_over(self, name: str | None) -> list[cst.For]:
        """The for loops of the file that iterate ``name`` (through enumerate/tqdm wrappers)."""
        if not hasattr(self, "_loops_by_iterable"):
            index: dict[str, list[cst.For]] = {}
            imports = self.imports

            class Loops(cst.CSTVisitor):
                def visit_For(self, node: cst.For) -> None:
                    iterated = matching.iterated_name(node, imports)
                    if iterated is not None:
                        index.setdefault(iterated, []).append(node)

            visit(self.module, Loops())
            self._loops_by_iterable = index
        return self._loops_by_iterable.get(name or "", [])

    def iterating_loops(self) -> list[cst.For]:
        """The for loops that iterate the value the current node builds: through the name it is
        assigned to once (``loader = DataLoader(...)`` ... ``for x in loader``), or in place
        (``for x in DataLoader(...)``)."""
        node = self.ancestors[-1]
        name = self.bound_name()
        if name is not None:
            return self.loops_over(name) if self.binding_of(name) is node else []
        for ancestor in reversed(self.ancestors[:-1]):
            if isinstance(ancestor, cst.For):
                iterated = ancestor.iter
                while isinstance(iterated, cst.Call) and iterated.args and iterated is not node:
                    iterated = iterated.args[0].value
                return [ancestor] if iterated is node else []
            if not isinstance(ancestor, (cst.Call, cst.Arg)):
                return []
        return []

    def moves_to_cuda(self, tree: cst.CSTNode) -> bool:
        """Does the subtree copy something to a CUDA device: ``.cuda(...)``, or ``.to(d)`` /
        ``.to(device=d)`` with ``d`` a device that is not known to be another kind (a name bound
        only to ``"cpu"`` is not CUDA; ``"cuda" if available else "cpu"`` is)?"""
        ctx = self

        class Moves(cst.CSTVisitor):
            found = False

            def visit_Call(self, node: cst.Call) -> None:
                func = node.func
                if not isinstance(func, cst.Attribute) or self.found:
                    return
                if func.attr.value == "cuda":
                    self.found = True
                elif func.attr.value == "to" and node.args and not node.args[0].star:
                    target = (matching.keyword_arg(node, "device") or node.args[0]).value
                    if ctx.is_device(target):
                        values = [target] if not isinstance(target, cst.Name) else ctx.bindings.get(target.value, [None])
                        kinds = {matching.device_kind(v, ctx.imports) if v is not None else None for v in values}
                        self.found = "cuda" in kinds or None in kinds  # unknown devices may be CUDA

        finder = Moves()
        visit(tree, finder)
        return finder.found

    def enclosing_loops(self) -> list[cst.CSTNode]:
        """Enclosing for/while loops, innermost first, up to the enclosing function."""
        return self._loops_in_function()

    def block_indentation(self, block: cst.IndentedBlock) -> str:
        """The indentation of the statements of ``block``, one of the current node's ancestors."""
        indent = ""
        for node in self.ancestors:
            if isinstance(node, cst.IndentedBlock):
                indent += self.module.default_indent if node.indent is None else node.indent
            if node is block:
                return indent
        raise ValueError("block_indentation: the block is not an ancestor of the current node")

    @property
    def definitions(self) -> dict[str, list[cst.FunctionDef | cst.ClassDef]]:
        """Every function and class the file defines (nested ones too), by name, in file order."""
        if not hasattr(self, "_definitions"):
            found: dict[str, list[cst.FunctionDef | cst.ClassDef]] = {}

            class Definitions(cst.CSTVisitor):
                def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
                    found.setdefault(node.name.value, []).append(node)

                def visit_ClassDef(self, node: cst.ClassDef) -> None:
                    found.setdefault(node.name.value, []).append(node)

            visit(self.module, Definitions())
            self._definitions = found
        return self._definitions

    def defined(self, name: str | None, kind: type = cst.CSTNode) -> list:
        """The file's functions or classes (``kind``) named ``name``."""
        return [node for node in self.definitions.get(name or "", []) if isinstance(node, kind)]

    @property
    def lightning_modules(self) -> frozenset[str]:
        """Names of the file's LightningModule classes (through imports and in-file subclasses)."""
        if not hasattr(self, "_lightning_modules"):
            self._lightning_modules = matching.lightning_module_classes(self.module, self.imports)
        return self._lightning_modules

    def lightning_method(self) -> tuple[cst.ClassDef, cst.FunctionDef, str] | None:
        """(class, method, name of ``self``) when the current node is inside a method of a
        LightningModule (functions nested in the method included, unless one rebinds ``self``);
        None for static and class methods."""
        method = None
        nested: list[cst.CSTNode] = []
        for node in reversed(self.ancestors[:-1]):
            if isinstance(node, cst.ClassDef):
                if method is None or node.name.value not in self.lightning_modules:
                    return None
                break
            if isinstance(node, (cst.FunctionDef, cst.Lambda)):
                if method is not None:
                    nested.append(method)
                method = node
        else:
            return None
        if not isinstance(method, cst.FunctionDef) or any(
                matching.dotted_name(d.decorator) in ("staticmethod", "classmethod") for d in method.decorators):
            return None
        params = matching.function_parameters(method)
        if not params or any(params[0] in matching.function_parameters(inner) for inner in nested):
            return None
        return node, method, params[0]

    def import_reference(self, module: str, name: str | None = None) -> tuple[str, NodeEdit | None] | None:
        """How to refer to ``module`` (or ``module.name``) at the current node: the local spelling
        and, when the file lacks the import, the edit that adds ``import module`` or ``from module
        import name`` after the last top-level import before the current top-level statement.
        None when that cannot be done safely (the name is already used for something else, or
        there is no top-level import to put it after)."""
        body = list(self.module.body)
        top = self.ancestors[1] if len(self.ancestors) > 1 else None
        anchor = None
        for statement in body[: body.index(top)] if top in body else body:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if isinstance(small, cst.Import):
                    anchor = statement
                    for alias in small.names:
                        full = matching.dotted_name(alias.name)
                        if alias.asname is not None:
                            local = alias.asname.name.value if full == module else None
                        else:  # `import a.b.c` makes `a.b` usable as written
                            local = module if full == module or full.startswith(module + ".") else None
                        if local:
                            return (f"{local}.{name}" if name else local), None
                elif isinstance(small, cst.ImportFrom):
                    anchor = statement
                    if name and not small.relative and small.module is not None \
                            and matching.dotted_name(small.module) == module and not isinstance(small.names, cst.ImportStar):
                        for alias in small.names:
                            if matching.dotted_name(alias.name) == name:
                                local = alias.asname.name.value if alias.asname else name
                                return local, None
        local = name or module.split(".")[0]
        if anchor is None or re.search(rf"(?<![\w.]){re.escape(local)}\b", self.source):
            return None  # nowhere to put it, or the name already means something in this file
        if name is None and module in sys.stdlib_module_names:  # `import os` goes first, as isort would
            first = next(s for s in body if isinstance(s, cst.SimpleStatementLine) and any(
                isinstance(small, cst.Import) or (isinstance(small, cst.ImportFrom) and not (
                    small.module and matching.dotted_name(small.module) == "__future__")) for small in s.body))
            small = next(small for small in first.body if isinstance(small, (cst.Import, cst.ImportFrom)))
            head = matching.dotted_name(small.names[0].name if isinstance(small, cst.Import) else small.module) or ""
            separator = "" if head.split(".")[0] in sys.stdlib_module_names else "\n"  # a new section
            return module, NodeEdit(first, f"import {module}\n{separator}", "line_before")
        text = f"from {module} import {name}\n" if name else f"import {module}\n"
        return (name or module), NodeEdit(anchor, text, "line_after")

    # --- precision and AMP, optimizer step, model architecture (TL3xx, TL4xx, TL7xx) ------------
    @property
    def binding_counts(self) -> dict[str, int]:
        """How many statements bind each plain name in the file (see matching.binding_counts)."""
        if not hasattr(self, "_binding_counts"):
            self._binding_counts = matching.binding_counts(self.module)
        return self._binding_counts

    def in_import_guard(self) -> bool:
        """Inside the body of a ``try`` that catches a failed import (a fallback for other
        versions: rewriting it may remove the very code that keeps them working)."""
        for parent, child in zip(self.ancestors, self.ancestors[1:]):
            if isinstance(parent, cst.Try) and child is parent.body and matching.catches_import_error(parent):
                return True
        return False

    def in_compatibility_fallback(self) -> bool:
        """Inside code that exists for other library versions: an ``except ImportError`` /
        ``AttributeError`` / ``TypeError`` handler (the fallback when a newer spelling failed), or a
        branch of an ``if`` or conditional expression that tests a version or whether an attribute
        exists (``torch.amp.GradScaler(...) if _TORCH_GREATER_EQUAL_2_4 else torch.cuda.amp.GradScaler()``).
        Rewriting such code to the newer spelling removes the support it is there for. Code after
        such an ``if`` whose branch returns or raises is the other branch, written without ``else``."""
        for parent, child in zip(self.ancestors, self.ancestors[1:]):
            if isinstance(parent, cst.ExceptHandler) and matching.catches_compatibility_error(parent):
                return True
            if isinstance(parent, (cst.If, cst.IfExp)) and child is not parent.test \
                    and matching.VERSION_TEST.search(self.code_for(parent.test)):
                return True
            if isinstance(parent, cst.IndentedBlock) and child in parent.body and any(
                    isinstance(earlier, cst.If) and matching.VERSION_TEST.search(self.code_for(earlier.test))
                    and matching.ends_in_exit(earlier.body) for earlier in parent.body[:parent.body.index(child)]):
                return True
        return False

    @property
    def training_loops(self) -> list[cst.CSTNode]:
        """The file's outermost training loops: for/while loops that call ``.backward(`` and are
        not inside another such loop of the same function, in source order."""
        if not hasattr(self, "_training_loops"):
            found: list[cst.CSTNode] = []
            ctx = self

            class Loops(cst.CSTVisitor):
                def visit_For(self, node: cst.CSTNode) -> bool:
                    if ctx.backpropagated_names(node) is not None:
                        found.append(node)
                        return False  # loops inside it are not outermost; functions inside it are rare
                    return True

                visit_While = visit_For

            visit(self.module, Loops())
            self._training_loops = found
        return self._training_loops

    @property
    def convolution_dimensions(self) -> frozenset[int]:
        """The dimensions of the convolutions the file builds (see matching.convolution_dimension)."""
        if not hasattr(self, "_convolution_dimensions"):
            found: set[int] = set()
            imports = self.imports

            class Convolutions(cst.CSTVisitor):
                def visit_Call(self, node: cst.Call) -> None:
                    dimension = matching.convolution_dimension(imports.qualified_name(node.func))
                    if dimension is not None:
                        found.add(dimension)

            visit(self.module, Convolutions())
            self._convolution_dimensions = frozenset(found)
        return self._convolution_dimensions

    def cuda_training_script(self) -> cst.CSTNode | None:
        """The first training loop of a script (see ``is_script``) that names CUDA: where rules
        about a whole training run (its precision, its process-wide settings) report."""
        loops = self.training_loops
        if loops and self.is_script and matching.mentions_cuda(self.source):
            return loops[0]
        return None

    def module_setting(self, template: str) -> NodeEdit | None:
        """The edit that adds a process-wide setting after the module's imports (before the first
        function, class or loop): ``template`` is the statement with ``{torch}`` where the
        file's name for torch goes (``{torch}.backends.cudnn.benchmark = True``). None when the
        file does not import torch at the top or has no import line to put it after."""
        anchor = matching.module_settings_anchor(self.module)
        for statement in self.module.body:
            if statement is anchor:
                break
        else:
            return None
        reference = self.import_reference("torch")
        if reference is None or reference[1] is not None:
            return None
        return NodeEdit(anchor, template.format(torch=reference[0]) + "\n", "line_after")

    @property
    def is_script(self) -> bool:
        """The file is run as a program: it has an ``if __name__ == "__main__":`` block or a
        training loop outside any function. Process-wide settings (``cudnn.benchmark``, the matmul
        precision) belong in such entry points, not in library modules or test helpers that other
        code imports."""
        if not hasattr(self, "_is_script"):
            def top_level(statements) -> bool:
                for statement in statements:
                    if matching.is_main_guard(statement):
                        return True
                    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                        continue
                    if isinstance(statement, matching.LOOPS) and self.backpropagated_names(statement) is not None:
                        return True
                    for attr in ("body", "orelse", "finalbody"):
                        child = getattr(statement, attr, None)
                        if isinstance(child, cst.IndentedBlock) and top_level(child.body):
                            return True
                        if isinstance(child, cst.Else) and top_level(child.body.body):
                            return True
                        if isinstance(child, cst.If) and top_level([child]):
                            return True
                return False

            self._is_script = top_level(self.module.body)
        return self._is_script

    def mixed_precision_step(self, block: cst.IndentedBlock, index: int, loss_names: set[str], scaler: str,
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
        start = matching.computation_run(body, index, loss_names)
        if start == index:
            return None
        step = None
        for position in range(index + 1, len(body)):
            call = _bare_call(body[position])
            target = matching.method_call(call, "step") if call is not None and not call.args else None
            if target is not None and (self.code_for(target.value) == optimizer if optimizer is not None
                                       else self.is_optimizer(target.value)):
                step = position
                break
        if step is None:
            return None
        clip = None
        for statement in body[index + 1:step]:
            finder = _StepReader(self.imports)
            visit(statement, finder)
            if finder.reads_grad or (finder.clips and not isinstance(statement, cst.SimpleStatementLine)):
                return None
            if finder.clips and clip is None:
                clip = statement
        indent = self.block_indentation(block)
        unit = self.module.default_indent
        step_call = _bare_call(body[step])
        optimizer = self.code_for(step_call.func.value)
        edits = []
        for position in range(start, index):
            statement = body[position]
            code = self.statement_code(statement, block, unit)
            if position == start:
                edits.append(NodeEdit(statement, f"with {autocast}:\n{indent}{unit}{code}"))
            else:
                edits += [NodeEdit(statement, unit, "line_before"), NodeEdit(statement, code)]
        edits.append(NodeEdit(step_call, f"{scaler}.step({optimizer})"))
        edits.append(NodeEdit(body[step], f"{indent}{scaler}.update()\n", "line_after"))
        if clip is not None:
            edits.append(NodeEdit(clip, f"{indent}{scaler}.unscale_({optimizer})\n", "line_before"))
        return MixedPrecisionStep(tuple(edits), optimizer, clip)

    def unused_name(self, *candidates: str) -> str | None:
        """The first of ``candidates`` that nothing in the file binds or mentions."""
        for name in candidates:
            if name not in self.binding_counts and not re.search(rf"(?<![\w.]){re.escape(name)}\b", self.source):
                return name
        return None

    def is_optimizer(self, expr: cst.BaseExpression) -> bool:
        """A name bound to a ``torch.optim`` optimizer in this file, or named like one
        (``optimizer``, ``opt``, ``g_optim``); never a learning-rate scheduler."""
        name = matching.dotted_name(expr)
        if name is None:
            return False
        values = self.bindings.get(name, [])
        for value in values:
            if isinstance(value, cst.Call):
                qualified = self.qualified_name(value.func) or ""
                if qualified.startswith("torch.optim.") and ".lr_scheduler." not in qualified:
                    return True
        return bool(matching.OPTIMIZER_NAME.search(name.rsplit(".", 1)[-1]))

    def statement_code(self, statement: cst.SimpleStatementLine, block: cst.IndentedBlock | cst.Module,
                       extra_indent: str = "") -> str:
        """The code of a statement line of ``block`` (the module or an ancestor of the current
        node) from its first token to its last, re-indented one ``extra_indent`` deeper: what
        replaces the statement's span when a fix moves it into a new block (continuation lines of
        a call that spans lines move with it). Leading comment lines and the trailing comment are
        not part of the span and stay where they are."""
        from libcst._nodes.internal import CodegenState

        indent = "" if isinstance(block, cst.Module) else self.block_indentation(block)
        state = CodegenState(default_indent=self.module.default_indent, default_newline="\n")
        state.indent_tokens = [indent + extra_indent]
        statement.with_changes(leading_lines=(), trailing_whitespace=cst.TrailingWhitespace())._codegen(state)
        text = "".join(state.tokens)
        return text[len(indent + extra_indent):].rstrip("\n")

    # --- memory, devices, transfers and loop hygiene (TL1xx, TL2xx, TL8xx) ----------------------
    def device_move(self, call: cst.CSTNode, extra_names: tuple[str, ...] = ()) -> matching.DeviceMove | None:
        """What a ``.cuda(...)``, ``.to(<device>...)`` or ``.cpu()`` call moves to; None for any
        other call, and for ``.to(torch.float16)``, ``.to(other_tensor)`` or a ``.to()`` whose
        first argument is not clearly a device (see is_device)."""
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)):
            return None
        method = call.func.attr.value
        if method == "cpu":
            return None if call.args else matching.DeviceMove(
                call, "cpu", cst.SimpleString('"cpu"'), None, True, True, True)
        if method == "cuda":
            understood = not matching.has_star_args(call) and len(matching.positional_args(call)) <= 2 and all(
                a.keyword is None or a.keyword.value in ("device", "non_blocking") for a in call.args)
            index = matching.argument(call, "device", 0)
            if index is None or matching.is_literal(index.value, None):
                device, certain = cst.SimpleString('"cuda"'), True
            elif isinstance(index.value, cst.Integer):
                device, certain = cst.SimpleString(f'"cuda:{index.value.evaluated_value}"'), True
            else:  # an int variable or a device: `device=` reads an int as a CUDA index too, but not a str
                device, certain = index.value, False
            return matching.DeviceMove(call, "cuda", device, None, understood, certain, False)
        if method != "to" or matching.has_star_args(call):
            return None
        positional = matching.positional_args(call)
        device_arg = matching.keyword_arg(call, "device") or (positional[0] if positional else None)
        if device_arg is None or not self.is_device(device_arg.value, extra_names):
            return None
        dtype_arg = matching.keyword_arg(call, "dtype")
        if dtype_arg is None and len(positional) > 1 and positional[0] is device_arg:
            dtype_arg = positional[1]
        if dtype_arg is not None and not self.is_dtype(dtype_arg.value):
            return None
        understood = len(positional) <= 2 and all(
            a.keyword is None or a.keyword.value in ("device", "dtype", "non_blocking") for a in call.args)
        to_cpu = matching.device_kind(device_arg.value, self.imports) == "cpu" \
            and not isinstance(device_arg.value, cst.IfExp)
        return matching.DeviceMove(call, "to", device_arg.value, dtype_arg.value if dtype_arg else None,
                                   understood, True, to_cpu)

    def device_kind(self, expr: cst.BaseExpression) -> str | None:
        """``"cuda"``, ``"cpu"``, ``"mps"``... for a device written out or a name bound to one
        (every value the file assigns to it agrees); None when unknown."""
        kind = matching.device_kind(expr, self.imports)
        if kind is None and isinstance(expr, cst.Name):
            values = self.bindings.get(expr.value, [])
            kinds = {matching.device_kind(v, self.imports) if v is not None else None for v in values}
            if len(kinds) == 1:
                kind = kinds.pop()
        return kind

    def step_loop(self) -> cst.CSTNode | None:
        """The loop around the current node whose every iteration is one training step: the
        innermost enclosing loop (in this function) that calls backward. None when there is none,
        or when that loop also holds another loop that calls backward and the current node is not
        in it: then the node runs once per pass of that inner loop (an epoch loop)."""
        ancestors = {id(node) for node in self.ancestors}
        for loop in self._loops_in_function():
            if self.backpropagated_names(loop) is None:
                continue
            inner = [other for other in self.nested_loops(loop)
                     if id(other) not in ancestors and self.backpropagated_names(other) is not None]
            return None if inner else loop
        return None

    def nested_loops(self, loop: cst.CSTNode) -> list[cst.CSTNode]:
        """Every for/while loop inside ``loop``'s body (functions defined there left out)."""
        if not hasattr(self, "_nested"):
            self._nested: dict[int, list[cst.CSTNode]] = {}
        if id(loop) not in self._nested:
            found: list[cst.CSTNode] = []

            class Loops(cst.CSTVisitor):
                def on_visit(self, node: cst.CSTNode) -> bool:
                    if isinstance(node, matching.LOOPS):
                        found.append(node)
                    return not isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef))

            visit(loop.body, Loops())
            self._nested[id(loop)] = found
        return self._nested[id(loop)]

    def in_test_code(self) -> bool:
        """In a test: a file named ``test_*.py``/``*_test.py``/``conftest.py`` or under a
        ``tests``/``testing`` folder, a ``test_*`` function, or a method of a ``Test*``/``*Test``/
        ``TestCase`` class. Performance advice does not apply there."""
        path = Path(self.path)
        root = getattr(self.settings, "root", None)
        try:  # folders above the project root say nothing (a checkout in ~/test/)
            path = path.resolve().relative_to(Path(root).resolve()) if root is not None else path
        except (ValueError, OSError):
            pass
        parts = path.as_posix().split("/")
        name = parts[-1]
        if name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py" \
                or any(part in ("tests", "test", "testing") for part in parts[:-1]):
            return True
        for node in self.ancestors:
            if isinstance(node, cst.FunctionDef) and node.name.value.startswith("test_"):
                return True
            if isinstance(node, cst.ClassDef) and (node.name.value.startswith("Test") or node.name.value.endswith(
                    ("Test", "Tests", "TestCase"))):
                return True
        return False

    @property
    def module_classes(self) -> frozenset[str]:
        """Names of the file's ``torch.nn`` module classes (LightningModules included)."""
        if not hasattr(self, "_module_classes"):
            self._module_classes = matching.module_classes(self.module, self.imports)
        return self._module_classes

    def statement_edit(self, old: cst.CSTNode, new: Sequence[cst.BaseStatement]) -> NodeEdit:
        """An edit that replaces the statement ``old`` (the current node or one of its ancestors)
        with the statements ``new``, written at ``old``'s indentation. LibCST renders them, so
        nested blocks, comments and multi-line strings come out right. ``old``'s leading comment
        lines, its trailing comment and newline are outside its span and stay: ``new`` should end
        with the same last line as ``old`` (wrapping or unwrapping a block does)."""
        from libcst._nodes.internal import CodegenState

        index = next(i for i, node in enumerate(self.ancestors) if node is old)
        blocks = [node for node in self.ancestors[:index] if isinstance(node, cst.IndentedBlock)]
        indent = self.block_indentation(blocks[-1]) if blocks else ""
        first = new[0].with_changes(leading_lines=[line for line in new[0].leading_lines if line.comment])
        statements = [first, *new[1:]]
        statements[-1] = _mark_end(statements[-1])
        # "\n": the engine turns a text edit's newlines into the file's own
        state = CodegenState(default_indent=self.module.default_indent, default_newline="\n")
        state.indent_tokens = [indent] if indent else []
        for statement in statements:
            statement._codegen(state)
        text = "".join(state.tokens)
        text = text[: text.rindex(_END_MARK)]
        return NodeEdit(old, text[len(indent):] if text.startswith(indent) else text, "replace")

    def removal_edit(self, statement: cst.BaseStatement) -> NodeEdit | None:
        """An edit that deletes a statement (an ancestor of the current node) with its lines; its
        own leading comment lines move to the statement after it. A statement alone in its block
        becomes ``pass``. None when that cannot be done cleanly (several statements on one line,
        or comment lines above the last statement of a block)."""
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) != 1:
            return None
        index = next(i for i, node in enumerate(self.ancestors) if node is statement)
        block = self.ancestors[index - 1]
        body = list(block.body)
        if len(body) == 1:
            if isinstance(statement, cst.SimpleStatementLine):
                return NodeEdit(statement.body[0], "pass", "replace")
            return self.statement_edit(statement, [cst.SimpleStatementLine([cst.Pass()])])
        position = body.index(statement)
        comments = [line for line in statement.leading_lines if line.comment]
        if position == len(body) - 1:
            if comments:
                return None
            new_body = body[:-1]
        else:
            following = body[position + 1]
            # blank lines that separated the removed statement separate the next one, unless it
            # has its own; comment lines go with them
            moved = list(statement.leading_lines) if comments or not following.leading_lines else []
            new_body = body[:position] + [following.with_changes(
                leading_lines=[*moved, *following.leading_lines])] + body[position + 2:]
        new_block = block.with_changes(body=new_body)
        # The edit covers the innermost enclosing statement whose span does not end inside the
        # removed statement (the text after a span stays, and must not be the removed newline).
        for i in range(index - 2, 0, -1):
            owner = self.ancestors[i]
            if isinstance(owner, cst.BaseCompoundStatement) and \
                    not matching.contains(statement, matching.last_simple_statement(owner)):
                changed = owner.deep_replace(block, new_block).with_changes(leading_lines=[])
                return self.statement_edit(owner, [changed])
        return NodeEdit(self.module, self.module.deep_replace(block, new_block), "replace")


# --- statement rewriting helpers (memory, devices, transfers and loop hygiene) -------------------

_END_MARK = "#<torchlint:end>"


def _mark_end(statement: cst.CSTNode) -> cst.CSTNode:
    """``statement`` with its last line's trailing whitespace replaced by a marker comment (and
    the line's trailing semicolon dropped): the text up to the marker is the statement's span."""
    last = matching.last_simple_statement(statement)
    if last is None:
        return statement
    small = list(last.body)
    small[-1] = small[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
    marked = last.with_changes(body=small, trailing_whitespace=cst.TrailingWhitespace(
        whitespace=cst.SimpleWhitespace(""), comment=cst.Comment(_END_MARK)))
    return marked if last is statement else statement.deep_replace(last, marked)


def _bare_call(statement: cst.CSTNode) -> cst.Call | None:
    """The call of a statement line that is nothing but one call (``optimizer.step()``)."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            and isinstance(statement.body[0], cst.Expr) and isinstance(statement.body[0].value, cst.Call):
        return statement.body[0].value
    return None


class _StepReader(cst.CSTVisitor):
    """Between backward and step: does the code read ``.grad`` or clip gradients?"""

    def __init__(self, imports: matching.ImportMap):
        self.imports = imports
        self.reads_grad = False
        self.clips = False

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "grad":
            self.reads_grad = True

    def visit_Call(self, node: cst.Call) -> None:
        if self.imports.qualified_name(node.func) in matching.CLIP_GRAD_FUNCTIONS:
            self.clips = True


# --- discovery ---------------------------------------------------------------------------------

@cache
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class in ``torchlint.rules``, sorted by code. Adding a rule is adding a module."""
    import torchlint.rules as package

    found: dict[str, type[Rule]] = {}
    names: dict[str, str] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, Rule) and obj.__module__ == module.__name__ \
                    and "code" in vars(obj):
                _check_metadata(obj)
                if obj.code in found or obj.name in names:
                    raise RuntimeError(f"duplicate rule {obj.code} {obj.name} in {module.__name__}")
                found[obj.code] = obj
                names[obj.name] = obj.code
    return tuple(found[code] for code in sorted(found))


def _check_metadata(rule: type[Rule]) -> None:
    problems = []
    if not (rule.code.startswith("TL") and rule.code[2:].isdigit() and len(rule.code) == 5):
        problems.append("code must be TL + 3 digits")
    if rule.kind not in KINDS:
        problems.append(f"kind must be one of {KINDS}")
    if rule.fix_applicability not in (SAFE, UNSAFE, NO_FIX):
        problems.append("fix_applicability must be safe, unsafe or none")
    if not rule.triggers:
        problems.append("triggers must name at least one raw-text trigger")
    if not rule.docs():
        problems.append("the module docstring is the rule's documentation and must not be empty")
    if problems:
        raise RuntimeError(f"rule {rule.__module__}: " + "; ".join(problems))


def rule_by_selector(text: str) -> type[Rule] | None:
    for rule in all_rules():
        if text.upper() == rule.code or text.lower() == rule.name:
            return rule
    return None
