"""
## What it does

Finds `torch.load(f)` calls that do not say `weights_only=`, when the target torch is older than
2.6 (from 1.13, where the parameter came in). `torch.serialization.load` and any import spelling
(`from torch import load as load_checkpoint`) count; other libraries' `load` functions do not.

## Why is it wrong

Before torch 2.6, `torch.load` defaults to `weights_only=False`: it unpickles whatever the file
holds, and unpickling runs code that the file names. Loading a checkpoint downloaded from the
internet, or shared by someone else, can therefore execute arbitrary code on your machine.
`weights_only=True` limits the unpickler to tensors, primitive types, and plain containers
(dicts, lists, tuples, `OrderedDict`), which is all a `state_dict` or a usual training checkpoint
holds.

Torch 2.6 made `weights_only=True` the default. Code that relies on the old default to load a
whole pickled model, an `argparse.Namespace` or NumPy objects stops working on that upgrade with
an `UnpicklingError`. Passing the argument explicitly makes the load behave the same on every
version: `True` for weights and checkpoints, `False` only for files you trust that hold other
Python objects.

## Example

```python
state = torch.load("checkpoint.pt", map_location="cpu")
model.load_state_dict(state["model"])
```

## Use instead

```python
state = torch.load("checkpoint.pt", map_location="cpu", weights_only=True)
model.load_state_dict(state["model"])
```

## Fix safety

Unsafe: the fix adds `weights_only=True`, and a file that holds more than tensors and plain
containers (a whole `nn.Module` saved with `torch.save(model)`, a config object, NumPy arrays in
older torch) then fails to load; write `weights_only=False` instead for such a trusted file, or
allow its classes with `torch.serialization.add_safe_globals`.

The rule stays silent when the call passes `pickle_module=` (by keyword or as the third positional
argument; `weights_only=True` refuses a custom pickle module), when it passes `*args` or
`**kwargs` (which may already carry `weights_only`), in code for other torch versions (a branch on
`torch.__version__`, an `except` fallback), when the name it calls is bound to something else as
well in the file (another library's `load`), and for a target torch of 2.6 or newer, where the
default is already `weights_only=True`.

## References

- https://pytorch.org/docs/stable/generated/torch.load.html
- https://pytorch.org/docs/stable/notes/serialization.html#weights-only
- https://pytorch.org/docs/stable/notes/serialization.html#torch-load-with-weights-only-true
"""

from __future__ import annotations

import re

from torchlint.analysis.syntax import (ast_find_keyword, ast_has_star_args, find_argument,
                                       find_keyword, has_star_args, whole_word)
from torchlint.fixes import set_keyword
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

LOADS = frozenset({"torch.load", "torch.serialization.load"})
PICKLE_MODULE_POSITION = 2  # torch.load(f, map_location, pickle_module, *, weights_only, ...)


# `load(` (the word before it, if any, checked in Python: a regex that opens with `\b` tries every
# position of the text, thirty times slower on torch's sources)
LOAD_CALL = re.compile(r"load\s*\(")


class LoadWeightsOnly(Rule):
    code = "TL104"
    name = "load-weights-only"
    kind = "correctness"
    summary = "`torch.load` without `weights_only=` unpickles arbitrary objects before torch 2.6"
    fix_applicability = "unsafe"

    @classmethod
    def applies(cls, text: str) -> bool:
        return any(whole_word(text, match.start(), match.start() + len("load")) for match in LOAD_CALL.finditer(text))
    # `weights_only` exists since 1.13; from 2.6 on it defaults to True
    torch_versions = ">=1.13,<2.6"

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        return any(not ast_has_star_args(call) and ast_find_keyword(call, "weights_only") is None
                   and ast_find_keyword(call, "pickle_module") is None and len(call.args) <= PICKLE_MODULE_POSITION
                   for call in index.calls_of(LOADS))

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified_name(node.func) not in LOADS or has_star_args(node) \
                or find_keyword(node, "weights_only") is not None \
                or find_argument(node, "pickle_module", PICKLE_MODULE_POSITION) is not None:
            return
        if self.ctx.bindings.ambiguous(node.func) or self.ctx.compat.in_fallback():
            return  # the name may mean another `load`; or code kept for other torch versions
        fix = self.fix("Pass `weights_only=True`", self.replace(node, set_keyword(node, "weights_only", cst.Name("True"))))
        self.report(node, "`torch.load` without `weights_only=` unpickles whatever the file holds, running any code it "
                          "names (before torch 2.6, whose default became `weights_only=True`); pass "
                          "`weights_only=True`, or `weights_only=False` for a trusted file that holds other objects",
                    fix)
