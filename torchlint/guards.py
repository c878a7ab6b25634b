"""The engine's guards on every fix (DESIGN.md, "Fix safety"): whatever rule wrote it, a fix is
withheld (reported, not applied) when it cannot be proved to keep the code working as meant:

- it adds a keyword to a call that passes ``**kwargs``, which may carry that keyword already
  (``f(**opts, device=d)`` raises TypeError when ``opts`` has ``device``);
- it changes a setting inside a branch whose test reads that setting
  (``if args.set_to_none is False: opt.zero_grad(set_to_none=False)``): the branch exists to choose
  the very value the fix would overrule.

Rules need not call these: the engine applies them to every report, at each edited node's own
place in the tree. What a fix changes is read from its edits: the keywords a replaced call gains,
loses or gives another value.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchlint.analysis.walk import Visitor, visit, walk
from torchlint.lazy import libcst as cst

_CONSTANTS = frozenset({"True", "False", "None"})


def may_change_keywords(edit) -> bool:
    """Could this edit (a NodeEdit) change a call's keywords? Only those need ``withheld``."""
    return edit.where == "replace" and isinstance(edit.node, (cst.Call, cst.Arg))


def withheld(edit, ancestors: Sequence[cst.CSTNode]) -> str | None:
    """Why the fix that ``edit`` (a NodeEdit) belongs to must not be applied, or None.
    ``ancestors``: the path from the module to the edited node, both included."""
    change = _keyword_change(edit.node, edit.text, ancestors)
    if change is None:
        return None
    calls, added, settings = change
    if added and any(arg.star == "**" for call in calls for arg in call.args):
        return f"the call passes `**` arguments, which may already carry `{sorted(added)[0]}`"
    tested = _branch_test_names(ancestors)
    for setting in sorted(settings):
        if any(_names_setting(name, setting) for name in tested):
            return f"it is inside a branch that tests `{setting}`"
    return None


def _keyword_change(old: cst.CSTNode, new: str | cst.CSTNode, ancestors: Sequence[cst.CSTNode]):
    """(the calls before and after, keywords added, settings changed) for an edit that replaces a
    call or one of its keyword arguments; None for any other edit."""
    if isinstance(old, cst.Call):
        call = old
        new_call = _as_call(new)
        if new_call is None:
            return None
        before, after = _keywords(old.args), _keywords(new_call.args)
    elif isinstance(old, cst.Arg) and old.keyword is not None:
        call = next((n for n in reversed(ancestors) if isinstance(n, cst.Call) and old in n.args), None)
        new_call = _as_call(f"f({new})" if isinstance(new, str) else None)
        if call is None or new_call is None:
            return None
        before, after = _keywords([old]), _keywords(new_call.args)
    else:
        return None
    added = set(after) - set(before)
    code = cst.Module([]).code_for_node
    moved = {code(arg.value) for arg in _all_args(old)}
    settings = set()
    for name in set(before) | set(after):
        if before.get(name) == after.get(name):
            continue
        value = after.get(name)
        if name in added and value in moved and value not in _CONSTANTS and not value[:1].isdigit() \
                and value[:1] not in "\"'":
            continue  # a value the old code passed elsewhere (`.to(device)` -> `device=device`): moved, not changed
        settings.add(name)
        if value is not None:
            last = value.rsplit(".", 1)[-1]
            if last.isidentifier() and last not in _CONSTANTS:
                settings.add(last)  # `memory_format=torch.channels_last`: also `channels_last`
    return (call, new_call), added, settings


def _as_call(new: str | cst.CSTNode | None) -> cst.Call | None:
    if isinstance(new, str):
        try:
            new = cst.parse_expression(new)
        except cst.ParserSyntaxError:
            return None
    return new if isinstance(new, cst.Call) else None


def _keywords(args: Sequence[cst.Arg]) -> dict[str, str]:
    code = cst.Module([]).code_for_node
    return {arg.keyword.value: code(arg.value) for arg in args if arg.keyword is not None}


def _all_args(node: cst.CSTNode) -> list[cst.Arg]:
    found: list[cst.Arg] = []
    walk(node, lambda n: found.append(n) if isinstance(n, cst.Arg) else None)
    return found


def _branch_test_names(ancestors: Sequence[cst.CSTNode]) -> set[str]:
    """Names, attribute names and string keys read by the tests of the ``if``/``while``/conditional
    expressions whose branches hold the node (not by a test that holds it)."""
    tests = [parent.test for parent, child in zip(ancestors, ancestors[1:])
             if isinstance(parent, (cst.If, cst.IfExp, cst.While)) and child is not parent.test]
    names: set[str] = set()

    class Names(Visitor):
        def visit_Name(self, node: cst.Name) -> None:
            names.add(node.value)

        def visit_SimpleString(self, node: cst.SimpleString) -> None:
            value = node.evaluated_value
            if isinstance(value, str) and value.isidentifier():
                names.add(value)  # `cfg["pin_memory"]`, `getattr(args, "fused", False)`

    for test in tests:
        visit(test, Names())
    return names


def _names_setting(name: str, setting: str) -> bool:
    """``args.pin_memory``, ``no_pin_memory``, ``use_fused`` name the settings ``pin_memory`` and
    ``fused``: the setting's words, in order, within the name's."""
    words, wanted = name.lower().split("_"), setting.lower().split("_")
    return any(words[i:i + len(wanted)] == wanted for i in range(len(words) - len(wanted) + 1))
