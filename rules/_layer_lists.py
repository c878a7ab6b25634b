"""Which layers follow which in the lists a function builds for ``nn.Sequential(*layers)``: what
TL401 bias-before-norm asks of ``layers += [conv, nn.BatchNorm2d(c)]``, ``layers.append(conv)``
then ``layers.append(bn)``, and ``if batch_norm: layers += [bn]`` right after the conv (issue 12,
shape 3). ``LayerLists`` gathers them during the walk, one frame per function;
``ast_listed_calls`` is its precheck twin."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from torchlint.analysis.index import SyntaxIndex
from torchlint.lazy import libcst as cst
from torchlint.rule import RuleContext

SEQUENTIAL = frozenset({"torch.nn.Sequential", "torch.nn.modules.container.Sequential"})


@dataclass(frozen=True)
class ListedPair:
    """A layer call listed right before another call (a norm, the caller checks), ``condition``
    when the second is added under ``if <condition>:``, and whether a fix may change the layer
    call: False when it is bound to a name that the function also uses elsewhere."""

    layer: cst.Call
    follower: cst.Call
    condition: cst.BaseExpression | None
    fixable: bool


@dataclass
class _Frame:
    """One function: its list literals and additions by list name, the names ``nn.Sequential``
    unpacks, the values bound to names, and how often each name occurs."""

    literals: list[tuple[str, list[cst.BaseExpression | None]]] = field(default_factory=list)
    # statements that add to a list: name, block (its first statement's id), index, items, and the
    # condition of an `if` whose body starts with the addition
    adds: list[tuple[str, int, int, list[cst.BaseExpression | None], cst.BaseExpression | None]] = \
        field(default_factory=list)
    unpacked: set[str] = field(default_factory=set)
    bound: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    occurrences: dict[str, int] = field(default_factory=dict)

    def call_of(self, item: cst.BaseExpression | None) -> cst.Call | None:
        """A list item's call: the item itself, or the one call a name is bound to in the function."""
        if isinstance(item, cst.Call):
            return item
        if isinstance(item, cst.Name) and len(self.bound.get(item.value, ())) == 1 \
                and isinstance(self.bound[item.value][0], cst.Call):
            return self.bound[item.value][0]
        return None


def _items(literal: cst.List | cst.Tuple) -> list[cst.BaseExpression | None]:
    """A literal's items; None for ``*unpacked`` ones, which no layer pairs across."""
    return [e.value if isinstance(e, cst.Element) else None for e in literal.elements]


def _added(statement: cst.BaseSmallStatement) -> tuple[str, list[cst.BaseExpression | None]] | None:
    """``layers += [...]``, ``layers.extend([...])`` or ``layers.append(x)``: the list's name and
    the items added."""
    if isinstance(statement, cst.AugAssign) and isinstance(statement.operator, cst.AddAssign) \
            and isinstance(statement.target, cst.Name) and isinstance(statement.value, (cst.List, cst.Tuple)):
        return statement.target.value, _items(statement.value)
    call = statement.value if isinstance(statement, cst.Expr) else None
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
            and isinstance(call.func.value, cst.Name) and len(call.args) == 1 and not call.args[0].star
            and call.args[0].keyword is None):
        return None
    if call.func.attr.value == "extend" and isinstance(call.args[0].value, (cst.List, cst.Tuple)):
        return call.func.value.value, _items(call.args[0].value)
    if call.func.attr.value == "append":
        return call.func.value.value, [call.args[0].value]
    return None


