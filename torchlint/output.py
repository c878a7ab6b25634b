"""Report formats: text (Ruff-like), json (LSP PublishDiagnosticsParams-like), jsonl, sarif (SARIF
2.1.0, for code scanning) and github (GitHub Actions annotations)."""

from __future__ import annotations

import functools
import json
import unicodedata
from collections import Counter
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

from torchlint import __version__
from torchlint.diagnostics import Diagnostic, Related, SourceText
from torchlint.fileio import SourceDecodeError, decode_source
from torchlint.rule import rule_by_selector

DOCS_URL = "https://github.com/torchlint/torchlint/blob/main/docs/rules/{code}.md"


def docs_url(code: str) -> str | None:
    """The page of a rule: torchlint's docs/rules/ for its own rules, what a plugin's rule names as
    its ``documentation_url`` (None when it names none)."""
    from torchlint.rule import rule_by_selector, rule_plugin

    rule = rule_by_selector(code) if not code.startswith("TL") else None
    if rule is not None and rule_plugin(rule) is not None:
        return rule.documentation_url or None
    return DOCS_URL.format(code=code)


def _units(text: SourceText, line: int, col: int, encoding: str) -> int:
    """A code-point column in the units of a position encoding (LSP's default is UTF-16)."""
    if encoding == "utf-16":
        return text.utf16_col(line, col)
    if encoding == "utf-8":
        return len(text.line_text(line)[:col].encode("utf-8"))
    return col


def lsp_range(text: SourceText, line: int, col: int, end_line: int, end_col: int, encoding: str = "utf-16") -> dict:
    """An LSP range from 0-based lines and code-point columns."""
    return {"start": {"line": line, "character": _units(text, line, col, encoding)},
            "end": {"line": end_line, "character": _units(text, end_line, end_col, encoding)}}


def lsp_diagnostic(diag: Diagnostic, text: SourceText, *, encoding: str = "utf-16", cell_text=None) -> dict:
    """The LSP shape of one diagnostic. ``cell_text(index)`` gives the text of another notebook
    cell that one of its fix's edits lands in (such an edit carries that cell's index)."""
    fix = None
    if diag.fix is not None:
        edit_cells = diag.extra.get("edit_cells") or [diag.cell] * len(diag.fix.edits)
        edits = []
        for edit, cell in zip(diag.fix.edits, edit_cells):
            where = text if cell == diag.cell or cell_text is None else cell_text(cell)
            entry = {"range": lsp_range(where, *where.position(edit.start), *where.position(edit.end), encoding),
                     "newText": edit.text}
            if cell != diag.cell:
                entry["cell"] = cell
            edits.append(entry)
        fix = {"applicability": diag.fix.applicability, "title": diag.fix.title, "edits": edits}
    found = {
        "range": lsp_range(text, diag.line, diag.col, diag.end_line, diag.end_col, encoding),
        "severity": int(diag.severity),
        "code": diag.code,
        "source": "torchlint",
        **({"codeDescription": {"href": url}} if (url := docs_url(diag.code)) else {}),
        "message": diag.message,
        "data": {"name": diag.name, "cell": diag.cell, "fix": fix},
    }
    if diag.related:
        found["relatedInformation"] = [_related_information(related, encoding) for related in diag.related]
    return found


def _related_information(related: Related, encoding: str) -> dict:
    """LSP's ``DiagnosticRelatedInformation`` for a place in (possibly) another file: its columns
    count in that file's text, read once per file."""
    return {"location": {"uri": Path(related.path).as_uri(),
                         "range": lsp_range(_text_of(related.path), related.line, related.col, related.end_line,
                                            related.end_col, encoding)},
            "message": related.message}


@functools.lru_cache(maxsize=64)
def _text_of(path: str) -> SourceText:
    try:
        return SourceText(decode_source(Path(path).read_bytes())[0])
    except (OSError, SourceDecodeError):
        return SourceText("")


