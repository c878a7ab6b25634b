"""Following a value or a call within one file: which assignment gives a name its value at a
place, and which of the file's own functions a call runs.

Both are light stand-ins for real data-flow and call-graph analysis (a layer of cross-function
summaries is being built apart from this): names are matched as written, a branch may or may not
run, a loop's later statements do not reach its earlier ones, and a call reaches a function of the
file only by its name (``helper(...)``, ``self.helper(...)``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.syntax import ast_first_line, dotted_name, function_parameters, scope_types
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst


@cache
def block_types() -> tuple[type, ...]:
    return (cst.IndentedBlock, cst.Module)


@dataclass(frozen=True)
class Assigned:
    """One assignment that may give a name its value: ``value`` is the assigned expression, and
    ``element`` the index the name takes of it when it is unpacked (``a, b = pair`` -> ``b`` is
    element 1 of ``pair``); ``statement`` is the assignment's statement line."""

    value: cst.BaseExpression
    element: int | None
    statement: cst.CSTNode


def path_to(root: cst.CSTNode, target: cst.CSTNode) -> list[cst.CSTNode] | None:
    """The nodes from ``root`` down to ``target`` (both included), or None when ``target`` is not
    inside ``root``: the ancestors of a node the walk is not at."""
    stack: list[cst.CSTNode] = []
    found: list[list[cst.CSTNode]] = []

    def on_visit(node: cst.CSTNode) -> bool:
        if found:
            return False
        stack.append(node)
        if node is target:
            found.append(list(stack))
            return False
        return True

    def on_leave(node: cst.CSTNode) -> None:
        if stack and stack[-1] is node:
            stack.pop()

    walk(root, on_visit, on_leave)
    return found[0] if found else None


class Ancestry:
    """The parent of every node under ``root``, from one walk: the path down to any node in the
    time of its depth, where ``path_to`` walks the tree again for each node."""

    def __init__(self, root: cst.CSTNode):
        self.root = root
        self._parent: dict[int, cst.CSTNode] = {}
        stack: list[cst.CSTNode] = []

        def on_visit(node: cst.CSTNode) -> None:
            if stack:
                self._parent[id(node)] = stack[-1]
            stack.append(node)

        walk(root, on_visit, lambda node: stack.pop())

    def path(self, target: cst.CSTNode, start: cst.CSTNode | None = None) -> list[cst.CSTNode] | None:
        """``path_to(start, target)``: the nodes from ``start`` (the root by default) down to
        ``target``, or None when ``target`` is not inside ``start``."""
        start = self.root if start is None else start
        path = [target]
        while path[-1] is not start:
            parent = self._parent.get(id(path[-1]))
            if parent is None:
                return None
            path.append(parent)
        path.reverse()
        return path


def target_binds(target: cst.BaseExpression, name: str, element: int | None = None) -> tuple[bool, int | None] | None:
    """Does an assignment target bind ``name``: (True, element index or None), else None. Nested
    or starred unpacking binds it to no single element: (True, -1)."""
    if dotted_name(target) == name:
        return True, element
    if type(target) in (cst.Tuple, cst.List):
        for index, item in enumerate(target.elements):
            if type(item) is cst.StarredElement or element is not None:
                if target_binds(item.value, name) is not None:
                    return True, -1
                continue
            found = target_binds(item.value, name, index)
            if found is not None:
                return found
    return None


class _Binds:
    """Searches a statement for what binds ``name`` in it (functions and classes inside left out)."""

    def __init__(self, name: str):
        self.name = name

    def small(self, statement: cst.BaseSmallStatement, line: cst.CSTNode) -> list[Assigned | None] | None:
        """What a small statement binds ``name`` to: None if it does not bind it; a list whose
        items are None where the value is unknown (``+=``, ``import``, ``del``)."""
        if type(statement) is cst.Assign:
            for target in reversed(statement.targets):
                found = target_binds(target.target, self.name)
                if found is not None:
                    element = found[1]
                    return [None] if element == -1 else [Assigned(statement.value, element, line)]
            return None
        if type(statement) is cst.AnnAssign and dotted_name(statement.target) == self.name:
            return [Assigned(statement.value, None, line)] if statement.value is not None else [None]
        if type(statement) is cst.AugAssign and dotted_name(statement.target) == self.name:
            return [None]
        if type(statement) in (cst.Import, cst.ImportFrom, cst.Global, cst.Nonlocal, cst.Del) \
                and self.name in cst.Module([]).code_for_node(statement).replace(",", " ").split():
            return [None]
        return None

    def walrus(self, node: cst.CSTNode) -> bool:
        """Does an expression bind the name with ``:=`` (its value is then taken as unknown)?"""
        found = []

        def on_visit(child: cst.CSTNode) -> bool:
            if type(child) is cst.NamedExpr and dotted_name(child.target) == self.name:
                found.append(child)
            return not found and not isinstance(child, scope_types())

        walk(node, on_visit)
        return bool(found)


