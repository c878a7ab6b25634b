"""The rule reference under ``docs/rules/``: one page per rule, made from its docstring and
metadata, and an index. ``python -m torchlint.docs`` writes them; ``--check`` only says whether
the committed pages are current (tests/test_docs.py runs the same comparison).

The pages are what ``codeDescription.href`` in torchlint's output points to
(``docs/rules/<CODE>.md``, see torchlint.output.DOCS_URL).

A plugin's rules (torchlint/plugins.py) get their pages the same way, into the plugin's own folder:
``python -m torchlint.docs --plugin DISTRIBUTION --out docs/rules``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torchlint.rule import Rule, all_rules, builtin_rules, rule_plugin

DOCS_DIR = Path(__file__).resolve().parent.parent / "docs" / "rules"
INDEX = "README.md"
FIX_TEXT = {"safe": "safe: applied by `--fix`", "unsafe": "unsafe: applied with `--fix --unsafe-fixes`",
            "none": "none: the message says what to write"}
FAMILIES = {"0": "tool", "1": "memory and autograd", "2": "devices and transfers", "3": "optimizer step",
            "4": "model architecture", "5": "distributed", "6": "data loading", "7": "precision and AMP",
            "8": "host syncs and loop hygiene", "9": "Lightning"}


# Test code: test files (test_*.py and *_test.py holding a test, conftest.py, under tests/ or testing/), test_*
# functions that the file does not call itself, and unittest TestCase methods (Programs.in_test_code).
TEST_CODE_TEXT = {
    True: "not reported (a test's speed is not the point; see the README's \"Test code\")",
    False: "reported",
}


def rule_page(rule: type[Rule]) -> str:
    """The Markdown page of one rule: a metadata table, then the rule's own documentation."""
    rows = [
        ("Code", f"`{rule.code}`"),
        ("Name", f"`{rule.name}`"),
        ("Kind", rule.kind),
        ("Default severity", rule.severity.name.lower()),
        ("Fix", FIX_TEXT[rule.fix_applicability]),
        ("Enabled by default", "yes" if rule.default_enabled else "no (select it with `--select` or `extend-select`)"),
        ("In test code", TEST_CODE_TEXT[rule.silent_in_test_code()]),
    ]
    if rule.torch_versions:
        rows.append(("Target torch", f"`{rule.torch_versions}`"))
    if rule.lightning_versions:
        rows.append(("Target Lightning", f"`{rule.lightning_versions}`"))
    plugin = rule_plugin(rule)
    if plugin is not None:
        rows.append(("Origin", f"`{plugin.origin}` (plugin, entry point `{plugin.entry_point}`)"))
    for option, (kind, default, description) in sorted(rule.options.items()):
        rows.append((f"Option `{option}`", f"{description} ({kind.__name__}, default `{default!r}`)"))
    table = "\n".join(["| | |", "|---|---|"] + [f"| {key} | {value} |" for key, value in rows])
    return f"# {rule.code} {rule.name}\n\n{rule.summary}\n\n{table}\n\n{rule.docs().strip()}\n"


def _family(rule: type[Rule]) -> str:
    """The heading a rule is listed under: its TL family, or a plugin's prefix and package."""
    plugin = rule_plugin(rule)
    if plugin is None:
        return f"TL{rule.code[2]}xx: {FAMILIES.get(rule.code[2], 'other')}"
    return f"{rule.code.rstrip('0123456789')}: {plugin.origin}"


def index_page(rules: tuple[type[Rule], ...], plugin: str | None = None) -> str:
    made = f"`python -m torchlint.docs --plugin {plugin}`" if plugin else "`python -m torchlint.docs`"
    lines = ["# Rules", "",
             f"Every rule of {plugin or 'torchlint'}, generated from the rules' own documentation by {made}. "
             "`torchlint rule CODE` prints the same text.", ""]
    family = None
    for rule in rules:
        if _family(rule) != family:
            family = _family(rule)
            lines += ["", f"## {family}", "",
                      "| code | name | kind | fix | summary |", "|---|---|---|---|---|"]
        lines.append(f"| [{rule.code}]({rule.code}.md) | `{rule.name}` | {rule.kind} | {rule.fix_applicability} "
                     f"| {rule.summary.replace('|', '&#124;')} |")
    return "\n".join(lines).replace("\n\n\n", "\n\n") + "\n"


def plugin_rules(distribution: str) -> tuple[type[Rule], ...]:
    """The rules of an installed plugin, by its distribution's name (case and ``-``/``_`` aside)."""
    def key(name: str) -> str:
        return name.lower().replace("_", "-").replace(".", "-")

    return tuple(rule for rule in all_rules()
                 if (plugin := rule_plugin(rule)) is not None and key(plugin.distribution) == key(distribution))


def render(plugin: str | None = None) -> dict[str, str]:
    """File name -> content of every page: of torchlint's own rules, or of one plugin's."""
    rules = plugin_rules(plugin) if plugin else builtin_rules()
    if plugin and rules:
        plugin = rule_plugin(rules[0]).distribution  # as the distribution spells its name
    pages = {f"{rule.code}.md": rule_page(rule) for rule in rules}
    pages[INDEX] = index_page(rules, plugin)
    return pages


def stale(directory: Path = DOCS_DIR, plugin: str | None = None) -> list[str]:
    """Pages that are missing, different from what the rules say, or left over from a removed rule."""
    pages = render(plugin)
    problems = [name for name, text in sorted(pages.items())
                if not (directory / name).is_file() or (directory / name).read_text(encoding="utf-8") != text]
    if directory.is_dir():
        problems += sorted(p.name for p in directory.glob("*.md") if p.name not in pages)
    return problems


def write(directory: Path = DOCS_DIR, plugin: str | None = None) -> list[str]:
    """Write every page, delete pages of rules that no longer exist; return what changed."""
    changed = stale(directory, plugin)
    pages = render(plugin)
    directory.mkdir(parents=True, exist_ok=True)
    for name in changed:
        path = directory / name
        if name in pages:
            path.write_text(pages[name], encoding="utf-8", newline="\n")
        else:
            path.unlink()
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchlint.docs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale pages (exit 1 if any)")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"directory to write (default: {DOCS_DIR}; with --plugin, docs/rules)")
    parser.add_argument("--plugin", metavar="DISTRIBUTION",
                        help="the pages of an installed plugin's rules instead of torchlint's own")
    args = parser.parse_args(argv)
    out = args.out or (Path("docs/rules") if args.plugin else DOCS_DIR)
    if args.plugin and not plugin_rules(args.plugin):
        from torchlint.rule import plugin_problems

        print(f"no installed plugin named `{args.plugin}` ships rules (see `torchlint rules`)", file=sys.stderr)
        for problem in plugin_problems():
            print(f"warning: {problem}", file=sys.stderr)
        return 2
    if args.check:
        problems = stale(out, args.plugin)
        command = f"python -m torchlint.docs --plugin {args.plugin}" if args.plugin else "python -m torchlint.docs"
        for name in problems:
            print(f"{out / name}: out of date; run `{command}`", file=sys.stderr)
        return 1 if problems else 0
    for name in write(out, args.plugin):
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