def _texts(result):
    """The SourceText a result's diagnostics refer to, by notebook cell (None: the file's text)."""
    cache: dict = {}

    def text_for(cell: int | None) -> SourceText:
        if cell not in cache:
            cache[cell] = SourceText(result.source if cell is None or result.cells is None else result.cells[cell])
        return cache[cell]
    return text_for


def file_diagnostics(results) -> list[dict]:
    out = []
    for result in sorted(results, key=lambda r: r.path):
        if not result.diagnostics:
            continue
        text_for = _texts(result)
        out.append({"uri": Path(result.path).resolve().as_uri(), "path": result.path,
                    "diagnostics": [lsp_diagnostic(d, text_for(d.cell), cell_text=text_for)
                                    for d in result.diagnostics]})
    return out


def format_json(results) -> str:
    return json.dumps(file_diagnostics(results), indent=2, ensure_ascii=False, sort_keys=False) + "\n"


def format_jsonl(results) -> str:
    lines = []
    for entry in file_diagnostics(results):
        for diag in entry["diagnostics"]:
            lines.append(json.dumps({"uri": entry["uri"], "path": entry["path"], **diag}, ensure_ascii=False))
    return "".join(line + "\n" for line in lines)


SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SARIF_LEVELS = {1: "error", 2: "warning", 3: "note", 4: "note"}
INFORMATION_URI = "https://github.com/torchlint/torchlint"


def _doc_section(docs: str, title: str) -> str:
    """The text under ``## title`` in a rule's docs."""
    for section in docs.split("\n## "):
        heading, _, body = section.partition("\n")
        if heading.lstrip("# ").strip().lower() == title.lower():
            return " ".join(body.split())
    return ""


def _sarif_rules() -> list[dict]:
    from torchlint.engine import SYNTAX_ERROR
    from torchlint.rule import all_rules

    syntax = SYNTAX_ERROR[0]
    descriptors = [{
        "id": syntax, "name": SYNTAX_ERROR[1],
        "shortDescription": {"text": "The file cannot be read or parsed as Python"},
        "fullDescription": {"text": "A syntax error, or a file that is not text or not a notebook: nothing else "
                                    "in the file can be checked until it parses."},
        "helpUri": docs_url(syntax), "defaultConfiguration": {"level": "error"},
        "properties": {"tags": ["tool"]},
    }]
    for rule in all_rules():
        docs = rule.docs()
        descriptors.append({
            "id": rule.code, "name": rule.name,
            "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": _doc_section(docs, "What it does") or rule.summary},
            "help": {"text": docs, "markdown": docs},
            **({"helpUri": url} if (url := docs_url(rule.code)) else {}),
            "defaultConfiguration": {"level": SARIF_LEVELS[int(rule.severity)], "enabled": rule.default_enabled},
            "properties": {"tags": [rule.kind], "fix": rule.fix_applicability},
        })
    return descriptors


def _sarif_artifact(file_uri: str) -> dict:
    """A related location's file: relative to the current directory (``%SRCROOT%``) when it is
    under it, the absolute file URI otherwise."""
    path = Path(unquote(urlparse(file_uri).path))
    try:
        return {"uri": quote(path.relative_to(Path.cwd()).as_posix()), "uriBaseId": "%SRCROOT%"}
    except ValueError:
        return {"uri": file_uri}


def _sarif_region(range_: dict) -> dict:
    """An LSP range (0-based, UTF-16) as a SARIF region (1-based, UTF-16: the run's columnKind)."""
    start, end = range_["start"], range_["end"]
    return {"startLine": start["line"] + 1, "startColumn": start["character"] + 1,
            "endLine": end["line"] + 1, "endColumn": end["character"] + 1}