def _reaching_in_block(statements: list[cst.CSTNode], binds: _Binds) -> tuple[list[Assigned | None], bool]:
    """The assignments of the name that may reach the end of ``statements``, and whether one of
    them surely runs (so nothing before the block reaches past it)."""
    reached: list[Assigned | None] = []
    for statement in reversed(statements):
        found, certain = _reaching_in_statement(statement, binds)
        reached += found
        if certain:
            return reached, True
    return reached, False


def _reaching_in_statement(statement: cst.CSTNode, binds: _Binds) -> tuple[list[Assigned | None], bool]:
    if type(statement) is cst.SimpleStatementLine:
        for small in reversed(statement.body):
            found = binds.small(small, statement)
            if found is not None:
                return found, True
        if binds.walrus(statement):
            return [None], True
        return [], False
    if type(statement) in (cst.FunctionDef, cst.ClassDef):
        return ([None], True) if statement.name.value == binds.name else ([], False)
    if type(statement) is cst.With:
        if any(item.asname is not None and target_binds(item.asname.name, binds.name) is not None
               for item in statement.items):
            return [None], True
        return _reaching_in_block(list(statement.body.body), binds)
    branches: list[list[cst.CSTNode]] = []
    always = False  # one of the branches surely runs
    if type(statement) is cst.If:
        node: cst.CSTNode | None = statement
        while type(node) is cst.If:
            branches.append(list(node.body.body))
            node = node.orelse
        if type(node) is cst.Else:
            branches.append(list(node.body.body))
            always = True
    elif type(statement) in (cst.For, cst.While):
        if type(statement) is cst.For and target_binds(statement.target, binds.name) is not None:
            return [None], False
        branches.append(list(statement.body.body))
        if statement.orelse is not None:
            branches.append(list(statement.orelse.body.body))
    elif type(statement) in (cst.Try, cst.TryStar):
        branches.append(list(statement.body.body))
        branches += [list(handler.body.body) for handler in statement.handlers]
        for extra in (statement.orelse, statement.finalbody):
            if extra is not None:
                branches.append(list(extra.body.body))
    elif type(statement) is cst.Match:
        return ([None], False) if binds.walrus(statement) or binds.name in _match_names(statement) else ([], False)
    else:
        return [], False
    reached: list[Assigned | None] = []
    certain = always
    for branch in branches:
        found, sure = _reaching_in_block(branch, binds)
        reached += found
        certain = certain and sure
    return reached, certain and bool(reached)


def _match_names(statement: cst.Match) -> set[str]:
    names: set[str] = set()

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.Name:
            names.add(node.value)
        return True

    walk(statement, on_visit)
    return names


def reaching_assignments(name: str, chain: list[cst.CSTNode]) -> list[Assigned] | None:
    """The assignments that may give ``name`` its value at the last node of ``chain`` (the nodes
    from the module down to it). None when a value is unknown: a parameter, a ``for``/``with``
    target, ``+=``, an import; or the name is not bound before the place in its function (a
    global, or a name bound later in a loop body)."""
    binds = _Binds(name)
    reached: list[Assigned | None] = []
    for i in range(len(chain) - 1, 0, -1):
        node, parent = chain[i], chain[i - 1]
        if isinstance(node, scope_types()) and i != len(chain) - 1:
            if type(node) in (cst.FunctionDef, cst.Lambda):
                parameters = function_parameters(node)
                if name in parameters:
                    return None
            break
        if isinstance(parent, block_types()):
            body = list(parent.body)
            found, certain = _reaching_in_block(body[: body.index(node)], binds)
            reached += found
            if certain:
                return None if any(item is None for item in reached) or not reached else reached
    return None


