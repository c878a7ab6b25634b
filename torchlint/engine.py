"""The engine: prefilter, parse once, run every enabled rule in one batched traversal, resolve
positions and fixes only for what was reported, apply fixes to a fixpoint."""

from __future__ import annotations

import ast
import os
import re
import sys
import traceback
import warnings
from bisect import bisect_left, bisect_right
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from functools import cache
from itertools import accumulate

from torchlint import guards
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.programs import is_test_file
from torchlint.analysis.syntax import ast_first_line
from torchlint.analysis.walk import forget_children, walk
from torchlint.context import RuleContext, project_modules
from torchlint.diagnostics import Diagnostic, Edit, Severity, apply_edits
from torchlint.fixes import NodeEdit
from torchlint.lazy import libcst as cst
from torchlint.parsing import StatementCache, parse_module
from torchlint.rule import Report, Rule, all_rules
from torchlint.suppression import apply_noqa, skip_file

SYNTAX_ERROR = ("TL000", "syntax-error")
MAX_FIX_ROUNDS = 10


class _Dispatcher:
    """Calls every rule's ``visit_<Node>``/``leave_<Node>`` in one walk and keeps the ancestor
    stack that the semantic model reads. A rule that raises is dropped for the rest of the file,
    with its reports: the other rules' findings stand (see ``crashed``)."""

    def __init__(self, ctx: RuleContext, rules: list[Rule]):
        self.ctx = ctx
        self.visits: dict[type, list] = {}
        self.leaves: dict[type, list] = {}
        self.crashed: list[tuple[Rule, BaseException]] = []
        for rule in rules:
            for attr in dir(type(rule)):
                if attr.startswith(("visit_", "leave_")):
                    node_type = getattr(cst, attr[6:], None)
                    if node_type is None:
                        raise RuntimeError(f"{type(rule).__name__}.{attr}: no LibCST node named {attr[6:]}")
                    table = self.visits if attr.startswith("visit_") else self.leaves
                    table.setdefault(node_type, []).append((rule, getattr(rule, attr)))

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.ctx.ancestors.append(node)
        for rule, handler in self.visits.get(type(node), ()):
            try:
                handler(node)
            except Exception as error:  # noqa: BLE001 - one rule's bug must not cost the others' findings
                self._drop(rule, error)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        for rule, leave in self.leaves.get(type(original_node), ()):
            try:
                leave(original_node)
            except Exception as error:  # noqa: BLE001 - as in on_visit
                self._drop(rule, error)
        self.ctx.ancestors.pop()

    def _drop(self, rule: Rule, error: BaseException) -> None:
        self.crashed.append((rule, error))
        for table in (self.visits, self.leaves):
            for node_type, handlers in table.items():
                table[node_type] = [(owner, handler) for owner, handler in handlers if owner is not rule]
        self.ctx.reports[:] = [report for report in self.ctx.reports if report.rule is not rule]


def _crash_message(path: str, rule: type[Rule], error: BaseException) -> str:
    return (f"{path}: rule {rule.code} ({rule.name}) failed on this file ({error.__class__.__name__}: "
            f"{str(error)[:200]}); its findings here are missing, the other rules' are reported. Please report "
            "it (set TORCHLINT_DEBUG=1 for the traceback)")


_collected: ContextVar[list[str] | None] = ContextVar("torchlint_crashes", default=None)


@contextmanager
def collecting_crashes():
    """Gather the rule failures of every lint inside the block (fix rounds and notebook cells
    included) whose caller passed no ``crashes`` list: the list it yields, each message once."""
    crashes: list[str] = []
    token = _collected.set(crashes)
    try:
        yield crashes
    finally:
        _collected.reset(token)


def _record_crash(crashes: list[str] | None, path: str, rule: type[Rule], error: BaseException) -> None:
    """Tell the caller, or the enclosing ``collecting_crashes``, or else standard error, that a
    rule failed."""
    message = _crash_message(path, rule, error)
    if os.environ.get("TORCHLINT_DEBUG"):
        traceback.print_exception(error)
    if crashes is None:
        crashes = _collected.get()
    if crashes is None:
        print(f"torchlint: error: {message}", file=sys.stderr)
    elif message not in crashes:  # a fix round lints the file again and meets the same failure
        crashes.append(message)


def syntax_error(path: str, error: cst.ParserSyntaxError | str, line: int = 0, col: int = 0) -> Diagnostic:
    if isinstance(error, cst.ParserSyntaxError):
        message = f"SyntaxError: {error.message}"
        line, col = max(error.raw_line - 1, 0), max(error.raw_column, 0)
    else:
        message = error
    return Diagnostic(path, *SYNTAX_ERROR, message, Severity.ERROR, line, col, line, col)


