"""What TL102 requires-grad-then-move and TL201 move-after-create share: a tensor made by a
factory and moved to a device right away, and the fix that makes it on the device."""

from __future__ import annotations

import ast
import re
from collections.abc import Collection
from dataclasses import dataclass

from torchlint.analysis.devices import (DETERMINISTIC_FACTORIES, EXACT_FACTORIES, DeviceMove, ast_may_move,
                                        tensor_factory)
from torchlint.analysis.calls import ast_call_summary
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.summaries import Factory
from torchlint.analysis.syntax import ast_callee, dotted_name, find_keyword, is_literal, names_in
from torchlint.fixes import FixSpec, set_keyword
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, RuleContext

PARAMETER = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
VARIABLE = frozenset({"torch.autograd.Variable", "torch.autograd.variable.Variable"})
# Factories that make the tensor where it will be anyway: `zeros_like(x)` where `x` is, and
# `tensor(data)`/`as_tensor(data)` from host data that must be copied to the device either way.
# Moving one of them buys nothing worth a finding about speed.
NO_HOST_FILL = frozenset({"tensor", "as_tensor", "zeros_like", "ones_like", "empty_like", "full_like",
                          "rand_like", "randn_like", "randint_like"})
# Methods between a factory and its move that the device computes as the host does, so that the
# factory can be given the device and the methods kept: `torch.zeros(n).long().cuda()`,
# `torch.empty(n).fill_(v).to(device)`. Casts round the same way on both, views and fills with a
# given value are exact; fills with random numbers draw from another generator on the device (a
# fix is unsafe, as for random factories). Anything else between (a reduction, arithmetic) is left
# alone.
CHAINED_METHODS = frozenset({
    "float", "double", "half", "bfloat16", "long", "int", "short", "byte", "char", "bool",
    "view", "reshape", "unsqueeze", "squeeze", "expand", "repeat", "t", "transpose", "permute", "flatten",
    "contiguous", "fill_", "zero_",
})
RANDOM_FILLS = frozenset({"uniform_", "normal_", "random_", "bernoulli_", "exponential_", "geometric_",
                          "cauchy_", "log_normal_"})
# The legacy typed constructors and the dtype of what they make; `torch.Tensor` makes the default
# dtype. Given sizes, they allocate an uninitialized tensor on the CPU, as `torch.empty` does.
LEGACY_CONSTRUCTORS = {
    "torch.FloatTensor": "float32", "torch.DoubleTensor": "float64", "torch.HalfTensor": "float16",
    "torch.BFloat16Tensor": "bfloat16", "torch.LongTensor": "int64", "torch.IntTensor": "int32",
    "torch.ShortTensor": "int16", "torch.ByteTensor": "uint8", "torch.CharTensor": "int8", "torch.BoolTensor": "bool",
    "torch.Tensor": None,
}
FILLS = frozenset({"fill_", "zero_"}) | RANDOM_FILLS
CHAIN = CHAINED_METHODS | RANDOM_FILLS
# A move of a call's result: `)`, maybe whitespace or comments, then `.to(`, `.cuda(` or `.type_as(`.
# A comment runs to the end of its line (`#[^\n]*\n`): a comment that could end anywhere would let
# the pattern split a line of `#`s every possible way, in time exponential in its length.
MOVE_AFTER_CALL = re.compile(r"\)(?:\s|#[^\n]*\n)*\.\s*(?:cuda|to|type_as)\s*\(")
# A name moved into itself: `z = z.to(` / `z = z.cuda(`. Found from the move (`= z.to(`) and
# checked backwards, since a backreference tried at every word of a file took 20 times as long.
_ASSIGNED_MOVE = re.compile(r"=[ \t]*(\w+)[ \t]*\.[ \t]*(?:cuda|to)[ \t]*\(")


def rebound_move_in(text: str) -> bool:
    """Does the text hold ``z = z.to(`` or ``z = z.cuda(`` (any spaces or tabs around ``=``)?"""
    for match in _ASSIGNED_MOVE.finditer(text):
        name = match.group(1)
        before = text[:match.start()].rstrip(" \t")
        if before.endswith(name):
            boundary = len(before) - len(name) - 1
            if boundary < 0 or not (before[boundary].isalnum() or before[boundary] == "_"):
                return True
    return False


