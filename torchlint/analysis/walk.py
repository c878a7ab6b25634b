"""A fast, read-only walk over a LibCST tree.

``CSTNode.visit`` rebuilds every node it passes (it is a transform that visitors ride along), which
makes it the most expensive step of a lint. Rules only read the tree, so torchlint walks it
itself: children in source order, without the whitespace and punctuation nodes that no rule
looks at, with an explicit stack (deep expressions cannot exhaust Python's recursion limit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from torchlint.lazy import libcst as cst

# Syntax-only nodes: whitespace, comments, punctuation. Rules read them through their parents. (By
# name, so that importing this module does not import LibCST: see torchlint/lazy.py.)
SKIPPED_TYPES = frozenset({
    "SimpleWhitespace", "ParenthesizedWhitespace", "TrailingWhitespace", "EmptyLine", "Newline",
    "Comment", "Comma", "LeftParen", "RightParen", "LeftSquareBracket", "RightSquareBracket",
    "LeftCurlyBrace", "RightCurlyBrace", "Semicolon", "Colon", "AssignEqual", "Dot",
    "ImportStar",
})
SKIPPED_FIELDS = frozenset({
    "lpar", "rpar", "lbracket", "rbracket", "lbrace", "rbrace", "comma", "semicolon", "colon", "equal", "dot",
    "leading_lines", "lines_after_decorators", "header", "footer", "newline", "trailing_whitespace",
})
# Where the dataclass field order is not the order the code reads in.
FIELD_ORDER = {
    "FunctionDef": ("decorators", "name", "params", "returns", "body"),
    "ClassDef": ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
    "IfExp": ("body", "test", "orelse"),
    "Parameters": ("posonly_params", "posonly_ind", "params", "star_arg", "kwonly_params", "star_kwarg"),
    "Arg": ("keyword", "value"),
    "ExceptHandler": ("type", "name", "body"),
    "ExceptStarHandler": ("type", "name", "body"),
    "MatchCase": ("pattern", "guard", "body"),
    "TypeAlias": ("name", "type_parameters", "value"),
}

_fields: dict[type, tuple[str, ...]] = {}


def _child_fields(node_type: type) -> tuple[str, ...]:
    names = FIELD_ORDER.get(node_type.__name__) if node_type.__module__.startswith("libcst.") else None
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(node_type)
                      if f.name not in SKIPPED_FIELDS and not f.name.startswith("whitespace"))
    else:
        names = tuple(n for n in names if any(f.name == n for f in dataclasses.fields(node_type)))
    _fields[node_type] = names
    return names


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The node's children that rules can see, in source order (the list is shared: do not change it)."""
    entry = _children.get(id(node))
    if entry is not None and entry[0] is node:
        return entry[1]
    out = []
    for name in _fields.get(type(node)) or _child_fields(type(node)):
        value = getattr(node, name)
        kind = type(value)
        if kind is tuple or kind is list:
            for item in value:
                seen = _visible.get(type(item))
                if seen is None:
                    seen = _is_visible(type(item))
                if seen:
                    out.append(item)
        else:
            seen = _visible.get(kind)
            if seen is None:
                seen = _is_visible(kind)
            if seen:
                out.append(value)
    if len(_children) >= MAX_REMEMBERED:
        _children.clear()
    _children[id(node)] = (node, out)  # the node is kept with its entry, so its id is not reused meanwhile
    return out


# A file's tree is walked a dozen times (the rules' walk, and each analysis that reads a function or
# the module); the children of each node are found once. The engine forgets them after each file.
MAX_REMEMBERED = 1 << 21
_children: dict[int, tuple[cst.CSTNode, list[cst.CSTNode]]] = {}
_visible: dict[type, bool] = {}


def _is_visible(kind: type) -> bool:
    """A LibCST node that rules see (isinstance on LibCST's abstract base is slow: once per type)."""
    _visible[kind] = visible = issubclass(kind, cst.CSTNode) and not (
        kind.__name__ in SKIPPED_TYPES and kind.__module__.startswith("libcst."))
    return visible


def forget_children() -> None:
    """Drop what ``children`` and ``walk`` remember (after a file: its nodes may then be freed)."""
    _children.clear()
    _where.clear()


# Where each walked node sits in the flat, source-ordered list of its tree: id -> (nodes, ends, index),
# with ``ends[i]`` the index just past the subtree of ``nodes[i]``. A file's tree is walked fifteen
# times and more; flattening it once makes each walk a loop over a list.
_where: dict[int, tuple[list[cst.CSTNode], list[int], int]] = {}


