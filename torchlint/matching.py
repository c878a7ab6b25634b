"""Matching logic shared by the rules: import-resolved names, devices and dtypes, training and
evaluation loops, grad mode. Rules call these through their ``RuleContext``; nothing here is
specific to one rule."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache

import libcst as cst
from torchlint.walk import visit

# --- names ---------------------------------------------------------------------------------


def dotted_name(expr: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if not isinstance(expr, cst.Name):
        return None
    parts.append(expr.value)
    return ".".join(reversed(parts))


def _statements(body: Sequence[cst.CSTNode]) -> Iterator[cst.CSTNode]:
    """Every statement, nested ones included, without descending into expressions."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, cst.SimpleStatementLine):
            continue
        for attr in ("body", "orelse", "finalbody"):
            child = getattr(stmt, attr, None)
            if isinstance(child, (cst.IndentedBlock, cst.SimpleStatementSuite)):
                yield from _statements(child.body)
            elif isinstance(child, (cst.Else, cst.Finally, cst.If)):
                yield from _statements([child] if isinstance(child, cst.If) else child.body.body)
        for handler in getattr(stmt, "handlers", ()):
            yield from _statements(handler.body.body)
        for case in getattr(stmt, "cases", ()):
            yield from _statements(case.body.body)


def small_statements(module: cst.Module) -> Iterator[cst.BaseSmallStatement]:
    for stmt in _statements(module.body):
        if isinstance(stmt, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            yield from stmt.body
        elif isinstance(getattr(stmt, "body", None), cst.SimpleStatementSuite):
            yield from stmt.body.body


class ImportMap:
    """Local name -> qualified name, from every import statement in the file.

    A light stand-in for LibCST's scope analysis (which costs more than the whole lint):
    ``import torch.nn as nn`` maps ``nn`` to ``torch.nn``; ``from torch.nn import DataParallel as
    DP`` maps ``DP`` to ``torch.nn.DataParallel``. Relative and star imports are not resolved.
    """

    def __init__(self, module: cst.Module):
        self.aliases: dict[str, str] = {}
        for small in small_statements(module):
            if isinstance(small, cst.Import):
                for alias in small.names:
                    full = dotted_name(alias.name)
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        self.aliases[alias.asname.name.value] = full
                    else:
                        head = full.split(".")[0]
                        self.aliases[head] = head
            elif isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None:
                if isinstance(small.names, cst.ImportStar):
                    continue
                base = dotted_name(small.module)
                for alias in small.names:
                    name = dotted_name(alias.name)
                    local = (alias.asname.name.value
                             if alias.asname is not None and isinstance(alias.asname.name, cst.Name)
                             else name)
                    self.aliases[local] = f"{base}.{name}"

    def qualified_name(self, expr: cst.BaseExpression) -> str | None:
        name = dotted_name(expr)
        if name is None:
            return None
        head, dot, rest = name.partition(".")
        target = self.aliases.get(head)
        if target is None:
            return None
        return target + dot + rest


# --- calls and arguments ---------------------------------------------------------------------


def keyword_arg(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def positional_args(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def has_star_args(call: cst.Call) -> bool:
    """``*args`` or ``**kwargs``: the call may carry any argument we cannot see."""
    return any(a.star for a in call.args)


def argument(call: cst.Call, name: str, index: int | None = None) -> cst.Arg | None:
    """The argument bound to parameter ``name`` (keyword) or at positional ``index``."""
    found = keyword_arg(call, name)
    if found is None and index is not None:
        positional = positional_args(call)
        if len(positional) > index and not any(a.star == "*" for a in call.args[: index + 1]):
            found = positional[index]
    return found


def is_literal(expr: cst.BaseExpression | None, value: object) -> bool:
    """``True``/``False``/``None`` or an int literal equal to value."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value] is value
    if isinstance(expr, cst.Integer) and isinstance(value, int) and not isinstance(value, bool):
        return expr.evaluated_value == value
    return False


def string_value(expr: cst.BaseExpression | None) -> str | None:
    if isinstance(expr, cst.SimpleString):
        try:
            value = expr.evaluated_value
        except Exception:  # noqa: BLE001 - odd prefixes; not a plain string then
            return None
        return value if isinstance(value, str) else None
    return None


def method_call(node: cst.CSTNode, *names: str) -> cst.Attribute | None:
    """If node is ``<obj>.<name>(...)`` for one of names, the Attribute, else None."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in names:
        return node.func
    return None


def root_names(expr: cst.BaseExpression) -> set[str]:
    """Names an expression's value derives from: ``(a + b.mean()).sum()`` -> {a, b}."""
    if isinstance(expr, cst.Name):
        return {expr.value}
    if isinstance(expr, cst.Attribute):
        return root_names(expr.value)
    if isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Attribute):
            return root_names(expr.func.value)
        return set()
    if isinstance(expr, cst.BinaryOperation):
        return root_names(expr.left) | root_names(expr.right)
    if isinstance(expr, cst.UnaryOperation):
        return root_names(expr.expression)
    if isinstance(expr, cst.Subscript):
        return root_names(expr.value)
    return set()


# --- devices and dtypes ---------------------------------------------------------------------

DEVICE_STRING = re.compile(r"^(cuda|cpu|mps|xpu|meta|hpu|xla|npu|privateuseone)(:\d+)?$")
DTYPES = frozenset(
    "float16 half bfloat16 float32 float float64 double complex32 complex64 cfloat complex128 "
    "cdouble uint8 int8 int16 short int32 int int64 long bool float8_e4m3fn float8_e5m2".split()
)
DEVICE_NAMES = re.compile(r"^(device|dev|.*_device)$")


def is_dtype(expr: cst.BaseExpression, imports: ImportMap) -> bool:
    name = imports.qualified_name(expr)
    return name is not None and name.startswith("torch.") and name[6:] in DTYPES


def is_device_value(expr: cst.BaseExpression, imports: ImportMap) -> bool:
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
        return imports.qualified_name(expr.func) == "torch.device"
    if isinstance(expr, cst.IfExp):
        return is_device_value(expr.body, imports) and is_device_value(expr.orelse, imports)
    return False


# --- loops, grad mode ---------------------------------------------------------------------

LOOPS = (cst.For, cst.While)
BACKWARD_FUNCTIONS = frozenset({"torch.autograd.backward"})
# Methods that backpropagate their first argument: Accelerate, Fabric, Lightning.
BACKWARD_METHODS = frozenset({"manual_backward"})
NO_GRAD_CONTEXTS = frozenset({
    "torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.inference_mode",
    "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode",
})
EVAL_FUNCTION = re.compile(
    r"(^|_)(val|valid|validate|validation|eval|evaluate|evaluation|test|testing|predict|inference|infer)(_|$)")


class _BackwardFinder(cst.CSTVisitor):
    """Collects what a subtree backpropagates: ``loss.backward()`` -> {"loss"}."""

    def __init__(self, imports: ImportMap):
        self.imports = imports
        self.names: set[str] = set()
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "backward":
            self.found = True
            target = func.value
            # scaler.scale(loss).backward(): the scaled value is the loss
            if method_call(target, "scale") and target.args:
                target = target.args[0].value
            self.names |= root_names(target)
            # accelerator.backward(loss) / fabric.backward(loss): the argument is the loss
            if node.args and node.args[0].keyword is None:
                self.names |= root_names(node.args[0].value)
        elif (isinstance(func, cst.Attribute) and func.attr.value in BACKWARD_METHODS) or \
                self.imports.qualified_name(func) in BACKWARD_FUNCTIONS:
            self.found = True
            if node.args:
                self.names |= root_names(node.args[0].value)

    # Functions defined inside a loop do not run as part of it.
    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def with_item_disables_grad(item: cst.WithItem, imports: ImportMap) -> bool:
    expr = item.item
    func = expr.func if isinstance(expr, cst.Call) else expr
    name = imports.qualified_name(func)
    if name in NO_GRAD_CONTEXTS:
        return True
    if name in ("torch.set_grad_enabled", "torch.autograd.set_grad_enabled") and isinstance(expr, cst.Call):
        return bool(expr.args) and is_literal(expr.args[0].value, False)
    return False


def decorator_disables_grad(decorator: cst.Decorator, imports: ImportMap) -> bool:
    expr = decorator.decorator
    func = expr.func if isinstance(expr, cst.Call) else expr
    return imports.qualified_name(func) in NO_GRAD_CONTEXTS


def is_eval_call(node: cst.CSTNode) -> bool:
    """``model.eval()`` (no arguments: ``eval(expr)`` is the builtin)."""
    return method_call(node, "eval") is not None and not node.args


# --- rewriting calls (for fixes) --------------------------------------------------------------


def set_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """``call`` with keyword ``name=value``: replaced in place if present, else appended in the
    call's own layout (one line, or one argument a line with a trailing comma)."""
    args = list(call.args)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == name:
            args[i] = arg.with_changes(value=value)
            return call.with_changes(args=args)
    new = cst.Arg(value=value, keyword=cst.Name(name),
                  equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                        whitespace_after=cst.SimpleWhitespace("")))
    if args:
        last = args[-1]
        if isinstance(last.comma, cst.Comma):
            # a trailing comma: the new argument takes it, the old last one gets a separator
            # like the ones between the other arguments
            separator = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else \
                cst.Comma(whitespace_after=call.whitespace_before_args)
            closing = last.comma.whitespace_after
            if isinstance(closing, cst.ParenthesizedWhitespace) and closing.first_line.comment is not None \
                    and isinstance(separator.whitespace_after, cst.ParenthesizedWhitespace):
                # the old last argument keeps the comment at the end of its line
                separator = separator.with_changes(whitespace_before=last.comma.whitespace_before,
                                                   whitespace_after=closing.with_changes(
                                                       last_line=separator.whitespace_after.last_line))
                closing = closing.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
            new = new.with_changes(comma=last.comma.with_changes(whitespace_after=closing))
            args[-1] = last.with_changes(comma=separator)
        else:
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(new)
    return call.with_changes(args=args)


def remove_arg(call: cst.Call, target: cst.Arg) -> cst.Call:
    """``call`` without the argument ``target`` (commas tidied; a multi-line trailing comma kept)."""
    args = [a for a in call.args if a is not target]
    if args and call.args[-1] is target:
        multiline = isinstance(target.comma, cst.Comma) and isinstance(
            target.comma.whitespace_after, cst.ParenthesizedWhitespace)
        comma = target.comma if multiline else cst.MaybeSentinel.DEFAULT
        previous = args[-1].comma
        if multiline and isinstance(previous, cst.Comma) and isinstance(previous.whitespace_after,
                                                                        cst.ParenthesizedWhitespace):
            # one argument a line: the previous line keeps its own comment (the removed line's
            # comment goes with it) and closes the call as the removed line did
            closing = target.comma.whitespace_after
            comma = previous.with_changes(whitespace_after=previous.whitespace_after.with_changes(
                empty_lines=closing.empty_lines, indent=closing.indent, last_line=closing.last_line))
        args[-1] = args[-1].with_changes(comma=comma)
    return call.with_changes(args=args)


def replace_arg_value(call: cst.Call, target: cst.Arg, value: cst.BaseExpression) -> cst.Call:
    return call.with_changes(args=[a.with_changes(value=value) if a is target else a for a in call.args])


def parse_expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


# --- distributed training, data loading and Lightning (TL5xx, TL6xx, TL9xx) --------------------

DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
# DataLoader's parameters that may be passed by position, in order (the rest are keyword-only).
DATALOADER_POSITIONAL = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers",
                         "collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn",
                         "multiprocessing_context", "generator")