def ast_moved_calls(index: SyntaxIndex, *names: str, extra_names: Collection[str] | None = None,
                    through_methods: bool = False) -> list[ast.Call]:
    """The calls of ``names`` whose result is moved right away (``torch.zeros(3).cuda()``; with
    ``through_methods``, also after CHAINED_METHODS and RANDOM_FILLS): the precheck twin of
    factory_move and chained_factory_move (``extra_names`` as ``ast_may_move`` takes them)."""
    wanted = index.names(names)
    variables = index.names(["Variable"])
    moved = []
    for call in index.calls("cuda", "to"):
        if not isinstance(call.func, ast.Attribute):
            continue
        made = _ast_chain_base(call.func.value, CHAIN) if through_methods else call.func.value
        if through_methods and isinstance(made, ast.BinOp):
            made = _ast_scaled(made)  # (torch.ones(n) * i).long().to(device)
        if not isinstance(made, ast.Call):
            continue
        if ast_callee(made) in variables and len(made.args) == 1 and isinstance(made.args[0], ast.Call):
            made = made.args[0]  # Variable(torch.zeros(n)).cuda()
        if ast_callee(made) in wanted and ast_may_move(index, call, extra_names):
            moved.append(made)
    return moved


def ast_rebound_moves(index: SyntaxIndex, *factories: str, extra_names: Collection[str] | None = None) -> bool:
    """Any ``z = z.to(...)``/``z = z.cuda(...)`` whose block assigned ``z`` a call of one of
    ``factories`` in the last earlier statement that mentions ``z``: the precheck twin of
    bound_factory_move (which also stops at a statement that mentions the device's names)."""
    wanted = index.names(factories)
    for block in index.blocks():
        for position, statement in enumerate(block):
            name = _ast_single_assignment(statement)
            value = statement.value if name is not None else None
            if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                    and value.func.attr in ("cuda", "to") and isinstance(value.func.value, ast.Name)
                    and value.func.value.id == name and ast_may_move(index, value, extra_names)):
                continue
            for earlier in reversed(block[:position]):
                if any(isinstance(node, ast.Name) and node.id == name for node in ast.walk(earlier)):
                    made = earlier.value if _ast_single_assignment(earlier) == name else None
                    if isinstance(made, ast.Call) and ast_callee(made) in wanted:
                        return True
                    break
    return False


def ast_helper_factory_moves(index: SyntaxIndex, extra_names: Collection[str] | None = None) -> bool:
    """The precheck twin of helper_factory_move: a move of what a call of the project's own function
    returns (maybe through CHAINED_METHODS), where that function returns a tensor a factory made on
    the CPU."""
    for call in index.calls("cuda", "to"):
        made = _ast_chain_base(call.func.value, CHAINED_METHODS) if isinstance(call.func, ast.Attribute) else None
        if isinstance(made, ast.Call) and ast_may_move(index, call, extra_names):
            summary = ast_call_summary(index, made)
            if summary is not None and summary.returns_factory is not None:
                return True
    return False


def _ast_chain_base(value: ast.AST, methods: frozenset[str]) -> ast.AST:
    """The precheck twin of _chain: what ``value`` calls ``methods`` on (``torch.zeros(n)`` in
    ``torch.zeros(n).long().fill_(1)``)."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
            and isinstance(value.func.value, (ast.Call, ast.BinOp)) and value.func.attr in methods:
        value = value.func.value
    return value


def _ast_scaled(value: ast.BinOp) -> ast.Call | None:
    """The call in ``<call> * x``, ``<call> + x``, ``x - <call>``...: the precheck twin of _scaled."""
    if not isinstance(value.op, (ast.Mult, ast.Add, ast.Sub)):
        return None
    for inner, other in ((value.left, value.right), (value.right, value.left)):
        if isinstance(inner, ast.Call) and isinstance(other, (ast.Constant, ast.Name)):
            return inner
    return None


def _ast_single_assignment(statement: ast.stmt) -> str | None:
    """The name of ``name = <value>``."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
        return statement.targets[0].id
    return None


