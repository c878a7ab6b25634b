"""One node at a time: names, calls and their arguments, literals, statements.

The LibCST answers take ``cst`` nodes; their CPython-``ast`` twins, used by the prechecks, carry
an ``ast_`` prefix and share a name with a LibCST answer only when they mean the same thing.
Verbs say what a function does: ``find_*`` returns a node or None, ``is_*``/``has_*`` answer yes
or no. Nothing here knows about PyTorch.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator, Sequence
from functools import cache

from torchlint.analysis.walk import Visitor, visit
from torchlint.lazy import libcst as cst

# Modules a file may use without importing them, through `from helpers import *`: the names of the
# modules themselves, which such a helper module imports under their own names.
STAR_MODULES = frozenset({"torch"})


@cache
def scope_types() -> tuple[type, ...]:
    """LibCST's nodes that open a scope: functions, classes, lambdas (a function, not a constant:
    importing this module must not import LibCST, see torchlint/lazy.py)."""
    return (cst.FunctionDef, cst.ClassDef, cst.Lambda)


@cache
def atom_types() -> tuple[type, ...]:
    """The expressions that ``.attribute`` or a call can follow without parentheses."""
    return (cst.Name, cst.Attribute, cst.Call, cst.Subscript)


# --- names ---------------------------------------------------------------------------------------


def dotted_name(expr: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    # `type() is`: LibCST's node classes are ABCs, whose isinstance takes a Python call when it fails
    if type(expr) is cst.Name:
        return expr.value
    parts = []
    while type(expr) is cst.Attribute:
        parts.append(expr.attr.value)
        expr = expr.value
    if type(expr) is not cst.Name:
        return None
    parts.append(expr.value)
    return ".".join(reversed(parts))


def ast_dotted_name(expr: ast.AST) -> str | None:
    """``a.b.c`` for a chain of names, else None."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


def ast_callee(call: ast.Call) -> str | None:
    """The last part of what a call calls: ``Conv2d`` for ``nn.Conv2d(...)``."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def root_names(expr: cst.BaseExpression, cut: frozenset[str] = frozenset()) -> set[str]:
    """Names an expression's value derives from: ``(a + b.mean()).sum()`` -> {a, b}; an attribute
    or method named in ``cut`` (``detach``, ``item``) ends the chain below it."""
    if isinstance(expr, cst.Name):
        return {expr.value}
    if isinstance(expr, cst.Attribute):
        return set() if expr.attr.value in cut else root_names(expr.value, cut)
    if isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value not in cut:
            return root_names(expr.func.value, cut)
        return set()
    if isinstance(expr, cst.BinaryOperation):
        return root_names(expr.left, cut) | root_names(expr.right, cut)
    if isinstance(expr, cst.UnaryOperation):
        return root_names(expr.expression, cut)
    if isinstance(expr, cst.Subscript):
        return root_names(expr.value, cut)
    return set()


def ast_root_names(expr: ast.AST, cut: frozenset[str] = frozenset()) -> set[str]:
    """The twin of ``root_names`` on CPython's tree."""
    if isinstance(expr, ast.Name):
        return {expr.id}
    if isinstance(expr, ast.Attribute):
        return set() if expr.attr in cut else ast_root_names(expr.value, cut)
    if isinstance(expr, ast.Subscript):
        return ast_root_names(expr.value, cut)
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Attribute) and expr.func.attr not in cut:
            return ast_root_names(expr.func.value, cut)
        return set()
    if isinstance(expr, ast.BinOp):
        return ast_root_names(expr.left, cut) | ast_root_names(expr.right, cut)
    if isinstance(expr, ast.UnaryOp):
        return ast_root_names(expr.operand, cut)
    return set()


def ast_target_names(target: ast.AST) -> set[str]:
    """The twin of ``target_names`` on CPython's tree."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return {name for element in target.elts for name in ast_target_names(element)}
    if isinstance(target, ast.Starred):
        return ast_target_names(target.value)
    return set()


class _NameReader(Visitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def names_in(node: cst.CSTNode) -> set[str]:
    """Every identifier written in a subtree."""
    reader = _NameReader()
    visit(node, reader)
    return reader.names


def target_names(target: cst.BaseExpression) -> set[str]:
    """The plain names an assignment target binds: ``a``, ``(a, b)``, ``[a, *rest]``."""
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {name for element in target.elements for name in target_names(element.value)}
    if isinstance(target, cst.StarredElement):
        return target_names(target.value)
    return set()


# --- calls and arguments -------------------------------------------------------------------------


def find_keyword(call: cst.Call, name: str) -> cst.Arg | None:
    """The ``name=`` argument of a call."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def ast_find_keyword(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def positional_args(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def has_star_args(call: cst.Call) -> bool:
    """``*args`` or ``**kwargs``: the call may carry any argument we cannot see."""
    return any(a.star for a in call.args)


