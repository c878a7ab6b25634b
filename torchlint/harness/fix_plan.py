"""Which fixes a verification applies: all of them, each on its own, or a chosen few.

``engine.fix_source`` applies every applicable fix, round after round (lint, take the fixes whose
edits do not overlap, apply, lint again) until none is left. ``verify --each`` and ``--keep`` need
more: one fix without the others, and any subset of them. This module is that entry point, built
on the engine's public pieces (``lint_source``, ``select_edits``, ``apply_edits``): the same
rounds, with a filter on which fixes may be taken.

A fix is named by where its diagnostic starts in the *original* script (``FixId``): a fix taken in
a later round, after earlier fixes moved the text, is traced back through the edits of every
round, so that "this fix" means the same fix whether it is applied alone or with the others.

Units: each fix is measured alone when it applies alone (taking exactly itself). When it does not
(alone, its rule reports it elsewhere, or the text it needs comes from another fix of its rule),
its rule's fixes are measured together; and when even they do not apply as a group, the fix is
measured only with all the others.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable

from torchlint.diagnostics import Diagnostic, Edit, SourceText, apply_edits
from torchlint.engine import MAX_FIX_ROUNDS, SYNTAX_ERROR, FixError, lint_source, parses, select_edits
from torchlint.harness.verdict import AppliedFix

# The linter verify uses; tests replace it to verify with rules of their own.
lint = lint_source


@dataclass(frozen=True, order=True)
class FixId:
    """A fix, by where its diagnostic starts in the original script (1-based line, 0-based column)."""

    line: int
    col: int
    code: str


@dataclass
class FixRun:
    source: str
    applied: dict[FixId, AppliedFix]  # in the order the fixes were taken


@dataclass
class FixUnit:
    """Fixes measured together (one, as a rule, or a rule's group), and the script with only them."""

    ids: tuple[FixId, ...]
    fixes: list[AppliedFix]
    source: str
    grouped: str | None = None  # why these fixes are measured together, when they are several
    # fixes applied too but reported in units of their own: those these fixes need to apply at all
    with_others: list[AppliedFix] = field(default_factory=list)

    label: str = ""  # "TL101:43", with the column where two fixes of a rule share a line: "TL701:32:9"
    path: str = ""  # the imported module whose text ``source`` is (verify --imports); "": the script


class _OriginalOffsets:
    """Maps an offset in the text after some rounds of edits back to the original text."""

    def __init__(self) -> None:
        self._rounds: list[list[Edit]] = []

    def add_round(self, edits: list[Edit]) -> None:
        self._rounds.append(sorted(edits))

    def original(self, offset: int) -> int:
        for edits in reversed(self._rounds):
            offset = _before_edits(edits, offset)
        return offset

    @property
    def rounds(self) -> int:
        return len(self._rounds)


def _before_edits(edits: list[Edit], offset: int) -> int:
    """Where ``offset`` of the edited text was before the edits (text an edit inserted maps to the
    start of what it replaced)."""
    shift = 0
    for edit in edits:
        start = edit.start + shift
        if offset < start:
            break
        if offset < start + len(edit.text):
            return edit.start
        shift += len(edit.text) - (edit.end - edit.start)
    return offset - shift


def _compiles(source: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the user's invalid escapes are not ours to print
        try:
            compile(source, "<fixed>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return False
    return True


def apply_fixes(text: str, path: str, settings, wanted: Callable[[FixId], bool] | None = None) -> FixRun:
    """Fix ``text`` round after round as ``engine.fix_source`` does, taking only the fixes that
    ``wanted`` accepts (all when None). Raises ``FixError`` when a round produces code that does
    not parse, as the engine does."""
    original = SourceText(text)
    offsets = _OriginalOffsets()
    source, applied = text, {}
    compiles = None
    diagnostics = lint(text, path, settings)
    for _ in range(MAX_FIX_ROUNDS):
        if any(d.code == SYNTAX_ERROR[0] for d in diagnostics):
            break
        current = SourceText(source)
        named = [(d, _fix_id(d, current, offsets, original)) for d in diagnostics]
        chosen = {id(d): fix_id for d, fix_id in named if wanted is None or wanted(fix_id)}
        taken, edits = select_edits([d for d in diagnostics if id(d) in chosen], settings.unsafe_fixes)
        if not taken:
            break
        candidate = apply_edits(source, edits)
        if compiles is None:
            compiles = _compiles(text)
        if not (_compiles(candidate) if compiles else parses(candidate)):
            raise FixError(f"{path}: fixes {', '.join(sorted({d.code for d in taken}))} produced code that "
                           "does not parse; nothing was run. Please report this as a torchlint bug.")
        for diagnostic in taken:
            fix_id = chosen[id(diagnostic)]
            applied.setdefault(fix_id, AppliedFix(fix_id.code, fix_id.line, diagnostic.fix.applicability))
        offsets.add_round(edits)
        source = candidate
        diagnostics = lint(source, path, settings)
    return FixRun(source, applied)


def _fix_id(diagnostic: Diagnostic, current: SourceText, offsets: _OriginalOffsets, original: SourceText) -> FixId:
    line, col = original.position(offsets.original(current.offset(diagnostic.line, diagnostic.col)))
    return FixId(line + 1, col, diagnostic.code)


def fix_units(text: str, path: str, settings, everything: FixRun, module: str = "") -> list[FixUnit]:
    """The fixes of ``everything`` (all fixes applied) as units to measure one by one: each fix
    alone where it applies alone, else its rule's fixes together, else all fixes together. For an
    imported module's text, ``module`` is its path relative to the script's folder: the units say
    so, and their labels start with it."""
    units: list[FixUnit] = []
    placed: set[FixId] = set()
    shared_lines = {(a.code, a.line) for a in everything.applied for b in everything.applied
                    if a != b and (a.code, a.line) == (b.code, b.line)}
    for fix_id in everything.applied:
        if fix_id in placed:
            continue
        unit = _alone(text, path, settings, everything, fix_id) or \
            _rule_group(text, path, settings, everything, fix_id.code, placed) or \
            _with_all(everything, fix_id.code, placed)
        unit.label = (f"{module}:" if module else "") + ", ".join(
            f"{i.code}:{i.line}" + (f":{i.col + 1}" if (i.code, i.line) in shared_lines else "") for i in unit.ids)
        unit.path = module
        units.append(unit)
        placed.update(unit.ids)
    return units


def _with_all(everything: FixRun, code: str, placed: set[FixId]) -> FixUnit:
    """The rule's fixes that apply only after other fixes (a non_blocking copy needs the pinned
    loader another rule's fix makes), measured with all the fixes applied."""
    ids = tuple(fix_id for fix_id in everything.applied if fix_id.code == code and fix_id not in placed)
    others = [fix for fix_id, fix in everything.applied.items() if fix_id not in ids]
    return FixUnit(ids, [everything.applied[fix_id] for fix_id in ids], everything.source,
                   grouped="they apply only after other fixes, so they were measured with all the fixes",
                   with_others=others)


def _alone(text: str, path: str, settings, everything: FixRun, fix_id: FixId) -> FixUnit | None:
    try:
        run = apply_fixes(text, path, settings, lambda candidate: candidate == fix_id)
    except FixError:
        return None
    if list(run.applied) != [fix_id]:
        return None
    return FixUnit((fix_id,), [everything.applied[fix_id]], run.source)


def _rule_group(text: str, path: str, settings, everything: FixRun, code: str, placed: set[FixId]) -> FixUnit | None:
    """The rule's fixes applied together; those already measured in a unit of their own are
    applied too but not reported again."""
    group = tuple(fix_id for fix_id in everything.applied if fix_id.code == code)
    try:
        run = apply_fixes(text, path, settings, lambda candidate: candidate in group)
    except FixError:
        return None
    if set(run.applied) != set(group):
        return None
    ids = tuple(fix_id for fix_id in group if fix_id not in placed)
    return FixUnit(ids, [everything.applied[fix_id] for fix_id in ids], run.source,
                   grouped=f"the {code} fixes apply only together",
                   with_others=[everything.applied[fix_id] for fix_id in group if fix_id in placed])