DISTRIBUTED_SAMPLERS = frozenset({"torch.utils.data.DistributedSampler",
                                  "torch.utils.data.distributed.DistributedSampler"})
DISTRIBUTED_DATA_PARALLEL = frozenset({"torch.nn.parallel.DistributedDataParallel",
                                       "torch.nn.parallel.distributed.DistributedDataParallel"})
ITERABLE_DATASETS = frozenset({"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset",
                               "torch.utils.data.IterDataPipe", "torch.utils.data.datapipes.datapipe.IterDataPipe"})
IN_MEMORY_DATASETS = frozenset({"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"})
# Wrappers a loop may iterate a loader through: `enumerate(loader)`, `tqdm(loader)`.
ITERATION_WRAPPERS = frozenset({"enumerate", "iter", "tqdm", "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm",
                                "rich.progress.track"})
LIGHTNING_PACKAGES = ("pytorch_lightning", "lightning.pytorch", "lightning")


def is_dataloader_call(node: cst.CSTNode, imports: ImportMap) -> bool:
    return isinstance(node, cst.Call) and imports.qualified_name(node.func) in DATALOADERS


def dataloader_argument(call: cst.Call, name: str) -> cst.Arg | None:
    """The argument a DataLoader call binds to parameter ``name``, by keyword or by position
    (``num_workers`` is the sixth positional argument)."""
    index = DATALOADER_POSITIONAL.index(name) if name in DATALOADER_POSITIONAL else None
    return argument(call, name, index)


