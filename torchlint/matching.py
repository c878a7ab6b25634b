"""Matching logic shared by the rules: import-resolved names, devices and dtypes, training and
evaluation loops, grad mode. Rules call these through their ``RuleContext``; nothing here is
specific to one rule."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import libcst as cst

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


class _EvalCallFinder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        if is_eval_call(node) or (method_call(node, "train") and node.args and is_literal(node.args[0].value, False)):
            self.found = True


def contains_eval_call(node: cst.CSTNode) -> bool:
    finder = _EvalCallFinder()
    node.visit(finder)
    return finder.found


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
            new = new.with_changes(comma=last.comma)
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
        args[-1] = args[-1].with_changes(comma=target.comma if multiline else cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args)


def replace_arg_value(call: cst.Call, target: cst.Arg, value: cst.BaseExpression) -> cst.Call:
    return call.with_changes(args=[a.with_changes(value=value) if a is target else a for a in call.args])


def parse_expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)
