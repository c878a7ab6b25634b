"""Attention written by hand: is a matrix product the output of a scaled dot-product attention,
``softmax(q @ k.transpose(-2, -1) * scale [+ mask]) [-> dropout] @ v``, and what are its parts?

The value is followed back from the final product through the names it was assigned to in its
function (``flow.reaching_assignments``: one assignment each), through a dropout (``F.dropout``,
an ``nn.Dropout`` the class builds), a softmax (``F.softmax``, ``torch.softmax``, ``.softmax``, an
``nn.Softmax`` the class builds), a mask (``masked_fill``, an added bias) and a scale (``*`` or
``/``), to the product of the queries with the transposed keys. Each part is described exactly
enough for a rule to tell whether ``F.scaled_dot_product_attention`` computes the same thing.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.flow import Assigned, path_to, reaching_assignments
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.syntax import ast_callee, dotted_name, find_argument, is_literal, positional_args

MATMUL_FUNCTIONS = frozenset({"torch.matmul", "torch.bmm", "torch.Tensor.matmul"})
SOFTMAX_FUNCTIONS = frozenset({"torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax"})
SOFTMAX_MODULES = frozenset({"torch.nn.Softmax", "torch.nn.modules.activation.Softmax"})
DROPOUT_FUNCTIONS = frozenset({"torch.nn.functional.dropout", "torch.dropout"})
DROPOUT_MODULES = frozenset({"torch.nn.Dropout", "torch.nn.modules.dropout.Dropout"})
MASKED_FILL_FUNCTIONS = frozenset({"torch.masked_fill"})
TRANSPOSE_FUNCTIONS = frozenset({"torch.transpose"})
# Casts that may wrap a softmax (`F.softmax(s.float(), -1).type_as(q)`): the attention is still
# recognized, but it is computed in another precision than SDPA would.
CASTS = frozenset({"float", "type_as", "to", "half", "bfloat16"})
# How `-inf` is written.
NEGATIVE_INFINITY = ("float('-inf')", 'float("-inf")', "-float('inf')", '-float("inf")', "-math.inf", "-torch.inf",
                     "-np.inf", "-numpy.inf", "float('-Inf')", 'float("-Inf")', "-float('Inf')", '-float("Inf")')
MAX_DEPTH = 8


@dataclass
class Attention:
    """The parts of a hand-written attention whose output is ``output``.

    ``key_transposed``: True when the keys are transposed over exactly their last two dimensions
    (``transpose(-2, -1)``, ``transpose(-1, -2)``, ``.mT``); False for other spellings that may
    mean it for some ranks (``transpose(2, 3)``, ``permute``, ``.T``). ``scale``: ``("*", s)``,
    ``("/", s)`` or None when the scores are not scaled between the product and the softmax.
    ``mask``: ``("fill", condition, fill value)``, ``("add", bias)`` or None; ``mask_after_scale``:
    the mask is applied to the scaled scores. ``softmax_exact``: over the last dimension, in the
    input's own precision. ``dropout``: ``(p, training)`` where ``training`` is None when the
    dropout always runs (``F.dropout`` without ``training=``) and the string ``"module"`` for an
    ``nn.Dropout`` layer (``p`` is then the layer); None without dropout. ``steps``: the
    assignments the value came through, from the last to the first."""

    output: cst.CSTNode
    query: cst.BaseExpression
    key: cst.BaseExpression
    value: cst.BaseExpression
    weights: cst.BaseExpression  # what the final product multiplies the values with
    key_transposed: bool = True
    scale: tuple[str, cst.BaseExpression] | None = None
    mask: tuple | None = None
    mask_after_scale: bool = True
    softmax_exact: bool = True
    dropout: tuple | None = None
    steps: list[Assigned] = field(default_factory=list)
    weight_steps: int = 0  # the first steps, which hold the weights (after the softmax)


def matmul_operands(node: cst.CSTNode, bindings: Bindings) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """The two operands of ``a @ b``, ``torch.matmul(a, b)``, ``torch.bmm(a, b)``, ``a.matmul(b)``."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        return node.left, node.right
    if isinstance(node, cst.Call) and not any(arg.star or arg.keyword for arg in node.args):
        if bindings.qualified_name(node.func) in MATMUL_FUNCTIONS and len(node.args) == 2:
            return node.args[0].value, node.args[1].value
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "matmul" and len(node.args) == 1 \
                and bindings.qualified_name(node.func) is None:
            return node.func.value, node.args[0].value
    return None


