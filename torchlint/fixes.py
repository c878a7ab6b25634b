"""Writing fixes: edits anchored to nodes, in the file's own layout.

A rule builds a fix with ``FixBuilder`` (``fix = self.fix_builder(title)``; ``torch =
fix.ensure_import("torch")``; ``fix.replace(node, new)``; ``self.report(node, message, fix.build())``),
or for a single edit with ``self.fix(title, self.replace(node, new))``. The engine turns the edits
into text offsets, checks them against its guards, and applies them.

The call rewriters (``set_keyword``, ``remove_arg``, ``insert_arg``...) keep the call's layout:
one line stays one line, one argument a line stays so, comments stay on the lines they belong to.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torchlint.analysis.syntax import contains, dotted_name, last_simple_statement
from torchlint.lazy import libcst as cst

if TYPE_CHECKING:
    from torchlint.context import RuleContext


@dataclass(frozen=True)
class NodeEdit:
    node: cst.CSTNode
    text: str | cst.CSTNode  # replacement text, or a node rendered in the file's own style
    where: str = "replace"  # replace | before | after | line_before | line_after | lines


@dataclass(frozen=True)
class FixSpec:
    title: str
    applicability: str
    edits: tuple[NodeEdit, ...]


# --- single edits --------------------------------------------------------------------------------

def replace(node: cst.CSTNode, new: str | cst.CSTNode) -> NodeEdit:
    return NodeEdit(node, new, "replace")


def insert_before(node: cst.CSTNode, text: str) -> NodeEdit:
    return NodeEdit(node, text, "before")


def insert_after(node: cst.CSTNode, text: str) -> NodeEdit:
    return NodeEdit(node, text, "after")


def insert_lines_after(statement: cst.CSTNode, text: str) -> NodeEdit:
    """Whole lines after the statement's last line (text should end with a newline)."""
    return NodeEdit(statement, text, "line_after")


def insert_lines_before(statement: cst.CSTNode, text: str) -> NodeEdit:
    return NodeEdit(statement, text, "line_before")


# --- calls -----------------------------------------------------------------------------------------

def keyword_argument(name: str, value: cst.BaseExpression) -> cst.Arg:
    """A new ``name=value`` argument, written without spaces around ``=``."""
    return cst.Arg(value=value, keyword=cst.Name(name),
                   equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                         whitespace_after=cst.SimpleWhitespace("")))


def as_keyword(arg: cst.Arg, name: str) -> cst.Arg:
    """A positional argument turned into ``name=value``, comments and comma kept."""
    return arg.with_changes(keyword=cst.Name(name), equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))


def _bare_separator(comma: cst.Comma) -> cst.Comma:
    """A comma like ``comma`` that starts the next line the same way, without the comment (and
    the blank or comment lines) that may follow ``comma`` on its own line: those belong to the
    argument before it."""
    after = comma.whitespace_after
    if isinstance(after, cst.ParenthesizedWhitespace):
        return comma.with_changes(whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace(),
                                                                      empty_lines=()))
    return comma


def set_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """``call`` with keyword ``name=value``: replaced in place if present, else appended in the
    call's own layout (one line, or one argument a line, with or without a trailing comma)."""
    args = list(call.args)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == name:
            args[i] = arg.with_changes(value=value)
            return call.with_changes(args=args)
    return _appended(call, keyword_argument(name, value))


def _appended(call: cst.Call, new: cst.Arg) -> cst.Call:
    """``call`` with ``new`` after its last argument, in the call's own layout."""
    args = list(call.args)
    if args:
        last = args[-1]
        trailing = isinstance(last.comma, cst.Comma)
        # what stands before the closing parenthesis: after a trailing comma, or after the last
        # argument (``drop_last=True\n    )``); the new argument ends with it
        closing = last.comma.whitespace_after if trailing else last.whitespace_after_arg
        if trailing or isinstance(closing, cst.ParenthesizedWhitespace):
            # the old last argument gets a separator like the ones between the other arguments
            # (not their comments)
            separator = _separator(call, args)
            if isinstance(closing, cst.ParenthesizedWhitespace) and closing.first_line.comment is not None \
                    and isinstance(separator.whitespace_after, cst.ParenthesizedWhitespace):
                # the old last argument keeps the comment at the end of its line
                separator = separator.with_changes(whitespace_before=last.comma.whitespace_before if trailing
                                                   else cst.SimpleWhitespace(""),
                                                   whitespace_after=closing.with_changes(
                                                       last_line=separator.whitespace_after.last_line))
                closing = closing.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
            if trailing:
                new = new.with_changes(comma=last.comma.with_changes(whitespace_after=closing))
                args[-1] = last.with_changes(comma=separator)
            else:
                new = new.with_changes(whitespace_after_arg=closing)
                args[-1] = last.with_changes(comma=separator, whitespace_after_arg=cst.SimpleWhitespace(""))
        else:
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(new)
    return call.with_changes(args=args)


