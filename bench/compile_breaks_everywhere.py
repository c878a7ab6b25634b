"""TLC001's break finder on real model code, as if every module were compiled.

    .venv/bin/python bench/compile_breaks_everywhere.py PATH [PATH ...] [--sample N] [--seed S]

Compiled regions are rare in real code, and most files compile a model class they import from
another module, which one file's reading cannot follow; so TLC001 alone reports little on real
repositories. To judge what it would report inside compiled code, this script adds, for every
``nn.Module`` class of every file, a compile site whose entry is the class's ``forward`` (what
``torch.compile(model)`` would compile), lints with TLC001 only, and prints the findings (or a
random sample of N of them) for reading: each one should be a place where Dynamo breaks the graph
when that forward runs compiled. bench/results/catalog-2026-compile.md records what the reading
found. It only changes what counts as compiled; the break finder is the rule's own.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from torchlint import engine
from torchlint.analysis import compiled
from torchlint.config import resolve_settings
from torchlint.discovery import discover
from torchlint.engine import lint_source
from torchlint.rule import rule_by_selector


def compile_every_module() -> None:
    """Make every module class's ``forward`` a compile site, beside the file's real ones (and let
    every file through the filters that look for a compile call)."""
    rule = rule_by_selector("TLC001")
    rule.applies = classmethod(lambda cls, text: "Module" in text)
    engine._prechecked = lambda rules, *args, **kwargs: rules
    collect = compiled.CompiledCode._collect_sites

    def collect_with_every_forward(self: compiled.CompiledCode) -> None:
        collect(self)
        for classes in self.callees.definitions.classes.values():
            for cls in classes:
                forward = self.callees.method(cls, "forward") if cls.name.value in self.callees.module_classes else None
                if forward is not None:
                    self.sites.append(compiled.CompileSite(cls, f"torch.compile({cls.name.value}(...))", None,
                                                           (forward,)))

    compiled.CompiledCode._collect_sites = collect_with_every_forward


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--sample", type=int, default=0, help="print a random sample of this many findings")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    compile_every_module()
    findings = []
    for root in args.paths:
        settings = resolve_settings(root, isolated=True, select=["TLC001"])
        for path in discover([root], settings, lambda message: print(message, file=sys.stderr)):
            if path.suffix != ".py":
                continue
            try:
                source = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            findings += [(path, d) for d in lint_source(source, str(path), settings)]
    print(f"{len(findings)} findings", file=sys.stderr)
    shown = random.Random(args.seed).sample(findings, min(args.sample, len(findings))) if args.sample else findings
    for path, diagnostic in sorted(shown, key=lambda item: (str(item[0]), item[1].line)):
        print(f"{path}:{diagnostic.line + 1}: {diagnostic.message.split(':', 1)[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
