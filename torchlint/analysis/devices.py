"""Devices and dtypes: what is a device, what kind, what a ``.cuda()``/``.to()``/``.cpu()`` call
moves to, which calls make tensors (factories), and what precision a file computes in."""

from __future__ import annotations

import ast
import re
from collections.abc import Collection
from dataclasses import dataclass
from functools import cached_property, lru_cache

from torchlint.analysis.bindings import Bindings, ast_values
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.syntax import (ast_find_keyword, ast_has_star_args, find_argument, find_keyword,
                                       has_star_args, has_word, is_literal, positional_args, string_value,
                                       whole_word)
from torchlint.analysis.walk import Visitor, visit
from torchlint.lazy import libcst as cst

DEVICE_STRING = re.compile(r"^(cuda|cpu|mps|xpu|meta|hpu|xla|npu|privateuseone)(:\d+)?$")
DTYPES = frozenset(
    "float16 half bfloat16 float32 float float64 double complex32 complex64 cfloat complex128 "
    "cdouble uint8 int8 int16 short int32 int int64 long bool float8_e4m3fn float8_e5m2".split()
)
INTEGER_DTYPES = frozenset("uint8 int8 int16 short int32 int int64 long bool".split())
DEVICE_NAMES = re.compile(r"^(device|dev|.*_device)$")

# Tensor factories (``torch.<name>``): deterministic ones give the same values on every device;
# random ones do not (the CPU and CUDA generators differ). EXACT: values exact in every dtype.
DETERMINISTIC_FACTORIES = frozenset({
    "zeros", "ones", "empty", "full", "arange", "range", "eye", "tensor", "as_tensor", "linspace", "logspace",
    "zeros_like", "ones_like", "empty_like", "full_like", "scalar_tensor", "tril_indices", "triu_indices",
})
RANDOM_FACTORIES = frozenset({"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like",
                              "normal"})
EXACT_FACTORIES = frozenset({"zeros", "ones", "empty", "eye", "zeros_like", "ones_like", "empty_like"})
TENSOR_FACTORIES = {f"torch.{name}": name for name in DETERMINISTIC_FACTORIES | RANDOM_FACTORIES}
# Factories whose result is an integer or bool tensor whatever the arguments.
INTEGER_FACTORIES = frozenset({"randint", "randperm", "tril_indices", "triu_indices"})

# Text that shows a file computes in float16/bfloat16 somewhere (autocast, a scaler, half models):
# these words, each a whole word except `GradScaler` and `.half()`. The word boundaries are checked
# in Python: a regex that opens with `\b` tries every position of the text, ten times slower.
REDUCED_PRECISION = re.compile(r"autocast|GradScaler|b?float16|\.half\(\)|bf16|fp16|amp\.initialize")
_UNBOUNDED = frozenset({"GradScaler", ".half()"})


# --- device and dtype values -------------------------------------------------------------------------

def is_dtype(expr: cst.BaseExpression, bindings: Bindings) -> bool:
    name = bindings.qualified_name(expr)
    return name is not None and name.startswith("torch.") and name[6:] in DTYPES


def names_python_value(name: str | None) -> bool:
    """A qualified name that stands for a Python value: a torch dtype (``torch.int32``), or a name
    of ``math`` (its constants and functions give Python numbers)."""
    return name is not None and (name.startswith("math.") or name.startswith("torch.") and name[6:] in DTYPES)


def is_device_value(expr: cst.BaseExpression, bindings: Bindings) -> bool:
    """A device written out: ``"cuda:0"``, ``torch.device(...)``, ``f"cuda:{rank}"``, or a
    conditional between such values."""
    text = string_value(expr)
    if text is not None:
        return bool(DEVICE_STRING.match(text))
    if isinstance(expr, cst.FormattedString):
        first = expr.parts[0] if expr.parts else None
        return isinstance(first, cst.FormattedStringText) and bool(
            re.match(r"^(cuda|cpu|mps|xpu|npu|hpu):", first.value))
    if isinstance(expr, cst.Call):
        return bindings.qualified_name(expr.func) == "torch.device"
    if isinstance(expr, cst.IfExp):
        return is_device_value(expr.body, bindings) and is_device_value(expr.orelse, bindings)
    return False