def _python_compile(source: str, flags: int = ast.PyCF_ONLY_AST):
    """CPython's parse (or, with ``flags=0``, its compiler), silent: the warnings it has about the
    user's code (invalid escape sequences...) are not torchlint's to print."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compile(source, "<file>", "exec", flags, dont_inherit=True)


def _python_syntax_error(source: str) -> SyntaxError | None:
    try:
        _python_compile(source)
    except SyntaxError as error:
        return error
    except (ValueError, RecursionError, MemoryError):
        return None
    return None


def _parse_failure(path: str, source: str, error: Exception) -> Diagnostic:
    """TL000 with CPython's message and position when it has one (LibCST's are vaguer)."""
    python_error = _python_syntax_error(source)
    if python_error is not None and python_error.lineno:
        return _cpython_error(path, python_error)
    if isinstance(error, RecursionError):
        return syntax_error(path, f"{_CANNOT_ANALYZE}: it nests too deeply to be parsed; split the deepest "
                                  "expression, or exclude the file")
    if python_error is None and _python_parses(source):  # valid Python that LibCST cannot read
        return syntax_error(path, f"{_CANNOT_ANALYZE}: its parser (LibCST) rejects it although Python accepts "
                                  f"it ({error.message if isinstance(error, cst.ParserSyntaxError) else error}); "
                                  "exclude the file")
    return syntax_error(path, error)


def _python_parses(source: str, flags: int = ast.PyCF_ONLY_AST) -> bool:
    try:
        _python_compile(source, flags)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


# LibCST's parser takes seconds on an expression nested a few hundred levels deep (its time grows
# with the square of the depth), its position pass then overflows Python's stack, and its native
# parser crashes the whole process on brackets nested about two thousand deep. So CPython's parser
# (in C, about a tenth of LibCST's time) looks at a file before LibCST does.
MAX_NESTING = 300  # levels of CPython's syntax tree; real code stays under 40
MAX_BRACKETS = 200  # CPython's own limit ("too many nested parentheses")
_BRACKET = {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}
_NOT_BRACKETS = re.compile(r"[^()\[\]{}]+")
_CANNOT_ANALYZE = "torchlint cannot analyze this file"


SYNTAX_CHECK_FACTOR = 8  # past max-file-size, Python's syntax check still runs up to 8 times the limit


def _size(source: str, limit: int | None) -> int:
    """The file's size in UTF-8 bytes where it matters (0 when it is surely under ``limit``)."""
    if not limit or len(source) <= limit // 4:
        return 0
    return len(source.encode("utf-8", "surrogatepass"))


def _not_analysed(path: str, size: int, limit: int, checked: str) -> Diagnostic:
    """Past ``max-file-size``: a TL000 that says why no rule ran."""
    return syntax_error(path, f"{_CANNOT_ANALYZE}: it is {size / (1 << 20):.1f} MiB, over the `max-file-size` of "
                              f"{limit / (1 << 20):.1f} MiB; {checked} (raise `max-file-size` to lint it, or "
                              "exclude the file)")


def _python_tree(source: str, path: str) -> tuple[ast.Module | None, Diagnostic | None]:
    """CPython's tree of the file (None when CPython cannot read it: a syntax error, or a grammar
    newer than this Python), or TL000 for a file LibCST must not be given as CPython refuses its
    nesting (see _too_deep for the nesting torchlint reads)."""
    try:
        tree = _python_compile(source)
    except (RecursionError, MemoryError):
        return None, syntax_error(path, f"{_CANNOT_ANALYZE}: it nests too deeply even for Python's own parser; "
                                        "split the deepest expression, or exclude the file")
    except SyntaxError as error:
        # brackets (strings included: an overestimate) beyond CPython's limit: a syntax error
        # for this Python, and LibCST must not try
        depth = max(accumulate(map(_BRACKET.__getitem__, _NOT_BRACKETS.sub("", source))), default=0)
        if depth > MAX_BRACKETS or "too many nested" in str(error.msg):
            return None, _cpython_error(path, error)
        return None, None  # an ordinary syntax error, or a grammar newer than this Python: LibCST decides
    except ValueError:
        return None, None
    return tree, None


def _too_deep(tree: ast.Module, path: str) -> Diagnostic | None:
    """TL000 for a file that nests deeper than torchlint analyzes (LibCST must not be given it)."""
    if _tree_depth(tree, limit=MAX_NESTING) <= MAX_NESTING:
        return None
    return syntax_error(path, f"{_CANNOT_ANALYZE}: it nests {_tree_depth(tree)} levels deep and torchlint reads "
                              f"up to {MAX_NESTING}; split the deepest expression, or exclude the file")