def format_sarif(results) -> str:
    """SARIF 2.1.0, as GitHub code scanning reads it: paths relative to the current directory
    (``%SRCROOT%``), columns in UTF-16 code units. A notebook finding's region counts lines within
    its cell (``properties.cell``), and its fix is left out (SARIF has no notion of cells)."""
    rules = _sarif_rules()
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    sarif_results = []
    for entry in file_diagnostics(results):
        location = {"uri": quote(Path(entry["path"]).as_posix()), "uriBaseId": "%SRCROOT%"}
        for diag in entry["diagnostics"]:
            result = {"ruleId": diag["code"], "ruleIndex": index[diag["code"]],
                      "level": SARIF_LEVELS[diag["severity"]], "message": {"text": diag["message"]},
                      "locations": [{"physicalLocation": {"artifactLocation": location,
                                                          "region": _sarif_region(diag["range"])}}]}
            cell, fix = diag["data"]["cell"], diag["data"]["fix"]
            if diag.get("relatedInformation"):
                result["relatedLocations"] = [
                    {"id": number, "message": {"text": info["message"]},
                     "physicalLocation": {"artifactLocation": _sarif_artifact(info["location"]["uri"]),
                                          "region": _sarif_region(info["location"]["range"])}}
                    for number, info in enumerate(diag["relatedInformation"])]
            if cell is not None:
                result["properties"] = {"cell": cell}
            elif fix is not None:
                unsafe = " (unsafe)" if fix["applicability"] == "unsafe" else ""
                result["fixes"] = [{
                    "description": {"text": fix["title"] + unsafe},
                    "artifactChanges": [{"artifactLocation": location, "replacements": [
                        {"deletedRegion": _sarif_region(edit["range"]), "insertedContent": {"text": edit["newText"]}}
                        for edit in fix["edits"]]}],
                }]
            sarif_results.append(result)
    errors = [error for r in sorted(results, key=lambda r: r.path) for error in r.errors]
    run = {
        "tool": {"driver": {"name": "torchlint", "version": __version__, "semanticVersion": __version__,
                            "informationUri": INFORMATION_URI, "rules": rules}},
        "invocations": [{"executionSuccessful": not errors, "toolExecutionNotifications": [
            {"level": "error", "message": {"text": error}} for error in errors]}],
        "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().as_uri().rstrip("/") + "/"}},
        "columnKind": "utf16CodeUnits",
        "results": sarif_results,
    }
    return json.dumps({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}, indent=2,
                      ensure_ascii=False) + "\n"


def _escape_data(text: str) -> str:
    """GitHub Actions workflow commands: the message part (as @actions/core escapes it)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


GITHUB_LEVELS = {1: "error", 2: "warning", 3: "notice", 4: "notice"}


def format_github(results) -> str:
    """One GitHub Actions annotation per finding (``::warning file=...,line=...::message``). A
    notebook finding names its cell in the message and gives no line: the file's lines are JSON."""
    lines = []
    for result in sorted(results, key=lambda r: r.path):
        for diag in result.diagnostics:
            path = Path(diag.path).as_posix()
            properties = [("file", path)]
            message = diag.message
            if diag.cell is None:
                properties += [("line", diag.line + 1), ("col", diag.col + 1),
                               ("endLine", diag.end_line + 1), ("endColumn", diag.end_col + 1)]
            else:
                message = f"cell {diag.cell + 1}, line {diag.line + 1}, column {diag.col + 1}: {message}"
            properties.append(("title", f"{diag.code} ({diag.name})"))
            rendered = ",".join(f"{key}={_escape_property(str(value))}" for key, value in properties)
            lines.append(f"::{GITHUB_LEVELS[int(diag.severity)]} {rendered}::{_escape_data(message)}")
    return "".join(line + "\n" for line in lines)


REPORTS = {"json": format_json, "jsonl": format_jsonl, "sarif": format_sarif, "github": format_github}


# --- the text report (Ruff's layout) ----------------------------------------------------------