def _separator(call: cst.Call, args: list[cst.Arg]) -> cst.Comma:
    """The comma to put after the last of ``args`` when an argument follows it: the one between
    the last two arguments, or one that starts a line as the first argument does, else ``, ``."""
    if len(args) > 1 and isinstance(args[-2].comma, cst.Comma):
        return _bare_separator(args[-2].comma)
    before = call.whitespace_before_args
    if isinstance(before, cst.ParenthesizedWhitespace):  # without the comment after the parenthesis
        return cst.Comma(whitespace_after=before.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=()))
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def remove_arg(call: cst.Call, target: cst.Arg) -> cst.Call:
    """``call`` without the argument ``target`` (commas tidied; a multi-line trailing comma kept)."""
    args = [a for a in call.args if a is not target]
    if args and call.args[-1] is target:
        multiline = isinstance(target.comma, cst.Comma) and isinstance(
            target.comma.whitespace_after, cst.ParenthesizedWhitespace)
        comma = target.comma if multiline else cst.MaybeSentinel.DEFAULT
        previous = args[-1].comma
        if multiline and isinstance(previous, cst.Comma) and isinstance(previous.whitespace_after,
                                                                        cst.ParenthesizedWhitespace):
            # one argument a line: the previous line keeps its own comment (the removed line's
            # comment goes with it) and closes the call as the removed line did
            closing = target.comma.whitespace_after
            comma = previous.with_changes(whitespace_after=previous.whitespace_after.with_changes(
                empty_lines=closing.empty_lines, indent=closing.indent, last_line=closing.last_line))
        args[-1] = args[-1].with_changes(comma=comma)
    return call.with_changes(args=args)


def replace_arg_value(call: cst.Call, target: cst.Arg, value: cst.BaseExpression) -> cst.Call:
    return call.with_changes(args=[a.with_changes(value=value) if a is target else a for a in call.args])


def insert_arg(call: cst.Call, index: int, new: cst.Arg) -> cst.Call:
    """``call`` with ``new`` inserted before its ``index``-th argument (``len(call.args)``: at the
    end), separated like the call's other arguments (a call written one argument a line keeps
    that layout, and a trailing comma stays last)."""
    if index >= len(call.args):
        return _appended(call, new.with_changes(comma=cst.MaybeSentinel.DEFAULT))
    args = list(call.args)
    before = call.whitespace_before_args
    # one argument a line: the same line break and indentation, without the comment that may
    # follow the opening parenthesis
    separator = cst.Comma(whitespace_after=before.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=())
                          if isinstance(before, cst.ParenthesizedWhitespace) else cst.SimpleWhitespace(" "))
    args.insert(index, new.with_changes(comma=separator))
    return call.with_changes(args=args)