def _tree_depth(tree: ast.AST, limit: int | None = None) -> int:
    """The depth of the tree as LibCST will build it. With a ``limit``, subtrees that cannot reach
    it are not entered, and the answer is exact only when it exceeds the limit: a node that sits
    on one line gains at most a level per character of its text (plus its operator and context
    leaves), so a short line is passed by whole."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if limit is not None and getattr(node, "end_lineno", 0) == getattr(node, "lineno", None) \
                and depth + node.end_col_offset - node.col_offset + 3 <= limit:
            deepest = max(deepest, depth)
            continue
        if isinstance(node, ast.BoolOp):  # flat here, but LibCST nests `a and b and c` an operand a level
            depth += len(node.values) - 1
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _cpython_error(path: str, error: SyntaxError) -> Diagnostic:
    line = max((error.lineno or 1) - 1, 0)
    col = max((error.offset or 1) - 1, 0)
    return syntax_error(path, f"SyntaxError: {error.msg}", line, col)


def _syntax_check(source: str, path: str) -> list[Diagnostic]:
    """A file no rule needs to parse still gets its syntax errors reported (TL000): CPython's own
    parser is far cheaper than LibCST's, and LibCST confirms (it knows newer grammars)."""
    if _python_syntax_error(source) is None:
        return []
    _, refused = _python_tree(source, path)
    if refused is not None:
        return [refused]
    try:
        parse_module(source)
    except (cst.ParserSyntaxError, RecursionError) as error:
        return [_parse_failure(path, source, error)]
    return []


def lint_source(source: str, path: str, settings, rules: tuple[type[Rule], ...] | None = None,
                crashes: list[str] | None = None, statements: StatementCache | None = None) -> list[Diagnostic]:
    """Diagnostics for one Python source text, sorted, noqa applied. A rule that fails on the file
    is left out and said so in ``crashes`` (on standard error when it is None). ``statements``
    keeps the document's parsed statements from one lint to the next (the language server): only
    the statements whose text changed are parsed again, and the diagnostics are the same."""
    if skip_file(source):
        return []
    rules = settings.rules_for(path) if rules is None else rules
    if is_test_file(path, getattr(settings, "root", None), source):
        rules = [rule for rule in rules if not rule.silent_in_test_code()]  # see Rule.report
    candidates = [rule for rule in rules if rule.applies(source) or rule.reaches and rule.reachable(source)
                  and _reaches(rule, path, source, settings)]
    limit = getattr(settings, "max_file_size", None) or 0
    size = _size(source, limit)
    if size > SYNTAX_CHECK_FACTOR * limit:  # CPython's own parser would take about 100 MB per MB
        return [_not_analysed(path, size, limit, "not even its syntax was checked")]
    if not candidates:
        return _syntax_check(source, path)
    tree, refused = _python_tree(source, path)
    if refused is not None:
        return [refused]
    statement_lines = None
    if tree is not None:
        candidates = _prechecked(candidates, tree, source, settings, path, crashes, first=bool(limit) and size > limit)
        if not candidates:
            return []  # CPython read the file, so it has no syntax error either
    try:  # from here on, the summary the prechecks made of the text is released at every exit (finally)
        if tree is not None:
            too_deep = _too_deep(tree, path)
            if too_deep is not None:
                return [too_deep]
        if limit and size > limit:  # a file some rule would read with LibCST: seconds per 100 KB
            error = _python_syntax_error(source) if tree is None else None
            if error is not None and error.lineno:
                return [_cpython_error(path, error)]
            return [_not_analysed(path, size, limit, "only its syntax was checked")]
        if tree is not None:
            statement_lines = _statement_lines(tree)
        cut_by = tree if statements is not None else None  # CPython's tree cuts the text into statements
        del tree  # LibCST's tree is the peak of memory: CPython's need not live beside it
        try:
            module = parse_module(source) if statements is None else statements.parse(source, cut_by)
            del cut_by
        except (cst.ParserSyntaxError, RecursionError) as error:
            return [_parse_failure(path, source, error)]
        ctx = RuleContext(path=path, source=source, module=module, settings=settings, statements=statements)
        dispatcher = _Dispatcher(ctx, [rule(ctx) for rule in candidates])
        walk(module, dispatcher.on_visit, dispatcher.on_leave)
        for rule, error in dispatcher.crashed:
            _record_crash(crashes, path, type(rule), error)
        if not ctx.reports:
            return []
        _apply_guards(module, ctx.reports)
        from torchlint.positions import resolve_reports  # LibCST's codegen, at its top: see torchlint/lazy.py

        diagnostics = resolve_reports(ctx, module, source, statement_lines)
    except RecursionError:  # a shape the depth check does not see (`a and b and ...`, "a" "b" ...)
        return [syntax_error(path, f"{_CANNOT_ANALYZE}: an expression nests too deeply; split it, "
                                   "or exclude the file")]
    finally:
        forget_children()
        project_modules(settings).release(path)  # a text that is not the disk's: its summary goes
    if "\f" in source and module.code != source:
        # LibCST renders a block indented with a form feed with the form feed on every line, so
        # its columns there are off by one and a fix would land beside its target: report, but
        # fix nothing
        diagnostics = [replace(d, fix=None) for d in diagnostics]
    return sorted(apply_noqa(source, diagnostics), key=lambda d: d.sort_key)


