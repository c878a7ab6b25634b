"""
## What it does

Finds a `torch.utils.data.DataLoader` that loads in the main process (`num_workers=0`, or no
`num_workers` at all, whose default is 0) but passes an option that only worker processes take:
`prefetch_factor=k` or `persistent_workers=True`.

## Why is it wrong

Both options describe worker processes, and the DataLoader refuses them without workers: its
constructor raises `ValueError: persistent_workers option needs num_workers > 0`, and, from torch
2.0 on (where `prefetch_factor` defaults to `None`), `ValueError: prefetch_factor option could
only be specified in multiprocessing` for any `prefetch_factor` that is not `None`. Before 2.0 the
default was 2 and only another value raised. The script fails when the loader is built, often
after a debugging edit that set `num_workers=0` and left the worker options behind.

## Example

```python
loader = DataLoader(dataset, batch_size=64, num_workers=0, prefetch_factor=4, persistent_workers=True)
```

## Use instead

```python
loader = DataLoader(dataset, batch_size=64, num_workers=0)
```
or keep the options and give the loader workers (`num_workers=4`).

## Fix safety

Safe: the fix drops the offending arguments, and the only behaviour that changes is the
`ValueError` the constructor raised; the loader then loads in the main process, as `num_workers`
says. If workers were meant, set `num_workers` instead of applying the fix.

The rule reports only a loader whose `num_workers` is provably 0: absent, a literal `0`, or a name
that every assignment in the file sets to `0` (and that no enclosing function takes as a
parameter). It stays silent for `num_workers=args.workers` and other values that may be more than
0, for `prefetch_factor=None`, `persistent_workers=False` or a non-literal value, for a call that
passes `*args` or `**kwargs` (which may carry `num_workers`), in code for other torch versions,
and in tests and under `pytest.raises`/`assertRaises` (which may build such a loader to check
that torch refuses it). Both options exist since torch 1.7; for a target torch older than 2.0,
`prefetch_factor=2` is the default and raises only once the code runs on torch 2.0 or newer, which
the message says.

## References

- https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader
- https://pytorch.org/docs/stable/data.html#single-and-multi-process-data-loading
- https://github.com/pytorch/pytorch/blob/main/torch/utils/data/dataloader.py
"""

from __future__ import annotations

import ast

from torchlint.analysis.data import (ast_dataloader_argument, ast_dataloader_calls, is_dataloader_call, known_value,
                                    without_workers)
from torchlint.analysis.syntax import ast_find_keyword, ast_is_literal, dotted_name, find_keyword, same_literal
from torchlint.fixes import remove_arg
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

WORKER_OPTIONS = ("prefetch_factor", "persistent_workers")


class PrefetchWithoutWorkers(Rule):
    code = "TL604"
    name = "prefetch-without-workers"
    kind = "correctness"
    summary = "`DataLoader` with `prefetch_factor` or `persistent_workers=True` but no workers (a `ValueError`)"
    fix_applicability = "safe"
    triggers = ("prefetch_factor", "persistent_workers")
    torch_versions = ">=1.7"  # both options came in torch 1.7

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a worker option that is not a literal None/False, on a loader whose num_workers is absent
        # or not a literal other than 0
        for call in ast_dataloader_calls(index):
            workers = ast_dataloader_argument(call, "num_workers")
            if workers is not None and not ast_is_literal(workers, 0) and not isinstance(workers, ast.Name):
                continue
            for option in WORKER_OPTIONS:
                found = ast_find_keyword(call, option)
                if found is not None and _ast_may_need_workers(option, found.value):
                    return True
        return False

    def visit_Call(self, node: cst.Call) -> None:
        if not is_dataloader_call(node, self.ctx.bindings):
            return
        parameters = self.ctx.parameters_around()
        offending = [arg for arg in map(lambda option: find_keyword(node, option), WORKER_OPTIONS)
                     if arg is not None and self._needs_workers(arg, parameters)]
        if not offending or not without_workers(node, self.ctx.bindings, parameters) \
                or self.ctx.compat.in_fallback() or self._expects_the_error():
            return
        new = node
        for arg in offending:
            new = remove_arg(new, next(a for a in new.args if a.keyword is not None
                                       and a.keyword.value == arg.keyword.value))
        written = " and ".join(f"`{arg.keyword.value}={self.ctx.code_for(arg.value)}`" for arg in offending)
        pronoun = "it" if len(offending) == 1 else "them"
        later = "" if self.ctx.torch_at_least("2.0") or any(not self._default_prefetch(a, parameters)
                                                          for a in offending) else " from torch 2.0 on"
        self.report(node, f"`DataLoader` without worker processes (`num_workers` is 0) raises a `ValueError`{later} "
                          f"for {written}; drop {pronoun}, or set `num_workers` > 0",
                    self.fix("Drop the options that need workers", self.replace(node, new)))

    def _expects_the_error(self) -> bool:
        """In a test (which may build the loader to check that torch refuses it), or under
        ``with pytest.raises(...)``/``self.assertRaises(...)``."""
        if self.ctx.programs.in_test_code():
            return True
        return any(isinstance(item.item, cst.Call) and (dotted_name(item.item.func) or "").lower().endswith("raises")
                   for statement in self.ctx.enclosing(cst.With) for item in statement.items)

    def _needs_workers(self, arg: cst.Arg, parameters: set[str]) -> bool:
        """Does this option's value make the constructor require workers?"""
        known, value = known_value(arg.value, self.ctx.bindings, parameters)
        if not known:
            return False
        if arg.keyword.value == "persistent_workers":
            return value is True
        return type(value) is int  # prefetch_factor: any number (None is the default since 2.0)

    def _default_prefetch(self, arg: cst.Arg, parameters: set[str]) -> bool:
        """``prefetch_factor=2``: the default before torch 2.0, which raised only for another value."""
        return arg.keyword.value == "prefetch_factor" and same_literal(
            known_value(arg.value, self.ctx.bindings, parameters)[1], 2)


def _ast_may_need_workers(option: str, value: ast.expr) -> bool:
    """Can ``_needs_workers`` say yes to this value: a name (which the file may bind to a literal),
    or a literal ``True`` (``persistent_workers``) or int (``prefetch_factor``), as ``known_value``
    reads them? ``persistent_workers=persistent and num_workers > 0`` is not known."""
    if isinstance(value, ast.Name):
        return True
    if option == "persistent_workers":
        return ast_is_literal(value, True)
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        value = value.operand
    return isinstance(value, ast.Constant) and type(value.value) is int
