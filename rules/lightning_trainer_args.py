"""
## What it does

Finds Lightning `Trainer` arguments that Lightning 2.x removed or discourages (`gpus=2`,
`precision=16`, `resume_from_checkpoint=...`, `weights_summary=None`...), for a `Trainer` of
`pytorch_lightning`, `lightning.pytorch` or `lightning` under any import alias, and rewrites them
into their 2.x spelling. The migrations are data: `rules/lightning_trainer_args.yaml`, one row per
argument, shown in the table below.

## Why is it wrong

Lightning 2.0 removed these arguments: a 1.x script (and the guides in the seeds, written for 1.x)
fails on a 2.x install with `TypeError: Trainer.__init__() got an unexpected keyword argument
'gpus'`. The integer precisions still work in 2.x but are discouraged, since `16` does not say
whether the weights stay in float32 (`"16-mixed"`) or not (`"16-true"`). Removed arguments are
reported as errors, discouraged ones as warnings.

## Example

```python
import pytorch_lightning as pl

trainer = pl.Trainer(gpus=2, precision=16, weights_summary=None, resume_from_checkpoint="last.ckpt")
trainer.fit(model)
```

## Use instead

```python
import pytorch_lightning as pl

trainer = pl.Trainer(accelerator="gpu", devices=2, precision="16-mixed", enable_model_summary=False)
trainer.fit(model, ckpt_path="last.ckpt")
```

## Arguments

<!-- table -->

## Fix safety

Each row's safety is in the table: renaming and value mappings that mean the same in 2.x are safe;
mappings that change what runs are unsafe (`strategy="dp"`, which 2.x removed, becomes `"ddp"`,
which starts one process per GPU and gives each a whole batch; apex options are dropped for native
AMP; `auto_select_gpus=True` is dropped, so Lightning takes the first GPUs instead of free ones).
`gpus=0` and `gpus=None` meant the CPU in 1.x, while 2.x picks a GPU when it finds one, so they
become `accelerator="cpu"`. No fix is offered:

- for a variable (`gpus=args.gpus`) where the mapping depends on the value (it may be 0);
- when the new keyword is already written with another value (`devices=` next to `gpus=`), or
  when another old argument of the same call writes it first (a second pass then reports it);
- when the call has `**kwargs`, which may carry the new keyword, unless the fix only deletes;
- for `resume_from_checkpoint=p`, unless the Trainer's `.fit(...)` is chained to it, or the
  Trainer is assigned once to a name with exactly one `.fit(...)` call in the same function, and
  that call has no `ckpt_path` or `**kwargs`: then `p` moves there (safe for a literal, unsafe for
  an expression whose value might change in between);
- for `progress_bar_refresh_rate=N`, unless `callbacks=` is absent or a list literal, and the
  callback can be imported (the fix adds `from <package>.callbacks import TQDMProgressBar` after
  the file's imports, or uses `pl.callbacks.TQDMProgressBar` when the Trainer is written `pl.Trainer`).

## Versions

Set `target-lightning` to the Lightning you run (default: the newest). A row is reported when the
target is at least its version: the 2.0 removals for 2.x targets, the 1.5-1.7 removals from
those versions on.

## References

- https://lightning.ai/docs/pytorch/stable/upgrade/migration_guide.html
- https://github.com/Lightning-AI/pytorch-lightning/blob/master/src/lightning/pytorch/CHANGELOG.md
- https://lightning.ai/docs/pytorch/stable/common/trainer.html
- https://lightning.ai/docs/pytorch/stable/common/precision_basic.html
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from torchlint.analysis.frameworks import lightning_names
from torchlint.analysis.syntax import (dotted_name, find_keyword, has_star_args, literal_value, positional_args,
                                       same_literal)
from torchlint.analysis.walk import Visitor, visit
from torchlint.fixes import append_element, import_reference, remove_arg, set_keyword
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, Severity, SyntaxIndex, data_table


@cache
def _rows() -> dict[str, dict]:
    """The table's rows by the old argument's name (read on first use: YAML costs start-up)."""
    return {row["old"]: row for row in data_table("lightning_trainer_args.yaml")}


TRAINER_PATHS = ("Trainer", "trainer.Trainer", "trainer.trainer.Trainer")
FIT_CKPT_INDEX = 4  # Trainer.fit(model, train_dataloaders, val_dataloaders, datamodule, ckpt_path)
PROGRESS_BARS = ("ProgressBar", "progress_bar")


def argument_list_text(pairs: list[tuple[str, str]]) -> str:
    """``[("accelerator", '"gpu"'), ("devices", "2")]`` -> ``accelerator="gpu", devices=2``."""
    return ", ".join(f"{name}={value}" for name, value in pairs)


def python_literal(value: object) -> str:
    """Source text for a plain value read from the table: ``"16-mixed"``, ``True``, ``2``, ``None``."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    raise ValueError(f"not a plain literal: {value!r}")