def iterated_value(loop: cst.For, imports: ImportMap) -> cst.BaseExpression:
    """What a for loop iterates, inside ``enumerate``/``tqdm``/``iter`` wrappers:
    ``for i, (x, y) in enumerate(tqdm(train_loader))`` -> ``train_loader``."""
    expr = loop.iter
    while isinstance(expr, cst.Call) and expr.args and expr.args[0].keyword is None and not expr.args[0].star \
            and (dotted_name(expr.func) in ITERATION_WRAPPERS or imports.qualified_name(expr.func) in ITERATION_WRAPPERS):
        expr = expr.args[0].value
    return expr


def iterated_name(loop: cst.For, imports: ImportMap) -> str | None:
    """The dotted name a for loop iterates (see ``iterated_value``), if it is one."""
    return dotted_name(iterated_value(loop, imports))


def assigned_names(module: cst.Module) -> dict[str, list[cst.BaseExpression]]:
    """Every value assigned to each dotted name in the file (``loader = ...``,
    ``self.loader = ...``); names bound by tuple unpacking or ``for`` get a None value."""
    bindings: dict[str, list[cst.BaseExpression | None]] = {}

    class Collector(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                self._bind(target.target, node.value)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            if node.value is not None:
                self._bind(node.target, node.value)

        def visit_For(self, node: cst.For) -> None:
            self._bind(node.target, None)

        def visit_WithItem(self, node: cst.WithItem) -> None:
            if node.asname is not None:
                self._bind(node.asname.name, None)

        def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
            if isinstance(target, (cst.Tuple, cst.List)):
                for element in target.elements:
                    self._bind(element.value, None)
                return
            name = dotted_name(target)
            if name is not None:
                bindings.setdefault(name, []).append(value)

    visit(module, Collector())
    return bindings


def binding_of(name: str | None, bindings: dict[str, list]) -> cst.BaseExpression | None:
    """The value of a name assigned exactly once in the file, else None."""
    values = bindings.get(name or "", [])
    return values[0] if len(values) == 1 else None


def lightning_names(qualified: str | None, *paths: str) -> bool:
    """Is ``qualified`` one of ``paths`` (``"LightningModule"``, ``"core.module.LightningModule"``)
    under any of Lightning's package names (``pytorch_lightning``, ``lightning.pytorch``,
    ``lightning``)?"""
    return qualified is not None and any(qualified == f"{package}.{path}"
                                         for package in LIGHTNING_PACKAGES for path in paths)


LIGHTNING_MODULE_PATHS = ("LightningModule", "core.LightningModule", "core.module.LightningModule",
                          "core.lightning.LightningModule")


def lightning_module_classes(module: cst.Module, imports: ImportMap) -> frozenset[str]:
    """Names of the classes in the file that derive from ``LightningModule``, directly or through
    other classes of the file (``class Base(pl.LightningModule)``, ``class Model(Base)``)."""
    return derived_classes(module, imports, lambda name: lightning_names(name, *LIGHTNING_MODULE_PATHS))


def derived_classes(module: cst.Module, imports: ImportMap, is_root) -> frozenset[str]:
    """Names of the classes in the file with a base whose qualified name ``is_root`` accepts, or
    that derive from such a class of the file."""
    classes = [node for node in _statements(module.body) if isinstance(node, cst.ClassDef)]
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in classes:
            if node.name.value in found:
                continue
            for base in node.bases:
                if base.keyword is None and (is_root(imports.qualified_name(base.value))
                                             or dotted_name(base.value) in found):
                    found.add(node.name.value)
                    changed = True
                    break
    return frozenset(found)


def function_parameters(function: cst.FunctionDef | cst.Lambda) -> list[str]:
    params = function.params
    return [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)] + [
        p.name.value for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]