class Palette:
    """ANSI styles for a terminal, after Ruff's: each method returns the text as it is when colour
    is off (a pipe, a file, ``NO_COLOR``), so the plain report is the coloured one minus escapes."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def _style(self, text: str, sgr: str) -> str:
        return f"\x1b[{sgr}m{text}\x1b[0m" if self.enabled and text else text

    def path(self, text: str) -> str:
        return self._style(text, "1")

    def rule_code(self, text: str) -> str:
        return self._style(text, "1;31")

    def punctuation(self, text: str) -> str:
        """The ``:`` between path, line and column, ``[*]``, the ``-`` of the fix listing."""
        return self._style(text, "36")

    def gutter(self, text: str) -> str:
        return self._style(text, "1;34")

    def heading(self, text: str) -> str:
        return self._style(text, "1;32")


PLAIN = Palette(False)


def _marker(diag: Diagnostic, unsafe_fixes: bool, palette: Palette = PLAIN) -> str:
    return palette.punctuation("[*]") + " " if diag.fix is not None and diag.fix.applies(unsafe_fixes) else ""


def _location(diag: Diagnostic, palette: Palette) -> str:
    """``path:line:column`` (``path:cell N:line:column`` in a notebook), 1-based as editors count."""
    colon = palette.punctuation(":")
    parts = [palette.path(diag.path)] + ([f"cell {diag.cell + 1}"] if diag.cell is not None else [])
    return colon.join(parts + [str(diag.line + 1), str(diag.col + 1)])


def _display(text: str) -> str:
    """A source line as the terminal should show it: a tab as four spaces, other control
    characters (a form feed) as one, so that the caret line below lines up."""
    return "".join("    " if ch == "\t" else " " if unicodedata.category(ch) == "Cc" else ch for ch in text)


def _width(text: str) -> int:
    """Terminal cells: East Asian wide characters take two, combining marks none."""
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
               for ch in _display(text))


SNIPPET_CONTEXT = 2  # lines shown before and after the finding's line, as Ruff shows


def _shown_lines(diag: Diagnostic, text: SourceText) -> range:
    """The finding's line and two lines around it, less blank lines at the end; empty when the
    text has no such line (a file that could not be decoded)."""
    lines = len(text.line_starts)
    if not text.text or diag.line >= lines:
        return range(0)
    first, last = max(diag.line - SNIPPET_CONTEXT, 0), min(diag.line + SNIPPET_CONTEXT, lines - 1)
    while last > diag.line and not text.line_text(last).strip():
        last -= 1
    return range(first, last + 1)


def _snippet(diag: Diagnostic, text: SourceText, shown: range, palette: Palette) -> list[str]:
    """The shown lines in Ruff's gutter layout, with carets under the span (on its first line
    when it runs over several)."""
    if not shown:
        return []
    number_width = len(str(shown[-1] + 1))
    bar = palette.gutter(" " * number_width + " |")
    out = [bar]
    for line in shown:
        source = text.line_text(line)
        shown_text = _display(source).rstrip()
        out.append(palette.gutter(f"{line + 1:>{number_width}} |") + (" " + shown_text if shown_text else ""))
        if line == diag.line:
            end = diag.end_col if diag.end_line == diag.line else len(source)
            carets = "^" * max(_width(source[diag.col:end]), 1)
            out.append(f"{bar} {' ' * _width(source[:diag.col])}{palette.rule_code(carets)}")
    out.append(bar)
    return out


def _full_entry(diag: Diagnostic, text: SourceText, unsafe_fixes: bool, palette: Palette) -> str:
    """One finding as Ruff's ``full`` format shows it: code and message, then where, the source
    with a caret, and the fix's title as help."""
    shown = _shown_lines(diag, text)
    number_width = len(str(shown[-1] + 1)) if shown else 1
    entry = [f"{palette.rule_code(diag.code)} {_marker(diag, unsafe_fixes, palette)}{diag.message}",
             f"{palette.gutter(' ' * number_width + '-->')} {_location(diag, palette)}"]
    entry += _snippet(diag, text, shown, palette)
    if diag.fix is not None:
        unsafe = "" if diag.fix.applicability == "safe" else " (unsafe)"
        entry.append(f"{palette.path('help')}: {diag.fix.title}{unsafe}")
    return "".join(line + "\n" for line in entry)


