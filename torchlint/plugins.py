"""Third-party rules. A package ships rules by declaring entry points in the group
``torchlint.rules``; each names a module (every Rule subclass defined in it is a rule) or one Rule
subclass::

    [project.entry-points."torchlint.rules"]
    example = "torchlint_example_plugin.seed_in_loop"            # a module
    other = "torchlint_example_plugin.other:SomeRule"             # a class

They are loaded after the built-in rules and are rules like them: the same ``Rule`` base, the same
selectors, ``# noqa``, per-rule options and docs (``torchlint rule CODE``, ``python -m
torchlint.docs --plugin NAME``). A plugin that fails to import, or a rule of it whose metadata is
wrong, whose code uses torchlint's own ``TL`` prefix, or whose code or name another rule already
has, is skipped with a message naming its distribution and entry point: linting with every other
rule goes on.

This module knows nothing of the Rule class (torchlint/rule.py hands it in), so that the registry
can import it without a cycle.
"""

from __future__ import annotations

import importlib.machinery
import inspect
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Callable

GROUP = "torchlint.rules"
BUILTIN = "torchlint"  # the origin of the rules that torchlint itself ships
RESERVED_PREFIX = "TL"


@dataclass(frozen=True)
class Plugin:
    """Where a third-party rule comes from: its distribution and entry point."""

    distribution: str
    version: str
    entry_point: str  # "name = value", as the package declares it

    @property
    def origin(self) -> str:
        """``"torchlint-example-plugin 0.1.0"``: what `torchlint rules` shows."""
        return f"{self.distribution} {self.version}".strip()

    def __str__(self) -> str:
        return f"plugin `{self.entry_point}` (entry point of {self.origin} in group {GROUP})"


@dataclass
class Loaded:
    rules: list[type] = field(default_factory=list)
    plugins: dict[type, Plugin] = field(default_factory=dict)  # rule class -> its plugin
    problems: list[str] = field(default_factory=list)  # one line each, for a warning


def entry_points() -> list[importlib.metadata.EntryPoint]:
    """The installed entry points of the group, in a stable order."""
    if not _may_declare(GROUP):
        return []
    import importlib.metadata

    found = importlib.metadata.entry_points(group=GROUP)
    return sorted(found, key=lambda ep: (_distribution(ep)[0], ep.name, ep.value))


def _may_declare(group: str) -> bool:
    """Whether an installed distribution may declare entry points of ``group``: its name appears in
    some ``entry_points.txt`` of a metadata folder on ``sys.path``. Importing importlib.metadata and
    reading every distribution's metadata costs start-up (tens of milliseconds) that a run with no
    plugin installed need not pay. Where the answer is not that plain (a zip on the path, a finder
    that lists distributions of its own), the answer is yes and importlib.metadata decides."""
    for finder in sys.meta_path:
        if finder is not importlib.machinery.PathFinder and hasattr(finder, "find_distributions"):
            return True
    for entry in sys.path:
        folder = entry or os.curdir
        if not os.path.isdir(folder):
            if os.path.exists(folder):
                return True  # an archive: importlib.metadata reads it
            continue
        try:
            names = os.listdir(folder)
        except OSError:
            continue  # importlib.metadata skips an unreadable folder too
        for name in names:
            if name.endswith((".dist-info", ".egg-info")):
                declared = os.path.join(folder, name, "entry_points.txt")
                try:
                    with open(declared, encoding="utf-8", errors="replace") as file:
                        if group in file.read():
                            return True
                except OSError:
                    continue  # no entry points (or a one-file .egg-info, which declares none)
    return False


def _distribution(ep: importlib.metadata.EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "an unknown distribution", ""
    return dist.metadata["Name"] or "an unknown distribution", dist.version or ""


def _rules_of(loaded: object, base: type) -> list[type] | None:
    """The rule classes an entry point names: the class itself, or those its module defines."""
    if inspect.isclass(loaded):
        return [loaded] if issubclass(loaded, base) and loaded is not base else None
    if isinstance(loaded, types.ModuleType):
        return [obj for obj in vars(loaded).values() if inspect.isclass(obj) and issubclass(obj, base)
                and obj.__module__ == loaded.__name__ and "code" in vars(obj)]
    return None


def load(builtin: dict[str, type], base: type, check: Callable[[type], None]) -> Loaded:
    """The rules of every installed plugin that loads and does not clash with ``builtin`` (code ->
    rule) or with an earlier plugin; ``check`` raises RuntimeError on bad metadata."""
    result = Loaded()
    codes: dict[str, str] = {code: f"torchlint's {code} {rule.name}" for code, rule in builtin.items()}
    names: dict[str, str] = {rule.name: f"torchlint's {code} {rule.name}" for code, rule in builtin.items()}
    for ep in entry_points():
        distribution, version = _distribution(ep)
        plugin = Plugin(distribution, version, f"{ep.name} = {ep.value}")
        try:
            loaded = ep.load()
        except Exception as error:  # noqa: BLE001 - any failure of a plugin's import skips it, nothing more
            result.problems.append(f"{plugin} cannot be loaded ({error.__class__.__name__}: {error}); "
                                   "its rules are skipped")
            continue
        rules = _rules_of(loaded, base)
        if not rules:
            what = "defines no rule (a subclass of torchlint.rule.Rule with a `code`)" if rules is not None \
                else "names neither a module nor a subclass of torchlint.rule.Rule"
            result.problems.append(f"{plugin} {what}; nothing is loaded from it")
            continue
        for rule in rules:
            problem = _refused(rule, check, codes, names)
            if problem:
                result.problems.append(f"{plugin}: rule {getattr(rule, 'code', '?')} "
                                       f"({rule.__module__}.{rule.__qualname__}) is skipped: {problem}")
                continue
            owner = f"{plugin.origin}'s {rule.code} {rule.name}"
            codes[rule.code], names[rule.name] = owner, owner
            result.rules.append(rule)
            result.plugins[rule] = plugin
    return result


def _refused(rule: type, check: Callable[[type], None], codes: dict[str, str], names: dict[str, str]) -> str:
    """Why a plugin's rule cannot be registered, or ''."""
    try:
        check(rule)
    except RuntimeError as error:
        return str(error).split(": ", 1)[-1]
    except Exception as error:  # noqa: BLE001 - its metadata or docs raise: the rule is unusable
        return f"reading its metadata raises {error.__class__.__name__}: {error}"
    if rule.code.startswith(RESERVED_PREFIX):
        return (f"its code `{rule.code}` uses torchlint's own prefix {RESERVED_PREFIX}; a plugin's codes take a "
                "prefix of their own (XYZ001)")
    if rule.code in codes:
        return f"its code {rule.code} is {codes[rule.code]}"
    if rule.name in names:
        return f"its name `{rule.name}` is {names[rule.name]}"
    return ""