def written_device_kind(expr: cst.BaseExpression, bindings: Bindings) -> str | None:
    """The kind of a device written out: ``"cuda"`` for ``"cuda:0"``, ``torch.device("cuda", 1)``
    or ``f"cuda:{rank}"``; ``"cpu"``, ``"mps"``...; None when it cannot be read. A conditional
    between CUDA and the CPU (``"cuda" if torch.cuda.is_available() else "cpu"``) is ``"cuda"``:
    on a machine without CUDA nothing moves."""
    if isinstance(expr, cst.Call) and bindings.qualified_name(expr.func) == "torch.device" and expr.args \
            and expr.args[0].keyword in (None,) and not expr.args[0].star:
        expr = expr.args[0].value
    if isinstance(expr, cst.IfExp):
        kinds = {written_device_kind(expr.body, bindings), written_device_kind(expr.orelse, bindings)}
        if kinds <= {"cuda", "cpu"}:
            return "cuda" if "cuda" in kinds else "cpu"
        return None
    text = string_value(expr)
    if text is None and isinstance(expr, cst.FormattedString) and expr.parts \
            and isinstance(expr.parts[0], cst.FormattedStringText) and ":" in expr.parts[0].value:
        text = expr.parts[0].value.split(":")[0]
    if text is None or not DEVICE_STRING.match(text):
        return None
    return text.split(":")[0]


def tensor_factory(call: cst.CSTNode, bindings: Bindings) -> str | None:
    """``zeros`` for a call of ``torch.zeros`` (any import spelling), else None."""
    if not isinstance(call, cst.Call):
        return None
    return TENSOR_FACTORIES.get(bindings.qualified_name(call.func) or "")


@dataclass(frozen=True)
class DeviceMove:
    """What a ``.cuda(...)``/``.to(device...)``/``.cpu()`` call does (see Devices.move)."""

    call: cst.Call
    method: str  # "cuda" | "to" | "cpu"
    device: cst.BaseExpression  # the target device, as written (or a literal made up for .cuda()/.cpu())
    dtype: cst.BaseExpression | None  # a dtype given to .to() as well
    understood: bool  # every argument is one a fix can carry over (device, dtype, non_blocking)
    certain: bool  # the device means the same when given as `device=` (not `.cuda(x)` with a variable x)
    to_cpu: bool  # the target is literally the CPU

    @property
    def non_blocking(self) -> cst.Arg | None:
        index = 1 if self.method == "cuda" else None
        return find_argument(self.call, "non_blocking", index)