def bound_factory_move(ctx: RuleContext, node: cst.Call, extra_names: tuple[str, ...] = ()
                       ) -> tuple[cst.Call, str, DeviceMove, cst.SimpleStatementLine, cst.SimpleStatementLine] | None:
    """For ``z = z.to(<device>)`` (or ``.cuda()``) whose block assigned ``z = torch.<factory>(...)``
    earlier, with no statement in between that mentions ``z`` or the names of the device: the
    factory call, its name, the move, and the two statements."""
    move = node.func
    if not (isinstance(move, cst.Attribute) and move.attr.value in ("cuda", "to") and isinstance(move.value, cst.Name)):
        return None
    name = move.value.value
    position = ctx.statement_position()
    if position is None:
        return None
    statement, body, index = position
    if _single_assignment(statement, name) is not node:
        return None
    target = ctx.devices.move(node, extra_names)
    if target is None or target.to_cpu:
        return None
    watched = {name} | names_in(target.device) | (names_in(target.dtype) if target.dtype is not None else set())
    for earlier in reversed(body[:index]):
        if not names_in(earlier) & watched:
            continue
        value = _single_assignment(earlier, name)
        factory = tensor_factory(value, ctx.bindings) if value is not None else None
        if factory is None or name in names_in(value):
            return None
        return value, factory, target, earlier, statement
    return None