def is_negative_infinity(expr: cst.BaseExpression) -> bool:
    text = cst.Module([]).code_for_node(expr).replace(" ", "")
    return text in NEGATIVE_INFINITY


def _integer(expr: cst.BaseExpression | None) -> int | None:
    if isinstance(expr, cst.Integer):
        return int(expr.value)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus) \
            and isinstance(expr.expression, cst.Integer):
        return -int(expr.expression.value)
    return None


class AttentionFinder:
    """Recognizes hand-written attention at a place of the walk (``ancestors``: the live stack
    from the module down to the current node)."""

    def __init__(self, module: cst.Module, bindings: Bindings, ancestors: list[cst.CSTNode]):
        self.module = module
        self.bindings = bindings
        self.ancestors = ancestors

    def at(self, node: cst.CSTNode) -> Attention | None:
        """The attention whose output is ``node`` (the current node of the walk), if it is one."""
        operands = matmul_operands(node, self.bindings)
        if operands is None:
            return None
        weights, value = operands
        steps: list[Assigned] = []
        chain = list(self.ancestors)
        found = Attention(node, query=None, key=None, value=value, weights=weights, steps=steps)
        expr, chain = self._follow(weights, chain, steps)
        dropout = self._dropout(expr)
        if dropout is not None:
            inner, found.dropout = dropout
            expr, chain = self._follow(inner, chain, steps)
        softmax = self._softmax(expr)
        if softmax is None:
            return None
        found.weight_steps = len(steps)
        scores, found.softmax_exact = softmax
        found.steps = steps
        return found if self._scores(scores, chain, found, 0) else None

    # following names -------------------------------------------------------------------------------
    def _follow(self, expr: cst.BaseExpression, chain: list[cst.CSTNode],
                steps: list[Assigned]) -> tuple[cst.BaseExpression, list[cst.CSTNode]]:
        """The expression a plain name stands for, through its one reaching assignment (and the
        chain to that expression); ``expr`` itself otherwise."""
        for _ in range(MAX_DEPTH):
            if not isinstance(expr, cst.Name):
                break
            assignments = reaching_assignments(expr.value, chain)
            if assignments is None or len(assignments) != 1 or assignments[0].element is not None:
                break
            where = self._chain_to(chain, assignments[0].value)
            if where is None:
                break
            steps.append(assignments[0])
            expr, chain = assignments[0].value, where
        return expr, chain

    @staticmethod
    def _chain_to(chain: list[cst.CSTNode], node: cst.CSTNode) -> list[cst.CSTNode] | None:
        for i in range(len(chain) - 1, -1, -1):
            if isinstance(chain[i], (cst.FunctionDef, cst.Module)):
                path = path_to(chain[i], node)
                return chain[:i] + path if path is not None else None
        return None

    def _layer(self, func: cst.BaseExpression, classes: frozenset[str]) -> cst.Call | None:
        """The ``nn.X(...)`` call that every value the file gives ``func`` (``self.softmax``)
        is, for a layer class in ``classes``."""
        values = self.bindings.values(dotted_name(func)) if isinstance(func, (cst.Name, cst.Attribute)) else []
        if not values or not all(isinstance(v, cst.Call) and self.bindings.qualified_name(v.func) in classes
                                 for v in values):
            return None
        return values[0]

    # the parts -------------------------------------------------------------------------------------
    def _dropout(self, expr: cst.BaseExpression) -> tuple[cst.BaseExpression, tuple] | None:
        """``(input, (p, training))`` for a dropout of ``input``."""
        if not isinstance(expr, cst.Call) or not expr.args or expr.args[0].star or expr.args[0].keyword:
            return None
        qualified = self.bindings.qualified_name(expr.func)
        if qualified in DROPOUT_FUNCTIONS:
            p = find_argument(expr, "p", 1)
            training = find_argument(expr, "training", 2)
            inplace = find_argument(expr, "inplace", 3)
            if any(a.star for a in expr.args) or inplace is not None and not is_literal(inplace.value, False):
                return expr.args[0].value, ("unknown", None)
            return expr.args[0].value, (p.value if p else cst.Float("0.5"), training.value if training else None)
        if qualified is None and len(expr.args) == 1 and self._layer(expr.func, DROPOUT_MODULES) is not None:
            return expr.args[0].value, (expr.func, "module")
        return None

    def _softmax(self, expr: cst.BaseExpression) -> tuple[cst.BaseExpression, bool] | None:
        """``(input, exact)`` for a softmax over the last dimension (``exact``: in the input's own
        precision, nothing cast around it); None for any other softmax or none."""
        exact = True
        while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in CASTS \
                and self.bindings.qualified_name(expr.func) is None:
            expr, exact = expr.func.value, False
        if not isinstance(expr, cst.Call) or any(a.star for a in expr.args):
            return None
        qualified = self.bindings.qualified_name(expr.func)
        if qualified in SOFTMAX_FUNCTIONS:
            source, dim, dtype = find_argument(expr, "input", 0), find_argument(expr, "dim", 1), \
                find_argument(expr, "dtype", 2)
        elif qualified is None and len(expr.args) == 1 and self._layer(expr.func, SOFTMAX_MODULES) is not None:
            layer = self._layer(expr.func, SOFTMAX_MODULES)
            source, dim, dtype = expr.args[0], find_argument(layer, "dim", 0), None
        elif qualified is None and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "softmax":
            source, dim, dtype = cst.Arg(expr.func.value), find_argument(expr, "dim", 0), find_argument(expr, "dtype", 1)
        else:
            return None
        if source is None or dim is None or _integer(dim.value) != -1:
            return None  # no dim (the legacy implicit one) or another dimension than the last
        if dtype is not None and not is_literal(dtype.value, None):
            exact = False
        inner = source.value
        while isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) and inner.func.attr.value in CASTS \
                and self.bindings.qualified_name(inner.func) is None:
            inner, exact = inner.func.value, False
        return inner, exact

    def _scores(self, expr: cst.BaseExpression, chain: list[cst.CSTNode], found: Attention, depth: int) -> bool:
        """Peel the scale and the mask off the scores down to ``q @ kᵀ``, filling ``found`` (left
        as it was when they do not lead there)."""
        if depth > MAX_DEPTH:
            return False
        steps: list[Assigned] = []
        expr, chain = self._follow(expr, chain, steps)
        attempts: list[tuple[cst.BaseExpression, dict]] = []
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Multiply, cst.Divide)) \
                and found.scale is None:
            if isinstance(expr.operator, cst.Divide):
                attempts.append((expr.left, {"scale": ("/", expr.right)}))
            else:
                attempts += [(expr.left, {"scale": ("*", expr.right)}), (expr.right, {"scale": ("*", expr.left)})]
        elif isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add) and found.mask is None:
            after = found.scale is None  # peeled from the outside in: a scale already peeled is applied later
            attempts += [(scores, {"mask": ("add", bias), "mask_after_scale": after})
                         for scores, bias in ((expr.left, expr.right), (expr.right, expr.left))]
        elif (fill := self._masked_fill(expr)) is not None and found.mask is None:
            attempts.append((fill[0], {"mask": fill[1], "mask_after_scale": found.scale is None}))
        for inner, changes in attempts:
            saved = {name: getattr(found, name) for name in ("scale", "mask", "mask_after_scale", "steps")}
            for name, value in changes.items():
                setattr(found, name, value)
            found.steps = found.steps + steps
            if self._scores(inner, chain, found, depth + 1):
                return True
            for name, value in saved.items():
                setattr(found, name, value)
        if attempts:
            return False
        operands = matmul_operands(expr, self.bindings)
        key = self._untransposed(operands[1], chain) if operands is not None else None
        if key is None:
            return False
        found.query, (found.key, found.key_transposed) = operands[0], key
        found.steps = found.steps + steps
        return True

    def _masked_fill(self, expr: cst.BaseExpression) -> tuple[cst.BaseExpression, tuple] | None:
        if not isinstance(expr, cst.Call) or any(a.star for a in expr.args):
            return None
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "masked_fill" \
                and self.bindings.qualified_name(expr.func) is None:
            scores, condition, value = expr.func.value, find_argument(expr, "mask", 0), find_argument(expr, "value", 1)
        elif self.bindings.qualified_name(expr.func) in MASKED_FILL_FUNCTIONS:
            scores = find_argument(expr, "input", 0)
            scores = scores.value if scores else None
            condition, value = find_argument(expr, "mask", 1), find_argument(expr, "value", 2)
        else:
            return None
        if scores is None or condition is None or value is None:
            return None
        return scores, ("fill", condition.value, value.value)

    def _untransposed(self, expr: cst.BaseExpression, chain: list[cst.CSTNode]) -> tuple[cst.BaseExpression, bool] | None:
        """``(k, exact)`` for a transposed ``k``: exact when over the last two dimensions."""
        expr, chain = self._follow(expr, chain, [])
        if isinstance(expr, cst.Attribute) and expr.attr.value in ("mT", "T"):
            return expr.value, expr.attr.value == "mT"
        if not isinstance(expr, cst.Call) or any(a.star or a.keyword for a in expr.args):
            return None
        if self.bindings.qualified_name(expr.func) in TRANSPOSE_FUNCTIONS and len(expr.args) == 3:
            dims = {_integer(a.value) for a in expr.args[1:]}
            return expr.args[0].value, dims == {-1, -2}
        if not isinstance(expr.func, cst.Attribute) or self.bindings.qualified_name(expr.func) is not None:
            return None
        method, args = expr.func.attr.value, positional_args(expr)
        if method == "transpose" and len(args) == 2:
            return expr.func.value, {_integer(a.value) for a in args} == {-1, -2}
        if method == "permute" and len(args) >= 2:
            dims = [_integer(a.value) for a in args]
            n = len(dims)
            swapped = list(range(n - 2)) + [n - 1, n - 2]
            return (expr.func.value, False) if dims == swapped else None
        if method == "t" and not args:
            return expr.func.value, False
        return None