def function_of_call(call: cst.Call, bindings: Bindings) -> cst.FunctionDef | None:
    """The function of the file a call runs, found by its name: ``helper(...)``, or a method
    ``self.helper(...)`` / ``obj.helper(...)``; None when the file defines no function of that
    name or more than one."""
    func = call.func
    if type(func) is cst.Name:
        name = func.value
    elif type(func) is cst.Attribute:
        name = func.attr.value
    else:
        return None
    found = bindings.defined(name, cst.FunctionDef)
    return found[0] if len(found) == 1 else None


def argument_for(call: cst.Call, function: cst.FunctionDef, parameter: str,
                 bound: bool | None = None) -> cst.BaseExpression | None:
    """The expression a call passes for one of the function's parameters (by position, ``self``
    skipped for a method called on an object, or by keyword). ``bound``: whether the call binds
    the first parameter itself (``Net(...)`` for ``__init__``); by default, a call of an attribute
    does for a first parameter named ``self`` or ``cls``."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == parameter:
            return arg.value
    names = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
    if bound is None:
        bound = bool(names) and names[0] in ("self", "cls") and type(call.func) is cst.Attribute
    if bound:
        names = names[1:]
    positional = [a for a in call.args if a.keyword is None]
    if any(a.star for a in positional):
        return None
    if parameter in names and names.index(parameter) < len(positional):
        return positional[names.index(parameter)].value
    return None


def passed_values(module: cst.Module, function: cst.FunctionDef, owner: cst.ClassDef | None,
                  parameter: str) -> list[cst.BaseExpression | None] | None:
    """What the file's calls pass for one parameter of ``function``: of the calls that build
    ``owner`` when ``function`` is its ``__init__``, else of the calls of the function by its name.
    Each call gives the expression it passes, or the parameter's default where it leaves the
    parameter out; None where that cannot be read (``*args``, ``**kwargs``, no default). None
    instead of a list when the file makes no such call (or ``function`` is another method)."""
    if owner is not None and function.name.value != "__init__":
        return None
    callee = owner.name.value if owner is not None else function.name.value
    params = function.params
    default = next((p.default for p in (*params.posonly_params, *params.params, *params.kwonly_params)
                    if p.name.value == parameter), None)
    values: list[cst.BaseExpression | None] = []

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value == callee:
            passed = argument_for(node, function, parameter, bound=owner is not None)
            values.append(passed if passed is not None or any(a.star for a in node.args) else default)
        return True

    walk(module, on_visit)
    return values or None


# --- the precheck twin of reaching_assignments, on CPython's tree ------------------------------------

_AST_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_AST_TRY = (ast.Try, *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))
_AST_HIDDEN_BINDERS = (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Delete)


@dataclass(frozen=True)
class AstReaching:
    """What ``ast_reaching_assignments`` answers: ``assignments`` as (value, element) pairs, like
    ``Assigned``. When ``exact``, they are what ``reaching_assignments`` answers (None where it
    answers None); otherwise (a shape whose LibCST blocks the twin does not model: statements
    sharing a line, one-line bodies, ``match``, a ``:=``, ``import`` or ``del`` of the name) they
    are every ``=`` of the name in its scope, a superset."""

    assignments: list[tuple[ast.AST, int | None]] | None
    exact: bool


def ast_reaching_assignments(index: SyntaxIndex, name: ast.Name) -> AstReaching:
    """The precheck twin of ``reaching_assignments`` for a name at its place in the file: the same
    backward walk over the blocks around it (``if``/``else`` branches, loops, ``try``, ``with``)."""
    try:
        place = _ast_place(index, name)
    except LookupError:  # positions that do not nest (an f-string's on an old CPython): any assignment
        return AstReaching([(node.value, None) for node in index.nodes(ast.Assign, ast.AnnAssign)
                            if node.value is not None and _ast_binds_somewhere(node, name.id)], False)
    if place is None:
        return AstReaching(None, True)  # in a lambda, or in a definition's header
    path, scope = place
    if not _ast_plain(index, scope) or _ast_walrus(index, scope, name.id):
        return AstReaching(_ast_every_assignment(index, scope, name.id), False)
    walker = _AstBlocks(index, name.id)
    reached: list[tuple[ast.AST, int | None] | None] = []
    for block, at in reversed(path):
        found, certain = walker.block(block[:at])
        reached += found
        if walker.inexact:
            return AstReaching(_ast_every_assignment(index, scope, name.id), False)
        if certain:
            return AstReaching(None if None in reached or not reached else reached, True)
    return AstReaching(None, True)


def _ast_contains(outer: ast.AST, node: ast.AST) -> bool:
    start = (ast_first_line(outer), 0) if getattr(outer, "decorator_list", None) else (outer.lineno, outer.col_offset)
    return start <= (node.lineno, node.col_offset) \
        and (node.end_lineno, node.end_col_offset) <= (outer.end_lineno, outer.end_col_offset)


def _ast_blocks(statement: ast.stmt) -> list[list[ast.stmt]]:
    """The blocks of a compound statement, in LibCST's terms (an ``elif`` is an ``else`` block
    holding one ``if``: ``reaching_assignments`` answers the same for both)."""
    blocks = [getattr(statement, field) for field in ("body", "orelse", "finalbody") if getattr(statement, field, None)]
    blocks += [handler.body for handler in getattr(statement, "handlers", ())]
    blocks += [case.body for case in getattr(statement, "cases", ())]
    return blocks


def _ast_place(index: SyntaxIndex, node: ast.AST) -> tuple[list[tuple[list[ast.stmt], int]], ast.AST] | None:
    """The blocks from the innermost function or class around ``node`` (or the module) down to the
    statement that holds it, each with the statement's index in it, and that scope; None where
    ``reaching_assignments`` knows nothing: in a lambda, or in a definition's header (decorators,
    parameters, bases). Raises LookupError where the positions do not nest."""
    if any(_ast_contains(scope, node) for scope in index.nodes(ast.Lambda)):
        return None
    scope: ast.AST = index.tree
    path: list[tuple[list[ast.stmt], int]] = []
    block: list[ast.stmt] | None = index.tree.body
    while block is not None:
        at = next((i for i, statement in enumerate(block) if _ast_contains(statement, node)), None)
        if at is None:
            if scope is not index.tree and (node.lineno, node.col_offset) < (ast_first_line(block[0]), 0):
                return None  # a definition's header
            raise LookupError(node)
        path.append((block, at))
        statement, block = block[at], None
        if isinstance(statement, _AST_DEFS):
            scope, path, block = statement, [], statement.body
        else:
            block = next((inner for inner in _ast_blocks(statement)
                          if any(_ast_contains(s, node) for s in inner)), None)
    return path, scope


def _ast_statements(scope: ast.AST) -> list[ast.stmt]:
    """The statements of a scope, at every depth, nested functions and classes left out."""
    found: list[ast.stmt] = []
    stack = list(scope.body)
    while stack:
        statement = stack.pop()
        found.append(statement)
        if not isinstance(statement, _AST_DEFS):
            stack += [s for block in _ast_blocks(statement) for s in block]
    return found


def _ast_plain(index: SyntaxIndex, scope: ast.AST) -> bool:
    """Is every simple statement of the scope the first thing on its line (no ``;``, no one-line
    body, no line joined with a backslash before it; a compound statement always is) and none a
    ``match``? Then each is what LibCST calls a statement line or a compound statement, and each
    body an indented block."""
    def compute() -> bool:
        lines = index.memo("physical_lines", lambda: _physical_lines(index.source))
        for statement in _ast_statements(scope):
            if type(statement) is ast.Match:
                return False
            if _ast_blocks(statement) or isinstance(statement, _AST_DEFS):
                continue
            line = statement.lineno
            if lines[line - 1][:statement.col_offset].strip() or line > 1 and lines[line - 2].rstrip().endswith("\\"):
                return False
        return True
    return index.memo(("plain", id(scope)), compute)


def _physical_lines(source: str) -> list[str]:
    """The source's lines as CPython numbers them (ended by ``\\n``, ``\\r\\n`` or ``\\r``)."""
    return (source.replace("\r\n", "\n").replace("\r", "\n") if "\r" in source else source).split("\n")