def _single_assignment(statement: cst.CSTNode, name: str) -> cst.BaseExpression | None:
    """The value of ``name = <value>`` when that is the whole statement."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    assign = statement.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    return assign.value if isinstance(target, cst.Name) and target.value == name else None


def factory_move(ctx: RuleContext, node: cst.Call, extra_names: tuple[str, ...] = ()
                 ) -> tuple[cst.Call, str, DeviceMove] | None:
    """For ``torch.<factory>(...).cuda()`` / ``.to(<device>)``: the factory call, the factory's
    name and the move; None for anything else (a move to the CPU included)."""
    move = node.func
    if not (isinstance(move, cst.Attribute) and move.attr.value in ("cuda", "to") and isinstance(move.value, cst.Call)):
        return None
    made = _unwrapped(move.value, ctx)
    factory = tensor_factory(made, ctx.bindings)
    if factory is None:
        return None
    target = ctx.devices.move(node, extra_names)
    if target is None or target.to_cpu:
        return None
    return made, factory, target


def type_as_move(ctx: RuleContext, node: cst.Call) -> tuple[cst.Call, str, cst.BaseExpression] | None:
    """For ``torch.<factory>(...).type_as(t)``: the factory call, the factory's name and ``t``.
    ``type_as`` gives the tensor ``t``'s type, its device included, so a tensor made on the CPU is
    copied to ``t``'s device (transformers' ``torch.arange(n).type_as(self.inv_freq)``). None for
    anything else, for a ``t`` that is not a name or an attribute of one, and for a factory that
    names a device or takes ``*args``/``**kwargs``."""
    method = node.func
    if not (isinstance(method, cst.Attribute) and method.attr.value == "type_as" and isinstance(method.value, cst.Call)
            and len(node.args) == 1 and not node.args[0].star and node.args[0].keyword is None
            and dotted_name(node.args[0].value) is not None):
        return None
    made = method.value
    factory = tensor_factory(made, ctx.bindings)
    if factory is None or any(arg.star for arg in made.args) or find_keyword(made, "device") is not None:
        return None
    return made, factory, node.args[0].value


def ast_type_as_calls(index: SyntaxIndex, *names: str) -> list[ast.Call]:
    """The precheck twin of type_as_move: the calls of ``names`` whose result is given to
    ``.type_as(...)`` right away."""
    wanted = index.names(names)
    return [call.func.value for call in index.calls("type_as") if isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Call) and ast_callee(call.func.value) in wanted]


def moved_value(node: cst.Call) -> cst.BaseExpression | None:
    """What ``<value>.cuda(...)`` / ``<value>.to(...)`` moves; None for any other call."""
    move = node.func
    return move.value if isinstance(move, cst.Attribute) and move.attr.value in ("cuda", "to") else None


def _chain(value: cst.BaseExpression | None, methods: frozenset[str]
           ) -> tuple[cst.BaseExpression | None, tuple[cst.Call, ...]]:
    """``torch.zeros(n).long().fill_(1)`` -> ``torch.zeros(n)`` and the calls of ``methods`` on it,
    innermost first."""
    calls = []
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
            and isinstance(value.func.value, (cst.Call, cst.BinaryOperation)) and value.func.attr.value in methods:
        calls.append(value)
        value = value.func.value
    return value, tuple(reversed(calls))


def shown_chain(calls: tuple[cst.Call, ...]) -> str:
    """``.long().fill_(...)``: the chained calls, as a message shows them."""
    return "".join(f".{call.func.attr.value}({'...' if call.args else ''})" for call in calls)


def _names(calls: tuple[cst.Call, ...]) -> tuple[str, ...]:
    return tuple(call.func.attr.value for call in calls)


@dataclass(frozen=True)
class ChainedMove:
    """``(torch.ones(n) * i).long().to(device)``: the factory call and its name, the move, the
    methods between (innermost first), and the scaling of the factory's result by a number, as
    written with ``{}`` for the factory (``{} * i``, ``2 * {}``), when there is one."""

    factory_call: cst.Call
    factory: str
    move: DeviceMove
    chain: tuple[cst.Call, ...]
    scaling: str | None = None
    scaled_by_literal: bool = False

    @property
    def methods(self) -> tuple[str, ...]:
        return _names(self.chain)


SCALINGS = {"Multiply": "*", "Add": "+", "Subtract": "-"}  # LibCST's operator types by name: no import at load


def _scaled(value: cst.BaseExpression) -> tuple[cst.Call, str, bool] | None:
    """For ``(<call> * x)`` (or ``+``, ``-``, either side) with ``x`` a number or a name: the call,
    the scaling as written with ``{}`` for the call (``{} * i``) and whether ``x`` is a number
    literal. One IEEE operation with a scalar rounds the same on every device."""
    if not isinstance(value, cst.BinaryOperation) or type(value.operator).__name__ not in SCALINGS or not value.lpar:
        return None
    operator = SCALINGS[type(value.operator).__name__]
    for inner, other, shown in ((value.left, value.right, "{} %s %s"), (value.right, value.left, "%s %s {}")):
        if isinstance(inner, cst.Call) and isinstance(other, (cst.Integer, cst.Float, cst.Name)):
            operands = (operator, other.value) if inner is value.left else (other.value, operator)
            return inner, shown % operands, not isinstance(other, cst.Name)
    return None


def chained_factory_move(ctx: RuleContext, node: cst.Call, extra_names: tuple[str, ...] = ()) -> ChainedMove | None:
    """For ``torch.<factory>(...).<methods>().cuda()`` / ``.to(<device>)`` with at least one of
    CHAINED_METHODS or RANDOM_FILLS between, or the factory's result scaled by a number first
    (``(torch.ones(n) * i).long().to(device)``): the ChainedMove; None for anything else (a move to
    the CPU included)."""
    made, chain = _chain(moved_value(node), CHAIN)
    scaled = _scaled(made)
    if scaled is not None:
        made = scaled[0]
    factory = tensor_factory(made, ctx.bindings) if chain or scaled else None
    if factory is None:
        return None
    target = ctx.devices.move(node, extra_names)
    if target is None or target.to_cpu:
        return None
    return ChainedMove(made, factory, target, chain, *(scaled[1:] if scaled else ()))


@dataclass(frozen=True)
class LegacyMove:
    """``torch.LongTensor(n).random_(0, k).to(device)``: a legacy constructor, the methods chained
    after it (innermost first), the move, and the constructor as ``torch.empty`` with its dtype
    when its arguments are certainly sizes (None: they may be data, ``torch.LongTensor(values)``)."""

    constructor: cst.Call
    name: str  # "torch.LongTensor"
    chain: tuple[cst.Call, ...]
    move: DeviceMove
    modern: cst.Call | None

    @property
    def methods(self) -> tuple[str, ...]:
        return _names(self.chain)


def legacy_move(ctx: RuleContext, node: cst.Call, extra_names: tuple[str, ...] = ()) -> LegacyMove | None:
    """For ``torch.<Type>Tensor(sizes)`` moved right away (``.cuda()``/``.to(<device>)``), maybe
    after CHAINED_METHODS or RANDOM_FILLS: the LegacyMove; None for anything else. Given one
    argument that may be data (a name), only a fill between makes it one: the host made a
    tensor that the device could have filled."""
    made, chain = _chain(moved_value(node), CHAIN)
    if not isinstance(made, cst.Call):
        return None
    name = ctx.qualified_name(made.func)
    if name not in LEGACY_CONSTRUCTORS or any(arg.star for arg in made.args):
        return None
    sizes = _legacy_sizes(made)
    if sizes is None or not sizes and not FILLS.intersection(_names(chain)):
        return None
    target = ctx.devices.move(node, extra_names)
    if target is None or target.to_cpu:
        return None
    modern = None
    if sizes and isinstance(made.func, cst.Attribute):  # `torch.LongTensor`: the module's own spelling
        modern = made.with_changes(func=made.func.with_changes(attr=cst.Name("empty")))
        if LEGACY_CONSTRUCTORS[name] is not None:
            dtype = cst.Attribute(made.func.value.deep_clone(), cst.Name(LEGACY_CONSTRUCTORS[name]))
            modern = set_keyword(modern, "dtype", dtype)
    return LegacyMove(made, name, chain, target, modern)


def _legacy_sizes(call: cst.Call) -> bool | None:
    """True: the legacy constructor is given sizes (``size=``, two or more numbers, one integer
    literal); False: one argument that may be data; None: no argument, or keywords it is not
    known to take."""
    positional = [arg for arg in call.args if arg.keyword is None]
    keywords = {arg.keyword.value for arg in call.args if arg.keyword is not None}
    if keywords - {"size"} or keywords and positional:
        return None
    if keywords or len(positional) >= 2:
        return True
    if len(positional) == 1:
        return isinstance(positional[0].value, cst.Integer)
    return None


def helper_factory_move(ctx: RuleContext, node: cst.Call, extra_names: tuple[str, ...] = ()
                        ) -> tuple[cst.Call, Factory, DeviceMove] | None:
    """For ``helper(...).to(<device>)`` (or ``.cuda()``, maybe after CHAINED_METHODS) where
    ``helper`` is the project's own function and returns a tensor that a factory made on the CPU
    (``return torch.linspace(...)``): the helper's call, that factory, and the move."""
    made, _ = _chain(moved_value(node), CHAINED_METHODS)
    if not isinstance(made, cst.Call):
        return None
    if tensor_factory(made, ctx.bindings) is not None or ctx.qualified_name(made.func) in LEGACY_CONSTRUCTORS:
        return None  # torch's own: factory_move and legacy_move
    summary = ctx.calls.summary(made)
    factory = summary.returns_factory if summary is not None else None
    if factory is None or factory.name in NO_HOST_FILL:
        return None
    target = ctx.devices.move(node, extra_names)
    if target is None or target.to_cpu:
        return None
    return made, factory, target


