"""The cheap first pass: CPython's syntax tree tells which rules can fire on a file.

The engine builds CPython's tree of every file it parses anyway (to measure its nesting before
LibCST sees it), and LibCST's parse costs about ten times as much. So each rule may state, as
``Rule.precheck(index)``, the shapes it reports in terms of that tree: a file where no selected
rule's shapes occur is never given to LibCST.

A precheck is a necessary condition, never a sufficient one: it may say yes to a file the rule
ends up silent on, and must never say no to one it would fire on. So a callee is matched by the
last part of its name (``torch.nn.Conv2d`` by ``Conv2d``, whatever the import spelling, with
``from ... import X as Y`` aliases followed), and "inside" means inside by lines.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from torchlint.matching import DEVICE_STRING, DTYPES

LOOPS = (ast.For, ast.AsyncFor, ast.While)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# The names of the methods and functions that backpropagate (see matching._BackwardFinder).
BACKWARD_CALLEES = frozenset({"backward", "manual_backward"})


def callee(call: ast.Call) -> str | None:
    """The last part of what a call calls: ``Conv2d`` for ``nn.Conv2d(...)``."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def dotted(expr: ast.expr) -> str | None:
    """``a.b.c`` for a chain of names, else None."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


def has_star_args(call: ast.Call) -> bool:
    return any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)


def keyword(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def is_literal(expr: ast.AST | None, value: object) -> bool:
    return isinstance(expr, ast.Constant) and type(expr.value) is type(value) and expr.value == value


def dataloader_calls(index: SyntaxIndex) -> list[ast.Call]:
    """``DataLoader(...)`` calls without ``*args``/``**kwargs`` (the DataLoader rules' shape)."""
    return [call for call in index.calls("DataLoader") if not has_star_args(call)]


def dataloader_workers(call: ast.Call) -> ast.expr | None:
    """The ``num_workers`` a DataLoader call passes: by keyword, or as its sixth argument."""
    found = keyword(call, "num_workers")
    if found is not None:
        return found.value
    return call.args[5] if len(call.args) > 5 else None


_FIELDS: dict[type, tuple[str, ...]] = {}


def _by_type(tree: ast.AST) -> dict[type, list[ast.AST]]:
    """Every node of the tree by type: ``ast.walk`` without its generators (two and a half times
    faster), leaving out the expression contexts (``Load``/``Store``) that no precheck reads."""
    found: dict[type, list[ast.AST]] = {}
    stack: list = [tree]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        node = pop()
        kind = type(node)
        fields = _FIELDS.get(kind)
        if fields is None:
            if not issubclass(kind, ast.AST):
                continue  # a name in a list of names (`global a, b`), or None (`{**d}`'s key)
            fields = _FIELDS[kind] = tuple(name for name in kind._fields if name != "ctx")
        nodes = found.get(kind)
        if nodes is None:
            found[kind] = [node]
        else:
            nodes.append(node)
        for name in fields:
            value = getattr(node, name, None)
            if value.__class__ is list:
                extend(value)
            elif isinstance(value, ast.AST):
                push(value)
    return found


def may_be_device(expr: ast.AST, index: SyntaxIndex) -> bool:
    """Could RuleContext.is_device take this for a device? (A name always could.)"""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, str) and bool(DEVICE_STRING.match(expr.value))
    if isinstance(expr, ast.IfExp):
        return may_be_device(expr.body, index) and may_be_device(expr.orelse, index)
    if isinstance(expr, ast.Attribute):
        return expr.attr == "device"
    return isinstance(expr, (ast.Name, ast.JoinedStr)) or index.is_call(expr, "device")


def may_be_cpu(expr: ast.AST, index: SyntaxIndex) -> bool:
    """Could matching.device_kind read this as the CPU (``"cpu"``, ``torch.device("cpu")``)?"""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, str) and expr.value.startswith("cpu")
    return isinstance(expr, ast.JoinedStr) or index.is_call(expr, "device")


def device_argument(call: ast.Call) -> ast.AST | None:
    """What a ``.to(...)`` call gives as its device: ``device=``, or its first argument."""
    found = keyword(call, "device")
    return found.value if found is not None else call.args[0] if call.args else None


def first_line(node: ast.AST) -> int:
    """The line a statement starts on, its decorators included (LibCST counts them as its children)."""
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])


def _span(node: ast.AST) -> tuple[int, int]:
    """The lines a node covers, its decorators included."""
    return first_line(node), node.end_lineno