def format_text(results, *, unsafe_fixes: bool, fix_mode: bool, errors: int = 0, show_source: bool = False,
                summary: bool = True, show_fixes: bool = False, color: bool = False) -> str:
    """The findings and Ruff's summary: one line a finding, or with ``show_source`` (the ``full``
    format) each with its source line and a caret under the span. ``errors``: paths that could
    not be read, checked or written (reported on stderr), and rules that failed on a file (each
    result's ``crashes``): with any, the summary never says that all passed. ``show_fixes`` lists what ``--fix`` fixed per file before the summary; ``summary``
    False (``-q``) leaves the summary out. A blank line separates the parts, and full's entries."""
    palette = Palette(color)
    diagnostics = [(r, d) for r in sorted(results, key=lambda r: r.path) for d in r.diagnostics]
    if show_source:
        findings = "\n".join(_full_entry(d, _texts(r)(d.cell), unsafe_fixes, palette) for r, d in diagnostics)
    else:
        findings = "".join(f"{_location(d, palette)}{palette.punctuation(':')} {palette.rule_code(d.code)} "
                           f"{_marker(d, unsafe_fixes, palette)}{d.message}\n" for _, d in diagnostics)
    listing = format_fix_listing(results, applied=True, color=color) if show_fixes else ""
    closing = _summary(results, diagnostics, unsafe_fixes, fix_mode, errors, palette) if summary else []
    return paragraphs(findings, listing, "".join(line + "\n" for line in closing))


def paragraphs(*parts: str) -> str:
    """Report parts (each empty or ending with a newline), a blank line between them."""
    return "\n".join(part for part in parts if part)


def _plural(count: int, word: str, suffix: str = "s") -> str:
    return f"{count} {word}{suffix if count != 1 else ''}"


def _summary(results, diagnostics, unsafe_fixes: bool, fix_mode: bool, errors: int, palette: Palette) -> list[str]:
    """Ruff's closing lines: how many were found and fixed, what ``--fix`` (and
    ``--unsafe-fixes``) would fix, and how many paths could not be checked."""
    fixed = sum(len(r.fixed) for r in results)
    count = len(diagnostics)
    summary = []
    if fixed:
        summary.append(f"Found {_plural(count + fixed, 'error')} ({fixed} fixed, {count} remaining).")
    elif count:
        summary.append(f"Found {_plural(count, 'error')}.")
    failed = sum(len(r.crashes) for r in results)
    if not (count or fixed or errors or failed):
        summary.append("All checks passed!")
    if errors:
        paths, them = ("path", "error") if errors == 1 else ("paths", "errors")
        summary.append(f"Could not check{' or fix' if fix_mode else ''} {errors} {paths} (see the {them} above).")
    if failed:
        files = sum(1 for r in results if r.crashes)
        its, them = ("its", "error") if failed == 1 else ("their", "errors")
        summary.append(f"{_plural(failed, 'rule')} failed on {_plural(files, 'file')}: "
                       f"{its} findings there are missing (see the {them} above).")
    fixable = sum(1 for _, d in diagnostics if d.fix is not None and d.fix.applies(unsafe_fixes))
    hidden = sum(1 for _, d in diagnostics if d.fix is not None and not d.fix.applies(unsafe_fixes))
    hidden_fixes = f"{_plural(hidden, 'hidden fix', 'es')} can be enabled with the `--unsafe-fixes` option"
    if fixable:
        line = f"{palette.punctuation('[*]')} {fixable} fixable with the `--fix` option"
        summary.append(line + (f" ({hidden_fixes})." if hidden else "."))
    elif hidden:
        summary.append(f"No fixes available ({hidden_fixes}).")
    return summary


