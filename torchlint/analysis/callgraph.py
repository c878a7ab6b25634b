"""What a call does, its callees included: transitive summaries.

``Summaries.resolve(path, callee, scope)`` finds the function a call written as ``callee`` (its
dotted text: ``log_step``, ``self.meter.update``, ``U.log_step``) in function ``scope``
(``Trainer.fit``; None at module level) of file ``path`` calls (resolution.py says how), and
gives its transitive summary: its own facts and, through a fixpoint over the call graph, those of
everything it calls that resolves, each with the calls that lead there (``Effect.via``).
Recursion, mutual recursion and cycles across files end: facts only grow, and each is kept once.

A callee's parameter facts become the caller's through the arguments (``f(x)`` calls ``g(x)``:
g's sync on its parameter 0 is f's sync on x); a callee called under no_grad contributes no
forwards with grad, one called under a periodic condition no syncs and no cache clears; what a
callee keeps in an object made inside the caller dies with it.
"""

from __future__ import annotations

import os
import typing
from dataclasses import dataclass, replace

from torchlint.analysis.resolution import ModuleSource, Resolver, Target
from torchlint.analysis.summaries import (
    GLOBAL, PARAMETER, RESULT, TENSOR, UNKNOWN_VALUE, Argument, CallSite, Effect, FunctionSummary,
    Import, Keep, Layer, ModeCall, Operand, Returned, Sync, detached, operand, union,
)
from torchlint.analysis.tensor_places import HOST, MOVED, host_literal, moved, places_of

_UNPASSED = object()  # the call leaves the parameter to its default
_STARRED = object()  # the call may pass it through *args/**kwargs
_MAX_RECEIVER_PARTS = 5  # mode-call receivers mapped through recursive calls stop growing here


@dataclass(frozen=True)
class Resolved:
    """A resolved call: the callee's transitive summary, and how the call binds its arguments."""

    function: FunctionSummary
    bound: bool
    constructor: bool

    def argument_for(self, index: int, positional: int, keywords: typing.Sequence[str]) -> int | str | None:
        """Where this call passes the callee's parameter ``index`` (see FunctionSummary.argument_for)."""
        return self.function.argument_for(index, self.bound, positional, keywords)


