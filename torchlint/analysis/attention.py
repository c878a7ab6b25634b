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
from dataclasses import dataclass, field

from torchlint.analysis.bindings import Bindings, ast_values
from torchlint.analysis.flow import Assigned, ast_reaching_assignments, path_to, reaching_assignments
from torchlint.analysis.index import SyntaxIndex, last_parts
from torchlint.analysis.syntax import (ast_callee, ast_dotted_name, ast_has_star_args, dotted_name, find_argument,
                                       is_literal, positional_args)
from torchlint.analysis.walk import Visitor, visit
from torchlint.lazy import libcst as cst

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

def _ast_minus_one(expr: ast.AST | None) -> bool:
    return isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub) \
        and isinstance(expr.operand, ast.Constant) and expr.operand.value == 1


def _ast_integer(expr: ast.AST) -> int | None:
    """The twin of ``_integer``: ``3``, ``-1``."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub) and isinstance(expr.operand, ast.Constant):
        return -expr.operand.value if type(expr.operand.value) is int else None
    return expr.value if isinstance(expr, ast.Constant) and type(expr.value) is int else None


def _ast_argument(call: ast.Call, name: str, position: int) -> ast.AST | None:
    """The twin of ``find_argument``: the keyword ``name``, else the positional argument at ``position``."""
    keyword = next((k.value for k in call.keywords if k.arg == name), None)
    if keyword is not None:
        return keyword
    return call.args[position] if position < len(call.args) and not any(
        isinstance(a, ast.Starred) for a in call.args[:position + 1]) else None


def _ast_strip_casts(expr: ast.AST) -> ast.AST:
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in CASTS:
        expr = expr.func.value
    return expr


class _AstFinder:
    """The precheck twin of ``AttentionFinder``: the same steps in the same order on CPython's
    tree, each accepting at least what the finder accepts (a callee is matched by the last part of
    its name, a layer by any value the file gives it), and a name followed through the assignments
    ``flow.ast_reaching_assignments`` finds: its one reaching assignment where that answer is exact,
    as the finder requires, every assignment of the name where it is not."""

    def __init__(self, index: SyntaxIndex):
        self.index = index
        self.softmax = index.names(last_parts(SOFTMAX_FUNCTIONS))
        self.dropout = index.names(last_parts(DROPOUT_FUNCTIONS))
        self.matmul = index.names(last_parts(MATMUL_FUNCTIONS))

    def at(self, node: ast.AST) -> bool:
        """Can ``AttentionFinder.at`` find an attention whose output is ``node``?"""
        operands = self._operands(node)
        if operands is None:
            return False
        for weights in self._follow(operands[0]):
            candidates = [weights]
            inner = self._dropout(weights)
            if inner is not None:  # the finder takes the dropout when it sees one; either way here
                candidates += self._follow(inner)
            if any(self._scores(scores, False, False) for candidate in candidates
                   for scores in self._softmax(candidate)):
                return True
        return False

    def _follow(self, expr: ast.AST) -> list[ast.AST]:
        """What ``_follow`` may give for ``expr``: itself when it is not a name; for a name, the
        values it comes from (a name the finder stops at is a dead end: no step takes a name)."""
        found, stack, seen = [], [expr], set()
        while stack:
            expr = stack.pop()
            if not isinstance(expr, ast.Name):
                found.append(expr)
            elif id(expr) not in seen:
                seen.add(id(expr))
                reaching = ast_reaching_assignments(self.index, expr)
                assignments = reaching.assignments or []
                if not reaching.exact or len(assignments) == 1:
                    stack += [value for value, element in assignments if element is None]
        return found

    def _operands(self, node: ast.AST) -> tuple[ast.AST, ast.AST] | None:
        """The twin of ``matmul_operands``."""
        if isinstance(node, ast.BinOp):
            return (node.left, node.right) if isinstance(node.op, ast.MatMult) else None
        if not isinstance(node, ast.Call) or node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            return None
        if len(node.args) == 2 and ast_callee(node) in self.matmul:
            return node.args[0], node.args[1]
        if len(node.args) == 1 and isinstance(node.func, ast.Attribute) and node.func.attr == "matmul":
            return node.func.value, node.args[0]
        return None

    def _layer(self, func: ast.AST, classes: frozenset[str]) -> list[ast.Call]:
        """The ``nn.X(...)`` calls among the values the file gives ``func``, for a layer class in
        ``classes``: ``_layer`` needs every value to be one."""
        name = ast_dotted_name(func)
        wanted = self.index.names(last_parts(classes))
        return [value for value in ast_values(self.index).get(name or "", ())
                if isinstance(value, ast.Call) and ast_callee(value) in wanted]

    def _dropout(self, expr: ast.AST) -> ast.AST | None:
        """The input of a dropout, as ``_dropout`` takes it."""
        if not isinstance(expr, ast.Call) or not expr.args or isinstance(expr.args[0], ast.Starred):
            return None
        if ast_callee(expr) in self.dropout or len(expr.args) == 1 and not expr.keywords \
                and self._layer(expr.func, DROPOUT_MODULES):
            return expr.args[0]
        return None

    def _softmax(self, expr: ast.AST) -> list[ast.AST]:
        """The inputs ``_softmax`` may find, for a softmax over the last dimension."""
        expr = _ast_strip_casts(expr)
        if not isinstance(expr, ast.Call) or ast_has_star_args(expr):
            return []
        found = []
        if ast_callee(expr) in self.softmax and _ast_minus_one(_ast_argument(expr, "dim", 1)):
            found.append(_ast_argument(expr, "input", 0))
        if len(expr.args) + len(expr.keywords) == 1 and any(  # the one argument, by keyword or not
                _ast_minus_one(_ast_argument(layer, "dim", 0)) for layer in self._layer(expr.func, SOFTMAX_MODULES)):
            found.append(expr.args[0] if expr.args else expr.keywords[0].value)
        if isinstance(expr.func, ast.Attribute) and expr.func.attr == "softmax" \
                and _ast_minus_one(_ast_argument(expr, "dim", 0)):
            found.append(expr.func.value)
        return [_ast_strip_casts(source) for source in found if source is not None]

    def _scores(self, expr: ast.AST, scaled: bool, masked: bool) -> bool:
        """The twin of ``_scores``: peel a scale and a mask off the scores down to ``q @ kᵀ``."""
        for expr in self._follow(expr):
            attempts: list[tuple[ast.AST, bool, bool]] = []
            if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Mult, ast.Div)) and not scaled:
                attempts += [(expr.left, True, masked)] + ([(expr.right, True, masked)]
                                                           if isinstance(expr.op, ast.Mult) else [])
            elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add) and not masked:
                attempts += [(expr.left, scaled, True), (expr.right, scaled, True)]
            elif not masked and (filled := self._masked_fill(expr)):
                attempts += [(scores, scaled, True) for scores in filled]
            if any(self._scores(*attempt) for attempt in attempts):
                return True
            operands = self._operands(expr)  # only when nothing was peeled: a product is neither
            if operands is not None and self._transposed(operands[1]):
                return True
        return False

    def _masked_fill(self, expr: ast.AST) -> list[ast.AST]:
        """The scores ``_masked_fill`` may find filled: ``s.masked_fill(...)``, ``torch.masked_fill(s, ...)``."""
        if not isinstance(expr, ast.Call) or ast_has_star_args(expr) or ast_callee(expr) != "masked_fill" \
                and ast_callee(expr) not in self.index.names(last_parts(MASKED_FILL_FUNCTIONS)):
            return []
        found = [expr.func.value] if isinstance(expr.func, ast.Attribute) and expr.func.attr == "masked_fill" else []
        return found + [scores for scores in [_ast_argument(expr, "input", 0)] if scores is not None]

    def _transposed(self, expr: ast.AST) -> bool:
        """The twin of ``_untransposed``: are these keys transposed?"""
        for expr in self._follow(expr):
            if isinstance(expr, ast.Attribute) and expr.attr in ("mT", "T"):
                return True
            if not isinstance(expr, ast.Call) or expr.keywords or any(isinstance(a, ast.Starred) for a in expr.args):
                continue
            callee, args = ast_callee(expr), expr.args
            if len(args) == 3 and callee in self.index.names(last_parts(TRANSPOSE_FUNCTIONS)):
                return True
            if not isinstance(expr.func, ast.Attribute):
                continue
            if callee == "transpose" and len(args) == 2 or callee == "t" and not args:
                return True
            if callee == "permute" and len(args) >= 2 \
                    and [_ast_integer(a) for a in args] == list(range(len(args) - 2)) + [len(args) - 1, len(args) - 2]:
                return True
        return False


def ast_may_be_attention(index: SyntaxIndex) -> bool:
    """Can ``AttentionFinder`` find anything in this file? Some matrix product of the file is one
    ``_AstFinder.at`` accepts (after a cheap look for a product and a softmax over ``-1``)."""
    products = [node for node in index.nodes(ast.BinOp) if isinstance(node.op, ast.MatMult)] \
        + index.calls("matmul", "bmm")
    if not products or not any(any(_ast_minus_one(arg) for arg in call.args) or any(
            keyword.arg == "dim" and _ast_minus_one(keyword.value) for keyword in call.keywords)
            for call in index.calls("softmax", "Softmax")):
        return False
    finder = _AstFinder(index)
    return any(finder.at(node) for node in products)


# --- the rank of the query, key and value, where the code writes it ----------------------------------

REARRANGE = frozenset({"einops.rearrange"})
SIZED_FACTORIES = frozenset({"torch.randn", "torch.rand", "torch.zeros", "torch.ones", "torch.empty"})
PARAMETERS = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})


def operand_rank(expr: cst.BaseExpression, ancestors: list[cst.CSTNode], bindings: Bindings) -> int | None:
    """How many dimensions ``expr`` (an operand of the attention at the end of ``ancestors``) has,
    when the code writes it out: a name assigned once in the function from ``rearrange(x, "b p n
    (h d) -> b p h n d")`` (also through ``q, k, v = map(lambda t: rearrange(t, ...), qkv)``),
    ``.view(...)``/``.reshape(...)`` with the sizes listed, or ``self.<name>`` assigned once in
    the class an ``nn.Parameter(torch.randn(a, b))``. None when it is not written out."""
    function = next((n for n in reversed(ancestors) if type(n) is cst.FunctionDef), None)
    if type(expr) is cst.Name and function is not None:
        found = _assignments(function, lambda target: _binds_name(target, expr.value))
    elif type(expr) is cst.Attribute and dotted_name(expr) is not None and dotted_name(expr).startswith("self."):
        owner = next((n for n in reversed(ancestors) if type(n) is cst.ClassDef), None)
        wanted = dotted_name(expr)
        found = _assignments(owner, lambda target: dotted_name(target) == wanted) if owner is not None else []
    else:
        return None
    if len(found) != 1:
        return None
    target, value = found[0]
    if type(target) is cst.Tuple and type(value) is cst.Call and dotted_name(value.func) == "map" \
            and len(value.args) == 2 and type(value.args[0].value) is cst.Lambda:
        value = value.args[0].value.body  # q, k, v = map(lambda t: rearrange(t, ...), qkv)
    elif type(target) is not cst.Name and type(target) is not cst.Attribute:
        return None
    return _written_rank(value, bindings)


def _binds_name(target: cst.BaseExpression, name: str) -> bool:
    if type(target) is cst.Name:
        return target.value == name
    return type(target) is cst.Tuple and any(type(e.value) is cst.Name and e.value.value == name
                                             for e in target.elements)


def _assignments(scope: cst.CSTNode, binds) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """The (target, value) of each assignment in ``scope`` (nested functions included, as the
    names of a method's ``self`` are) whose target ``binds`` accepts; a ``for``, ``+=`` or other
    binding of it makes the list longer than one, and the rank unknown."""
    found: list = []

    class Assignments(Visitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            found.extend((t.target, node.value) for t in node.targets if binds(t.target))

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if binds(node.target):
                found.append((node.target, None))

        def visit_For(self, node: cst.For) -> None:
            if binds(node.target):
                found.append((node.target, None))

    visit(scope, Assignments())
    return found


def _written_rank(value: cst.BaseExpression | None, bindings: Bindings) -> int | None:
    if type(value) is not cst.Call:
        return None
    qualified = bindings.qualified_name(value.func)
    args = positional_args(value)
    if qualified in PARAMETERS and args:
        return _written_rank(args[0].value, bindings)
    if qualified in REARRANGE or dotted_name(value.func) == "rearrange":
        pattern = args[1].value if len(args) > 1 else None
        return _pattern_rank(pattern.evaluated_value) if type(pattern) is cst.SimpleString else None
    sizes = args
    if not sizes or any(a.star for a in value.args):  # `x.view(b, *rest)`: unknown
        return None
    if type(value.func) is cst.Attribute and value.func.attr.value in ("view", "reshape") or qualified in SIZED_FACTORIES:
        if len(sizes) == 1 and type(sizes[0].value) in (cst.Tuple, cst.List):
            return len(sizes[0].value.elements)
        return len(sizes) if all(type(a.value) not in (cst.Tuple, cst.List) for a in sizes) else None
    return None


def _pattern_rank(pattern: object) -> int | None:
    """The number of axes on the output side of an einops pattern (a group in parentheses is
    one); None with an ellipsis or no arrow."""
    if not isinstance(pattern, str) or "->" not in pattern:
        return None
    output = pattern.split("->", 1)[1]
    if "..." in output or "…" in output:
        return None
    rank, depth = 0, 0
    for token in output.replace("(", " ( ").replace(")", " ) ").split():
        if token == "(":
            rank += depth == 0
            depth += 1
        elif token == ")":
            depth -= 1
        elif depth == 0:
            rank += 1
    return rank