class SyntaxIndex:
    """One walk over CPython's tree: its nodes by type, and the file's ``from ... import ... as``
    aliases. The questions rules ask of it are the methods below."""

    def __init__(self, tree: ast.Module, source: str, target_torch: tuple[int, ...] = (0,)):
        self.source = source
        self.target_torch = target_torch  # the oldest torch by default: every version-gated shape counts
        self._by_type = _by_type(tree)
        self._line_count = max(source.count("\n"), source.count("\r")) + 1
        self._loop_lines: bytearray | None = None
        self._training_loop_lines: bytearray | None = None
        self._calls_by_callee: dict[str | None, list[ast.Call]] | None = None
        self._aliases: dict[str, set[str]] = {}  # local name -> last parts of what it may name
        for node in self._by_type.get(ast.ImportFrom, ()):
            for alias in node.names:
                if alias.asname:
                    self._aliases.setdefault(alias.asname, set()).add(alias.name.rsplit(".", 1)[-1])

    def nodes(self, *types: type) -> list:
        if len(types) == 1:
            return self._by_type.get(types[0], [])
        return [node for kind in types for node in self._by_type.get(kind, ())]

    def names(self, names: Iterable[str]) -> frozenset[str]:
        """``names`` and the local aliases of any of them."""
        wanted = set(names)
        return frozenset(wanted | {local for local, named in self._aliases.items() if named & wanted})

    def calls(self, *names: str) -> list[ast.Call]:
        """The calls of anything whose name ends in one of ``names``."""
        if self._calls_by_callee is None:
            self._calls_by_callee = {}
            for call in self.nodes(ast.Call):
                self._calls_by_callee.setdefault(callee(call), []).append(call)
        return [call for name in self.names(names) for call in self._calls_by_callee.get(name, ())]

    def is_call(self, node: ast.AST, *names: str) -> bool:
        return isinstance(node, ast.Call) and callee(node) in self.names(names)

    def classes_deriving(self, *names: str) -> list[ast.ClassDef]:
        """Classes with a base whose name ends in one of ``names``, and the classes of the file
        that derive from those."""
        roots, found = self.names(names), []
        classes = self.nodes(ast.ClassDef)
        changed = True
        while changed:
            changed = False
            for node in classes:
                if node in found:
                    continue
                bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", None) for b in node.bases}
                if bases & roots or bases & {c.name for c in found}:
                    found.append(node)
                    changed = True
        return found

    def lines(self, containers: Iterable[ast.AST]) -> bytearray:
        """A mask of the lines the containers cover: ``mask[node.lineno]`` says whether a node
        starts inside one of them."""
        mask = bytearray(self._line_count + 2)
        for container in containers:
            start, end = _span(container)
            mask[start:end + 1] = b"\1" * (end + 1 - start)
        return mask

    @property
    def loop_lines(self) -> bytearray:
        if self._loop_lines is None:
            self._loop_lines = self.lines(self.nodes(*LOOPS))
        return self._loop_lines

    @property
    def training_loop_lines(self) -> bytearray:
        """Lines of the loops that hold a call of ``backward`` (``loss.backward()``,
        ``accelerator.backward(loss)``, ``torch.autograd.backward(loss)``, ``self.manual_backward(loss)``)."""
        if self._training_loop_lines is None:
            backward = self.calls(*BACKWARD_CALLEES)
            self._training_loop_lines = self.lines(
                loop for loop in self.nodes(*LOOPS)
                if any(_span(loop)[0] <= call.lineno <= _span(loop)[1] for call in backward))
        return self._training_loop_lines

    def may_move(self, call: ast.AST) -> bool:
        """Could RuleContext.device_move read this call as a move to a device (``.cuda(...)``,
        ``.to(<device>[, <dtype>])``)? A move to the CPU included, since a name may be bound to it."""
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
            return False
        if call.func.attr == "cuda":
            return True
        device = device_argument(call)
        if call.func.attr != "to" or has_star_args(call) or device is None or not may_be_device(device, self):
            return False
        dtype = keyword(call, "dtype")
        dtype = dtype.value if dtype is not None else call.args[1] if len(call.args) > 1 and call.args[0] is device \
            else None
        return dtype is None or (dtype.attr if isinstance(dtype, ast.Attribute) else getattr(dtype, "id", None)) \
            in self.names(DTYPES)

    def moves_to_cpu(self, call: ast.AST) -> bool:
        """Could RuleContext.device_move read this call as a move to the CPU (``.cpu()``, ``.to("cpu")``)?"""
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
            return False
        if call.func.attr == "cpu":
            return not call.args and not call.keywords
        device = device_argument(call)
        return call.func.attr == "to" and device is not None and may_be_cpu(device, self)

    def is_script(self) -> bool:
        """The file runs as a program: it has an ``if __name__ == "__main__":`` or a training loop
        outside any function (see RuleContext.is_script)."""
        if "__main__" in self.source:
            return True
        functions = self.lines(self.nodes(*FUNCTIONS))
        return any(not functions[loop.lineno] for loop in self.nodes(*LOOPS) if self.training_loop_lines[loop.lineno])

    def training_script(self) -> bool:
        """A training loop, in a file run as a program."""
        return any(self.training_loop_lines) and self.is_script()
