"""What one call of a function does by itself: its local summary, from one walk over its
statements in order (value_facts.py reads the expressions).

What one call does, as documented here: statements under a periodic condition (a remainder test,
``if step % 100 == 0``, a test of a flag passed in, ``if log_now:``, or of whether a value is a
tensor, ``if torch.is_tensor(lr):``) contribute no syncs and no cache clears (they are left out,
not recorded as conditional), except the reads of a value written under a test of whether it is
a tensor, which are kept as syncs of a tensor only (how "guarded"); ``except`` handlers, code after a
``return``/``raise``/``break``/``continue`` in the same block, nested functions and lambdas are
not part of the call; any other condition counts as taken. Never imports or runs the code.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from torchlint.analysis.module_index import SourceLines, definition_at, dotted, index_class, index_module
from torchlint.analysis.summaries import (
    PARAMETER, RESULT, TENSOR, Factory, FunctionSummary, Layer, ModuleSummary, Operand, Returned, Scope, operand,
    public, union,
)
from torchlint.analysis.value_facts import (
    BIAS_POSITION, LAYERS, NO_CHANGE, SEQUENTIALS, SET_GRAD_ENABLED, UNKNOWN_VALUE, ExpressionFacts,
    is_periodic_remainder,
)
from torchlint.analysis.devices import RANDOM_FACTORIES, TENSOR_FACTORIES
from torchlint.analysis.tensor_places import on_host


def summarize_module(tree: ast.Module, source: str, path: str) -> ModuleSummary:
    """A file's index (module_index.py), each function summarized when first asked for."""
    return index_module(tree, source, path, summarize_function)


def definition_summarizer(text: SourceLines, first: int, end: int):
    """The function defined on those lines of the file, parsed alone, and a summarizer of it over
    the file's text (what ``ModuleSummary.release_trees`` restores one function with); None when
    the lines do not hold it."""
    node = definition_at(text, first, end)
    if node is None:
        return None
    return node, lambda module, node, qualname, class_name, bindings_only=False: summarize_function(
        module, node, qualname, class_name, text, bindings_only)


def summarize_function(module: ModuleSummary, node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str,
                       class_name: str | None, text: SourceLines,
                       bindings_only: bool = False) -> FunctionSummary | FunctionBindings:
    """The function's local summary, or with ``bindings_only`` what its names mean (see
    ModuleSummary.bindings)."""
    if bindings_only:
        return BindingsWalker(module, node, qualname, class_name, text).bindings()
    return FunctionWalker(module, node, qualname, class_name, text).summary()