def argument_list_text(pairs: Sequence[tuple[str, str]]) -> str:
    """``[("accelerator", '"gpu"'), ("devices", "2")]`` -> ``accelerator="gpu", devices=2``."""
    return ", ".join(f"{name}={value}" for name, value in pairs)


def python_literal(value: object) -> str:
    """Source text for a plain value read from a data table: ``"16-mixed"``, ``True``, ``2``, ``None``."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    raise ValueError(f"not a plain literal: {value!r}")


def literal_value(expr: cst.BaseExpression) -> tuple[bool, object]:
    """(True, value) for a plain literal (str, int, float, True/False/None, a list of ints),
    else (False, None)."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return True, {"True": True, "False": False, "None": None}[expr.value]
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True, expr.evaluated_value
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus) \
            and isinstance(expr.expression, (cst.Integer, cst.Float)):
        return True, -expr.expression.evaluated_value
    text = string_value(expr)
    if text is not None:
        return True, text
    if isinstance(expr, (cst.List, cst.Tuple)):
        values = [literal_value(e.value) for e in expr.elements if not isinstance(e, cst.StarredElement)]
        if len(values) == len(expr.elements) and all(ok for ok, _ in values):
            return True, [v for _, v in values]
    return False, None


def same_literal(a: object, b: object) -> bool:
    """Equal and of the same type (``True`` is not ``1``, ``16`` is not ``"16"``)."""
    return type(a) is type(b) and a == b


