"""What one call of a function does: the data a summary holds, and a module's summaries.

Real training code spreads an anti-pattern over helpers: ``log_step(loss)`` does the ``.item()``,
a meter's ``update(loss)`` keeps the loss with its graph, ``free_memory()`` empties the CUDA
cache, ``conv3x3(...)`` builds the biased conv that feeds a BatchNorm. A rule that looks at the
call in the loop asks "what does this call do?"; a ``FunctionSummary`` answers, each fact with the
``Effect`` that locates it (in whichever file) and the chain of calls that leads there.

This module holds the plain data (picklable, and JSON through ``to_json``/``from_json`` for a disk
cache) and ``ModuleSummary``, a file's index: its imports, classes and names, with each
function's local summary computed on first request (``function(qualname)``) by
torchlint/analysis/local_facts.py. torchlint/analysis/callgraph.py resolves calls and makes the
facts transitive; torchlint/analysis/project.py finds and loads the project's own modules.

Conventions: lines are 1-based and columns 0-based code points (LibCST's ``PositionProvider``);
parameters are numbered as the ``def`` lists them, ``self`` first; a local summary's calls are
left unresolved, as ``CallSite`` references.
"""

from __future__ import annotations

import ast
import typing
from dataclasses import dataclass, field, fields, is_dataclass, replace

# Bump when what a summary holds or means changes: disk-cached summaries of another version are misses.
SUMMARY_VERSION = 1

# Operand kinds
PARAMETER = "parameter"  # a parameter of the function (``index``, ``name``); the call site decides what it is
TENSOR = "tensor"  # a tensor the function computes (torch ops, a model's output)
UNKNOWN = "unknown"  # a value nothing here knows (a global, an attribute of ``self``, a call nothing resolves)
DEVICE = "device"  # no value: waits for the device itself (``torch.cuda.synchronize()``)
GLOBAL = "global"  # a holder at module level (or a closure's), which outlives any call
RESULT = "result"  # local summaries only: the result of ``calls[index]``, known once that call is resolved