class Summaries:
    """Resolved calls and transitive summaries, computed on demand and kept for the process;
    ``clear()`` forgets them (a project file changed)."""

    def __init__(self, modules: ModuleSource):
        self.modules = modules
        self.resolver = Resolver(modules)
        self.clear()

    def clear(self) -> None:
        self.resolver.clear()
        self._final: dict[tuple[str, str], FunctionSummary | None] = {}
        self._depends: dict[tuple[str, str], frozenset[str]] = {}
        self._asked: dict[str, set[str]] = {}

    # -- what rules ask

    def resolve(self, path: str, callee: str, scope: str | None) -> Resolved | None:
        path = os.path.abspath(path)
        target, consulted = self.resolver.target(path, scope, callee)
        asked = self._asked.setdefault(path, set())
        asked |= consulted
        if target is None:
            return None
        summary = self._transitive(target.key)
        asked |= self._depends.get(target.key, frozenset())
        return None if summary is None else Resolved(summary, target.bound, target.constructor)

    def runs(self, path: str, name: str | Import, scope: str | None = None,
             instance: bool = False) -> tuple[FunctionSummary, ...]:
        """The transitive summaries of what calling ``name`` runs (a dotted text read in
        ``scope``, or the name an import statement brings in; see Resolver.runs): a function's,
        or the ``__init__`` of each class of the project a class derives from (with ``instance``:
        what calling an instance of the class runs, its ``forward``); empty when unknown."""
        path = os.path.abspath(path)
        targets, consulted = self.resolver.runs(path, scope, name, instance)
        asked = self._asked.setdefault(path, set())
        asked |= consulted
        found = []
        for target in targets:
            summary = self._transitive(target.key)
            asked |= self._depends.get(target.key, frozenset())
            if summary is not None:
                found.append(summary)
        return tuple(found)

    def returned_layer(self, path: str, callee: str, scope: str | None, resolved: Resolved) -> Layer | None:
        """The fresh Conv/Linear that a call of ``callee`` (read in ``scope``, resolved as ``resolved``)
        gives back: the one its function returns on every path; or, when the call constructs a class
        of the project, the layer whose output calling the instance returns as is, which its
        ``__init__`` assigns to ``self.<attr>`` once and its ``forward`` returns as ``self.<attr>(...)``
        on every path (tacotron2's ``ConvNorm`` wrapping a ``Conv1d``). A bias set by a parameter is
        set by the function's (the ``__init__``'s)."""
        function = resolved.function
        if not resolved.constructor:
            return function.returns_layer
        if not function.self_layers:
            return None
        for forward in self.runs(path, callee, scope, instance=True):
            called = {forward.calls[r.call].callee if r.call is not None else None for r in forward.returns}
            attribute = called.pop() if len(called) == 1 else None
            if attribute and forward.self_name and attribute.startswith(f"{forward.self_name}."):
                return function.self_layers.get(attribute[len(forward.self_name) + 1:])
        return None

    def exports(self, path: str, name: str, scope: str | None = None) -> tuple[str, ...] | None:
        """The names of ``__all__`` of the project's module ``name`` means (Resolver.exports)."""
        path = os.path.abspath(path)
        names, consulted = self.resolver.exports(path, scope, name)
        self._asked.setdefault(path, set()).update(consulted)
        return names

    def external_bases(self, path: str, callee: str, scope: str | None) -> frozenset[str]:
        """The qualified names of the bases outside the project of the class of the project that
        ``callee`` means, its bases' included (see Resolver.external_bases)."""
        path = os.path.abspath(path)
        bases, consulted = self.resolver.external_bases(path, scope, callee)
        self._asked.setdefault(path, set()).update(consulted)
        return bases

    def resolve_call(self, path: str, callee: str, scope: str | None) -> FunctionSummary | None:
        """The transitive summary of what a call written as ``callee`` in ``scope`` calls."""
        resolved = self.resolve(path, callee, scope)
        return None if resolved is None else resolved.function

    def function(self, path: str, qualname: str) -> FunctionSummary | None:
        """The transitive summary of a function of a file, by its qualified name."""
        path = os.path.abspath(path)
        summary = self._transitive((path, qualname))
        self._asked.setdefault(path, set()).update(self._depends.get((path, qualname), {path}))
        return summary

    def consulted(self, path: str) -> frozenset[str]:
        """The files read to answer what was asked about ``path`` so far, itself included."""
        return frozenset(self._asked.get(os.path.abspath(path), ()))

    # -- the fixpoint

    def _node(self, key: tuple[str, str]) -> tuple[FunctionSummary | None, list[Target | None], set[str]]:
        """A function's local summary, where each of its calls lands, and the files read to know."""
        path, qualname = key
        consulted = {path}
        module = self.modules.summary(path)
        local = module.function(qualname) if module is not None else None
        targets = []
        for site in local.calls if local is not None else ():
            target, read = self.resolver.target(path, qualname, site.callee)
            consulted |= read
            targets.append(target)
        return local, targets, consulted

    def _transitive(self, key: tuple[str, str]) -> FunctionSummary | None:
        """Tarjan's strongly connected components over the calls reachable from ``key`` that are
        not summarized yet; each component, callees first, is solved to its fixpoint."""
        if key in self._final:
            return self._final[key]
        index: dict = {}
        low: dict = {}
        nodes: dict = {}
        stack: list = []
        on_stack: set = set()
        work = [(key, 0)]
        while work:
            node, position = work[-1]
            if position == 0 and node not in index:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
                local, targets, consulted = self._node(node)
                callees = list(dict.fromkeys(t.key for t in targets if t is not None and t.key not in self._final))
                nodes[node] = (local, targets, consulted, callees)
            callees = nodes[node][3]
            if position < len(callees):
                work[-1] = (node, position + 1)
                callee = callees[position]
                if callee not in index:
                    work.append((callee, 0))
                elif callee in on_stack:
                    low[node] = min(low[node], index[callee])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                self._solve(component, nodes)
        return self._final[key]

    def _solve(self, component: list, nodes: dict) -> None:
        current: dict = {member: None for member in component}
        cyclic = len(component) > 1 or component[0] in nodes[component[0]][3]
        while True:
            changed = False
            for member in component:
                local, targets = nodes[member][:2]
                if local is None:
                    continue
                summary = _compose(local, targets, self._final, current)
                if current[member] is None or _signature(summary) != _signature(current[member]):
                    current[member] = summary
                    changed = True
            if not (cyclic and changed):
                break
        depends = set()
        for member in component:
            depends |= nodes[member][2]
            for target in nodes[member][1]:
                if target is not None and target.key not in current:
                    depends |= self._depends.get(target.key, frozenset())
        for member in component:
            self._final[member] = current[member]
            self._depends[member] = frozenset(depends)