def format_fix_listing(results, *, applied: bool, color: bool = False) -> str:
    """``--show-fixes``, as Ruff prints it: per file, how many findings of each rule were fixed
    (``applied``) or would be (``--diff``); empty when there are none."""
    palette = Palette(color)
    fixed = {r.path: Counter((d.code, d.name) for d in r.fixed) for r in sorted(results, key=lambda r: r.path)
             if r.fixed}
    if not fixed:
        return ""
    total = sum(sum(counts.values()) for counts in fixed.values())
    width = max(len(str(n)) for counts in fixed.values() for n in counts.values())
    lines = [palette.heading(f"{'Fixed' if applied else 'Would fix'} {_plural(total, 'error')}:")]
    for path, counts in fixed.items():
        lines.append(f"{palette.punctuation('-')} {palette.path(path)}{palette.punctuation(':')}")
        for (code, name), number in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
            lines.append(f"    {number:>{width}} × {palette.rule_code(code)} ({name})")
    return "".join(line + "\n" for line in lines)


def diff_summary(results, *, unsafe_fixes: bool) -> str:
    """The line after ``--diff`` (on stderr, so that stdout is a patch): what would be fixed, and
    the fixes that ``--unsafe-fixes`` would add, in Ruff's words; nothing when there is neither."""
    fixed = sum(len(r.fixed) for r in results)
    files = sum(1 for r in results if r.diff)
    unapplied = sum(1 for r in results for d in r.diagnostics if d.fix is not None and not d.fix.applies(unsafe_fixes))
    if fixed:
        extra = f" ({_plural(unapplied, 'additional fix', 'es')} available with `--unsafe-fixes`)" if unapplied else ""
        return f"Would fix {_plural(fixed, 'error')} in {_plural(files, 'file')}{extra}.\n"
    if unapplied:
        return f"No errors would be fixed ({_plural(unapplied, 'fix', 'es')} available with `--unsafe-fixes`).\n"
    return ""


NO_NEWLINE = "\\ No newline at end of file\n"


def patch_text(result) -> str:
    """A result's diff as a patch that ``patch`` and ``git apply`` read. difflib leaves a last line
    without a newline unended, so it runs into the next line of the diff; diff(1) ends it and adds
    ``\\ No newline at end of file``. Here ``result.source`` is the original text: its last line,
    when changed, is the diff's last ``-`` line, and only ``+`` lines can follow it."""
    diff = result.diff
    if not diff:
        return diff
    if result.source and not result.source.endswith(("\n", "\r")):
        removed = "\n-" + result.source.splitlines(keepends=True)[-1]
        at = diff.rfind(removed) + len(removed)
        rest = diff[at:]
        if at >= len(removed) and rest and all(line.startswith("+") for line in rest.split("\n") if line):
            diff = diff[:at] + "\n" + NO_NEWLINE + rest
    return diff if diff.endswith("\n") else diff + "\n" + NO_NEWLINE


def format_statistics(results, *, unsafe_fixes: bool, color: bool = False) -> str:
    palette = Palette(color)
    counts = Counter(d.code for r in results for d in r.diagnostics)
    fixable = Counter(d.code for r in results for d in r.diagnostics if d.fix is not None and d.fix.applies(unsafe_fixes))
    rows = []
    width = max((len(str(n)) for n in counts.values()), default=1)
    for code, number in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        rule = rule_by_selector(code)
        name = rule.name if rule else "syntax-error"
        mark = "[*]" if fixable[code] == number else "[-]" if fixable[code] else "[ ]"
        rows.append(f"{palette.path(f'{number:>{width}}')}\t{palette.rule_code(code)}\t{palette.punctuation(mark)} {name}")
    return "".join(row + "\n" for row in rows)
