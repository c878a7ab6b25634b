"""The anatomy of a rule (see DESIGN.md "A rule") and the per-file context every rule reads.

A rule is a class in its own module under ``rules/``. The module docstring is the rule's user
documentation; the class carries the metadata and the ``visit_<Node>``/``leave_<Node>`` methods
that the engine runs, batched with every other enabled rule, in one traversal of the file.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar

import libcst as cst

from torchlint import matching
from torchlint.diagnostics import NO_FIX, SAFE, UNSAFE, Severity

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
            loop.visit(finder)
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
        """The innermost enclosing loop that evaluates a model: not a training loop, and either in
        a function named like evaluation (``validate``, ``evaluate``, ``test_epoch``...) or after a
        ``model.eval()`` call earlier in the same function."""
        loops = self._loops_in_function()
        if not loops or any(self.backpropagated_names(loop) is not None for loop in loops):
            return None
        function = self.enclosing_function()
        if function is not None and matching.EVAL_FUNCTION.search(function.name.value):
            return loops[0]
        # a `model.eval()` statement before the outermost loop, in the same block
        outer = loops[-1]
        for i in range(len(self.ancestors) - 1):
            if self.ancestors[i + 1] is outer and isinstance(self.ancestors[i], (cst.Module, cst.IndentedBlock)):
                body = list(self.ancestors[i].body)
                before = body[: body.index(outer)]
                if any(matching.contains_eval_call(stmt) for stmt in before):
                    return loops[0]
        return None

    def grad_disabled(self) -> bool:
        """Under ``torch.no_grad()``/``inference_mode()``/``set_grad_enabled(False)``, as a with
        block or as a decorator of an enclosing function."""
        for node in self.ancestors[:-1]:
            if isinstance(node, cst.With) and any(
                    matching.with_item_disables_grad(item, self.imports) for item in node.items):
                return True
            if isinstance(node, cst.FunctionDef) and any(
                    matching.decorator_disables_grad(d, self.imports) for d in node.decorators):
                return True
        return False

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