# --- the precheck twin, on CPython's tree -------------------------------------------------------

_AST_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef)
_AST_TRANSPOSES = ("transpose", "permute", "t")
_NOWHERE = 1 << 30


def _ast_transposed(expr: ast.AST) -> bool:
    """Keys as ``_untransposed`` accepts them: ``k.transpose(...)``, ``torch.transpose(k, ...)``,
    ``k.permute(...)``, ``k.t()``, ``k.mT``, ``k.T``."""
    if isinstance(expr, ast.Attribute):
        return expr.attr in ("mT", "T")
    return isinstance(expr, ast.Call) and isinstance(expr.func, (ast.Attribute, ast.Name)) \
        and ast_callee(expr) in _AST_TRANSPOSES


def _ast_key_operand(node: ast.AST) -> ast.AST | None:
    """The right operand of ``a @ b``, ``torch.matmul(a, b)``, ``torch.bmm(a, b)``, ``a.matmul(b)``."""
    if isinstance(node, ast.BinOp):
        return node.right if isinstance(node.op, ast.MatMult) else None
    if ast_callee(node) in ("matmul", "bmm") and node.args:
        return node.args[-1]
    return None


def _ast_minus_one(expr: ast.AST) -> bool:
    return isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub) \
        and isinstance(expr.operand, ast.Constant) and expr.operand.value == 1