def _unwrapped(value: cst.Call, ctx: RuleContext) -> cst.BaseExpression:
    """``Variable(t)`` -> ``t``: the pre-0.4 wrapper, which gives the same values, on the same device."""
    if ctx.qualified_name(value.func) in VARIABLE and len(value.args) == 1 and value.args[0].keyword is None \
            and not value.args[0].star:
        return value.args[0].value
    return value


def creates_non_leaf(ctx: RuleContext, factory_call: cst.Call) -> bool:
    """At the move call (ctx's current node): the factory asks for ``requires_grad=True`` and the
    moved copy is kept as it is, not wrapped in ``nn.Parameter`` (which makes a new leaf) nor
    detached."""
    grad = find_keyword(factory_call, "requires_grad")
    if grad is None or not is_literal(grad.value, True):
        return False
    consumer = ctx.parent
    if isinstance(consumer, cst.Arg) and len(ctx.ancestors) > 2:
        outer = ctx.ancestors[-3]
        if isinstance(outer, cst.Call) and ctx.qualified_name(outer.func) in PARAMETER:
            return False
    if isinstance(consumer, cst.Attribute) and consumer.attr.value in ("detach", "detach_", "data"):
        return False
    return True


def same_values_on_any_device(factory_call: cst.Call, factory: str) -> bool:
    """Does the factory give the same values on the GPU as on the CPU? Not ``linspace`` and
    ``logspace``, whose kernels compute each value in the device's own precision, nor ``arange``
    over floats: the CPU computes ``start + i * step`` in double and rounds once, CUDA in float32
    (``torch.arange(0.0, 1.01, 0.1)[9]`` is 0.89999998 on one and 0.90000004 on the other;
    pytorch#47043). Integer ranges are exact."""
    if factory in ("linspace", "logspace"):
        return False
    if factory in ("arange", "range"):
        return not any(_may_be_fractional(arg.value) for arg in factory_call.args
                       if arg.keyword is None or arg.keyword.value in ("start", "end", "step"))
    return True