class LayerLists:
    """Fed by a rule's visitors (``enter``/``leave`` around each function, and the nodes in
    between), it answers at each function's end which listed calls follow which."""

    def __init__(self, ctx: RuleContext):
        self.ctx = ctx
        self.frames: list[_Frame] = []

    def enter(self) -> None:
        self.frames.append(_Frame())

    def name(self, node: cst.Name) -> None:
        if self.frames:
            occurrences = self.frames[-1].occurrences
            occurrences[node.value] = occurrences.get(node.value, 0) + 1

    def assign(self, node: cst.Assign) -> None:
        if not self.frames or len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
            return
        target = node.targets[0].target.value
        frame = self.frames[-1]
        if isinstance(node.value, cst.List):
            frame.literals.append((target, _items(node.value)))
        frame.bound.setdefault(target, []).append(node.value)

    def aug_assign(self, node: cst.AugAssign) -> None:
        if self.frames and isinstance(node.operator, cst.AddAssign) and isinstance(node.target, cst.Name) \
                and isinstance(node.value, (cst.List, cst.Tuple)):
            self._add(node, node.target.value, _items(node.value))

    def call(self, node: cst.Call, qualified: str | None) -> None:
        if not self.frames:
            return
        if qualified in SEQUENTIAL:
            self.frames[-1].unpacked.update(a.value.value for a in node.args
                                            if a.star == "*" and isinstance(a.value, cst.Name))
            return
        method = node.func
        if not (isinstance(method, cst.Attribute) and isinstance(method.value, cst.Name) and len(node.args) == 1
                and not node.args[0].star and node.args[0].keyword is None):
            return
        if method.attr.value == "extend" and isinstance(node.args[0].value, (cst.List, cst.Tuple)):
            self._add(node, method.value.value, _items(node.args[0].value))
        elif method.attr.value == "append":
            self._add(node, method.value.value, [node.args[0].value])

    def if_statement(self, node: cst.If) -> None:
        """``if batch_norm: layers += [nn.BatchNorm2d(c)]`` right after ``layers += [conv]``: the
        addition counts as the next one, under the condition."""
        if not self.frames or node.orelse is not None or not isinstance(node.body, cst.IndentedBlock):
            return
        first = node.body.body[0] if node.body.body else None
        if not (isinstance(first, cst.SimpleStatementLine) and len(first.body) == 1):
            return
        added = _added(first.body[0])
        position = self.ctx.statement_position()
        if added is not None and position is not None:
            self.frames[-1].adds.append((added[0], id(position[1][0]), position[2], added[1], node.test))

    def _add(self, node: cst.CSTNode, name: str, items: list[cst.BaseExpression | None]) -> None:
        """An addition to list ``name``: its items pair among themselves, and, when it is a statement
        of its own, its first and last items pair with the additions just before and after it."""
        frame = self.frames[-1]
        frame.literals.append((name, items))
        position = self.ctx.statement_position()
        if position is None or not isinstance(position[0], cst.SimpleStatementLine) or len(position[0].body) != 1:
            return
        small = position[0].body[0]
        if small is node or isinstance(small, cst.Expr) and small.value is node:
            frame.adds.append((name, id(position[1][0]), position[2], items, None))

    def leave(self, follows: Callable[[cst.Call], bool]) -> list[ListedPair]:
        """The function's listed pairs whose second call ``follows`` accepts (a norm)."""
        frame = self.frames.pop()
        pairs = [(layer, nxt, None) for name, items in frame.literals if name in frame.unpacked
                 for layer, nxt in zip(items, items[1:])]
        by_list: dict[str, list] = {}
        for name, block, index, items, condition in frame.adds:
            if name in frame.unpacked and items:
                by_list.setdefault(name, []).append((block, index, items, condition))
        for adds in by_list.values():
            adds.sort(key=lambda entry: entry[:2])
            pairs += [(a[2][-1], b[2][0], b[3]) for a, b in zip(adds, adds[1:]) if a[0] == b[0] and b[1] == a[1] + 1]
        in_pairs: dict[str, int] = {}
        resolved = []
        for layer, nxt, condition in pairs:
            layer_call, follower = frame.call_of(layer), frame.call_of(nxt)
            if layer_call is None or follower is None or not follows(follower):
                continue
            name = layer.value if isinstance(layer, cst.Name) else None
            if name is not None:
                in_pairs[name] = in_pairs.get(name, 0) + 1
            resolved.append((layer_call, follower, condition, name))
        # a layer bound to a name may be fixed only when the name is used nowhere but before norms
        return [ListedPair(layer, follower, condition,
                           name is None or frame.occurrences.get(name, 0) == 1 + in_pairs[name])
                for layer, follower, condition, name in resolved]


def ast_listed_calls(index: SyntaxIndex) -> Iterator[list[ast.AST]]:
    """The precheck twin of ``LayerLists``, loosely: per function that unpacks a name into
    ``nn.Sequential(*name)``, the values listed for that name anywhere in it (calls, and the values
    of names bound there), in no particular order."""
    sequentials = {id(call) for call in index.calls_of(SEQUENTIAL)
                   if any(isinstance(a, ast.Starred) and isinstance(a.value, ast.Name) for a in call.args)}
    if not sequentials:
        return
    for function in index.nodes(ast.FunctionDef, ast.AsyncFunctionDef):
        nodes = list(ast.walk(function))  # nested functions too: a precheck may say yes more often
        unpacked = {a.value.id for node in nodes if id(node) in sequentials for a in node.args
                    if isinstance(a, ast.Starred) and isinstance(a.value, ast.Name)}
        if not unpacked:
            continue
        items, bound = [], {}
        for node in nodes:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                bound.setdefault(node.targets[0].id, []).append(node.value)
                if node.targets[0].id in unpacked and isinstance(node.value, ast.List):
                    items += node.value.elts
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) \
                    and node.target.id in unpacked and isinstance(node.value, (ast.List, ast.Tuple)):
                items += node.value.elts
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("append", "extend") and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id in unpacked and len(node.args) == 1:
                items += node.args[0].elts if isinstance(node.args[0], (ast.List, ast.Tuple)) else [node.args[0]]
        yield [value for item in items for value in ([item] if isinstance(item, ast.Call) else
                                                     bound.get(item.id, ()) if isinstance(item, ast.Name) else ())]