def _compose(local: FunctionSummary, targets: list[Target | None], final: dict, current: dict) -> FunctionSummary:
    """A function's local facts with its callees' (as far as they are known) mapped in."""
    facts = _Facts()
    results = _Results()
    bindings: list[_Binding | None] = []
    for site, target in zip(local.calls, targets):
        callee = None if target is None else current[target.key] if target.key in current else \
            final.get(target.key)
        if callee is None:
            in_progress = target is not None and target.key in current
            results.append(() if in_progress else _expand(site.fallback, results))
            results.parts.append(None)
            bindings.append(None)
            continue
        binding = _Binding(callee, site, target, results)
        results.append(binding.result())
        results.parts.append(binding.parts())
        bindings.append(binding)
        facts.add_callee(binding)
    facts.add_local(local, results)
    returns = tuple(_returned(r, results, bindings) for r in local.returns)
    return facts.summary(local, returns)


class _Results(list):
    """What each call of a function gives back (its operands), and ``parts``: each element's
    where every return of the callee writes out a tuple of the same length (None otherwise)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[tuple[tuple[Operand, ...], ...] | None] = []

    def of(self, op: Operand) -> tuple[Operand, ...]:
        if op.index >= len(self):
            return UNKNOWN_VALUE
        parts = self.parts[op.index] if op.name is not None and op.index < len(self.parts) else None
        found = parts[int(op.name)] if parts is not None and int(op.name) < len(parts) else self[op.index]
        return moved(found) if op.device == MOVED else found


def _expand(ops: tuple[Operand, ...], results: _Results) -> tuple[Operand, ...]:
    """Operands with each call's result (or the element of it a tuple target takes) replaced by
    what that call gives back."""
    if all(op.kind != RESULT for op in ops):
        return ops
    return union(*(results.of(op) if op.kind == RESULT else (op,) for op in ops))


class _Binding:
    """One call of a resolved callee: the callee's parameters in the caller's terms."""

    def __init__(self, callee: FunctionSummary, site: CallSite, target: Target, results: list):
        self.callee, self.site, self.target, self.results = callee, site, target, results
        self.positional = [a for a in site.arguments if a.keyword is None]
        self.keywords = {a.keyword: a for a in site.arguments if a.keyword not in (None, "**")}

    def argument(self, index: int) -> object:
        """The Argument given for parameter ``index``, _UNPASSED or _STARRED (None: none at all,
        the instance a constructor makes)."""
        where = self.callee.argument_for(index, self.target.bound, len(self.positional), self.keywords)
        if where == -1:
            return None if self.target.constructor else self.site.receiver
        if self.site.star:
            return _STARRED
        if isinstance(where, int):
            return self.positional[where]
        return self.keywords[where] if where is not None else _UNPASSED

    def sources(self, op: Operand) -> tuple[Operand, ...]:
        """A callee's operand as the caller's operands."""
        if op.kind == TENSOR and op.device not in ("", HOST):
            return tuple(operand(TENSOR, None, None, op.graph, place) for place in self._places(op.device))
        if op.kind != PARAMETER:
            return (op,)
        argument = self.argument(op.index)
        if argument is _STARRED:
            return UNKNOWN_VALUE
        if not isinstance(argument, Argument):
            return ()
        ops = _expand(argument.sources, self.results)
        if op.device == MOVED:
            ops = moved(ops)
        return ops if op.graph else detached(ops)

    def _places(self, device: str) -> tuple[str, ...]:
        """A tensor's place in the callee ("param:k", "of:k": see tensor_places.py) in the
        caller's terms; none where it is on the device of a parameter left to a default written
        out (a constant, no tensor: that code cannot run)."""
        how, _, index = device.partition(":")
        argument = self.argument(int(index))
        if argument is _UNPASSED:
            default = self.callee.defaults[int(index)]
            if how == "of":
                return () if default is not None else ("",)
            return (HOST if host_literal(default) else "",)
        if not isinstance(argument, Argument):
            return ("",)
        ops = _expand(argument.sources, self.results)
        if how == "of":
            return places_of(ops)
        if host_literal(argument.literal):
            return (HOST,)
        parameter = ops[0] if len(ops) == 1 else None
        if parameter is not None and parameter.kind == PARAMETER and not parameter.device and \
                argument.text == parameter.name:
            return (f"param:{parameter.index}",)  # `device=device`: the caller's own parameter
        return ("",)

    def holder(self, holder: Operand) -> Operand | None:
        if holder.kind == GLOBAL:
            return holder
        argument = self.argument(holder.index)
        return argument.holder if isinstance(argument, Argument) else None

    def result(self) -> tuple[Operand, ...]:
        if self.target.constructor or self.callee.generator:
            return UNKNOWN_VALUE
        ops = union(*(self.sources(op) for r in self.callee.returns for op in r.value))
        return detached(ops) if self.site.grad is False else ops

    def parts(self) -> tuple[tuple[Operand, ...], ...] | None:
        """Each element of the result, where every return writes out a tuple of the same length."""
        returns = self.callee.returns
        if self.target.constructor or self.callee.generator or not returns or \
                any(r.parts is None or len(r.parts) != len(returns[0].parts) for r in returns):
            return None
        parts = tuple(union(*(self.sources(op) for r in returns for op in r.parts[k]))
                      for k in range(len(returns[0].parts)))
        return tuple(detached(part) for part in parts) if self.site.grad is False else parts

    def receiver(self, text: str) -> str | None:
        """A mode call's receiver in the caller's terms (``model`` passed as ``net``)."""
        root, dot, rest = text.partition(".")
        if root not in self.callee.parameters:
            return text
        argument = self.argument(self.callee.parameters.index(root))
        if not isinstance(argument, Argument) or argument.text is None:
            return None
        mapped = argument.text + dot + rest
        return mapped if mapped.count(".") < _MAX_RECEIVER_PARTS else None

    def layer(self, layer: Layer | None) -> Layer | None:
        """The callee's returned layer, its bias read through this call's arguments."""
        if layer is None:
            return None
        bias, parameter = layer.bias, layer.parameter
        if bias == "parameter":
            bias, parameter = "unknown", None
            argument = self.argument(layer.parameter.index)
            if argument is _UNPASSED:
                default = self.callee.defaults[layer.parameter.index]
                bias = default if default in ("True", "False") else "unknown"
            elif isinstance(argument, Argument):
                if argument.literal in ("True", "False"):
                    bias = argument.literal
                elif len(argument.sources) == 1 and argument.sources[0].kind == PARAMETER and \
                        argument.sources[0].name == argument.text:
                    bias, parameter = "parameter", argument.sources[0]
        return Layer(layer.kind, layer.effect.through(self.site.effect), bias, parameter)


def _returned(returned: Returned, results: _Results, bindings: list) -> Returned:
    """A return path with the calls it returns the result of resolved."""
    layer, factory, forward = returned.layer, returned.factory, returned.forward
    binding = bindings[returned.call] if returned.call is not None else None
    if binding is not None:
        via = binding.site.effect
        callee = binding.callee
        layer = layer or binding.layer(callee.returns_layer)
        if factory is None and callee.returns_factory is not None:
            factory = replace(callee.returns_factory, effect=callee.returns_factory.effect.through(via))
        if forward is None and binding.site.grad is not False and callee.returns_forward is not None:
            forward = callee.returns_forward.through(via)
    binding = bindings[returned.layer_call] if returned.layer_call is not None else None
    if layer is None and binding is not None:
        layer = binding.layer(binding.callee.returns_layer)
    parts = None if returned.parts is None else tuple(_expand(part, results) for part in returned.parts)
    return replace(returned, value=_expand(returned.value, results), layer=layer, factory=factory, forward=forward,
                   parts=parts)


def _shorter(store: dict, key: tuple, fact: object, effect: Effect) -> None:
    """Keep each fact once, reached by the shortest chain of calls."""
    found = store.get(key)
    if found is None or len(effect.via) < len(found[1].via):
        store[key] = (fact, effect)


class _Facts:
    """The facts of one function as they are gathered, each once."""

    def __init__(self) -> None:
        self.syncs: dict = {}
        self.clears: dict = {}
        self.keeps: dict = {}
        self.forwards: dict = {}
        self.models: dict = {}  # model calls in any grad mode
        self.backward: dict = {}
        self.autograd: dict = {}
        self.modes: dict = {}  # receiver -> (position in the function, ModeCall)
        self.builds: set[str] = set()
        self.convolutions: dict = {}  # (dimension, functional) -> (Convolution, its effect)

    def sync(self, sync: Sync, effect: Effect, reads: tuple[Operand, ...]) -> None:
        """One sync a place, reading whatever any path to it reads, reached by the shortest chain."""
        if not reads:
            return
        found = self.syncs.get(effect.location)
        if found is not None:
            reads = union(found[0].reads, reads)
            if len(found[1].via) <= len(effect.via):
                effect = found[1]
        self.syncs[effect.location] = (Sync(effect, reads, sync.how), effect)

    def keep(self, keep: Keep, effect: Effect, op: Operand, holder: Operand, with_graph: bool) -> None:
        if op.kind in (PARAMETER, TENSOR):
            fact = Keep(effect, op, holder, keep.into, keep.how, with_graph)
            _shorter(self.keeps, (effect.location, op.key, holder.key, keep.into, keep.how, with_graph), fact, effect)

    def mode(self, call: ModeCall, position: tuple[int, int]) -> None:
        found = self.modes.get(call.receiver)
        if found is None or position >= found[0]:
            self.modes[call.receiver] = (position, call)

    def add_local(self, local: FunctionSummary, results: list) -> None:
        for sync in local.host_syncs:
            self.sync(sync, sync.effect, _expand(sync.reads, results))
        for keep in local.keeps:
            for op in _expand((keep.value,), results):
                self.keep(keep, keep.effect, op, keep.holder, keep.with_graph and op.graph)
        for store, effects in ((self.clears, local.clears_cache), (self.forwards, local.forwards_with_grad),
                               (self.models, local.forwards), (self.backward, local.backward),
                               (self.autograd, local.autograd)):
            for effect in effects:
                _shorter(store, effect.location, effect, effect)
        for call in local.mode_calls:
            self.mode(call, (call.effect.line, call.effect.column))
        self.builds.update(local.builds)
        for convolution in local.convolutions:
            _shorter(self.convolutions, (convolution.dimension, convolution.functional), convolution,
                     convolution.effect)

    def add_callee(self, binding: _Binding) -> None:
        site, callee = binding.site, binding.callee
        via = site.effect
        if not site.periodic:
            for sync in callee.host_syncs:
                self.sync(sync, sync.effect.through(via), union(*(binding.sources(op) for op in sync.reads)))
            for effect in callee.clears_cache:
                _shorter(self.clears, effect.location, effect.through(via), effect.through(via))
        for keep in callee.keeps:
            holder = binding.holder(keep.holder)
            if holder is not None:
                effect = keep.effect.through(via)
                for op in binding.sources(keep.value):
                    self.keep(keep, effect, op, holder, keep.with_graph and op.graph)
        stores = [(self.backward, callee.backward), (self.autograd, callee.autograd)]
        if not site.looped:  # a model run once per call of the callee, once per call of this one
            stores.append((self.models, callee.forwards))
        if site.grad is True:
            stores.append((self.forwards, callee.forwards_with_grad))
        for store, effects in stores:
            for effect in effects:
                _shorter(store, effect.location, effect.through(via), effect.through(via))
        self.builds.update(callee.builds)
        for convolution in callee.convolutions:
            effect = convolution.effect.through(via)
            _shorter(self.convolutions, (convolution.dimension, convolution.functional),
                     replace(convolution, effect=effect), effect)
        for call in callee.mode_calls:
            receiver = binding.receiver(call.receiver)
            if receiver is not None:
                self.mode(ModeCall(receiver, call.mode, call.effect.through(via)), (via.line, via.column))

    def summary(self, local: FunctionSummary, returns: tuple[Returned, ...]) -> FunctionSummary:
        def ordered(store: dict) -> tuple:
            return tuple(store[key][0] for key in sorted(store))
        return replace(local, host_syncs=ordered(self.syncs), clears_cache=ordered(self.clears),
                       keeps=ordered(self.keeps), forwards_with_grad=ordered(self.forwards),
                       backward=ordered(self.backward), autograd=ordered(self.autograd),
                       mode_calls=tuple(self.modes[receiver][1] for receiver in sorted(self.modes)),
                       builds=tuple(sorted(self.builds)), convolutions=ordered(self.convolutions),
                       returns=returns, forwards=ordered(self.models))


def _signature(summary: FunctionSummary) -> tuple:
    """A summary's facts without the chains that reach them: equal signatures, same facts."""
    def where(effect: Effect | None) -> tuple | None:
        return None if effect is None else effect.location
    return (
        frozenset((s.effect.location, frozenset(op.key for op in s.reads)) for s in summary.host_syncs),
        frozenset(where(e) for e in summary.clears_cache),
        frozenset((k.effect.location, k.value.key, k.holder.key, k.into, k.how, k.with_graph) for k in summary.keeps),
        frozenset(where(e) for e in summary.forwards_with_grad),
        frozenset(where(e) for e in summary.forwards),
        frozenset(where(e) for e in summary.backward),
        frozenset(where(e) for e in summary.autograd),
        frozenset((m.receiver, m.mode, where(m.effect)) for m in summary.mode_calls),
        summary.builds,
        frozenset((c.dimension, c.functional, where(c.effect)) for c in summary.convolutions),
        tuple((tuple(op.key for op in r.value), where(r.layer and r.layer.effect), r.layer and r.layer.bias,
               where(r.factory and r.factory.effect), where(r.forward),
               r.parts and tuple(tuple(op.key for op in part) for part in r.parts)) for r in summary.returns),
    )