def _ast_scope_lines(index: SyntaxIndex) -> list[int]:
    """For each line, the first line of the innermost function around it (0: module level)."""
    line_count = max((getattr(node, "end_lineno", 0) or 0 for node in index.tree.body), default=0) + 1
    scope = [0] * (line_count + 1)
    for node in sorted(index.nodes(*_AST_SCOPES), key=lambda node: (node.lineno, -node.end_lineno)):
        scope[node.lineno:node.end_lineno + 1] = [node.lineno] * (node.end_lineno + 1 - node.lineno)
    return scope


class _Assignment:
    """One ``name = value`` (``:=``, annotated) on CPython's tree, reduced to what the fixpoints read."""

    __slots__ = ("scope", "line", "targets", "reads", "transposed", "scores")

    def __init__(self, scope: int, targets: list[ast.AST], value: ast.AST, scores: set[int]):
        self.scope, self.line = scope, value.lineno
        self.targets = [name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)]
        nodes = list(ast.walk(value))
        self.reads = [(node.id, node.lineno) for node in nodes if isinstance(node, ast.Name)]
        self.transposed = _ast_transposed(value)
        self.scores = any(id(node) in scores for node in nodes)


def _ast_fixpoint(assignments: list[_Assignment], seeded: Callable[[_Assignment], bool]) -> dict[tuple[int, str], int]:
    """The names (per scope) assigned a seeded value, or a value that reads such a name after the
    line where it was first so assigned, each with that line: the finder follows one reaching
    assignment, which comes before its use in straight-line code."""
    names: dict[tuple[int, str], int] = {}
    changed = True
    while changed:
        changed = False
        for assignment in assignments:
            if not (seeded(assignment) or any(names.get((assignment.scope, name), _NOWHERE) < line
                                              for name, line in assignment.reads)):
                continue
            for name in assignment.targets:
                if names.get((assignment.scope, name), _NOWHERE) > assignment.line:
                    names[(assignment.scope, name)] = assignment.line
                    changed = True
    return names