def append_element(sequence: cst.List | cst.Tuple, value: cst.BaseExpression) -> cst.List | cst.Tuple:
    """``[a, b]`` -> ``[a, b, value]`` in the list's own layout (one line, or one element a line
    with a trailing comma), like ``set_keyword`` does for arguments."""
    elements = list(sequence.elements)
    new = cst.Element(value)
    if elements:
        last = elements[-1]
        if isinstance(last.comma, cst.Comma):
            if len(elements) > 1 and isinstance(elements[-2].comma, cst.Comma):
                separator = elements[-2].comma
            elif isinstance(sequence, cst.List):  # one element a line: the next starts like the first
                separator = cst.Comma(whitespace_after=sequence.lbracket.whitespace_after)
            else:
                separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            new = new.with_changes(comma=last.comma)
            elements[-1] = last.with_changes(comma=separator)
        else:
            elements[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    elements.append(new)
    return sequence.with_changes(elements=elements)


class _Contains(cst.CSTVisitor):
    def __init__(self, target: cst.CSTNode):
        self.target = target
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if node is self.target:
            self.found = True
        return not self.found


def contains(tree: cst.CSTNode, target: cst.CSTNode) -> bool:
    """Is ``target`` (by identity) ``tree`` or inside it?"""
    finder = _Contains(target)
    visit(tree, finder)
    return finder.found


def is_main_guard(statement: cst.CSTNode) -> bool:
    """``if __name__ == "__main__":`` (either operand order)."""
    if not isinstance(statement, cst.If) or not isinstance(statement.test, cst.Comparison):
        return False
    test = statement.test
    if len(test.comparisons) != 1 or not isinstance(test.comparisons[0].operator, cst.Equal):
        return False
    sides = {dotted_name(test.left) or string_value(test.left),
             dotted_name(test.comparisons[0].comparator) or string_value(test.comparisons[0].comparator)}
    return sides == {"__name__", "__main__"}


# --- precision and AMP, optimizer step, model architecture (TL3xx, TL4xx, TL7xx) ----------------

CUDA_MENTION = re.compile(r"\bcuda\b")
# Text that shows a file computes in float16/bfloat16 somewhere (autocast, a scaler, half models).
REDUCED_PRECISION = re.compile(r"\bautocast\b|GradScaler|\bfloat16\b|\bbfloat16\b|\.half\(\)|\bbf16\b|\bfp16\b"
                               r"|\bamp\.initialize\b")
REDUCED_PRECISION_WORDS = ("autocast", "GradScaler", "float16", ".half()", "bf16", "fp16", "amp.initialize")
CLIP_GRAD_FUNCTIONS = frozenset(
    f"torch.nn.utils{module}.{name}" for module in ("", ".clip_grad")
    for name in ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"))
OPTIMIZER_NAME = re.compile(r"^(opt|optim|optimizer|optimiser)(_\w+)?$|_(opt|optim|optimizer|optimiser)$")
IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


CONVOLUTIONS = {f"torch.nn.{module}{kind}{dim}d": dim for module in ("", "modules.conv.")
                for kind in ("Conv", "ConvTranspose", "LazyConv", "LazyConvTranspose") for dim in (1, 2, 3)}


def convolution_dimension(qualified: str | None) -> int | None:
    """1, 2 or 3 for ``nn.Conv1d``/``Conv2d``/``Conv3d`` and their transposed and lazy forms; 2
    for a ``torchvision.models`` network (image models: 2-D convolutions); else None."""
    if qualified is None:
        return None
    if qualified.startswith("torchvision.models."):
        return 2
    return CONVOLUTIONS.get(qualified)


def mentions_cuda(source: str) -> bool:
    """The file names CUDA somewhere (``.cuda()``, ``"cuda"``, ``torch.cuda.is_available()``): a
    script that never does runs on the CPU, where CUDA-only advice does not apply."""
    return bool(CUDA_MENTION.search(source))


def may_train_on_cuda(source: str) -> bool:
    """A cheap prefilter for rules about CUDA training scripts: a training loop calls
    ``backward`` and the file names CUDA somewhere. Never false for a file they would fire on."""
    return "backward" in source and mentions_cuda(source)


def uses_reduced_precision(source: str) -> bool:
    # substring tests first: a regex that opens with `\b` alternatives scans slowly
    return any(word in source for word in REDUCED_PRECISION_WORDS) and bool(REDUCED_PRECISION.search(source))


def data_table(name: str) -> object:
    """A YAML data table shipped beside the rules (``rules/<name>``), read once per process."""
    return _data_table(name)


@cache
def _data_table(name: str) -> object:
    from importlib import resources

    import yaml

    text = resources.files("torchlint.rules").joinpath(name).read_text(encoding="utf-8")
    if not hasattr(yaml, "CSafeLoader"):
        return yaml.safe_load(text)
    # libyaml's safe loader, which yaml.safe_load does not pick by itself: a tenth of the time, and
    # start-up feels it
    reader = yaml.CSafeLoader(text)
    try:
        return reader.get_single_data()
    finally:
        reader.dispose()


class _NameReader(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def names_in(node: cst.CSTNode) -> set[str]:
    """Every identifier written in a subtree."""
    reader = _NameReader()
    visit(node, reader)
    return reader.names


def statement_targets(statement: cst.CSTNode) -> set[str] | None:
    """Names a simple statement line assigns (``out, aux = model(x)`` -> {out, aux}); None when
    the line is not made only of assignments."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return None
    names: set[str] = set()
    for small in statement.body:
        if isinstance(small, cst.Assign):
            targets = [t.target for t in small.targets]
        elif isinstance(small, (cst.AugAssign, cst.AnnAssign)) and getattr(small, "value", None) is not None:
            targets = [small.target]
        else:
            return None
        for target in targets:
            elements = target.elements if isinstance(target, (cst.Tuple, cst.List)) else [target]
            for element in elements:
                value = element.value if isinstance(element, (cst.Element, cst.StarredElement)) else element
                if isinstance(value, cst.Name):
                    names.add(value.value)
    return names


def computation_run(body: Sequence[cst.CSTNode], end: int, names: set[str]) -> int:
    """The start of the run of assignment lines right before ``body[end]`` that compute ``names``
    (the forward pass and loss before a backward): walking up, each line must assign a name that
    a later line of the run (or ``names``) reads. ``optimizer.zero_grad()`` lines right before
    ``body[end]`` are passed over (the PyTorch examples put it there) and end up inside the run,
    where they are harmless. Returns ``end`` when there is none."""
    needed = set(names)
    start = end
    position = end
    while position > 0:
        statement = body[position - 1]
        if start == end and _is_zero_grad_line(statement):
            position -= 1
            continue
        targets = statement_targets(statement)
        if not targets or not targets & needed:
            break
        needed |= names_in(statement)
        position -= 1
        start = position
    return start


def _is_zero_grad_line(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
        and isinstance(statement.body[0], cst.Expr) and method_call(statement.body[0].value, "zero_grad") is not None


def binding_counts(module: cst.Module) -> dict[str, int]:
    """How many different things each plain name is bound to in the file: every assignment,
    ``for``/``with`` target, ``def`` and ``class`` counts, and imports count once per module they
    name (``import torch`` and ``import torch.nn`` both bind ``torch`` to torch). A name bound more
    than once may not mean what its import says everywhere."""
    counts: dict[str, int] = {}
    imported: dict[str, set[str]] = {}

    def bind(target: cst.CSTNode) -> None:
        if isinstance(target, cst.Name):
            counts[target.value] = counts.get(target.value, 0) + 1
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                bind(element.value)
        elif isinstance(target, cst.StarredElement):
            bind(target.value)

    class Binder(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                bind(target.target)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            bind(node.target)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            bind(node.target)

        def visit_For(self, node: cst.For) -> None:
            bind(node.target)

        def visit_WithItem(self, node: cst.WithItem) -> None:
            if node.asname is not None:
                bind(node.asname.name)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            bind(node.name)

        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            bind(node.name)

        def visit_Import(self, node: cst.Import) -> None:
            for alias in node.names:
                full = dotted_name(alias.name)
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    imported.setdefault(alias.asname.name.value, set()).add(full)
                else:
                    head = full.split(".")[0]
                    imported.setdefault(head, set()).add(head)

        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
            if isinstance(node.names, cst.ImportStar):
                return
            base = "." * len(node.relative) + (dotted_name(node.module) if node.module is not None else "")
            for alias in node.names:
                name = dotted_name(alias.name)
                local = alias.asname.name.value if alias.asname is not None and isinstance(
                    alias.asname.name, cst.Name) else name
                imported.setdefault(local, set()).add(f"{base}.{name}")

    visit(module, Binder())
    for name, targets in imported.items():
        counts[name] = counts.get(name, 0) + len(targets)
    return counts


def insert_arg(call: cst.Call, index: int, new: cst.Arg) -> cst.Call:
    """``call`` with ``new`` inserted before its ``index``-th argument (``len(call.args)``: at the
    end), separated like the call's other arguments (a call written one argument a line keeps
    that layout, and a trailing comma stays last)."""
    args = list(call.args)
    before = call.whitespace_before_args
    # one argument a line: the same line break and indentation, without the comment that may
    # follow the opening parenthesis
    separator = cst.Comma(whitespace_after=before.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=())
                          if isinstance(before, cst.ParenthesizedWhitespace) else cst.SimpleWhitespace(" "))
    if index < len(args):
        args.insert(index, new.with_changes(comma=separator))
    elif args:
        last = args[-1]
        if isinstance(last.comma, cst.Comma):  # a trailing comma: the new last argument takes it
            args[-1] = last.with_changes(comma=separator)
            args.append(new.with_changes(comma=last.comma))
        else:
            args[-1] = last.with_changes(comma=separator)
            args.append(new.with_changes(comma=cst.MaybeSentinel.DEFAULT))
    else:
        args.append(new.with_changes(comma=cst.MaybeSentinel.DEFAULT))
    return call.with_changes(args=args)


def keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    """A ``name=value`` argument written without spaces around ``=``."""
    return cst.Arg(value=value, keyword=cst.Name(name),
                   equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                         whitespace_after=cst.SimpleWhitespace("")))


def as_keyword(arg: cst.Arg, name: str) -> cst.Arg:
    """A positional argument turned into ``name=value``, comments and comma kept."""
    return arg.with_changes(keyword=cst.Name(name), equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))


def amp_migration(qualified: str | None) -> dict | None:
    """The row of rules/amp_migrations.yaml for an old AMP spelling (``torch.cuda.amp.autocast``)."""
    if qualified is None or ".amp." not in qualified:
        return None
    for row in data_table("amp_migrations.yaml")["old_namespace"]:
        if qualified in row["old"]:
            return row
    return None


def amp_replacement(row: dict, target: tuple[int, ...]) -> str | None:
    """The qualified name that replaces an old AMP spelling on the target torch: ``new``, or the
    same object under its older name (``torch.autocast`` before ``torch.amp.autocast``); None
    when the target torch has neither."""
    from torchlint.rule import parse_version

    if target >= parse_version(row["since"]):
        return row["new"]
    fallback = row.get("fallback")
    if fallback and target >= parse_version(fallback["since"]):
        return fallback["name"]
    return None


def amp_constructor(old: str, target: tuple[int, ...], torch_name: str, keywords: str = "") -> str | None:
    """Source that makes what the old spelling ``old`` made, for the target torch, with the given
    keyword arguments: ``torch.amp.GradScaler("cuda")`` on torch 2.3+, ``torch.cuda.amp.GradScaler()``
    before; ``torch.amp.autocast("cuda", dtype=torch.float16)``."""
    row = amp_migration(old)
    new = amp_replacement(row, target)
    if new is None:
        name, arguments = old, keywords
    elif row["device_as"] == "positional":
        name, arguments = new, ", ".join(filter(None, [f'"{row["device"]}"', keywords]))
    else:
        name, arguments = new, ", ".join(filter(None, [f'{row["device_as"]}="{row["device"]}"', keywords]))
    return f"{torch_name}{name[len('torch'):]}({arguments})"


COMPATIBILITY_ERRORS = IMPORT_ERRORS | {"AttributeError", "TypeError", "NameError"}
# An `if` test that picks code by library version or by whether an attribute exists.
VERSION_TEST = re.compile(r"version|VERSION|_GREATER|_LESS|_AT_LEAST|_OLDER|_NEWER|\bhasattr\(")


def ends_in_exit(block: cst.BaseSuite) -> bool:
    """Does the block end with ``return`` or ``raise`` (so what follows it is the other branch)?"""
    last = block.body[-1] if block.body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1]
    return isinstance(last, (cst.Return, cst.Raise))


def catches_compatibility_error(handler: cst.ExceptHandler) -> bool:
    """An ``except`` clause that catches what a missing name or a changed signature raises."""
    if handler.type is None:
        return True
    types = handler.type.elements if isinstance(handler.type, cst.Tuple) else [handler.type]
    return any((dotted_name(t.value if isinstance(t, cst.Element) else t) or "").rsplit(".", 1)[-1]
               in COMPATIBILITY_ERRORS for t in types)


def catches_import_error(node: cst.Try) -> bool:
    """A ``try`` whose handlers catch a failed import (bare ``except``, ``ImportError``,
    ``ModuleNotFoundError``, ``Exception``)."""
    for handler in node.handlers:
        if handler.type is None:
            return True
        types = handler.type.elements if isinstance(handler.type, cst.Tuple) else [handler.type]
        for element in types:
            value = element.value if isinstance(element, cst.Element) else element
            if (dotted_name(value) or "").rsplit(".", 1)[-1] in IMPORT_ERRORS:
                return True
    return False


def module_settings_anchor(module: cst.Module) -> cst.SimpleStatementLine | None:
    """The last module-level import line before the first function, class, loop or ``if
    __name__`` block: where a script sets process-wide flags (``cudnn.benchmark``)."""
    anchor = None
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            if all(isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body):
                anchor = statement
        elif isinstance(statement, (cst.FunctionDef, cst.ClassDef, cst.For, cst.While, cst.If, cst.With)):
            break
    return anchor


# --- memory, devices, transfers and loop hygiene (TL1xx, TL2xx, TL8xx) ---------------------------

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
INTEGER_DTYPES = frozenset("uint8 int8 int16 short int32 int int64 long bool".split())


def tensor_factory(call: cst.CSTNode, imports: ImportMap) -> str | None:
    """``zeros`` for a call of ``torch.zeros`` (any import spelling), else None."""
    if not isinstance(call, cst.Call):
        return None
    return TENSOR_FACTORIES.get(imports.qualified_name(call.func) or "")


@dataclass(frozen=True)
class DeviceMove:
    """What a ``.cuda(...)``/``.to(device...)``/``.cpu()`` call does (see RuleContext.device_move)."""

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
        return argument(self.call, "non_blocking", index)


def device_kind(expr: cst.BaseExpression, imports: ImportMap) -> str | None:
    """The kind of a device written out: ``"cuda"`` for ``"cuda:0"``, ``torch.device("cuda", 1)``
    or ``f"cuda:{rank}"``; ``"cpu"``, ``"mps"``...; None when it cannot be read. A conditional
    between CUDA and the CPU (``"cuda" if torch.cuda.is_available() else "cpu"``) is ``"cuda"``:
    on a machine without CUDA nothing moves."""
    if isinstance(expr, cst.Call) and imports.qualified_name(expr.func) == "torch.device" and expr.args \
            and expr.args[0].keyword in (None,) and not expr.args[0].star:
        expr = expr.args[0].value
    if isinstance(expr, cst.IfExp):
        kinds = {device_kind(expr.body, imports), device_kind(expr.orelse, imports)}
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


class _RemainderFinder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found = False

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        # `step % 100`, not `"%d" % step`
        if isinstance(node.operator, cst.Modulo) and not isinstance(
                node.left, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
            self.found = True


def is_periodic_test(test: cst.BaseExpression) -> bool:
    """A condition that holds every k-th step: it takes a remainder (``step % 100 == 0``)."""
    finder = _RemainderFinder()
    visit(test, finder)
    return finder.found


def module_classes(module: cst.Module, imports: ImportMap) -> frozenset[str]:
    """Names of the classes in the file that are ``torch.nn`` modules: deriving from a
    ``torch.nn`` class (``nn.Module``, ``nn.Sequential``...), from ``LightningModule``, or from
    another such class of the file."""
    return derived_classes(module, imports, lambda name: (name or "").startswith("torch.nn.")
                           or lightning_names(name, *LIGHTNING_MODULE_PATHS))


def last_simple_statement(statement: cst.CSTNode) -> cst.CSTNode | None:
    """The simple statement line (or one-line suite) a statement's code ends with: its span ends
    with that line's last small statement; what follows (a trailing comment, the newline, block
    footers) lies outside the span."""
    node = statement
    while True:
        if isinstance(node, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            return node
        if isinstance(node, cst.IndentedBlock):
            if not node.body:
                return None
            node = node.body[-1]
            continue
        if isinstance(node, (cst.Try, cst.TryStar)):
            node = node.finalbody or node.orelse or (node.handlers[-1] if node.handlers else node.body)
        elif isinstance(node, (cst.If, cst.For, cst.While)) and node.orelse is not None:
            node = node.orelse
        elif isinstance(node, cst.Match):
            node = node.cases[-1]
        elif hasattr(node, "body"):
            node = node.body
        else:
            return None


class _ModeCalls(cst.CSTVisitor):
    """``model.eval()`` / ``model.train(False)`` -> "eval", ``model.train()`` -> "train", in order."""

    def __init__(self) -> None:
        self.modes: list[str] = []

    def visit_Call(self, node: cst.Call) -> None:
        if is_eval_call(node):
            self.modes.append("eval")
        elif method_call(node, "train") and not any(a.keyword and a.keyword.value != "mode" for a in node.args):
            self.modes.append("eval" if node.args and is_literal(node.args[0].value, False) else "train")

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False


def last_mode_call(statements: Sequence[cst.CSTNode]) -> str | None:
    """The mode the last ``.eval()``/``.train()`` call among statements sets, if any."""
    finder = _ModeCalls()
    for statement in statements:
        visit(statement, finder)
    return finder.modes[-1] if finder.modes else None


def is_grad_switch_off(node: cst.CSTNode, imports: ImportMap) -> bool | None:
    """For a ``torch.set_grad_enabled(x)`` call: True when x is False, False when it is True, None
    for anything else."""
    if not isinstance(node, cst.Call) or imports.qualified_name(node.func) not in (
            "torch.set_grad_enabled", "torch.autograd.set_grad_enabled", "torch.autograd.grad_mode.set_grad_enabled"):
        return None
    if len(node.args) != 1 or node.args[0].star:
        return None
    value = node.args[0].value
    return True if is_literal(value, False) else (False if is_literal(value, True) else None)


class _ScopeNames(cst.CSTVisitor):
    def __init__(self, root: cst.CSTNode) -> None:
        self.root = root
        self.assigned: dict[str, list[cst.BaseExpression | None]] = {}
        self.references: dict[str, int] = {}

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        if isinstance(target, cst.Name):
            self.assigned.setdefault(target.value, []).append(value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind(element.value, None)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, None)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target, None)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target, None)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind(node.asname.name, None)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target, node.value)

    def visit_Name(self, node: cst.Name) -> None:
        self.references[node.value] = self.references.get(node.value, 0) + 1

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        visit(node.value, self)  # `x.attr`: the attribute's name is not a reference to a variable
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        visit(node.value, self)  # `f(x=...)`: the keyword is not a reference
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if node is self.root:
            return True
        self._bind(node.name, None)
        return False  # names inside nested functions belong to their own scope

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self._bind(node.name, None)
        return node is self.root


def scope_names(scope: cst.CSTNode) -> tuple[dict[str, list[cst.BaseExpression | None]], dict[str, int]]:
    """For a function (or the module): every value each plain name is assigned in it (None for
    bindings without one value: ``for`` targets, unpacking, ``+=``) and how many times each name is
    written in it (bindings included), nested functions and classes left out."""
    finder = _ScopeNames(scope)
    visit(scope, finder)
    for param in (scope.params.params if isinstance(scope, cst.FunctionDef) else ()):
        finder._bind(param.name, None)
    if isinstance(scope, cst.FunctionDef):
        params = scope.params
        for param in (*params.posonly_params, *params.kwonly_params):
            finder._bind(param.name, None)
        for param in (params.star_arg, params.star_kwarg):
            if isinstance(param, cst.Param):
                finder._bind(param.name, None)
    return finder.assigned, finder.references

# The last part of a name that holds a model (``model``, ``self.net``, ``text_encoder``) or a
# loader of batches (``train_loader``, ``val_dataloader``, ``batches``).
MODEL_NAME = re.compile(r"(^|_)(model|net|network|encoder|decoder|backbone|classifier|generator|teacher|student)$",
                        re.IGNORECASE)
LOADER_NAME = re.compile(r"(^|_)(loader|dataloader|dl|batches|dataset|ds)$", re.IGNORECASE)


def calls_model(node: cst.CSTNode) -> bool:
    """Does the subtree call something named like a model (``model(x)``, ``self.net(x)``)?"""
    finder = _ModelCalls()
    visit(node, finder)
    return finder.found


class _ModelCalls(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func.value if isinstance(node.func, cst.Attribute) and node.func.attr.value == "forward" \
            else node.func
        name = dotted_name(func)
        if name is not None and MODEL_NAME.search(name.rsplit(".", 1)[-1]):
            self.found = True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False
