"""What leaves a block of code as a tensor: the names it assigns that code outside it reads, what
it stores on objects (``self.x = t``, ``d[k] = t``), appends to containers made outside it,
writes in place into tensors made outside it (``p.mul_(d)``), and returns or yields.

A value that leaves as a Python number or a string (``.item()``, ``.tolist()``, ``float(...)``,
an f-string), or as a copy on the host (``.cpu()``, ``.numpy()``), is taken to serve metrics and
logs, not further tensor computation. Rules ask this before changing how a block computes its
tensors (``torch.inference_mode`` makes tensors that autograd and in-place updates later refuse).
"""

from __future__ import annotations


from torchlint.analysis.syntax import dotted_name, names_in, root_names, target_names
from torchlint.analysis.walk import Visitor, visit
from torchlint.lazy import libcst as cst

# Methods whose result is a Python value or a host copy.
HOST_METHODS = frozenset({"item", "tolist", "numpy", "cpu", "size", "numel", "dim", "nelement"})
HOST_BUILTINS = frozenset({"float", "int", "bool", "len", "round", "str", "repr", "abs"})
HOST_MODULES = frozenset({"time", "datetime", "math"})
# Methods that put their argument into the container they are called on.
STORING_METHODS = frozenset({"append", "extend", "insert", "add", "update", "put", "put_nowait", "setdefault"})


def is_host_value(expr: cst.BaseExpression | None, hosts: frozenset[str] = frozenset()) -> bool:
    """A Python number or string, or a tensor copied to the host: ``x.sum().item()``,
    ``float(loss)``, ``preds.argmax(1).cpu()``, ``f"{acc:.2f}"``, ``time.time() - start``,
    arithmetic on such values and on the names in ``hosts`` (known to hold such values)."""
    if expr is None:
        return True
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)):
        return True
    if isinstance(expr, cst.Name):
        return expr.value in ("None", "True", "False") or expr.value in hosts
    if isinstance(expr, cst.Attribute) and expr.attr.value in ("shape", "dtype", "device"):
        return True
    if isinstance(expr, cst.Subscript):
        return isinstance(expr.value, cst.Attribute) and expr.value.attr.value == "shape" \
            or isinstance(expr.value, cst.Call) and is_host_value(expr.value, hosts)
    if isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in HOST_METHODS:
            return True
        return isinstance(expr.func, cst.Name) and expr.func.value in HOST_BUILTINS \
            or (dotted_name(expr.func) or "").split(".")[0] in HOST_MODULES
    if isinstance(expr, cst.BinaryOperation):
        return is_host_value(expr.left, hosts) and is_host_value(expr.right, hosts)
    if isinstance(expr, cst.UnaryOperation):
        return is_host_value(expr.expression, hosts)
    if isinstance(expr, (cst.Tuple, cst.List)):
        return all(is_host_value(element.value, hosts) for element in expr.elements)
    return False


class _Block(Visitor):
    """The facts of a block that decide what leaves it (functions defined inside left out)."""

    def __init__(self) -> None:
        self.assigned: dict[str, list[cst.BaseExpression | None]] = {}  # plain name -> values (None: unknown)
        self.leaks: list[tuple[str, cst.BaseExpression | None]] = []  # why a value may leave, and the value
        self.calls: list[cst.Call] = []

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        if isinstance(target, (cst.Attribute, cst.Subscript)):
            self.leaks.append((f"it stores a value on `{cst.Module([]).code_for_node(target)}`", value))
            return
        for name in target_names(target):
            self.assigned.setdefault(name, []).append(value if isinstance(target, cst.Name) else None)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target, node.value)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target, node.value)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target, None)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind(node.asname.name, None)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        for name in target_names(node.target):
            self.assigned.setdefault(name, []).append(None)

    def visit_Return(self, node: cst.Return) -> None:
        self.leaks.append(("it returns a value computed there", node.value))

    def visit_Yield(self, node: cst.Yield) -> None:
        value = node.value if not isinstance(node.value, cst.From) else node.value.item
        self.leaks.append(("it yields a value computed there", value))

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def leaks(block: cst.CSTNode, after: list[cst.CSTNode]) -> list[str]:
    """Why tensors computed in ``block`` may be used after it as tensors (empty when they leave
    only as numbers, strings and host copies). ``after``: the statements that may run after it, in
    order (the rest of its function, and the bodies of the loops around it, which run again)."""
    facts = _Block()
    visit(block, facts)
    hosts = _host_names(facts.assigned)
    found = [why for why, value in facts.leaks if not is_host_value(value, hosts)]
    for call in facts.calls:
        func = call.func
        if not isinstance(func, cst.Attribute):
            continue
        owner = root_names(func.value)
        made_outside = not owner & set(facts.assigned)
        method = func.attr.value
        stored = [a.value for a in call.args if not is_host_value(a.value, hosts)
                  and (names_in(a.value) & set(facts.assigned) or _calls(a.value))]
        if method in STORING_METHODS and made_outside and stored:
            found.append(f"it puts a value into `{dotted_name(func.value) or 'a container'}`, made outside it")
        elif method.endswith("_") and not method.endswith("__") and made_outside and owner:
            found.append(f"it writes in place into `{dotted_name(func.value) or sorted(owner)[0]}`, made outside it")
    tensors = set(facts.assigned) - hosts
    read: set[str] = set()
    _reads_before_rebinding(after, set(tensors), read)
    found += [f"`{name}` is computed there and read after it" for name in sorted(read)]
    return found