def _reaches(rule: type[Rule], path: str, source: str, settings) -> bool:
    """Does the file import (transitively) a project module whose text holds one of the rule's
    ``reaches`` words? Text only: no parse."""
    project = project_modules(settings)
    return any(project.mentions(path, word, source) for word in rule.reaches)


def _prechecked(rules: list[type[Rule]], tree: ast.Module, source: str, settings, path: str = "<string>",
                crashes: list[str] | None = None, first: bool = False) -> list[type[Rule]]:
    """The rules whose precheck on CPython's tree passes (torchlint/analysis/index.py); with
    ``first``, only the first of them (whether any passes is all a file past max-file-size asks). A
    precheck that fails is a bug reported like a rule's; its rule is left out of the file."""
    if all(rule.precheck.__func__ is Rule.precheck.__func__ for rule in rules):
        return rules
    project = project_modules(settings)
    index = SyntaxIndex(tree, source, settings.target_torch, path, project, settings)
    passed = []
    for rule in rules:
        try:
            if rule.precheck(index):
                passed.append(rule)
                if first:
                    break
        except Exception as error:  # noqa: BLE001 - one rule's bug must not cost the others' findings
            _record_crash(crashes, path, rule, error)
    if index.memoized("project-source") and not passed:
        project.release(path)  # nothing follows; else the walk's questions reuse it, and lint_source releases it
    return passed


def _apply_guards(module: cst.Module, reports: list[Report]) -> None:
    """Withhold the fixes that torchlint/guards.py finds unsafe, whichever rule wrote them, judged
    at each edited node's own place in the tree (a rule may write a fix far from where it stands)."""
    edits: dict[int, list[tuple[Report, NodeEdit]]] = {}
    for report in reports:
        for edit in report.fix.edits if report.fix is not None else ():
            if guards.may_change_keywords(edit):
                edits.setdefault(id(edit.node), []).append((report, edit))
    if not edits:
        return
    path: list[cst.CSTNode] = []

    def on_visit(node: cst.CSTNode) -> None:
        path.append(node)
        for report, edit in edits.get(id(node), ()):
            if report.fix is not None and guards.withheld(edit, path):
                report.fix = None

    walk(module, on_visit, lambda node: path.pop())


def _statement_lines(tree: ast.Module) -> list[int]:
    """The line where each statement starts in CPython's tree (its first decorator's, for a
    decorated one), every statement in the order of the text: a compound statement before the
    statements of its blocks (positions.py pairs them with LibCST's)."""
    found: list[int] = []
    stack: list[ast.stmt] = list(reversed(tree.body))
    while stack:
        node = stack.pop()
        found.append(ast_first_line(node))
        inner: list[ast.stmt] = list(getattr(node, "body", ()))
        for handler in getattr(node, "handlers", ()):
            inner += handler.body
        inner += getattr(node, "orelse", ())
        inner += getattr(node, "finalbody", ())
        for case in getattr(node, "cases", ()):
            inner += case.body
        stack.extend(reversed(inner))
    return found


@dataclass
class FixResult:
    source: str
    fixed: list[Diagnostic] = field(default_factory=list)
    remaining: list[Diagnostic] = field(default_factory=list)
    found: list[Diagnostic] = field(default_factory=list)  # the original text's diagnostics (its lint)

    @property
    def changed(self) -> bool:
        return bool(self.fixed)


class FixError(Exception):
    """A round of fixes produced text that does not parse: nothing is written."""


