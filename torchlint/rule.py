"""The anatomy of a rule (see DESIGN.md "A rule" and docs/writing-rules.md).

A rule is a class in its own module under ``rules/``. The module docstring is the rule's user
documentation; the class carries the metadata, the filters that decide whether it runs on a file
(``triggers``/``applies`` on the raw text, ``precheck`` on CPython's tree) and the
``visit_<Node>``/``leave_<Node>`` methods that the engine runs, batched with every other enabled
rule, in one traversal of the file's LibCST tree. ``self.ctx`` (torchlint/context.py) holds the
file and the semantic model's analyses; ``torchlint.fixes`` writes fixes.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar

from torchlint import fixes, plugins
from torchlint.analysis.index import SyntaxIndex
from torchlint.context import RuleContext
from torchlint.diagnostics import NO_FIX, SAFE, UNSAFE, Related, Severity
from torchlint.fixes import FixBuilder, FixSpec, NodeEdit
from torchlint.analysis.versions import version_matches
from torchlint.lazy import libcst as cst

__all__ = ["Rule", "RuleContext", "Report", "Related", "Severity", "SyntaxIndex", "all_rules", "builtin_rules",
           "data_table", "plugin_problems", "rule_by_selector", "rule_origin"]

KINDS = ("performance", "correctness", "deprecation", "migration")
# A family prefix and a number: TL + family digit (TL101), a family of its own (TLC001 compile
# readiness), or a third-party package's prefix.
CODE = re.compile(r"[A-Z]{2,5}\d{3}")


@dataclass
class Report:
    rule: Rule
    node: cst.CSTNode
    message: str
    fix: FixSpec | None
    severity: Severity | None = None  # overrides the rule's default for this finding
    related: tuple[Related, ...] = ()


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
    triggers: ClassVar[tuple[str, ...]] = ()  # the default `applies`: the raw text contains one of these
    # Words (analysis/project.WORDS) that let the rule fire through the project's own modules: a file
    # that `applies` rejects still reaches the rule when a module it imports contains one of them.
    reaches: ClassVar[tuple[str, ...]] = ()
    # Rules whose fixes must not be applied in the same round as this rule's: each could be safe
    # alone and unsafe together (a GradScaler and a fused SGD). The next round lints the file again,
    # and each rule then sees what the other wrote.
    fix_conflicts: ClassVar[tuple[str, ...]] = ()
    default_enabled: ClassVar[bool] = True
    # Findings in test code (Programs.in_test_code) are dropped for performance advice, and for a
    # rule that sets this: code that tests do on purpose (calling `forward` directly, building an
    # FSDP1 model, an optimizer stepped without zero_grad). A test file is then not checked at all.
    quiet_in_tests: ClassVar[bool] = False
    # option name -> (type, default, description); read with self.option(name)
    options: ClassVar[dict[str, tuple[type, Any, str]]] = {}
    # What the docs' "Example" and "Use instead" blocks may take for granted: the test that lints
    # them puts this in front (tests/test_docs.py).
    # Where the rule's page is published: torchlint's own rules leave it empty (their pages are
    # docs/rules/ of torchlint); a plugin's rule names its own page, if it has one.
    documentation_url: ClassVar[str] = ""
    example_prelude: ClassVar[str] = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
                                      "from torch.utils.data import DataLoader\n")

    def __init__(self, ctx: RuleContext):
        self.ctx = ctx

    # reporting -------------------------------------------------------------------------------------
    def report(self, node: cst.CSTNode, message: str, fix: FixSpec | None = None,
               severity: Severity | None = None, related: tuple[Related, ...] = ()) -> None:
        """Report a finding at ``node``. Performance advice is dropped in test code (a test's speed
        is not the point; see Programs.in_test_code), and so is every finding of a rule that is
        ``quiet_in_tests``: other correctness, deprecation and migration findings stand there too."""
        if self.silent_in_test_code() and self.ctx.programs.in_test_code():
            return
        self.ctx.reports.append(Report(self, node, message, fix, severity, related))

    @classmethod
    def silent_in_test_code(cls) -> bool:
        """Are all the rule's findings dropped in test code (see ``report``)?"""
        return cls.kind == "performance" or cls.quiet_in_tests

    def fix(self, title: str, *edits: NodeEdit, applicability: str | None = None) -> FixSpec:
        """A fix made of the given edits (``self.replace(node, new)``...)."""
        return FixSpec(title, applicability or self.fix_applicability, tuple(edits))

    def fix_builder(self, title: str, applicability: str | None = None) -> FixBuilder:
        """A fix built step by step (see torchlint/fixes.py), for fixes that add imports or
        rewrite statements."""
        return FixBuilder(self.ctx, title, applicability or self.fix_applicability)

    replace = staticmethod(fixes.replace)
    insert_before = staticmethod(fixes.insert_before)
    insert_after = staticmethod(fixes.insert_after)
    insert_lines_after = staticmethod(fixes.insert_lines_after)
    insert_lines_before = staticmethod(fixes.insert_lines_before)

    def option(self, name: str) -> Any:
        return self.ctx.settings.rule_option(self.name, name, self.options[name][1])

    # the filters -------------------------------------------------------------------------------------
    @classmethod
    def applies(cls, text: str) -> bool:
        """The raw-text prefilter: may the rule fire on a file with this text? It may say yes to text
        the rule ends up silent on, never no to text it would fire on. Override it for a sharper test
        than "contains one of the triggers"."""
        return any(trigger in text for trigger in cls.triggers)

    @classmethod
    def reachable(cls, text: str) -> bool:
        """What the file's own text must still show for the rule to fire through the project's
        modules (``reaches``): a necessary condition, like ``applies`` (a loop of its own, say)."""
        return True

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        """The cheap first pass, on CPython's syntax tree of a file whose text passed ``applies``
        (see torchlint/analysis/index.py): can the shapes the rule reports occur in the file? Like
        ``applies`` it may say yes wrongly, never no wrongly."""
        return True

    # metadata ------------------------------------------------------------------------------------------
    @classmethod
    def docs(cls) -> str:
        return inspect.cleandoc(sys.modules[cls.__module__].__doc__ or "")

    @classmethod
    def applies_to(cls, target_torch: tuple[int, ...], target_lightning: tuple[int, ...]) -> bool:
        return (not cls.torch_versions or version_matches(cls.torch_versions, target_torch)) and (
            not cls.lightning_versions or version_matches(cls.lightning_versions, target_lightning))