def _host_names(assigned: dict[str, list[cst.BaseExpression | None]]) -> frozenset[str]:
    """The names whose every value in the block is a host value (given the others found so far)."""
    hosts: frozenset[str] = frozenset()
    while True:
        grown = frozenset(name for name, values in assigned.items()
                          if all(value is not None and is_host_value(value, hosts) for value in values))
        if grown == hosts:
            return hosts
        hosts = grown


def _calls(expr: cst.BaseExpression) -> bool:
    class Calls(Visitor):
        found = False

        def visit_Call(self, node: cst.Call) -> None:
            self.found = True

    finder = Calls()
    visit(expr, finder)
    return finder.found


def _reads_before_rebinding(statements: list[cst.CSTNode], watched: set[str], read: set[str]) -> None:
    """Add to ``read`` the names of ``watched`` that ``statements``, run in order, read before
    binding them again (a binding in a branch or a loop may not run: it stops nothing)."""
    for statement in statements:
        if not watched:
            return
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, (cst.Assign, cst.AnnAssign)):
                    targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                    read |= names_in(small.value or cst.Name("None")) & watched
                    read |= {n for t in targets if not isinstance(t, cst.Name) for n in names_in(t)} & watched
                    watched -= {n for t in targets for n in target_names(t)}
                else:
                    read |= names_in(small) & watched
        elif isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            read |= names_in(statement) & watched  # a closure reads them later
            watched.discard(statement.name.value)
        elif isinstance(statement, cst.For):
            read |= names_in(statement.iter) & watched
            _reads_before_rebinding(list(statement.body.body), watched - target_names(statement.target), read)
            if statement.orelse is not None:
                _reads_before_rebinding(list(statement.orelse.body.body), set(watched), read)
        elif isinstance(statement, cst.BaseCompoundStatement):
            for part in ("test", "items"):
                value = getattr(statement, part, None)
                for node in value if isinstance(value, (list, tuple)) else [value] if value is not None else []:
                    read |= names_in(node) & watched
            for block in _blocks(statement):
                _reads_before_rebinding(list(block.body), set(watched), read)
        else:
            read |= names_in(statement) & watched


def _blocks(statement: cst.CSTNode) -> list[cst.BaseSuite]:
    """The blocks of a compound statement: body, ``elif``/``else``, handlers, ``finally``."""
    found = []
    node = statement
    while node is not None:
        body = getattr(node, "body", None)
        if isinstance(body, (cst.IndentedBlock, cst.SimpleStatementSuite)):
            found.append(body)
        for handler in getattr(node, "handlers", ()):
            found.append(handler.body)
        for case in getattr(node, "cases", ()):
            found.append(case.body)
        final = getattr(node, "finalbody", None)
        if final is not None:
            found.append(final.body)
        node = getattr(node, "orelse", None)
        if isinstance(node, cst.Else):
            found.append(node.body)
            node = None
    return found