class Devices:
    """The devices of a file: names that hold one, their kinds, and what moves go where."""

    def __init__(self, bindings: Bindings):
        self.bindings = bindings

    @cached_property
    def device_names(self) -> frozenset[str]:
        """Plain names assigned a device value somewhere in the file (``=``, annotated, ``:=``)."""
        return frozenset(name for name in self.bindings.assigned() if "." not in name and any(
            value is not None and is_device_value(value, self.bindings) for value in self.bindings.values(name)))

    def is_device(self, expr: cst.BaseExpression, extra_names: tuple[str, ...] = ()) -> bool:
        """Clearly a device: a device literal, ``torch.device(...)``, ``x.device``, or a name that
        is bound to a device in this file or is named like one (``device``, ``dev``,
        ``*_device``)."""
        if is_device_value(expr, self.bindings):
            return True
        if isinstance(expr, cst.Attribute) and expr.attr.value == "device":
            return True
        if isinstance(expr, cst.Name):
            return expr.value in self.device_names or bool(DEVICE_NAMES.match(expr.value)) \
                or expr.value in extra_names
        return False

    def is_dtype(self, expr: cst.BaseExpression) -> bool:
        return is_dtype(expr, self.bindings)

    def kind(self, expr: cst.BaseExpression) -> str | None:
        """``"cuda"``, ``"cpu"``, ``"mps"``... for a device written out or a name bound to one
        (every value the file assigns to it agrees); None when unknown."""
        kind = written_device_kind(expr, self.bindings)
        if kind is None and isinstance(expr, cst.Name):
            values = self.bindings.values(expr.value)
            kinds = {written_device_kind(v, self.bindings) if v is not None else None for v in values}
            if len(kinds) == 1:
                kind = kinds.pop()
        return kind

    def move(self, call: cst.CSTNode, extra_names: tuple[str, ...] = ()) -> DeviceMove | None:
        """What a ``.cuda(...)``, ``.to(<device>...)`` or ``.cpu()`` call moves to; None for any
        other call, and for ``.to(torch.float16)``, ``.to(other_tensor)`` or a ``.to()`` whose
        first argument is not clearly a device (see is_device)."""
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)):
            return None
        method = call.func.attr.value
        if method == "cpu":
            return None if call.args else DeviceMove(call, "cpu", cst.SimpleString('"cpu"'), None, True, True, True)
        if method == "cuda":
            understood = not has_star_args(call) and len(positional_args(call)) <= 2 and all(
                a.keyword is None or a.keyword.value in ("device", "non_blocking") for a in call.args)
            index = find_argument(call, "device", 0)
            if index is None or is_literal(index.value, None):
                device, certain = cst.SimpleString('"cuda"'), True
            elif isinstance(index.value, cst.Integer):
                device, certain = cst.SimpleString(f'"cuda:{index.value.evaluated_value}"'), True
            else:  # an int variable or a device: `device=` reads an int as a CUDA index too, but not a str
                device, certain = index.value, False
            return DeviceMove(call, "cuda", device, None, understood, certain, False)
        if method != "to" or has_star_args(call):
            return None
        positional = positional_args(call)
        device_arg = find_keyword(call, "device") or (positional[0] if positional else None)
        if device_arg is None or not self.is_device(device_arg.value, extra_names):
            return None
        dtype_arg = find_keyword(call, "dtype")
        if dtype_arg is None and len(positional) > 1 and positional[0] is device_arg:
            dtype_arg = positional[1]
        if dtype_arg is not None and not self.is_dtype(dtype_arg.value):
            return None
        understood = len(positional) <= 2 and all(
            a.keyword is None or a.keyword.value in ("device", "dtype", "non_blocking") for a in call.args)
        to_cpu = written_device_kind(device_arg.value, self.bindings) == "cpu" \
            and not isinstance(device_arg.value, cst.IfExp)
        return DeviceMove(call, "to", device_arg.value, dtype_arg.value if dtype_arg else None,
                          understood, True, to_cpu)

    def moves_to_cuda(self, tree: cst.CSTNode) -> bool:
        """Does the subtree copy something to a CUDA device: ``.cuda(...)``, or ``.to(d)`` /
        ``.to(device=d)`` with ``d`` a device that is not known to be another kind (a name bound
        only to ``"cpu"`` is not CUDA; ``"cuda" if available else "cpu"`` is)?"""
        devices = self

        class Moves(Visitor):
            found = False

            def visit_Call(self, node: cst.Call) -> None:
                func = node.func
                if not isinstance(func, cst.Attribute) or self.found:
                    return
                if func.attr.value == "cuda":
                    self.found = True
                elif func.attr.value == "to" and node.args and not node.args[0].star:
                    target = (find_keyword(node, "device") or node.args[0]).value
                    if devices.is_device(target):
                        values = [target] if not isinstance(target, cst.Name) else \
                            devices.bindings.values(target.value) or [None]
                        kinds = {written_device_kind(v, devices.bindings) if v is not None else None for v in values}
                        self.found = "cuda" in kinds or None in kinds  # unknown devices may be CUDA

        finder = Moves()
        visit(tree, finder)
        return finder.found

    def one_device(self, expr: cst.BaseExpression, function: cst.FunctionDef | None) -> bool:
        """Does a list of devices (``device_ids=``) name exactly one: a list or tuple display of
        one element (``[0]``, ``[args.gpu]``), or a parameter of ``function`` that takes such a
        display as its default and is not bound again in the function (``gpu_ids=[0]``: what the
        function does when its caller does not choose)?"""
        if isinstance(expr, cst.Name) and function is not None \
                and len(self.bindings.scope(function).assigned.get(expr.value) or ()) <= 1:  # the parameter's own
            params = function.params
            default = next((param.default for param in (*params.posonly_params, *params.params, *params.kwonly_params)
                            if param.name.value == expr.value), None)
            expr = default if default is not None else expr
        return isinstance(expr, (cst.List, cst.Tuple)) and len(expr.elements) == 1 \
            and isinstance(expr.elements[0], cst.Element)


# --- the same questions on CPython's tree, for the prechecks ---------------------------------------------