# --- data tables and discovery ------------------------------------------------------------------------

def data_table(name: str) -> object:
    """A YAML data table shipped beside the rules (``rules/<name>``), read once per process."""
    return _data_table(name)


@cache
def _data_table(name: str) -> object:
    from importlib import resources

    import yaml

    text = resources.files("torchlint.rules").joinpath(name).read_text(encoding="utf-8")
    if not hasattr(yaml, "CSafeLoader"):
        return yaml.safe_load(text)
    # libyaml's safe loader, which yaml.safe_load does not pick by itself: a tenth of the time, and
    # start-up feels it
    reader = yaml.CSafeLoader(text)
    try:
        return reader.get_single_data()
    finally:
        reader.dispose()


def all_rules() -> tuple[type[Rule], ...]:
    """Every rule: torchlint's own, sorted by code, then those of installed plugins (entry points of
    the group ``torchlint.rules``, see torchlint/plugins.py), sorted by code."""
    return _registry().rules


def rule_origin(rule: type[Rule]) -> str:
    """Where a rule comes from: ``"torchlint"``, or its plugin's distribution and version."""
    plugin = _registry().plugins.get(rule)
    return plugin.origin if plugin else plugins.BUILTIN


def rule_plugin(rule: type[Rule]) -> plugins.Plugin | None:
    """The plugin that ships a rule; None for torchlint's own."""
    return _registry().plugins.get(rule)


def plugin_problems() -> tuple[str, ...]:
    """Why plugins or rules of plugins were skipped, a line each (the command line warns)."""
    return _registry().problems


@dataclass(frozen=True)
class _Registry:
    rules: tuple[type[Rule], ...]
    plugins: dict[type[Rule], plugins.Plugin]
    problems: tuple[str, ...]


@cache
def _registry() -> _Registry:
    builtin = builtin_rules()
    loaded = plugins.load({rule.code: rule for rule in builtin}, Rule, _check_metadata)
    extra = tuple(sorted(loaded.rules, key=lambda rule: rule.code))
    return _Registry(builtin + extra, loaded.plugins, tuple(loaded.problems))


def reload_rules() -> None:
    """Forget the rules found so far (after installing a plugin in-process; tests)."""
    _registry.cache_clear()


@cache
def builtin_rules() -> tuple[type[Rule], ...]:
    """Every rule class in ``torchlint.rules``, sorted by code. Adding a rule is adding a module;
    modules whose name starts with ``_`` hold what a family of rules shares."""
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
    if not CODE.fullmatch(rule.code):
        problems.append("code must be a prefix of capital letters and 3 digits (TL101, TLC001)")
    if rule.kind not in KINDS:
        problems.append(f"kind must be one of {KINDS}")
    if rule.fix_applicability not in (SAFE, UNSAFE, NO_FIX):
        problems.append("fix_applicability must be safe, unsafe or none")
    if not rule.triggers and rule.applies.__func__ is Rule.applies.__func__:
        problems.append("a rule must name raw-text `triggers` or define `applies(text)`")
    if not (sys.modules[rule.__module__].__doc__ or "").strip():  # what `docs` renders (not rendered here)
        problems.append("the module docstring is the rule's documentation and must not be empty")
    if problems:
        raise RuntimeError(f"rule {rule.__module__}: " + "; ".join(problems))


def rule_by_selector(text: str) -> type[Rule] | None:
    for rule in all_rules():
        if text.upper() == rule.code or text.lower() == rule.name:
            return rule
    return None
