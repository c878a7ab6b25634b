"""The rule reference under ``docs/rules/``: one page per rule, made from its docstring and
metadata, and an index. ``python -m torchlint.docs`` writes them; ``--check`` only says whether
the committed pages are current (tests/test_docs.py runs the same comparison).

The pages are what ``codeDescription.href`` in torchlint's output points to
(``docs/rules/<CODE>.md``, see torchlint.output.DOCS_URL).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torchlint.rule import Rule, all_rules

DOCS_DIR = Path(__file__).resolve().parent.parent / "docs" / "rules"
INDEX = "README.md"
FIX_TEXT = {"safe": "safe: applied by `--fix`", "unsafe": "unsafe: applied with `--fix --unsafe-fixes`",
            "none": "none: the message says what to write"}
FAMILIES = {"0": "tool", "1": "memory and autograd", "2": "devices and transfers", "3": "optimizer step",
            "4": "model architecture", "5": "distributed", "6": "data loading", "7": "precision and AMP",
            "8": "host syncs and loop hygiene", "9": "Lightning"}


def rule_page(rule: type[Rule]) -> str:
    """The Markdown page of one rule: a metadata table, then the rule's own documentation."""
    rows = [
        ("Code", f"`{rule.code}`"),
        ("Name", f"`{rule.name}`"),
        ("Kind", rule.kind),
        ("Default severity", rule.severity.name.lower()),
        ("Fix", FIX_TEXT[rule.fix_applicability]),
        ("Enabled by default", "yes" if rule.default_enabled else "no (select it with `--select` or `extend-select`)"),
    ]
    if rule.torch_versions:
        rows.append(("Target torch", f"`{rule.torch_versions}`"))
    if rule.lightning_versions:
        rows.append(("Target Lightning", f"`{rule.lightning_versions}`"))
    for option, (kind, default, description) in sorted(rule.options.items()):
        rows.append((f"Option `{option}`", f"{description} ({kind.__name__}, default `{default!r}`)"))
    table = "\n".join(["| | |", "|---|---|"] + [f"| {key} | {value} |" for key, value in rows])
    return f"# {rule.code} {rule.name}\n\n{rule.summary}\n\n{table}\n\n{rule.docs().strip()}\n"


def index_page(rules: tuple[type[Rule], ...]) -> str:
    lines = ["# Rules", "",
             "Every rule of torchlint, generated from the rules' own documentation by `python -m torchlint.docs`. "
             "`torchlint rule CODE` prints the same text.", ""]
    family = None
    for rule in rules:
        if rule.code[2] != family:
            family = rule.code[2]
            lines += ["", f"## TL{family}xx: {FAMILIES.get(family, 'other')}", "",
                      "| code | name | kind | fix | summary |", "|---|---|---|---|---|"]
        lines.append(f"| [{rule.code}]({rule.code}.md) | `{rule.name}` | {rule.kind} | {rule.fix_applicability} "
                     f"| {rule.summary.replace('|', '&#124;')} |")
    return "\n".join(lines).replace("\n\n\n", "\n\n") + "\n"


def render() -> dict[str, str]:
    """File name -> content of every page."""
    rules = all_rules()
    pages = {f"{rule.code}.md": rule_page(rule) for rule in rules}
    pages[INDEX] = index_page(rules)
    return pages


def stale(directory: Path = DOCS_DIR) -> list[str]:
    """Pages that are missing, different from what the rules say, or left over from a removed rule."""
    pages = render()
    problems = [name for name, text in sorted(pages.items())
                if not (directory / name).is_file() or (directory / name).read_text(encoding="utf-8") != text]
    if directory.is_dir():
        problems += sorted(p.name for p in directory.glob("*.md") if p.name not in pages)
    return problems


def write(directory: Path = DOCS_DIR) -> list[str]:
    """Write every page, delete pages of rules that no longer exist; return what changed."""
    changed = stale(directory)
    pages = render()
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
    parser.add_argument("--out", type=Path, default=DOCS_DIR, help=f"directory to write (default: {DOCS_DIR})")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale(args.out)
        for name in problems:
            print(f"{args.out / name}: out of date; run `python -m torchlint.docs`", file=sys.stderr)
        return 1 if problems else 0
    for name in write(args.out):
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