class FunctionWalker(ExpressionFacts):
    """Reads one function's statements in order (see the module's docstring for what counts)."""

    statements: ClassVar[dict[type, Callable[..., None]]]  # each kind's handler (the table below)

    # -- statements

    def block(self, body: list[ast.stmt]) -> None:
        statements = self.statements
        for statement in body:
            kind = type(statement)
            handler = statements.get(kind)
            if handler is not None:
                handler(self, statement)
            if kind in _ENDS_BLOCK:
                return

    def _expression_statement(self, node: ast.Expr) -> None:
        self.value(node.value)
        value = node.value
        if type(value) is ast.Call and self._qualify(dotted(value.func)) in SET_GRAD_ENABLED:
            switch = self._grad_switch(value)
            if switch is not NO_CHANGE:
                self.grad = switch

    def _assign_statement(self, node: ast.Assign) -> None:
        ops = self.value(node.value)
        for target in node.targets:
            self.assign(target, ops, node.value, node, "assign")

    def _annotated_assign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.assign(node.target, self.value(node.value), node.value, node, "assign")

    def _augmented_assign(self, node: ast.AugAssign) -> None:
        ops = self._computed(union(self.value(node.value), self._target_value(node.target)))
        self.assign(node.target, ops, None, node, "augment")

    def _target_value(self, target: ast.AST) -> tuple[Operand, ...]:
        return self.env.get(target.id, UNKNOWN_VALUE) if type(target) is ast.Name else ()

    def _return(self, node: ast.Return) -> None:
        value, parts = node.value, None
        if type(value) is ast.Tuple and not any(type(e) is ast.Starred for e in value.elts):
            parts = tuple(self.value(element) for element in value.elts)  # `return a, b`: each element apart
        self.returns.append((value, union(*parts) if parts is not None else self.value(value) if value is not None
                             else (), parts))

    def _if(self, node: ast.If) -> None:
        self.value(node.test)
        periodic, guarded = self.periodic, self.tensor_guarded
        if self._is_every_kth(node.test):
            self.periodic, self.tensor_guarded = True, False
        elif not periodic and _tests_for_a_tensor(node.test):
            # `if torch.is_tensor(v): v = v.item()`: the read itself is kept, as a sync of a tensor only
            self.periodic, self.tensor_guarded = True, True
        before = dict(self.env)
        self.block(node.body)
        self.periodic, self.tensor_guarded = periodic, guarded
        self.block(node.orelse)
        for name, ops in self.env.items():  # a CPU tensor (or a result) under a condition: what was there may stay
            if ops is not before.get(name, ops) and any(on_host(op) or op.kind == RESULT for op in ops):
                self.env[name] = union(before[name], ops)

    def _is_every_kth(self, test: ast.AST) -> bool:
        """Holds every k-th call: a remainder test, or a flag passed in (``if log_now:``). A test of
        whether a value is a tensor (``if torch.is_tensor(lr): lr = lr.item()``) is defensive code
        for values that are usually Python numbers: ``_if`` keeps its reads as guarded syncs."""
        flag = test.operand if type(test) is ast.UnaryOp and type(test.op) is ast.Not else test
        if type(flag) is ast.Name and flag.id in self.parameter_index and flag.id != self.self_name:
            return True
        return is_periodic_remainder(test)

    def _for(self, node: ast.For) -> None:
        ops = self.value(node.iter)
        target, iterated = node.target, node.iter
        if type(iterated) is ast.Call and dotted(iterated.func) == "enumerate" and type(target) is ast.Tuple \
                and len(target.elts) == 2:
            self.assign(target.elts[0], (), None, node, "assign")  # the count
            target = target.elts[1]
        self.assign(target, ops, None, node, "assign")
        self._loop_body(node.body)
        self.block(node.orelse)

    def _while(self, node: ast.While) -> None:
        self.value(node.test)
        self._loop_body(node.body)
        self.block(node.orelse)

    def _loop_body(self, body: list[ast.stmt]) -> None:
        looped, self.looped = self.looped, True
        self.block(body)
        self.looped = looped

    def _with(self, node: ast.With) -> None:
        grad = self.grad
        for item in node.items:
            self.value(item.context_expr)
            switch = self._grad_switch(item.context_expr)
            if switch is not NO_CHANGE:
                self.grad = switch
            if item.optional_vars is not None:
                self.assign(item.optional_vars, UNKNOWN_VALUE, None, node, "assign")
        self.block(node.body)
        self.grad = grad

    def _try(self, node: ast.Try) -> None:
        self.block(node.body)
        self.block(node.orelse)
        self.block(node.finalbody)

    def _match(self, node: ast.Match) -> None:
        self.value(node.subject)
        for case in node.cases:
            self.block(case.body)

    def _function_def(self, node: ast.FunctionDef) -> None:
        self.names.define(node.name)
        self.module.register(f"{self.qualname}.{node.name}", node, None)

    def _class_def(self, node: ast.ClassDef) -> None:
        self.names.define(node.name)
        index_class(self.module, node, f"{self.qualname}.{node.name}", self.qualname)

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        self.names.bind_import(node)
        self.qualified_cache.clear()

    def _global(self, node: ast.Global | ast.Nonlocal) -> None:
        self.declared_globals.update(node.names)

    def _assert(self, node: ast.Assert) -> None:
        self.value(node.test)

    # -- the summary

    def summary(self) -> FunctionSummary:
        self.block(self.node.body)
        body = self.node.body[1:] if _has_docstring(self.node) else self.node.body
        if self.grad_mode is None and len(body) == 1 and type(body[0]) in (ast.With, ast.AsyncWith) and \
                any(self._grad_switch(item.context_expr) is False for item in body[0].items):
            self.grad_mode = "disabled"
        return FunctionSummary(
            path=self.path, qualname=self.qualname, line=self.node.lineno, kind=self.kind,
            class_name=self.class_name, self_name=self.self_name, parameters=self.parameters,
            positional=self.positional, star=self.star, double_star=self.double_star, defaults=self.defaults,
            grad_mode=self.grad_mode, generator=self.generator, host_syncs=tuple(self.syncs),
            clears_cache=tuple(self.clears), keeps=tuple(self.keeps), forwards_with_grad=tuple(self.forwards),
            backward=tuple(self.backward), autograd=tuple(self.autograd), mode_calls=tuple(self.modes),
            builds=tuple(sorted(self.builds)),
            returns=tuple(self._returned(*returned) for returned in self.returns), calls=tuple(self.calls),
            scope=self.names.scope(self.annotated), self_attributes=self_attributes(self.self_values),
            convolutions=tuple(self.convolutions[key] for key in sorted(self.convolutions)),
            returns_instance=self._returns_instance(), forwards=tuple(self.forwards_once),
            self_layers=self._self_layers())

    def _self_layers(self) -> dict[str, Layer]:
        """The fresh Conv/Linear layers assigned to ``self.<attr>``, each attribute assigned once."""
        found = {}
        for attribute, values in self.self_values.items():
            layer, _ = self._layer(self._bound_once(values[0])) if len(values) == 1 else (None, None)
            if layer is not None:
                found[attribute] = layer
        return found

    def _returns_instance(self) -> str:
        """The ``C`` every return gives ``C(...)`` of, or None (see FunctionSummary.returns_instance)."""
        found = set()
        for value, _, _ in self.returns:
            candidates = [value]
            if type(value) is ast.Name:
                candidates = self.all_bound_values.get(value.id, [])
                if not candidates or len(candidates) != self.names.counts.get(value.id):
                    return ""  # a parameter, or bound where the walk keeps no value (a loop, a tuple)
            for candidate in candidates:
                if candidate is None and value is not None:
                    return ""
                if candidate is None or type(candidate) is ast.Constant and candidate.value is None:
                    continue
                callee = dotted(candidate.func) if type(candidate) is ast.Call else None
                if callee is None or not callee.rpartition(".")[2][:1].isupper():
                    return ""
                found.add(callee)
        return found.pop() if len(found) == 1 else ""

    def _bound_once(self, node: ast.AST | None) -> ast.AST | None:
        """A local name bound once stands for the value it was bound to."""
        if type(node) is ast.Name and self.names.counts.get(node.id) == 1 and node.id in self.bound_values:
            return self.bound_values[node.id]
        return node

    def _returned(self, value: ast.AST | None, ops: tuple[Operand, ...],
                  parts: tuple[tuple[Operand, ...], ...] | None) -> Returned:
        node = self._bound_once(value)
        layer, layer_call = self._layer(node)
        forward = None
        for op in union(ops, *(self.fallbacks.get(o.index, ()) for o in ops if o.kind == RESULT)):
            if op.kind == TENSOR and op.index is not None and op.graph:
                forward = self.model_calls[op.index]
                break
        call = self.call_index.get(id(node)) if type(node) is ast.Call else None
        return Returned(public(ops), layer, self._factory(node), forward, call, layer_call,
                        None if parts is None else tuple(public(part) for part in parts))

    def _layer(self, node: ast.AST | None) -> tuple[Layer | None, int | None]:
        """A fresh Conv/Linear, or an ``nn.Sequential`` whose last element is one (or a call's
        result, index returned, that the resolution may find is one)."""
        if type(node) is not ast.Call:
            return None, None
        name = self._qualify(dotted(node.func))
        kind = LAYERS.get(name)
        if kind is not None:
            return Layer(kind, self._effect(node), *self._bias(node, kind)), None
        if name in SEQUENTIALS and node.args and not any(type(a) is ast.Starred for a in node.args):
            last = self._bound_once(node.args[-1])
            layer, _ = self._layer(last)
            return layer, None if layer is not None or type(last) is not ast.Call else self.call_index.get(id(last))
        return None, None

    def _bias(self, node: ast.Call, kind: str) -> tuple[str, Operand | None]:
        expr = next((k.value for k in node.keywords if k.arg == "bias"), None)
        if expr is None and len(node.args) > BIAS_POSITION[kind]:
            expr = node.args[BIAS_POSITION[kind]]
        if expr is None:
            unknown = any(k.arg is None for k in node.keywords) or any(type(a) is ast.Starred for a in node.args)
            return ("unknown" if unknown else "default"), None
        if type(expr) is ast.Constant and type(expr.value) is bool:
            return str(expr.value), None
        if type(expr) is ast.Name and expr.id in self.parameter_index:
            return "parameter", operand(PARAMETER, self.parameter_index[expr.id], expr.id)
        return "unknown", None

    def _factory(self, node: ast.AST | None) -> Factory | None:
        if type(node) is not ast.Call:
            return None
        name = TENSOR_FACTORIES.get(self._qualify(dotted(node.func)) or "")
        if name is None or name.endswith("_like") or any(k.arg in (None, "device", "out") for k in node.keywords):
            return None
        return Factory(name, self._effect(node), name in RANDOM_FACTORIES)