def ast_has_star_args(call: ast.Call) -> bool:
    return any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)


def find_argument(call: cst.Call, name: str, index: int | None = None) -> cst.Arg | None:
    """The argument bound to parameter ``name`` (keyword) or at positional ``index``."""
    found = find_keyword(call, name)
    if found is None and index is not None:
        positional = positional_args(call)
        if len(positional) > index and not any(a.star == "*" for a in call.args[: index + 1]):
            found = positional[index]
    return found


def method_call(node: cst.CSTNode, *names: str) -> cst.Attribute | None:
    """If node is ``<obj>.<name>(...)`` for one of names, the Attribute, else None."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in names:
        return node.func
    return None


def function_parameters(function: cst.FunctionDef | cst.Lambda) -> list[str]:
    params = function.params
    return [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)] + [
        p.name.value for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]


# --- literals ------------------------------------------------------------------------------------


def is_literal(expr: cst.BaseExpression | None, value: object) -> bool:
    """``True``/``False``/``None`` or an int literal equal to value (``True`` is not ``1``)."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value] is value
    if isinstance(expr, cst.Integer) and isinstance(value, int) and not isinstance(value, bool):
        return expr.evaluated_value == value
    return False


def ast_is_literal(expr: ast.AST | None, value: object) -> bool:
    return isinstance(expr, ast.Constant) and type(expr.value) is type(value) and expr.value == value


def string_value(expr: cst.BaseExpression | None) -> str | None:
    if isinstance(expr, cst.SimpleString):
        try:
            value = expr.evaluated_value
        except Exception:  # noqa: BLE001 - odd prefixes; not a plain string then
            return None
        return value if isinstance(value, str) else None
    return None


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


# --- statements ----------------------------------------------------------------------------------


def statements(body: Sequence[cst.CSTNode]) -> Iterator[cst.CSTNode]:
    """Every statement, nested ones included, without descending into expressions."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, cst.SimpleStatementLine):
            continue
        for attr in ("body", "orelse", "finalbody"):
            child = getattr(stmt, attr, None)
            if isinstance(child, (cst.IndentedBlock, cst.SimpleStatementSuite)):
                yield from statements(child.body)
            elif isinstance(child, (cst.Else, cst.Finally, cst.If)):
                yield from statements([child] if isinstance(child, cst.If) else child.body.body)
        for handler in getattr(stmt, "handlers", ()):
            yield from statements(handler.body.body)
        for case in getattr(stmt, "cases", ()):
            yield from statements(case.body.body)


def small_statements(module: cst.Module) -> Iterator[cst.BaseSmallStatement]:
    for stmt in statements(module.body):
        if isinstance(stmt, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            yield from stmt.body
        elif isinstance(getattr(stmt, "body", None), cst.SimpleStatementSuite):
            yield from stmt.body.body


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


def bare_call(statement: cst.CSTNode) -> cst.Call | None:
    """The call of a statement line that is nothing but one call (``optimizer.step()``)."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            and isinstance(statement.body[0], cst.Expr) and isinstance(statement.body[0].value, cst.Call):
        return statement.body[0].value
    return None


def ends_in_exit(block: cst.BaseSuite) -> bool:
    """Does the block end with ``return`` or ``raise`` (so what follows it is the other branch)?"""
    last = block.body[-1] if block.body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1]
    return isinstance(last, (cst.Return, cst.Raise))


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


def returns_of(function: cst.FunctionDef) -> list[cst.Return]:
    """The ``return`` statements of a function (not those of functions nested in it)."""
    found: list[cst.Return] = []

    class Returns(Visitor):
        def visit_Return(self, node: cst.Return) -> None:
            found.append(node)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is function

    visit(function, Returns())
    return found


class _Contains(Visitor):
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


def ast_contains(tree: ast.AST, target: ast.AST) -> bool:
    """The twin of ``contains`` on CPython's tree, by positions: ``target`` lies within ``tree``
    (its decorators apart: ``tree.lineno`` is its ``def`` or ``class`` line), or is it."""
    return (tree.lineno, tree.col_offset) <= (target.lineno, target.col_offset) \
        and (target.end_lineno, target.end_col_offset) <= (tree.end_lineno, tree.end_col_offset)


def ast_first_line(node: ast.AST) -> int:
    """The line a statement starts on, its decorators included (LibCST counts them as its children)."""
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])


_FSTRING_MIDDLE = getattr(tokenize, "FSTRING_MIDDLE", -1)


