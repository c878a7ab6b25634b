"""Which fixes one round applies: those whose edits overlap none of the fixes taken before them,
in the diagnostics' order. The engine does it in O(n log n); these tests hold it to the plain
quadratic definition below, and to reading each edit a bounded number of times."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from torchlint.diagnostics import SAFE, UNSAFE, Diagnostic, Edit, Fix, Severity
from torchlint.engine import select_edits


def select_edits_by_definition(diagnostics, unsafe_fixes):
    """The selection as first written: every new edit against every edit taken so far."""
    def overlaps(a, b):
        if a.start == a.end or b.start == b.end:  # insertions: the same point, or inside the other
            return b.start <= a.start <= b.end if a.start == a.end else a.start <= b.start <= a.end
        return a.start < b.end and b.start < a.end

    taken, edits = [], []
    for diag in diagnostics:
        if diag.fix is None or not diag.fix.applies(unsafe_fixes):
            continue
        if any(overlaps(new, old) for new in diag.fix.edits for old in edits):
            continue
        taken.append(diag)
        edits.extend(diag.fix.edits)
    return taken, edits


def diagnostic(number: int, *edits, applicability: str = SAFE) -> Diagnostic:
    fix = Fix("fix", applicability, tuple(edits)) if edits else None
    return Diagnostic("t.py", "TL999", "test", f"finding {number}", Severity.WARNING, 0, 0, 0, 0, fix)


def chosen(diagnostics, unsafe_fixes=False) -> list[str]:
    return [d.message for d in select_edits(diagnostics, unsafe_fixes)[0]]


def test_what_counts_as_overlapping():
    replace_0_5, replace_5_9 = Edit(0, 5, "a"), Edit(5, 9, "b")
    assert chosen([diagnostic(1, replace_0_5), diagnostic(2, replace_5_9)]) == ["finding 1", "finding 2"]
    assert chosen([diagnostic(1, replace_0_5), diagnostic(2, Edit(4, 6, "c"))]) == ["finding 1"]
    # an insertion meets a replacement at either end, and another insertion at the same point only
    assert chosen([diagnostic(1, replace_0_5), diagnostic(2, Edit(5, 5, "x"))]) == ["finding 1"]
    assert chosen([diagnostic(1, Edit(0, 0, "x")), diagnostic(2, replace_0_5)]) == ["finding 1"]
    assert chosen([diagnostic(1, Edit(3, 3, "x")), diagnostic(2, Edit(3, 3, "y")),
                   diagnostic(3, Edit(4, 4, "z"))]) == ["finding 1", "finding 3"]
    # one fix's own edits are not held against each other; a fix is taken whole or not at all
    assert chosen([diagnostic(1, Edit(0, 4, "a"), Edit(2, 6, "b")), diagnostic(2, Edit(7, 8, "c"), Edit(5, 7, "d")),
                   diagnostic(3, Edit(6, 7, "e"))]) == ["finding 1", "finding 3"]
    # fixes that do not apply take no room
    assert chosen([diagnostic(1), diagnostic(2, replace_0_5, applicability=UNSAFE), diagnostic(3, replace_0_5)]) \
        == ["finding 3"]


@st.composite
def edits(draw):
    start = draw(st.integers(0, 40))
    return Edit(start, start + draw(st.integers(0, 6) | st.just(0)), "x")


@st.composite
def diagnostic_lists(draw):
    return [diagnostic(number, *draw(st.lists(edits(), max_size=3)),
                       applicability=draw(st.sampled_from((SAFE, UNSAFE))))
            for number in range(draw(st.integers(0, 30)))]


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(diagnostic_lists(), st.booleans())
def test_selection_matches_the_definition(diagnostics, unsafe_fixes):
    taken, taken_edits = select_edits(diagnostics, unsafe_fixes)
    expected, expected_edits = select_edits_by_definition(diagnostics, unsafe_fixes)
    assert [id(d) for d in taken] == [id(d) for d in expected]
    assert taken_edits == expected_edits


class CountingEdit:
    """An edit that counts how often its offsets are read."""

    reads = 0

    def __init__(self, start: int, end: int):
        self._start, self._end, self.text = start, end, ""

    @property
    def start(self) -> int:
        CountingEdit.reads += 1
        return self._start

    @property
    def end(self) -> int:
        CountingEdit.reads += 1
        return self._end


def test_each_edit_is_read_a_bounded_number_of_times():
    # A large file's thousands of fixes: comparing each with every one taken before it reads the
    # offsets millions of times (minutes of CPU on 4,000 fixes); a selection in O(n log n) reads
    # each edit's a few times. Every other fix overlaps the one before it.
    count = 2000
    diagnostics = [diagnostic(i, CountingEdit(10 * (i // 2) + i % 2, 10 * (i // 2) + 5)) for i in range(count)]
    CountingEdit.reads = 0
    taken, _ = select_edits(diagnostics, unsafe_fixes=False)
    assert len(taken) == count // 2
    assert CountingEdit.reads <= 10 * count


def test_fixes_of_conflicting_rules_wait_for_the_next_round():
    # TL703's GradScaler and TL302's fused SGD are each safe alone, not together (Rule.fix_conflicts):
    # one round takes the first of them, and the next round lints the file with it applied
    def of(code: str, number: int, at: int) -> Diagnostic:
        fix = Fix("fix", UNSAFE, (Edit(at, at, "x"),))
        return Diagnostic("t.py", code, "test", f"finding {number}", Severity.WARNING, 0, 0, 0, 0, fix)

    found = [of("TL302", 1, 10), of("TL703", 2, 50), of("TL201", 3, 90), of("TL302", 4, 120)]
    assert chosen(found, unsafe_fixes=True) == ["finding 1", "finding 3", "finding 4"]
    assert chosen(found[1:], unsafe_fixes=True) == ["finding 2", "finding 3"]


def test_a_mixed_precision_fix_is_not_written_beside_a_fused_sgd(tmp_path):
    from torchlint.config import resolve_settings
    from torchlint.engine import fix_source

    source = ("import torch\n\nmodel = torch.nn.Linear(4, 2).cuda()\n"
              "optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\nfor _ in range(10):\n"
              "    loss = model(torch.randn(8, 4, device='cuda')).square().mean()\n    optimizer.zero_grad()\n"
              "    loss.backward()\n    optimizer.step()\n")
    settings = resolve_settings(tmp_path, isolated=True, select=["TL302", "TL703"], unsafe_fixes=True)
    fixed = fix_source(source, "train.py", settings).source
    assert "fused=True" in fixed and "GradScaler" not in fixed
