"""
## What it does

Finds `torch.tensor(arr)`, with no other argument, where `arr` is a NumPy array: a call of a NumPy
function that returns an array (`np.array(...)`, `np.zeros(...)`, `np.load(...)`, `np.stack(...)`...), the result of
`.numpy()` or `.to_numpy()`, or a local variable assigned only such values.

## Why is it slow

`torch.tensor` always copies its data. For an array that is not needed afterwards, the copy is
pure overhead: one more allocation and a pass over the whole array, on every sample when it sits
in a `Dataset.__getitem__`. `torch.from_numpy(arr)` wraps the array's memory in a tensor without
copying (and so does `torch.as_tensor(arr)`).

## Expected gain

Small: one copy of the array per call, a pass over memory that is cheap next to reading and decoding
the sample it comes from, and hidden entirely when DataLoader workers prepare batches ahead of the
step. It counts for large arrays converted on the training thread. No published measurement found;
`torchlint verify --each script.py` (with `--unsafe-fixes` for the unsafe fixes) measures the step
time and memory before and after the fix on your machine.

## Example

```python
import numpy as np

def load_image(path):
    image = np.load(path)
    return torch.tensor(image)
```

## Use instead

```python
import numpy as np

def load_image(path):
    image = np.load(path)
    return torch.from_numpy(image)
```

## Fix safety

`torch.from_numpy` shares memory with the array: writing into one changes the other. The fix is
safe when nothing else can see the array: it is made right in the call (`np.zeros(...)`,
`np.array(...)` without `copy=False`, `np.load(...)` without `mmap_mode`), or it is a local
variable assigned once such a value and used only in this call, outside any loop. Otherwise it is
unsafe: the array may be written later (a reused buffer), `.numpy()` shares memory with its tensor
already, and `np.asarray` may return its argument itself. Both functions fail on the same inputs
as `torch.tensor` does for arrays (negative strides, unsupported dtypes), so the fix does not add
errors; `from_numpy` warns where the array is read-only. Only a bare `torch.tensor(arr)` is
reported: with `dtype=` the conversion usually copies anyway (NumPy's float64 into float32), with
`device=` the data is copied to the device either way, and `requires_grad=` has no `from_numpy`
equivalent.

## References

- https://pytorch.org/docs/stable/generated/torch.from_numpy.html
- https://pytorch.org/docs/stable/generated/torch.as_tensor.html
- https://pytorch.org/docs/stable/generated/torch.tensor.html
"""

from __future__ import annotations

import ast

from torchlint.analysis.bindings import ast_scope_bindings
from torchlint.analysis.index import span
from torchlint.analysis.loops import AST_FUNCTIONS
from torchlint.analysis.syntax import find_argument, find_keyword, is_literal, method_call, positional_args
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

# NumPy functions that return a new array (never a view of their argument, never a scalar).
FRESH_ARRAYS = frozenset({
    "array", "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like", "arange",
    "linspace", "logspace", "eye", "identity", "stack", "concatenate", "vstack", "hstack", "dstack",
    "column_stack", "load", "loadtxt", "genfromtxt", "copy", "tile", "repeat",
})
# Functions that may return their argument (or a view of it) as it is.
SHARED_ARRAYS = frozenset({"asarray", "ascontiguousarray", "asfortranarray", "frombuffer", "fromfile"})
# numpy.random functions: the position of their `size` parameter (no size: a Python scalar).
RANDOM_SIZE = {"rand": 0, "randn": 0, "random": 0, "random_sample": 0, "normal": 2, "uniform": 2, "randint": 2}
ARRAY_METHODS = frozenset({"numpy", "to_numpy"})
# ndarray methods that return an array: a copy (astype, copy, flatten) or a view (the others).
ARRAY_TO_ARRAY = ("astype", "copy", "flatten", "reshape", "transpose", "squeeze", "ravel", "swapaxes")