def _may_be_fractional(expr: cst.BaseExpression) -> bool:
    """A float literal, or arithmetic that may make one (``/``, ``**`` with a negative power)."""
    if type(expr) is cst.UnaryOperation:
        return _may_be_fractional(expr.expression)
    if type(expr) is cst.Float:
        return True
    if type(expr) is cst.BinaryOperation:
        return type(expr.operator) in (cst.Divide, cst.Power) or _may_be_fractional(expr.left) \
            or _may_be_fractional(expr.right)
    if type(expr) is cst.Call:
        return dotted_name(expr.func) == "float"
    return False


def create_on_device(rule: Rule, node: cst.Call, factory_call: cst.Call, factory: str,
                     move: DeviceMove, repairs: bool = False, methods: tuple[str, ...] = (),
                     modern: cst.Call | None = None, exact_between: bool = True) -> FixSpec | None:
    """The fix that gives the factory the move's device (and dtype) and drops the move: safe for
    deterministic factories, unsafe for random ones and for ``.cuda(x)`` with a variable ``x``, and
    always unsafe when it ``repairs`` a bug (the values the run computes change by design). The
    ``methods`` chained between the factory and the move stay, now run on the device: unsafe when
    one fills with random numbers; no fix when the move also converts (two conversions). A legacy
    constructor is replaced by its ``modern`` spelling (``torch.empty(..., dtype=)``), which the
    device then fills. ``exact_between``: False when what runs between the factory and the move
    is not known to give the same values on the device (a scaling by a name, which may be a tensor
    that stays on the CPU)."""
    if not move.understood or any(a.star == "**" for a in factory_call.args) \
            or find_keyword(factory_call, "pin_memory") is not None:
        return None  # the factory may already carry `device`, or the move does more than move
    if find_keyword(factory_call, "generator") is not None:
        return None  # a CPU generator drives a factory only on the CPU (on a GPU it raises)
    code = rule.ctx.code_for(node)
    if "#" in code[len(rule.ctx.code_for(factory_call)):]:
        return None  # a comment between the factory and the move: the rewrite would drop it
    # a factory that already names a device computed its values there: another device may round
    # differently (`linspace`, `arange` on floats)
    safe = factory in DETERMINISTIC_FACTORIES and move.certain and find_keyword(factory_call, "device") is None \
        and same_values_on_any_device(factory_call, factory)
    new = set_keyword(modern or factory_call, "device", move.device)
    if move.dtype is not None:
        if find_keyword(modern or factory_call, "dtype") is not None or methods:
            return None  # two conversions: their order matters
        new = set_keyword(new, "dtype", move.dtype)
        safe = safe and factory in EXACT_FACTORIES
    safe = safe and exact_between and not RANDOM_FILLS.intersection(methods)
    if node.func.value is not factory_call:
        # `Variable(factory(...)).cuda()` -> `Variable(factory(..., device=))`;
        # `factory(...).long().cuda()` -> `factory(..., device=).long()`
        new = node.func.value.deep_replace(factory_call, new)
    if not isinstance(new, cst.BinaryOperation):  # `(ones(n) * i).to(d)` -> `(ones(n, device=d) * i)`: its parentheses
        new = new.with_changes(lpar=node.lpar, rpar=node.rpar)
    return rule.fix("Create the tensor on the device", rule.replace(node, new),
                    applicability="safe" if safe and not repairs else "unsafe")