def self_attributes(values: dict[str, list[ast.AST | None]]) -> dict[str, str]:
    """``self.<attr>`` -> the dotted ``C`` when every value assigned to it is ``C(...)``, else ""."""
    found = {}
    for attribute, assigned in values.items():
        callees = {dotted(value.func) if type(value) is ast.Call else None for value in assigned}
        found[attribute] = callees.pop() or "" if len(callees) == 1 else ""
    return found


@dataclass(frozen=True)
class FunctionBindings:
    """What a function's names mean, as its FunctionSummary holds it (those fields alone)."""

    qualname: str
    kind: str
    class_name: str | None
    self_name: str | None
    scope: Scope
    self_attributes: dict[str, str]


class BindingsWalker(FunctionWalker):
    """The function walk reduced to what binds a name: the same statements read in the same order
    (so the same names bound, and the same functions and classes defined inside registered), each
    expression read only for the ``:=`` in it (as ``value`` reads every part but a lambda's, and only
    where the function's lines hold one), and no fact recorded."""

    def _if(self, node: ast.If) -> None:
        self.value(node.test)  # what FunctionWalker._if binds, without its conditions' bookkeeping
        self.block(node.body)
        self.block(node.orelse)

    def value(self, node: ast.AST) -> tuple[Operand, ...]:
        if self.walrus:
            stack = [node]
            while stack:
                part = stack.pop()
                kind = type(part)
                if kind is ast.NamedExpr:
                    self.assign(part.target, (), part.value, part, "assign")
                elif kind is ast.Lambda:
                    continue
                stack.extend(ast.iter_child_nodes(part))
        return ()

    def _holder(self, expr: ast.AST) -> Operand | None:
        return None  # nothing kept is recorded

    def bindings(self) -> FunctionBindings:
        self.walrus = self.text.walrus(self.node.lineno, self.node.end_lineno)
        self.block(self.node.body)
        return FunctionBindings(self.qualname, self.kind, self.class_name, self.self_name,
                                self.names.scope(self.annotated), self_attributes(self.self_values))