class TensorFromNumpy(Rule):
    code = "TL204"
    name = "tensor-from-numpy"
    kind = "performance"
    summary = "`torch.tensor(ndarray)` copies the array; `torch.from_numpy` does not"
    fix_applicability = "unsafe"
    triggers = ("tensor(",)

    @classmethod
    def applies(cls, text: str) -> bool:
        # the array comes from numpy: `import numpy`, or a `.numpy()`/`.to_numpy()` call
        return "tensor(" in text and "numpy" in text

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # `torch.tensor(<an array>)`, or of a name the file assigns an array to (see _array_kind)
        def array(expr) -> bool:
            # as _array_kind reads a call: an array method (on any receiver), or NumPy's function
            if not isinstance(expr, ast.Call):
                return False
            func = expr.func
            if isinstance(func, ast.Attribute) and func.attr in ARRAY_METHODS | set(ARRAY_TO_ARRAY):
                return True
            return any(name.startswith("numpy.") for name in index.qualified_names(func))

        def array_name(call: ast.Call, name: str) -> bool:
            # as _array_kind reads a name: every value its scope binds it (the innermost function
            # around the call, or the module) is an array, and there is one
            functions = [f for f in index.nodes(*AST_FUNCTIONS) if span(f)[0] <= call.lineno <= f.end_lineno]
            scope = max(functions, key=lambda f: span(f)[0]) if functions else index.tree
            values = ast_scope_bindings(index, scope).get(name)
            return values is None or all(value is not None and array(value) for value in values)

        named = {target.id for node in index.nodes(ast.Assign, ast.AnnAssign, ast.NamedExpr) if array(node.value)
                 for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                 if isinstance(target, ast.Name)}
        return any(len(call.args) == 1 and not call.keywords and (
            array(call.args[0]) or isinstance(call.args[0], ast.Name) and call.args[0].id in named
            and array_name(call, call.args[0].id)) for call in index.calls("tensor"))

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified_name(node.func) != "torch.tensor":
            return
        if len(node.args) != 1 or node.args[0].keyword is not None or node.args[0].star:
            return  # with dtype=, device= or requires_grad= a copy is likely made either way
        data = node.args[0].value
        kind = self._array_kind(data)
        if kind is None:
            return
        fix = None
        if isinstance(node.func, cst.Attribute):
            fix = self.fix("Use `torch.from_numpy` (shares memory with the array)",
                           self.replace(node.func.attr, "from_numpy"),
                           applicability="safe" if kind == "fresh" else "unsafe")
        self.report(node, f"`torch.tensor` copies the NumPy array `{self.ctx.code_for(data)}`; "
                          "`torch.from_numpy(...)` uses its memory without a copy (a small gain: one copy per call)",
                    fix)

    def _array_kind(self, expr: cst.BaseExpression, follow: bool = True,
                    following: frozenset[str] = frozenset()) -> str | None:
        """"fresh" for a new array nothing else holds, "shared" for an array that may be seen
        elsewhere, None when expr is not known to be an array. A name is followed to its values
        once per chain: ``following`` holds the names being followed, so that a rebinding of a
        name to itself (``mode = mode.reshape(-1, 1)``) ends."""
        if isinstance(expr, cst.Call):
            if method_call(expr, *ARRAY_METHODS) and not expr.args:
                return "shared"
            method = method_call(expr, *ARRAY_TO_ARRAY)
            if method is not None and self._array_kind(method.value, True, following) is not None:
                copies = method.attr.value in ("astype", "copy", "flatten") and not is_literal(
                    getattr(find_keyword(expr, "copy"), "value", None), False)
                return "fresh" if copies else "shared"
            name = self.ctx.qualified_name(expr.func) or ""
            if not name.startswith("numpy."):
                return None
            function = name[len("numpy."):]
            if function in FRESH_ARRAYS:
                if function == "array" and is_literal(getattr(find_keyword(expr, "copy"), "value", None), False):
                    return "shared"
                if function == "load" and find_keyword(expr, "mmap_mode") is not None:
                    return "shared"
                return "fresh"
            if function in SHARED_ARRAYS:
                return "shared"
            if function.startswith("random.") and function[7:] in RANDOM_SIZE:
                size_at = RANDOM_SIZE[function[7:]]
                has_size = bool(positional_args(expr)) if function[7:] in ("rand", "randn") else \
                    find_argument(expr, "size", size_at) is not None
                return "fresh" if has_size else None
            return None
        if follow and isinstance(expr, cst.Name) and expr.value not in following:
            values = self._scope().assigned.get(expr.value, [])
            kinds = {self._array_kind(v, False, following | {expr.value}) if v is not None else None for v in values}
            if not values or None in kinds:
                return None
            # a variable may be seen elsewhere; fresh only if every value is and it is private
            return "fresh" if kinds == {"fresh"} and self._private_local(expr.value) else "shared"
        return None

    def _scope(self):
        scope = self.ctx.enclosing_function() or self.ctx.module
        if getattr(self, "_scope_of", None) is not scope:
            self._scope_of, self._names = scope, self.ctx.bindings.scope(scope)
        return self._names

    def _private_local(self, name: str) -> bool:
        """Assigned once in the function, read only here, and not inside a loop (where every
        iteration's tensor would share one array)."""
        if self.ctx.enclosing_function() is None or self.ctx.loops.enclosing_loops():
            return False
        names = self._scope()
        return len(names.assigned.get(name, [])) == 1 and names.references.get(name, 0) == 2