def _table_markdown() -> str:
    lines = ["| old | new | version | status | fix |", "|---|---|---|---|---|"]
    for row in _rows().values():
        safeties = sorted({case.get("safety", "none") for case in row["cases"] if case.get("write") is not None})
        fix = " / ".join(safeties) or "none"
        if row.get("handler"):
            fix += " (see below)"
        values = " (some values)" if row.get("only_values") else ""
        lines.append(f"| `{row['old']}`{values} | {row['new']} | {row['version']} | {row['status']} | {fix} |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Mapping:
    row: dict
    write: dict | None  # keyword -> value (str from the table, or the old value node); None: no fix
    safety: str


def _case(row: dict, value: cst.BaseExpression) -> Mapping | None:
    """The row's mapping for this value; None when the value is not an old spelling at all."""
    known, literal = literal_value(value)
    for case in row["cases"]:
        if "value" in case or "values" in case:
            wanted = case["values"] if "values" in case else [case["value"]]
            if not (known and any(same_literal(literal, w) for w in wanted)):
                continue
        elif case.get("literal") and not known:
            continue
        write = case["write"]
        if write is not None:
            write = {key: (value if v == "$value" else v) for key, v in write.items()}
        return Mapping(row, write, case.get("safety", "safe"))
    return None if row.get("only_values") else Mapping(row, None, "safe")


class LightningTrainerArgs(Rule):
    code = "TL901"
    name = "lightning-trainer-args"
    kind = "migration"
    summary = "A Lightning 1.x `Trainer` argument that Lightning 2.x removed or discourages (`gpus=`, `precision=16`)"
    fix_applicability = "safe"
    triggers = ("Trainer(",)
    lightning_versions = ">=0.8"  # the table's oldest version (a test keeps them equal)

    @classmethod
    def docs(cls) -> str:
        return super().docs().replace("<!-- table -->", _table_markdown())

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return any(k.arg in _rows() for call in index.calls("Trainer") for k in call.keywords)

    def visit_Call(self, node: cst.Call) -> None:
        if not lightning_names(self.ctx.qualified_name(node.func), *TRAINER_PATHS):
            return
        present = {arg.keyword.value: arg for arg in node.args if arg.keyword is not None}
        planned: dict[str, object] = {}  # keywords that earlier fixes of this call write
        for arg in node.args:
            row = _rows().get(arg.keyword.value) if arg.keyword is not None else None
            if row is None or not self.ctx.lightning_at_least(row["version"]):
                continue
            mapping = _case(row, arg.value)
            if mapping is not None:
                self._report(node, arg, mapping, present, planned)

    def _report(self, node: cst.Call, arg: cst.Arg, mapping: Mapping, present: dict, planned: dict) -> None:
        row = mapping.row
        old = f"{row['old']}={self.ctx.code_for(arg.value)}"
        new = row["new"]
        drop = new.removeprefix("nothing: ") if new.startswith("nothing: ") else "drop it"
        fix, advice = None, drop if new.startswith("nothing: ") else f"write {new} instead"
        if mapping.write is not None:
            text = [(key, self.ctx.code_for(value) if isinstance(value, cst.CSTNode) else python_literal(value))
                    for key, value in mapping.write.items()]
            advice = f"write `{argument_list_text(text)}` instead" if text else drop
            fix = self._rewrite(node, arg, mapping, text, present, planned)
        elif row.get("handler") == "resume":
            fix = self._resume(node, arg)
            advice = f"pass it to `.fit(..., ckpt_path={self.ctx.code_for(arg.value)})` instead"
        elif row.get("handler") == "progress_bar":
            fix, advice = self._progress_bar(node, arg, present, planned)
        removed = row["status"] == "removed"
        verb = "was removed in" if removed else "is discouraged since"
        self.report(arg, f"`{old}` {verb} Lightning {row['version']}; {advice}", fix,
                    severity=Severity.ERROR if removed else Severity.WARNING)

    def _rewrite(self, node: cst.Call, arg: cst.Arg, mapping: Mapping, text: list, present: dict, planned: dict):
        """Replace the argument by the new keywords (or delete it), unless that would write a
        keyword twice."""
        written = []
        for key, value in text:
            if key == arg.keyword.value:
                written.append((key, value))
                continue
            existing = present.get(key)
            if existing is not None or key in planned:
                have = self.ctx.code_for(existing.value) if existing is not None else planned[key]
                if have != value:
                    return None  # `accelerator="cpu"` next to `gpus=2`: the user must decide
                continue  # already written with this value
            if has_star_args(node):
                return None  # **kwargs may carry the keyword
            written.append((key, value))
        planned.update(written)
        title = f"Write `{argument_list_text(written)}`" if written else f"Drop `{arg.keyword.value}=`"
        if written:
            return self.fix(title, self.replace(arg, argument_list_text(written)), applicability=mapping.safety)
        return self.fix(title, self.replace(node, remove_arg(node, arg)), applicability=mapping.safety)

    # --- resume_from_checkpoint=p -> trainer.fit(..., ckpt_path=p) --------------------------------
    def _resume(self, node: cst.Call, arg: cst.Arg):
        fit = self._fit_call(node)
        if fit is None or has_star_args(fit) or find_keyword(fit, "ckpt_path") is not None \
                or len(positional_args(fit)) > FIT_CKPT_INDEX:
            return None
        known, _ = literal_value(arg.value)
        safety = "safe" if known else "unsafe"
        title = "Move the checkpoint to `fit(..., ckpt_path=...)`"
        if fit.func.value is node:  # Trainer(...).fit(model): one call holds both
            new_fit = set_keyword(fit.with_changes(func=fit.func.with_changes(value=remove_arg(node, arg))),
                                  "ckpt_path", arg.value)
            return self.fix(title, self.replace(fit, new_fit), applicability=safety)
        return self.fix(title, self.replace(node, remove_arg(node, arg)),
                        self.replace(fit, set_keyword(fit, "ckpt_path", arg.value)), applicability=safety)

    def _fit_call(self, node: cst.Call) -> cst.Call | None:
        """The one ``.fit(...)`` call of this Trainer: chained, or on the name it is assigned to
        (once) in the same function."""
        parent, grandparent = self.ctx.ancestors[-2], self.ctx.ancestors[-3]
        if isinstance(parent, cst.Attribute) and parent.attr.value == "fit" and isinstance(grandparent, cst.Call) \
                and grandparent.func is parent:
            return grandparent
        name = self.ctx.bound_name()
        if name is None:
            return None
        scope = self.ctx.enclosing_function() or self.ctx.module
        fits: list[cst.Call] = []
        assignments: list[cst.CSTNode] = []

        class Uses(Visitor):
            def visit_Call(self, call: cst.Call) -> None:
                if dotted_name(call.func) == f"{name}.fit":
                    fits.append(call)

            def visit_AssignTarget(self, target: cst.AssignTarget) -> None:
                if dotted_name(target.target) == name:
                    assignments.append(target)

        visit(scope, Uses())
        return fits[0] if len(fits) == 1 and len(assignments) == 1 else None

    # --- progress_bar_refresh_rate=N -> callbacks=[TQDMProgressBar(refresh_rate=N)] --------------
    def _progress_bar(self, node: cst.Call, arg: cst.Arg, present: dict, planned: dict):
        rate = self.ctx.code_for(arg.value)
        advice = f"write `callbacks=[TQDMProgressBar(refresh_rate={rate})]` instead"
        callbacks = present.get("callbacks")
        if "callbacks" in planned or has_star_args(node) or (
                callbacks is not None and (not isinstance(callbacks.value, cst.List)
                                           or any(p in self.ctx.code_for(callbacks.value) for p in PROGRESS_BARS))):
            return None, advice
        reference = self._progress_bar_class(node)
        if reference is None:
            return None, advice
        bar, import_edit = reference
        element = f"{bar}(refresh_rate={rate})"
        title = f"Use the `{bar}(refresh_rate={rate})` callback"
        extra = [import_edit] if import_edit else []
        planned["callbacks"] = element
        if callbacks is None:
            return self.fix(title, self.replace(arg, f"callbacks=[{element}]"), *extra), advice
        new_list = append_element(callbacks.value, cst.parse_expression(element))
        new_call = node.with_changes(args=[a.with_changes(value=new_list) if a is callbacks else a for a in node.args])
        return self.fix(title, self.replace(node, remove_arg(new_call, arg)), *extra), advice

    def _progress_bar_class(self, node: cst.Call) -> tuple[str, object] | None:
        """How to name TQDMProgressBar here: through the package alias the Trainer is written
        with (``pl.Trainer`` -> ``pl.callbacks.TQDMProgressBar``), or a new import."""
        qualified = self.ctx.qualified_name(node.func)
        package = qualified.rsplit(".Trainer", 1)[0].removesuffix(".trainer.trainer").removesuffix(".trainer")
        if package == "lightning":
            package = "lightning.pytorch"
        written = dotted_name(node.func) or ""
        if isinstance(node.func, cst.Attribute) and written.endswith(".Trainer") \
                and self.ctx.qualified_name(node.func.value) in ("pytorch_lightning", "lightning.pytorch"):
            return f"{written[: -len('.Trainer')]}.callbacks.TQDMProgressBar", None
        root = written.split(".")[0]
        if self.ctx.bindings.count(root) > 1:
            return None  # `try: import lightning.pytorch as pl / except ImportError: ...`: which package?
        return import_reference(self.ctx, f"{package}.callbacks", "TQDMProgressBar")