def _has_docstring(node: ast.AST) -> bool:
    body = node.body
    return bool(body) and type(body[0]) is ast.Expr and type(body[0].value) is ast.Constant \
        and isinstance(body[0].value.value, str)


W = FunctionWalker
_STATEMENTS = {
    ast.Expr: W._expression_statement, ast.Assign: W._assign_statement, ast.AnnAssign: W._annotated_assign,
    ast.AugAssign: W._augmented_assign, ast.Return: W._return, ast.If: W._if, ast.For: W._for,
    ast.AsyncFor: W._for, ast.While: W._while, ast.With: W._with, ast.AsyncWith: W._with, ast.Try: W._try,
    ast.TryStar: W._try, ast.Match: W._match, ast.FunctionDef: W._function_def,
    ast.AsyncFunctionDef: W._function_def, ast.ClassDef: W._class_def, ast.Import: W._import,
    ast.ImportFrom: W._import, ast.Global: W._global, ast.Nonlocal: W._global, ast.Assert: W._assert,
}
_ENDS_BLOCK = (ast.Return, ast.Raise, ast.Break, ast.Continue)
W.statements = _STATEMENTS
BindingsWalker.statements = {**_STATEMENTS, ast.If: BindingsWalker._if}
del W


def _tests_for_a_tensor(test: ast.AST) -> bool:
    """``torch.is_tensor(x)``, ``isinstance(x, torch.Tensor)`` anywhere in a condition."""
    for node in ast.walk(test):
        if type(node) is ast.Call:
            name = dotted(node.func) or ""
            if name.rsplit(".", 1)[-1] == "is_tensor":
                return True
            if name == "isinstance" and len(node.args) == 2 and "Tensor" in ast.unparse(node.args[1]):
                return True
    return False