def append_element(sequence: cst.List | cst.Tuple, value: cst.BaseExpression) -> cst.List | cst.Tuple:
    """``[a, b]`` -> ``[a, b, value]`` in the list's own layout (one line, or one element a line
    with a trailing comma), like ``set_keyword`` does for arguments."""
    elements = list(sequence.elements)
    new = cst.Element(value)
    if elements:
        last = elements[-1]
        if isinstance(last.comma, cst.Comma):
            if len(elements) > 1 and isinstance(elements[-2].comma, cst.Comma):
                separator = _bare_separator(elements[-2].comma)
            elif isinstance(sequence, cst.List):  # one element a line: the next starts like the first
                separator = cst.Comma(whitespace_after=sequence.lbracket.whitespace_after)
            else:
                separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            new = new.with_changes(comma=last.comma)
            elements[-1] = last.with_changes(comma=separator)
        else:
            elements[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    elements.append(new)
    return sequence.with_changes(elements=elements)


def parse_expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


# --- statements ------------------------------------------------------------------------------------

_END_MARK = "#<torchlint:end>"


def _mark_end(statement: cst.CSTNode) -> cst.CSTNode:
    """``statement`` with its last line's trailing whitespace replaced by a marker comment (and
    the line's trailing semicolon dropped): the text up to the marker is the statement's span."""
    last = last_simple_statement(statement)
    if last is None:
        return statement
    small = list(last.body)
    small[-1] = small[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
    marked = last.with_changes(body=small, trailing_whitespace=cst.TrailingWhitespace(
        whitespace=cst.SimpleWhitespace(""), comment=cst.Comment(_END_MARK)))
    return marked if last is statement else statement.deep_replace(last, marked)


def _codegen_state(module: cst.Module, indent: str):
    from libcst._nodes.internal import CodegenState

    # "\n": the engine turns a text edit's newlines into the file's own
    state = CodegenState(default_indent=module.default_indent, default_newline="\n")
    state.indent_tokens = [indent] if indent else []
    return state


def block_indentation(ctx: RuleContext, block: cst.IndentedBlock) -> str:
    """The indentation of the statements of ``block``, one of the current node's ancestors."""
    indent = ""
    for node in ctx.ancestors:
        if isinstance(node, cst.IndentedBlock):
            indent += ctx.module.default_indent if node.indent is None else node.indent
        if node is block:
            return indent
    raise ValueError("block_indentation: the block is not an ancestor of the current node")


def statement_edit(ctx: RuleContext, old: cst.CSTNode, new: Sequence[cst.BaseStatement]) -> NodeEdit:
    """An edit that replaces the statement ``old`` (the current node or one of its ancestors)
    with the statements ``new``, written at ``old``'s indentation. LibCST renders them, so
    nested blocks, comments and multi-line strings come out right. ``old``'s leading comment
    lines, its trailing comment and newline are outside its span and stay: ``new`` should end
    with the same last line as ``old`` (wrapping or unwrapping a block does). So are a decorated
    definition's decorators: ``new`` must start with the same definition, the same decorators on
    it."""
    index = next(i for i, node in enumerate(ctx.ancestors) if node is old)
    blocks = [node for node in ctx.ancestors[:index] if isinstance(node, cst.IndentedBlock)]
    indent = block_indentation(ctx, blocks[-1]) if blocks else ""
    first = new[0].with_changes(leading_lines=[line for line in new[0].leading_lines if line.comment])
    if getattr(old, "decorators", None):
        # a decorated definition's span starts at `def`/`class`: its decorators (and the lines
        # above them) are outside it and stay, so they are not written again
        if not (type(first) is type(old) and len(first.decorators) == len(old.decorators)
                and all(a.deep_equals(b) for a, b in zip(first.decorators, old.decorators))):
            raise ValueError("statement_edit: a decorated definition must keep its decorators")
        first = first.with_changes(leading_lines=(), decorators=(), lines_after_decorators=())
    written = [first, *new[1:]]
    written[-1] = _mark_end(written[-1])
    state = _codegen_state(ctx.module, indent)
    for statement in written:
        statement._codegen(state)
    text = "".join(state.tokens)
    text = text[: text.rindex(_END_MARK)]
    return NodeEdit(old, text[len(indent):] if text.startswith(indent) else text, "replace")


def removal_edit(ctx: RuleContext, statement: cst.BaseStatement,
                 replacements: Sequence[tuple[cst.CSTNode, cst.CSTNode]] = ()) -> NodeEdit | None:
    """An edit that deletes a statement (an ancestor of the current node) with its lines; its
    own leading comment lines move to the statement after it. A statement alone in its block
    becomes ``pass``. None when that cannot be done cleanly (several statements on one line,
    or comment lines above the last statement of a block). ``replacements`` (old node, new node)
    are made in the same edit, in other statements of the block (two edits would overlap)."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) != 1:
        return None
    index = next(i for i, node in enumerate(ctx.ancestors) if node is statement)
    block = ctx.ancestors[index - 1]
    body = list(block.body)
    if len(body) == 1:
        if isinstance(statement, cst.SimpleStatementLine):
            return NodeEdit(statement.body[0], "pass", "replace")
        return statement_edit(ctx, statement, [cst.SimpleStatementLine([cst.Pass()])])
    position = body.index(statement)
    comments = [line for line in statement.leading_lines if line.comment]
    if position == len(body) - 1:
        if comments:
            return None
        if not replacements:  # its lines go, with its trailing comment and its newline
            return NodeEdit(statement, "", "lines")
        new_body = body[:-1]
    else:
        following = body[position + 1]
        # blank lines that separated the removed statement separate the next one, unless it
        # has its own; comment lines go with them
        moved = list(statement.leading_lines) if comments or not following.leading_lines else []
        new_body = body[:position] + [following.with_changes(
            leading_lines=[*moved, *following.leading_lines])] + body[position + 2:]
    new_block = block.with_changes(body=new_body)
    for old, new in replacements:
        new_block = new_block.deep_replace(old, new)
    # The edit covers the innermost enclosing statement whose span does not end inside the
    # removed statement (the text after a span stays, and must not be the removed newline).
    for i in range(index - 2, 0, -1):
        owner = ctx.ancestors[i]
        if isinstance(owner, cst.BaseCompoundStatement) and \
                not contains(statement, last_simple_statement(owner)):
            changed = owner.deep_replace(block, new_block).with_changes(leading_lines=[])
            return statement_edit(ctx, owner, [changed])
    return NodeEdit(ctx.module, ctx.module.deep_replace(block, new_block), "replace")


def statement_code(ctx: RuleContext, statement: cst.SimpleStatementLine, block: cst.IndentedBlock | cst.Module,
                   extra_indent: str = "") -> str:
    """The code of a statement line of ``block`` (the module or an ancestor of the current
    node) from its first token to its last, re-indented one ``extra_indent`` deeper: what
    replaces the statement's span when a fix moves it into a new block (continuation lines of
    a call that spans lines move with it). Leading comment lines and the trailing comment are
    not part of the span and stay where they are."""
    indent = "" if isinstance(block, cst.Module) else block_indentation(ctx, block)
    state = _codegen_state(ctx.module, indent + extra_indent)
    statement.with_changes(leading_lines=(), trailing_whitespace=cst.TrailingWhitespace())._codegen(state)
    text = "".join(state.tokens)
    return text[len(indent + extra_indent):].rstrip("\n")


# --- imports and names -------------------------------------------------------------------------------

def _mentions(source: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", source) is not None


def _top_imports(ctx: RuleContext):
    """The import statements of the module's body before the current top-level statement: each
    statement line with each of its ``import``/``from ... import`` parts."""
    body = list(ctx.module.body)
    top = ctx.ancestors[1] if len(ctx.ancestors) > 1 else None
    for statement in body[: body.index(top)] if top in body else body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    yield statement, small


def _imported_as(small: cst.Import | cst.ImportFrom, module: str, name: str | None) -> str | None:
    """How an import statement lets the code spell ``module`` (or ``module.name``), if it does."""
    if isinstance(small, cst.Import):
        for alias in small.names:
            full = dotted_name(alias.name)
            if alias.asname is not None:
                local = alias.asname.name.value if full == module else None
            else:  # `import a.b.c` makes `a.b` usable as written
                local = module if full == module or full.startswith(module + ".") else None
            if local:
                return f"{local}.{name}" if name else local
    elif name and not small.relative and small.module is not None \
            and dotted_name(small.module) == module and not isinstance(small.names, cst.ImportStar):
        for alias in small.names:
            if dotted_name(alias.name) == name:
                return alias.asname.name.value if alias.asname else name
    return None


def import_reference(ctx: RuleContext, module: str, name: str | None = None) -> tuple[str, NodeEdit | None] | None:
    """How to refer to ``module`` (or ``module.name``) at the current node: the local spelling
    and, when the file lacks the import, the edit that adds ``import module`` or ``from module
    import name`` after the last top-level import before the current top-level statement.
    None when that cannot be done safely (the name is already used for something else, or
    there is no top-level import to put it after)."""
    body = list(ctx.module.body)
    anchor = None
    for statement, small in _top_imports(ctx):
        anchor = statement
        local = _imported_as(small, module, name)
        if local:
            return local, None
    local = name or module.split(".")[0]
    if anchor is None or _mentions(ctx.source, local):
        return None  # nowhere to put it, or the name already means something in this file
    if name is None and module in sys.stdlib_module_names:  # `import os` goes first, as isort would
        first = next(s for s in body if isinstance(s, cst.SimpleStatementLine) and any(
            isinstance(small, cst.Import) or (isinstance(small, cst.ImportFrom) and not (
                small.module and dotted_name(small.module) == "__future__")) for small in s.body))
        small = next(small for small in first.body if isinstance(small, (cst.Import, cst.ImportFrom)))
        head = dotted_name(small.names[0].name if isinstance(small, cst.Import) else small.module) or ""
        separator = "" if head.split(".")[0] in sys.stdlib_module_names else "\n"  # a new section
        return module, NodeEdit(first, f"import {module}\n{separator}", "line_before")
    text = f"from {module} import {name}\n" if name else f"import {module}\n"
    return (name or module), NodeEdit(anchor, text, "line_after")


def imported_name(ctx: RuleContext, module: str, name: str | None = None) -> str | None:
    """The local spelling of ``module`` (or ``module.name``) when the file already imports it at
    the top before the current statement; None otherwise (a fix that needs no new import)."""
    reference = import_reference(ctx, module, name)
    return reference[0] if reference is not None and reference[1] is None else None


def unused_name(ctx: RuleContext, *candidates: str) -> str | None:
    """The first of ``candidates`` that nothing in the file binds or mentions."""
    for name in candidates:
        if not ctx.bindings.is_bound(name) and not _mentions(ctx.source, name):
            return name
    return None


def module_setting(ctx: RuleContext, template: str) -> NodeEdit | None:
    """The edit that adds a process-wide setting after the module's imports (before the first
    function, class or loop): ``template`` is the statement with ``{torch}`` where the
    file's name for torch goes (``{torch}.backends.cudnn.benchmark = True``). None when the
    file does not import torch at the top or has no import line to put it after."""
    anchor = None
    body = list(ctx.module.body)
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            if all(isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body):
                anchor = statement
        elif isinstance(statement, (cst.FunctionDef, cst.ClassDef, cst.For, cst.While, cst.If, cst.With)):
            break
    if anchor is None:
        return None
    found = next(((statement, local) for statement, small in _top_imports(ctx)
                  if (local := _imported_as(small, "torch", None))), None)
    if found is None:
        return None
    binds, torch = found
    # the setting needs the name: after `import torch`, should that come after the first imports
    # and a block (a notebook that reads its data before importing torch)
    if body.index(binds) > body.index(anchor):
        anchor = binds
    return NodeEdit(anchor, template.format(torch=torch) + "\n", "line_after")


# --- a fix of several edits -----------------------------------------------------------------------------

@dataclass
class FixBuilder:
    """Collects the edits of one fix; a step that cannot be done safely spoils the whole fix
    (``build()`` is then None), so a rule never writes half a fix."""

    ctx: RuleContext
    title: str
    applicability: str
    edits: list[NodeEdit] = field(default_factory=list)
    imports: list[NodeEdit] = field(default_factory=list)  # written after the other edits
    spoiled: bool = False

    def add(self, *edits: NodeEdit | None) -> FixBuilder:
        for edit in edits:
            if edit is None:
                self.spoiled = True
            else:
                self.edits.append(edit)
        return self

    def replace(self, node: cst.CSTNode, new: str | cst.CSTNode) -> FixBuilder:
        return self.add(replace(node, new))

    def replace_statement(self, old: cst.CSTNode, new: Sequence[cst.BaseStatement]) -> FixBuilder:
        """Replace a statement (the current node or an ancestor) by statements (see statement_edit)."""
        return self.add(statement_edit(self.ctx, old, new))

    def remove_statement(self, statement: cst.BaseStatement,
                         replacements: Sequence[tuple[cst.CSTNode, cst.CSTNode]] = ()) -> FixBuilder:
        """Delete a statement (an ancestor of the current node) with its line, and make
        ``replacements`` in the rest of its block (see removal_edit)."""
        return self.add(removal_edit(self.ctx, statement, replacements))

    def ensure_import(self, module: str, name: str | None = None) -> str | None:
        """The local name of ``module`` (or ``module.name``), adding the import when the file lacks
        it; None (and a spoiled fix) when it cannot be imported safely."""
        reference = import_reference(self.ctx, module, name)
        if reference is None:
            self.spoiled = True
            return None
        local, edit = reference
        if edit is not None and edit not in self.imports:
            self.imports.append(edit)
        return local

    def build(self) -> FixSpec | None:
        if self.spoiled or not self.edits:
            return None
        return FixSpec(self.title, self.applicability, (*self.edits, *self.imports))