def _is_prose(literal: str) -> bool:
    """Is a string literal prose (a message, a help text: whitespace between its quotes) rather
    than a value that sets something (``"bf16-mixed"``, ``"cuda:0"``, ``"high"``)?"""
    body = literal.lstrip("rRbBuUfF")
    quote = 3 if body[:3] in ('"""', "'''") else 1
    return any(character.isspace() for character in body[quote:len(body) - quote])


def code_text(source: str) -> str:
    """The source with its comments, its string statements (docstrings) and its prose strings
    blanked out, lines and columns kept: what a file *does* say, for rules that decide from the
    presence of a word (``autocast``, ``cudnn.benchmark``). A docstring, a help text or a printed
    message that plans mixed precision is not mixed precision. Strings that are values
    (``precision="bf16-mixed"``) stay. Text that does not tokenize comes back as it is."""
    blanked = blanked_code(source)
    return source if blanked is None else blanked


def blanked_code(source: str) -> str | None:
    """``code_text``'s text, or None when ``source`` does not tokenize."""
    lines = source.splitlines(keepends=True)
    blanks: list[tuple[tuple[int, int], tuple[int, int]]] = []
    previous = tokenize.NEWLINE
    pending: tokenize.TokenInfo | None = None  # a string that starts a statement
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            kind = token.type
            if kind == tokenize.COMMENT:
                blanks.append((token.start, token.end))
                continue
            if kind in (tokenize.NL, tokenize.ENCODING):
                continue
            if pending is not None and kind in (tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.DEDENT):
                blanks.append((pending.start, pending.end))
            pending = token if kind == tokenize.STRING and previous in (
                tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT) else None
            if kind == tokenize.STRING and pending is None and _is_prose(token.string) \
                    or kind == _FSTRING_MIDDLE and any(character.isspace() for character in token.string):
                blanks.append((token.start, token.end))  # from Python 3.12, an f-string's text is its own token
            previous = kind
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    for (start_line, start_col), (end_line, end_col) in blanks:
        for number in range(start_line, end_line + 1):
            line = lines[number - 1]
            body = line.rstrip("\r\n")
            first = start_col if number == start_line else 0
            last = end_col if number == end_line else len(body)
            lines[number - 1] = body[:first] + " " * (last - first) + body[last:] + line[len(body):]
    return "".join(lines)


# A for/while statement starts a logical line, so a physical one ("\r" ends one too)
_LOOP_STATEMENT = re.compile(r"(?:^|\r)[ \t\f]*(?:async[ \t\f]+)?(?:for|while)\b", re.MULTILINE)


def has_loop_statement(text: str) -> bool:
    """May the text hold a ``for`` or ``while`` statement? (A line that starts with the word.)"""
    return ("for" in text or "while" in text) and _LOOP_STATEMENT.search(text) is not None


def whole_word(text: str, start: int, end: int) -> bool:
    r"""Is ``text[start:end]`` a word of its own (no letter, digit or ``_`` on either side)? What
    ``\b`` checks, for text prefilters that find a word with ``str.find`` or a regex that starts
    with a literal: a regex that opens with ``\b`` tries every position of the text, ten to thirty
    times slower on large files."""
    before = text[start - 1] if start else " "
    after = text[end] if end < len(text) else " "
    return not (before.isalnum() or before == "_" or after.isalnum() or after == "_")


def has_word(text: str, word: str) -> bool:
    r"""``re.search(rf"\b{word}\b", text)``, for a word that starts and ends with a word character."""
    start = text.find(word)
    while start != -1:
        if whole_word(text, start, start + len(word)):
            return True
        start = text.find(word, start + 1)
    return False


def scope_name(ancestors: list[cst.CSTNode]) -> str | None:
    """The qualified name of the function a node with these ancestors (outermost first) is in, as
    the summaries name it (``Trainer.fit``, ``outer.inner``); None at module level."""
    scopes = [node for node in ancestors if isinstance(node, (cst.FunctionDef, cst.ClassDef))]
    while scopes and not isinstance(scopes[-1], cst.FunctionDef):
        scopes.pop()  # a class body runs once, as module-level code does
    return ".".join(node.name.value for node in scopes) or None


def line_within(statement: cst.BaseStatement, node: cst.CSTNode) -> int:
    """The line (0-based) on which ``node`` starts in the code of ``statement`` that holds it: tells
    apart the lines of a statement written over several (positions are known only after the walk)."""
    wrapper = cst.MetadataWrapper(cst.Module(body=[statement]), unsafe_skip_copy=True)
    return wrapper.resolve(cst.metadata.PositionProvider)[node].start.line - 1