def _ast_walrus(index: SyntaxIndex, scope: ast.AST, name: str) -> bool:
    """Does ``:=`` bind ``name`` anywhere in the scope?"""
    return any(node.target.id == name and _ast_contains(scope, node) for node in index.nodes(ast.NamedExpr)) \
        if scope is not index.tree else any(node.target.id == name for node in index.nodes(ast.NamedExpr))


def _ast_every_assignment(index: SyntaxIndex, scope: ast.AST, name: str) -> list[tuple[ast.AST, int | None]]:
    """Every ``=`` (annotated with a value or not) of ``name`` among the scope's statements."""
    found: list[tuple[ast.AST, int | None]] = []
    for statement in _ast_statements(scope):
        if type(statement) is ast.Assign:
            for target in statement.targets:
                bound = _ast_target_binds(target, name)
                if bound is not None and bound[1] != -1:
                    found.append((statement.value, bound[1]))
        elif type(statement) is ast.AnnAssign and statement.value is not None \
                and isinstance(statement.target, ast.Name) and statement.target.id == name:
            found.append((statement.value, None))
    return found


def _ast_binds_somewhere(statement: ast.Assign | ast.AnnAssign, name: str) -> bool:
    targets = statement.targets if type(statement) is ast.Assign else [statement.target]
    return any(_ast_target_binds(target, name) for target in targets)