def ast_may_be_device_value(expr: ast.AST, index: SyntaxIndex) -> bool:
    """The precheck twin of ``is_device_value``."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, str) and bool(DEVICE_STRING.match(expr.value))
    if isinstance(expr, ast.IfExp):
        return ast_may_be_device_value(expr.body, index) and ast_may_be_device_value(expr.orelse, index)
    return isinstance(expr, ast.JoinedStr) or isinstance(expr, ast.Call) \
        and "torch.device" in index.qualified_names(expr.func)


def ast_device_names(index: SyntaxIndex) -> frozenset[str]:
    """The precheck twin of ``Devices.device_names``: plain names the file may assign a device."""
    return index.memo("device_names", lambda: frozenset(
        name for name, values in ast_values(index).items()
        if "." not in name and any(ast_may_be_device_value(value, index) for value in values)))


def ast_may_be_device(expr: ast.AST, index: SyntaxIndex, extra_names: Collection[str] | None = ()) -> bool:
    """Could Devices.is_device take this for a device? A name when it is named like one, the file
    may assign it a device, or it is one of ``extra_names`` (None: any name, the extra names being
    unknown)."""
    if ast_may_be_device_value(expr, index):
        return True
    if isinstance(expr, ast.IfExp):
        return ast_may_be_device(expr.body, index, extra_names) and ast_may_be_device(expr.orelse, index, extra_names)
    if isinstance(expr, ast.Attribute):
        return expr.attr == "device"
    return isinstance(expr, ast.Name) and (extra_names is None or expr.id in extra_names or bool(
        DEVICE_NAMES.match(expr.id)) or expr.id in ast_device_names(index))


def _ast_may_be_cpu(expr: ast.AST, index: SyntaxIndex) -> bool:
    """Could written_device_kind read this as the CPU (``"cpu"``, ``torch.device("cpu")``)?"""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, str) and expr.value.startswith("cpu")
    return isinstance(expr, ast.JoinedStr) or index.is_call(expr, "device")


def ast_device_argument(call: ast.Call) -> ast.AST | None:
    """What a ``.to(...)`` call gives as its device: ``device=``, or its first argument."""
    found = ast_find_keyword(call, "device")
    return found.value if found is not None else call.args[0] if call.args else None


def ast_may_move(index: SyntaxIndex, call: ast.AST, extra_names: Collection[str] | None = ()) -> bool:
    """Could Devices.move (given ``extra_names``: see ast_may_be_device) read this call as a move to
    a device (``.cuda(...)``, ``.to(<device>[, <dtype>])``)? A move to the CPU included, since a
    name may be bound to it."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return False
    if call.func.attr == "cuda":
        return True
    device = ast_device_argument(call)
    if call.func.attr != "to" or ast_has_star_args(call) or device is None \
            or not ast_may_be_device(device, index, extra_names):
        return False
    dtype = ast_find_keyword(call, "dtype")
    dtype = dtype.value if dtype is not None else call.args[1] if len(call.args) > 1 and call.args[0] is device \
        else None
    return dtype is None or (dtype.attr if isinstance(dtype, ast.Attribute) else getattr(dtype, "id", None)) \
        in index.names(DTYPES)


def ast_moves_to_cpu(index: SyntaxIndex, call: ast.AST) -> bool:
    """Could Devices.move read this call as a move to the CPU (``.cpu()``, ``.to("cpu")``)?"""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return False
    if call.func.attr == "cpu":
        return not call.args and not call.keywords
    device = ast_device_argument(call)
    return call.func.attr == "to" and device is not None and _ast_may_be_cpu(device, index)


# --- what a file's text says about its devices and precision ------------------------------------------------

def mentions_cuda(source: str) -> bool:
    """The file names CUDA somewhere (``.cuda()``, ``"cuda"``, ``torch.cuda.is_available()``): a
    script that never does runs on the CPU, where CUDA-only advice does not apply."""
    return has_word(source, "cuda")


@lru_cache(maxsize=4)
def may_train_on_cuda(source: str) -> bool:
    """A cheap prefilter for rules about CUDA training scripts: a training loop calls
    ``backward`` and the file names CUDA somewhere. Never false for a file they would fire on.
    Kept for the last few texts: the whole-script rules ask it of the same text in a row."""
    return "backward" in source and mentions_cuda(source)


def uses_reduced_precision(source: str) -> bool:
    return any(match.group() in _UNBOUNDED or whole_word(source, *match.span())
               for match in REDUCED_PRECISION.finditer(source))