@dataclass(frozen=True)
class Effect:
    """Where something happens, innermost: a file, a span, a snippet of its code for messages
    (``loss.item()``), and ``via``, the calls that lead there from the summarized function (the
    outermost first), each an Effect of its own with an empty ``via``."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    what: str
    via: tuple[Effect, ...] = ()

    @property
    def location(self) -> tuple[str, int, int, int, int]:
        return self.path, self.line, self.column, self.end_line, self.end_column

    def through(self, call: Effect) -> Effect:
        """The same effect, reached through one more call (the caller's)."""
        return replace(self, via=(call, *self.via))


@dataclass(frozen=True)
class Operand:
    """What a fact reads, keeps or returns (see the kinds above). ``graph``: for a parameter,
    whether the value is used without detaching it; for a tensor, whether it carries autograd
    history (a model's output with grad on does, a factory's tensor does not)."""

    kind: str
    index: int | None = None
    name: str | None = None
    graph: bool = True

    @property
    def key(self) -> tuple:
        return self.kind, -1 if self.index is None else self.index, self.name or "", self.graph


@dataclass(frozen=True)
class Sync:
    """The host waits for the device: ``.item()``, ``.cpu()``, ``float(t)``, ``print(t)``, a
    tensor formatted into a string, ``torch.cuda.synchronize()``. ``reads``: what is read; a
    ``float(x)`` on a parameter syncs only when the caller passes a tensor."""

    effect: Effect
    reads: Operand


@dataclass(frozen=True)
class Keep:
    """A value stored where it outlives the call: ``holder`` is the parameter that holds the
    container (``self`` is parameter 0) or GLOBAL; ``into`` the container as written
    (``self.history``); ``how``: "assign" (``self.x = v``), "augment" (``+=``, ``self.s = self.s +
    v``), "append" (``.append/.extend/.insert/.add``) or "item" (``self.d[k] = v``).
    ``with_graph``: kept without ``.item()``/``.detach()``/... (so with its autograd graph, if
    the value has one)."""

    effect: Effect
    value: Operand
    holder: Operand
    into: str
    how: str
    with_graph: bool


@dataclass(frozen=True)
class Layer:
    """A freshly built ``nn.Conv1d/2d/3d`` or ``nn.Linear`` (``kind``) and how its ``bias`` is
    set: "default" (on), "True", "False", "parameter" (from ``parameter``) or "unknown"."""

    kind: str
    effect: Effect
    bias: str
    parameter: Operand | None = None


@dataclass(frozen=True)
class Factory:
    """A tensor made on the CPU by ``torch.<name>(...)`` without ``device=``."""

    name: str
    effect: Effect
    random: bool  # random factories give other values when made with ``device=`` (the generators differ)


@dataclass(frozen=True)
class ModeCall:
    """``receiver.train()`` / ``receiver.eval()`` (``mode`` "train" or "eval")."""

    receiver: str
    mode: str
    effect: Effect


@dataclass(frozen=True)
class Returned:
    """One ``return`` path: the value's operands, and what it is when it is a fresh layer, a
    factory's tensor or a model's output. ``call``: the index (in ``calls``) of the call whose
    result is returned as is; ``layer_call``: of the call that builds the last layer of a
    returned ``nn.Sequential``."""

    value: tuple[Operand, ...]
    layer: Layer | None = None
    factory: Factory | None = None
    forward: Effect | None = None
    call: int | None = None
    layer_call: int | None = None


@dataclass(frozen=True)
class Argument:
    """An argument of a call as the summary needs it: its operands, ``keyword`` (None when
    positional), ``text`` (a dotted name as written), ``literal`` (``repr`` of a constant) and
    ``holder`` (the parameter or GLOBAL a container argument belongs to)."""

    sources: tuple[Operand, ...]
    keyword: str | None = None
    text: str | None = None
    literal: str | None = None
    holder: Operand | None = None


@dataclass(frozen=True)
class CallSite:
    """A call written in the function, unresolved: ``callee`` is its dotted text. ``fallback``:
    the result's operands if nothing resolves it. ``periodic``: under a condition that holds
    every k-th call; ``grad``: whether grad is on there (None: unknown); ``star``: ``*args`` or
    ``**kwargs`` given."""

    callee: str
    effect: Effect
    arguments: tuple[Argument, ...]
    receiver: Argument | None
    fallback: tuple[Operand, ...]
    periodic: bool
    grad: bool | None
    star: bool


@dataclass(frozen=True)
class Import:
    """``import module`` (``name`` None) or ``from <level dots>module import name``."""

    module: str
    name: str | None = None
    level: int = 0

    @property
    def qualified(self) -> str | None:
        """``torch.nn`` for ``import torch.nn as nn``; None for a relative import."""
        if self.level:
            return None
        return f"{self.module}.{self.name}" if self.name else self.module


@dataclass(frozen=True)
class Scope:
    """What the names of one scope (a function, or the module) mean, for resolving calls:
    ``imports``, ``instances`` (a name bound once to ``C(...)``, or a parameter annotated ``C``),
    ``aliases`` (a name bound once to a dotted name: ``step = self.train_step``), ``nested``
    (functions and classes defined in it, bound once) and ``locals`` (every name bound in it)."""

    imports: dict[str, Import] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    nested: frozenset[str] = frozenset()
    locals: frozenset[str] = frozenset()


@dataclass(frozen=True)
class FunctionSummary:
    """What one call of a function does. Local summaries (``ModuleSummary.function``) hold the
    function's own facts and its ``calls`` unresolved; transitive ones (callgraph.Summaries) add
    its callees' facts, ``via`` those calls, and hold no RESULT operands.

    ``kind``: "function", "method", "staticmethod" or "classmethod"; ``positional``: how many
    parameters take positional arguments; ``star``/``double_star``: the index of ``*args``/
    ``**kwargs``; ``defaults``: ``repr`` of each parameter's literal default (None otherwise).
    ``grad_mode``: "disabled" (a no-grad decorator, or the whole body under such a ``with``),
    "enabled" (``@torch.enable_grad()``) or None. ``backward``: backpropagation (a training step);
    ``autograd``: other uses (``torch.autograd.grad``, ``.requires_grad_()``, ``enable_grad``).
    ``self_attributes``: ``self.<attr>`` assigned in this method, with the dotted callee when
    the value is ``C(...)`` ("" otherwise)."""

    path: str
    qualname: str
    line: int
    kind: str
    class_name: str | None
    self_name: str | None
    parameters: tuple[str, ...]
    positional: int
    star: int | None
    double_star: int | None
    defaults: tuple[str | None, ...]
    grad_mode: str | None
    generator: bool
    host_syncs: tuple[Sync, ...]
    clears_cache: tuple[Effect, ...]
    keeps: tuple[Keep, ...]
    forwards_with_grad: tuple[Effect, ...]
    backward: tuple[Effect, ...]
    autograd: tuple[Effect, ...]
    mode_calls: tuple[ModeCall, ...]
    returns: tuple[Returned, ...]
    calls: tuple[CallSite, ...]
    scope: Scope
    self_attributes: dict[str, str] = field(default_factory=dict)

    @property
    def returns_parameters(self) -> tuple[Operand, ...]:
        """The parameters the return value derives from without detaching."""
        found = {op.index: op for r in self.returns for op in r.value if op.kind == PARAMETER and op.graph}
        return tuple(found[index] for index in sorted(found))

    @property
    def returns_forward(self) -> Effect | None:
        """The model call (grad on) whose output, or a loss computed from it, is returned."""
        return next((r.forward for r in self.returns if r.forward is not None), None)

    @property
    def returns_layer(self) -> Layer | None:
        """The fresh biased-capable layer every return path gives back (directly or as the last
        element of an ``nn.Sequential``)."""
        if self.returns and all(r.layer is not None for r in self.returns):
            return self.returns[0].layer
        return None

    @property
    def returns_factory(self) -> Factory | None:
        """The CPU factory tensor every return path gives back."""
        if self.returns and all(r.factory is not None for r in self.returns):
            return self.returns[0].factory
        return None

    def argument_for(self, index: int, bound: bool, positional: int, keywords: typing.Sequence[str]) -> int | str | None:
        """Where a call passes parameter ``index``: its position among the call's positional
        arguments, its keyword, -1 for the receiver of a bound call (``obj.m(...)``: ``self``),
        or None when the call does not pass it (its default) or passes it through ``*args``."""
        offset = 1 if bound else 0
        if index < offset:
            return -1
        name = self.parameters[index]
        if index < self.positional and index - offset < positional:
            return index - offset
        if index == self.star:
            return None
        if name in keywords:
            return name
        return None


@dataclass(frozen=True)
class ClassSummary:
    """A class of the file: its ``bases`` as written (dotted), its methods (name -> kind), and
    ``scope``, the function it is defined in (None at module level or in a class)."""

    qualname: str
    line: int
    bases: tuple[str, ...]
    methods: dict[str, str]
    scope: str | None = None


class ModuleSummary:
    """One file's index (imports, classes, module-level names) and its functions' local
    summaries. Built by local_facts.summarize_module, which leaves each function to be
    summarized on first request (``summarizer``), or read back from JSON complete."""

    def __init__(self, path: str, scope: Scope, star_imports: tuple[Import, ...], classes: dict[str, ClassSummary],
                 functions: dict[str, FunctionSummary] | None = None,
                 summarizer: typing.Callable[[ModuleSummary, ast.AST, str, str | None], FunctionSummary] | None = None):
        self.path = path
        self.scope = scope
        self.star_imports = star_imports
        self.classes = classes
        self.functions: dict[str, FunctionSummary] = functions or {}
        self._pending: dict[str, tuple[ast.AST, str | None]] = {}  # qualname -> (its def, its class)
        self._summarizer = summarizer

    def function(self, qualname: str) -> FunctionSummary | None:
        """The local summary of a function or method (``train_step``, ``Meter.update``,
        ``outer.inner``), or None when the file defines none by that name."""
        found = self.functions.get(qualname)
        if found is not None:
            return found
        entry = self._pending.get(qualname)
        if entry is None and "." in qualname:
            parent = qualname.rsplit(".", 1)[0]
            if parent in self._pending and parent not in self.classes:
                self.function(parent)  # summarizing a function registers what it defines inside
                entry = self._pending.get(qualname)
        if entry is None or self._summarizer is None:
            return None
        summary = self.functions[qualname] = self._summarizer(self, entry[0], qualname, entry[1])
        del self._pending[qualname]
        return summary

    def register(self, qualname: str, node: ast.AST, class_name: str | None) -> None:
        """A function to summarize when asked (a method, or a function defined in another)."""
        if qualname not in self.functions:
            self._pending[qualname] = (node, class_name)

    def to_json(self) -> dict:
        """Everything, every function summarized (nested ones included)."""
        while self._pending:
            self.function(next(iter(self._pending)))
        return {"path": self.path, "scope": encode(self.scope), "star_imports": encode(self.star_imports),
                "classes": encode(self.classes), "functions": encode(self.functions)}

    @classmethod
    def from_json(cls, data: dict) -> ModuleSummary:
        return cls(data["path"], decode(Scope, data["scope"]), decode(tuple[Import, ...], data["star_imports"]),
                   decode(dict[str, ClassSummary], data["classes"]),
                   decode(dict[str, FunctionSummary], data["functions"]))


# --- JSON ----------------------------------------------------------------------------------------

_HINTS: dict[type, dict[str, object]] = {}


def _hints(cls: type) -> dict[str, object]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def encode(value: object) -> object:
    """Plain JSON data for the summaries' dataclasses, dicts, tuples and frozensets."""
    if is_dataclass(value):
        return {f.name: encode(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {key: encode(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return [encode(item) for item in value]
    if isinstance(value, frozenset):
        return sorted(value)
    return value


def decode(kind: object, data: object) -> object:
    """The inverse of ``encode`` for a declared type; data of the wrong shape raises
    TypeError, KeyError or ValueError."""
    origin = typing.get_origin(kind)
    if origin is tuple:
        item = typing.get_args(kind)[0]
        return tuple(decode(item, element) for element in _list(data))
    if origin is dict:
        item = typing.get_args(kind)[1]
        if not isinstance(data, dict):
            raise TypeError(f"expected an object, got {type(data).__name__}")
        return {key: decode(item, element) for key, element in data.items()}
    if origin is frozenset:
        return frozenset(_list(data))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType")):
        options = [option for option in typing.get_args(kind) if option is not type(None)]
        return None if data is None else decode(options[0], data)
    if isinstance(kind, type) and is_dataclass(kind):
        if not isinstance(data, dict):
            raise TypeError(f"expected an object for {kind.__name__}")
        hints = _hints(kind)
        return kind(**{f.name: decode(hints[f.name], data[f.name]) for f in fields(kind)})
    if kind in (str, int, bool) and type(data) is not kind:
        raise TypeError(f"expected {kind.__name__}, got {type(data).__name__}")
    return data


def _list(data: object) -> list:
    if not isinstance(data, list):
        raise TypeError(f"expected a list, got {type(data).__name__}")
    return data
