"""The layout stays easy to read as it grows (issue 11): no import cycles, no module or class so
large that a line cannot tell which room it is in, and rules that ask the semantic model instead
of each other.

Imports are read from the source (CPython's tree), function-local ones included; imports under
``if TYPE_CHECKING:`` never run and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGES = {"torchlint": ROOT / "torchlint", "torchlint.rules": ROOT / "rules"}
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 300
# What a rule module may import from torchlint: the semantic model, the fix writer, the rule base
# and the family modules of rules/ (named with a leading underscore).
RULE_IMPORTS = ("torchlint.analysis", "torchlint.fixes", "torchlint.lazy", "torchlint.rule")


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            relative = path.relative_to(folder).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


def _runtime_nodes(tree: ast.AST):
    """Every node, except what sits under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING":
                stack.extend(child.orelse)
                continue
            stack.append(child)


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The torchlint modules a module imports (``from torchlint import fixes`` counts as
    torchlint.fixes)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found |= {target for target in targets if target in known and target != name}
    return found


GRAPH = {name: imported(name, path, modules()) for name, path in modules().items()}


def test_no_import_cycles():
    state: dict[str, int] = {}
    cycles = []

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for target in sorted(GRAPH[name]):
            if state.get(target) == 1:
                cycles.append(trail[trail.index(target):] + [target] if target in trail else [name, target])
            elif target not in state:
                visit(target, trail + [target])
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])
    assert cycles == []


@pytest.mark.parametrize("name", sorted(modules()))
def test_module_and_class_sizes(name):
    path = modules()[name]
    text = path.read_text(encoding="utf-8")
    assert text.count("\n") <= MAX_MODULE_LINES, f"{path}: split it by question"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            assert node.end_lineno - node.lineno <= MAX_CLASS_LINES, f"{path}: class {node.name} is too large"


def test_rules_ask_the_semantic_model_not_each_other():
    problems = []
    for name, targets in GRAPH.items():
        if not name.startswith("torchlint.rules."):
            continue
        for target in targets:
            family = target.startswith("torchlint.rules._")
            if not (family or target.startswith(RULE_IMPORTS) or target == "torchlint.rules"):
                problems.append(f"{name} imports {target}")
            if family and name.rsplit(".", 1)[1].startswith("_") and not target.startswith(RULE_IMPORTS):
                problems.append(f"family module {name} imports {target}")
    assert problems == []


def test_the_engine_never_imports_a_family_module():
    assert [f"{name} imports {target}" for name, targets in GRAPH.items() if not name.startswith("torchlint.rules")
            for target in targets if target.startswith("torchlint.rules.")] == []


def test_the_semantic_model_knows_no_rule():
    """It reads files (torchlint.fileio), answers questions and locates them (torchlint.diagnostics),
    and imports LibCST on first use (torchlint.lazy); it knows nothing of rules, fixes or the engine."""
    allowed = ("torchlint.analysis", "torchlint.fileio", "torchlint.diagnostics", "torchlint.lazy")
    assert [f"{name} imports {target}" for name, targets in GRAPH.items() if name.startswith("torchlint.analysis")
            for target in targets if not target.startswith(allowed)] == []