def _ast_target_binds(target: ast.AST, name: str, element: int | None = None) -> tuple[bool, int | None] | None:
    """The twin of ``target_binds``."""
    if isinstance(target, ast.Name):
        return (True, element) if target.id == name else None
    if isinstance(target, (ast.Tuple, ast.List)):
        for position, item in enumerate(target.elts):
            if isinstance(item, ast.Starred) or element is not None:
                if _ast_target_binds(item.value if isinstance(item, ast.Starred) else item, name) is not None:
                    return True, -1
                continue
            found = _ast_target_binds(item, name, position)
            if found is not None:
                return found
    return None


class _AstBlocks:
    """The twin of ``_reaching_in_block`` and ``_reaching_in_statement`` for one name, on the
    statements of a plain scope (``_ast_plain``), where each simple statement is a statement line
    of one small statement. ``inexact`` turns true at a statement whose answer it does not model
    (an ``import``, ``global`` or ``del`` that may name the name)."""

    def __init__(self, index: SyntaxIndex, name: str):
        self.index = index
        self.name = name
        self.inexact = False

    def block(self, statements: list[ast.stmt]) -> tuple[list, bool]:
        reached: list = []
        for statement in reversed(statements):
            found, certain = self.statement(statement)
            reached += found
            if certain or self.inexact:
                return reached, certain
        return reached, False

    def statement(self, statement: ast.stmt) -> tuple[list, bool]:
        name, kind = self.name, type(statement)
        if kind is ast.Assign:
            for target in reversed(statement.targets):
                bound = _ast_target_binds(target, name)
                if bound is not None:
                    return ([None] if bound[1] == -1 else [(statement.value, bound[1])]), True
            return [], False
        if kind is ast.AnnAssign or kind is ast.AugAssign:
            if isinstance(statement.target, ast.Name) and statement.target.id == name:
                known = kind is ast.AnnAssign and statement.value is not None
                return [(statement.value, None) if known else None], True
            return [], False
        if isinstance(statement, _AST_HIDDEN_BINDERS):
            lines = self.index.memo("physical_lines", lambda: _physical_lines(self.index.source))
            self.inexact = any(name in line for line in lines[statement.lineno - 1:statement.end_lineno])
            return [], False
        if isinstance(statement, _AST_DEFS):
            return ([None], True) if statement.name == name else ([], False)
        if kind is ast.With or kind is ast.AsyncWith:
            if any(item.optional_vars is not None and _ast_target_binds(item.optional_vars, name) is not None
                   for item in statement.items):
                return [None], True
            return self.block(statement.body)
        branches: list[list[ast.stmt]] = []
        always = False
        if kind is ast.If:
            node = statement
            while True:
                branches.append(node.body)
                if len(node.orelse) == 1 and type(node.orelse[0]) is ast.If:
                    node = node.orelse[0]  # elif, or an else holding one if: the same answer
                    continue
                if node.orelse:
                    branches.append(node.orelse)
                    always = True
                break
        elif kind in (ast.For, ast.AsyncFor, ast.While):
            if kind is not ast.While and _ast_target_binds(statement.target, name) is not None:
                return [None], False
            branches = [statement.body] + ([statement.orelse] if statement.orelse else [])
        elif isinstance(statement, _AST_TRY):
            branches = [statement.body] + [handler.body for handler in statement.handlers] \
                + [part for part in (statement.orelse, statement.finalbody) if part]
        else:
            return [], False  # an expression statement, a return ...: ``:=`` is excluded by the caller
        reached: list = []
        certain = always
        for branch in branches:
            found, sure = self.block(branch)
            reached += found
            certain = certain and sure
            if self.inexact:
                break
        return reached, certain and bool(reached)
