"""Report formats: text (Ruff-like), json (LSP PublishDiagnosticsParams-like), jsonl."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from torchlint.diagnostics import Diagnostic, SourceText
from torchlint.rule import rule_by_selector

DOCS_URL = "https://github.com/torchlint/torchlint/blob/main/docs/rules/{code}.md"


def docs_url(code: str) -> str:
    return DOCS_URL.format(code=code)


def _lsp_range(text: SourceText, line: int, col: int, end_line: int, end_col: int) -> dict:
    return {"start": {"line": line, "character": text.utf16_col(line, col)},
            "end": {"line": end_line, "character": text.utf16_col(end_line, end_col)}}


def lsp_diagnostic(diag: Diagnostic, text: SourceText) -> dict:
    fix = None
    if diag.fix is not None:
        fix = {"applicability": diag.fix.applicability, "title": diag.fix.title,
               "edits": [{"range": {"start": text.lsp_position(e.start), "end": text.lsp_position(e.end)},
                          "newText": e.text} for e in diag.fix.edits]}
    return {
        "range": _lsp_range(text, diag.line, diag.col, diag.end_line, diag.end_col),
        "severity": int(diag.severity),
        "code": diag.code,
        "source": "torchlint",
        "codeDescription": {"href": docs_url(diag.code)},
        "message": diag.message,
        "data": {"name": diag.name, "cell": diag.cell, "fix": fix},
    }


def file_diagnostics(results) -> list[dict]:
    out = []
    for result in sorted(results, key=lambda r: r.path):
        if not result.diagnostics:
            continue
        text = SourceText(result.source)
        out.append({"uri": Path(result.path).resolve().as_uri(), "path": result.path,
                    "diagnostics": [lsp_diagnostic(d, text) for d in result.diagnostics]})
    return out


def format_json(results) -> str:
    return json.dumps(file_diagnostics(results), indent=2, ensure_ascii=False, sort_keys=False) + "\n"


def format_jsonl(results) -> str:
    lines = []
    for entry in file_diagnostics(results):
        for diag in entry["diagnostics"]:
            lines.append(json.dumps({"uri": entry["uri"], "path": entry["path"], **diag}, ensure_ascii=False))
    return "".join(line + "\n" for line in lines)


def _marker(diag: Diagnostic, unsafe_fixes: bool) -> str:
    return "[*] " if diag.fix is not None and diag.fix.applies(unsafe_fixes) else ""


def format_text(results, *, unsafe_fixes: bool, fix_mode: bool, show_source: bool = True) -> str:
    lines = []
    diagnostics = [(r, d) for r in sorted(results, key=lambda r: r.path) for d in r.diagnostics]
    for result, diag in diagnostics:
        where = f"{diag.path}:{diag.line + 1}:{diag.col + 1}:"
        if diag.cell is not None:
            where = f"{diag.path}:cell {diag.cell + 1}:{diag.line + 1}:{diag.col + 1}:"
        lines.append(f"{where} {diag.code} {_marker(diag, unsafe_fixes)}{diag.message}")
    fixed = sum(len(r.fixed) for r in results)
    count = len(diagnostics)
    summary = []
    if fixed:
        summary.append(f"Found {count + fixed} error{'s' if count + fixed != 1 else ''} ({fixed} fixed, {count} remaining).")
    elif count:
        summary.append(f"Found {count} error{'s' if count != 1 else ''}.")
    elif not fix_mode:
        summary.append("All checks passed!")
    fixable = sum(1 for _, d in diagnostics if d.fix is not None and d.fix.applies(unsafe_fixes))
    hidden = sum(1 for _, d in diagnostics if d.fix is not None and not d.fix.applies(unsafe_fixes))
    if fixable:
        line = f"[*] {fixable} fixable with the `--fix` option"
        if hidden:
            line += f" ({hidden} hidden fix{'es' if hidden != 1 else ''} can be enabled with the `--unsafe-fixes` option)"
        summary.append(line + ".")
    elif hidden:
        summary.append(f"No fixes available ({hidden} hidden fix{'es' if hidden != 1 else ''} can be enabled with "
                       "the `--unsafe-fixes` option).")
    if lines and summary:
        lines.append("")
    return "\n".join(lines + summary) + "\n"


def format_statistics(results, *, unsafe_fixes: bool) -> str:
    counts = Counter(d.code for r in results for d in r.diagnostics)
    fixable = Counter(d.code for r in results for d in r.diagnostics if d.fix is not None and d.fix.applies(unsafe_fixes))
    rows = []
    width = max((len(str(n)) for n in counts.values()), default=1)
    for code, number in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        rule = rule_by_selector(code)
        name = rule.name if rule else "syntax-error"
        mark = "[*]" if fixable[code] == number else "[-]" if fixable[code] else "[ ]"
        rows.append(f"{number:>{width}}\t{code}\t{mark} {name}")
    return "\n".join(rows) + ("\n" if rows else "")