def _flatten(root: cst.CSTNode) -> tuple[list[cst.CSTNode], list[int], int]:
    """The subtree of ``root`` in source order (as ``children`` gives it), each node with the end of
    its own subtree; every node is remembered with its place (the list keeps the nodes alive, so
    their ids are not reused while remembered)."""
    nodes: list[cst.CSTNode] = []
    ends: list[int] = []
    stack: list = [root]
    pop, push, append, mark = stack.pop, stack.append, nodes.append, ends.append
    while stack:
        item = pop()
        if type(item) is int:
            ends[item] = len(nodes)  # the subtree that starts at `item` ends here
            continue
        push(len(nodes))
        append(item)
        mark(0)
        for child in reversed(children(item)):
            push(child)
    if len(_where) >= MAX_REMEMBERED:
        _where.clear()
    _where.update(zip(map(id, nodes), ((nodes, ends, index) for index in range(len(nodes)))))
    return nodes, ends, 0


def flat(root: cst.CSTNode) -> tuple[list[cst.CSTNode], list[int], int]:
    """The flat list that holds ``root`` (its tree's, when the tree was walked from its root), the
    subtree ends, and the index of ``root`` in it."""
    entry = _where.get(id(root))
    if entry is not None and entry[0][entry[2]] is root:
        return entry
    return _flatten(root)


def walk(root: cst.CSTNode, on_visit: Callable[[cst.CSTNode], bool | None],
         on_leave: Callable[[cst.CSTNode], None] | None = None) -> None:
    """Depth-first, source order; ``on_visit`` returning False skips the node's children."""
    nodes, ends, index = flat(root)
    stop = ends[index]
    if on_leave is None:
        while index < stop:
            index = index + 1 if on_visit(nodes[index]) is not False else ends[index]
        return
    pending: list[tuple[int, cst.CSTNode]] = []  # nodes to leave, each with the end of its subtree
    while index < stop:
        while pending and pending[-1][0] <= index:
            on_leave(pending.pop()[1])
        node = nodes[index]
        descend = on_visit(node)
        end = ends[index]
        pending.append((end, node))
        index = index + 1 if descend is not False else end
    while pending:
        on_leave(pending.pop()[1])


class Visitor:
    """A read-only visitor for ``visit``: ``visit_<Node>`` methods (returning False skips the node's
    children) and ``leave_<Node>`` methods, as LibCST's ``CSTVisitor`` has, or ``on_visit`` and
    ``on_leave`` for every node. Defining one does not import LibCST (a ``cst.CSTVisitor`` at a
    module's top level would, at start-up)."""

    def on_visit(self, node: cst.CSTNode) -> bool:
        method = getattr(self, f"visit_{type(node).__name__}", None)
        return method(node) is not False if method is not None else True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        method = getattr(self, f"leave_{type(original_node).__name__}", None)
        if method is not None:
            method(original_node)


def visit(root: cst.CSTNode, visitor: Visitor | cst.CSTVisitor) -> None:
    """``root.visit(visitor)`` for a read-only visitor, on the fast walk. A visitor that keeps the
    default ``on_visit``/``on_leave`` (it defines ``visit_<Node>``/``leave_<Node>`` methods) is
    called only for the node types it has methods for: LibCST's own dispatch looks the method up
    by name at every node."""
    kind = type(visitor)
    if kind.on_visit not in (Visitor.on_visit, cst.CSTVisitor.on_visit) or \
            kind.on_leave not in (Visitor.on_leave, cst.CSTVisitor.on_leave):
        walk(root, visitor.on_visit, visitor.on_leave)
        return
    methods: dict[type, tuple] = {}  # node type -> (its visit_ method or None, its leave_ method or None)
    nodes, ends, index = flat(root)
    stop = ends[index]
    pending: list[tuple[int, Callable, cst.CSTNode]] = []  # leave_ calls due where a subtree ends
    while index < stop:
        while pending and pending[-1][0] <= index:
            _, leave, node = pending.pop()
            leave(node)
        node = nodes[index]
        found = methods.get(type(node))
        if found is None:
            name = type(node).__name__
            found = methods[type(node)] = (getattr(visitor, f"visit_{name}", None),
                                           getattr(visitor, f"leave_{name}", None))
        on_visit, on_leave = found
        descend = on_visit(node) if on_visit is not None else True
        if on_leave is not None:
            pending.append((ends[index], on_leave, node))
        index = index + 1 if descend is not False else ends[index]
    while pending:
        _, leave, node = pending.pop()
        leave(node)