def select_edits(diagnostics: list[Diagnostic], unsafe_fixes: bool) -> tuple[list[Diagnostic], list[Edit]]:
    """Fixes whose edits overlap none taken before them (in the diagnostics' order); the rest wait
    for the next round, after a re-lint. O(n log n) in the number of edits (thousands in a large
    file): each fix asks the edits taken so far, counted by position, instead of each in turn."""
    candidates = [d for d in diagnostics if d.fix is not None and d.fix.applies(unsafe_fixes)]
    spans = [[_closed_span(edit) for edit in diag.fix.edits] for diag in candidates]
    starts = _Counter(lo for fix_spans in spans for lo, _ in fix_spans)
    ends = _Counter(hi for fix_spans in spans for _, hi in fix_spans)
    taken: list[Diagnostic] = []
    edits: list[Edit] = []
    conflicts = _fix_conflicts()
    excluded: set[str] = set()  # codes whose fixes conflict with one taken this round (Rule.fix_conflicts)
    for diag, fix_spans in zip(candidates, spans):
        # the taken spans that meet [lo, hi]: those starting at or before hi, less those ending
        # before lo (which start before hi too)
        if diag.code in excluded or any(starts.at_most(hi) > ends.at_most(lo - 1) for lo, hi in fix_spans):
            continue
        excluded |= conflicts.get(diag.code, frozenset())
        for lo, hi in fix_spans:
            starts.add(lo)
            ends.add(hi)
        taken.append(diag)
        edits.extend(diag.fix.edits)
    return taken, edits


@cache
def _fix_conflicts() -> dict[str, frozenset[str]]:
    """Code -> the codes whose fixes wait for the next round once one of its fixes is taken
    (Rule.fix_conflicts, both ways)."""
    found: dict[str, set[str]] = {}
    for rule in all_rules():
        for other in rule.fix_conflicts:
            found.setdefault(rule.code, set()).add(other)
            found.setdefault(other, set()).add(rule.code)
    return {code: frozenset(codes) for code, codes in found.items()}


def _closed_span(edit: Edit) -> tuple[int, int]:
    """The edit as a closed interval of integers that meets another edit's exactly when the two
    edits overlap: replacements whose ranges share a character; an insertion and a replacement
    that contains its point or touches it at either end; two insertions at the same point."""
    if edit.start == edit.end:
        return 4 * edit.start - 1, 4 * edit.start + 1
    return 4 * edit.start + 1, 4 * edit.end - 1


class _Counter:
    """How many of the values added so far are at most a given one: a Fenwick tree over the values
    that may be added, sorted."""

    def __init__(self, values):
        self.values = sorted(set(values))
        self.tree = [0] * (len(self.values) + 1)

    def add(self, value: int) -> None:
        i = bisect_left(self.values, value) + 1
        while i < len(self.tree):
            self.tree[i] += 1
            i += i & -i

    def at_most(self, value: int) -> int:
        i = bisect_right(self.values, value)
        total = 0
        while i:
            total += self.tree[i]
            i -= i & -i
        return total


def parses(source: str) -> bool:
    try:
        parse_module(source)
    except (cst.ParserSyntaxError, RecursionError):
        return False
    return True


def fix_source(source: str, path: str, settings, rules: tuple[type[Rule], ...] | None = None,
               crashes: list[str] | None = None, found: list[Diagnostic] | None = None,
               statements: StatementCache | None = None) -> FixResult:
    """Apply fixes round after round until none applies (bounded); the result always parses, and
    compiles if the original did. A round parses again only the statements the last one changed
    (``statements``: a document's cache, else a new one). ``found``: the diagnostics of ``source``
    with the same settings and rules, when the caller has them (the language server): its lint."""
    result = FixResult(source)
    statements = StatementCache() if statements is None else statements
    diagnostics = result.found = found if found is not None else lint_source(source, path, settings, rules, crashes,
                                                                               statements)
    compiles = None  # does the original compile with this Python? (asked once there is a fix)
    for _ in range(MAX_FIX_ROUNDS):
        taken, edits = select_edits(diagnostics, settings.unsafe_fixes)
        if not taken or any(d.code == SYNTAX_ERROR[0] for d in diagnostics):
            break
        candidate = apply_edits(result.source, edits)
        if compiles is None:
            compiles = _python_parses(source, flags=0)
        # CPython's compiler is the stricter judge (it also rejects `return` outside a function)
        # and cheaper than LibCST; LibCST judges code written for a newer Python than this one
        if not (_python_parses(candidate, flags=0) if compiles else parses(candidate)):
            raise FixError(f"{path}: fixes {', '.join(sorted({d.code for d in taken}))} produced code that "
                           "does not parse; nothing was written. Please report this as a torchlint bug.")
        result.source = candidate
        result.fixed.extend(taken)
        diagnostics = lint_source(candidate, path, settings, rules, crashes, statements)
    result.remaining = diagnostics
    return result