def ast_may_be_attention(index: SyntaxIndex) -> bool:
    """Can ``AttentionFinder`` find anything in this file? In one function (or at module level), a
    softmax over the last dimension (``dim=-1`` written as such, in the call or in an
    ``nn.Softmax`` layer the file builds) of something built from a matrix product with transposed
    keys (``q @ k.transpose(-2, -1)``), directly or through names assigned there. A necessary
    condition: "built from" is any subexpression, where the finder peels only a scale, a mask and
    casts; the product with the values is not checked."""
    products = [node for node in index.nodes(ast.BinOp) if isinstance(node.op, ast.MatMult)] \
        + index.calls("matmul", "bmm")
    softmaxes = [call for call in index.calls("softmax", "Softmax")
                 if any(_ast_minus_one(arg) for arg in call.args)
                 or any(keyword.arg == "dim" and _ast_minus_one(keyword.value) for keyword in call.keywords)]
    if not products or not softmaxes:
        return False
    scope = _ast_scope_lines(index)
    layer = any(ast_callee(call) == "Softmax" for call in softmaxes)  # called by any name, anywhere
    wanted = None if layer else {scope[call.lineno] for call in softmaxes}
    products = [node for node in products if wanted is None or scope[node.lineno] in wanted]
    keys = [(node, _ast_key_operand(node)) for node in products]
    if not any(key is not None for _, key in keys):
        return False
    values = [(node.targets, node.value) for node in index.nodes(ast.Assign)] \
        + [([node.target], node.value) for node in index.nodes(ast.AnnAssign, ast.NamedExpr) if node.value]
    values = [(targets, value) for targets, value in values if wanted is None or scope[value.lineno] in wanted]
    assignments = [_Assignment(scope[value.lineno], targets, value, set()) for targets, value in values]
    transposed = _ast_fixpoint(assignments, lambda assignment: assignment.transposed)
    scores = {id(node) for node, key in keys if key is not None and (
        _ast_transposed(key) or isinstance(key, ast.Name)
        and transposed.get((scope[node.lineno], key.id), _NOWHERE) < key.lineno)}
    if not scores:
        return False
    if layer:
        return True  # the layer may be called by any name: a product of transposed keys is enough
    assignments = [_Assignment(scope[value.lineno], targets, value, scores) for targets, value in values]
    from_scores = _ast_fixpoint(assignments, lambda assignment: assignment.scores)
    for call in softmaxes:
        where = scope[call.lineno]
        if any(id(node) in scores or isinstance(node, ast.Name)
               and from_scores.get((where, node.id), _NOWHERE) < node.lineno for node in ast.walk(call)):
            return True
    return False
