"""What one call of a function does: the data a summary holds, and a module's summaries.

Real training code spreads an anti-pattern over helpers: ``log_step(loss)`` does the ``.item()``,
a meter's ``update(loss)`` keeps the loss with its graph, ``free_memory()`` empties the CUDA
cache, ``conv3x3(...)`` builds the biased conv that feeds a BatchNorm. A rule that looks at the
call in the loop asks "what does this call do?"; a ``FunctionSummary`` answers, each fact with the
``Effect`` that locates it (in whichever file) and the chain of calls that leads there.

This module holds the plain data (picklable, and JSON through ``to_json``/``from_json`` for a disk
cache) and ``ModuleSummary``, a file's index: its imports, classes and names, with each
function's local summary computed on first request (``function(qualname)``). Beside it:

    module_index.py    a file's names (imports, classes, names bound once), from CPython's tree
    value_facts.py     what a function's expressions hold and do (syncs, keeps, calls, ...)
    function_facts.py  what one call of a function does by itself: its local summary
    resolution.py      which function a call calls, in the file or the project's modules
    callgraph.py       what a call does with its callees included (``Summaries``)
    project.py         the project's own modules: imports to files, loading, caches

Conventions: lines are 1-based and columns 0-based code points (LibCST's ``PositionProvider``);
parameters are numbered as the ``def`` lists them, ``self`` first; a local summary's calls are
left unresolved, as ``CallSite`` references.
"""

from __future__ import annotations

import ast
import typing
from dataclasses import dataclass, field, replace

from torchlint.analysis.dataclass_json import checked, decode, encode

# Bump when what a summary holds or means changes: disk-cached summaries of another version are misses.
SUMMARY_VERSION = 12

# Operand kinds
PARAMETER = "parameter"  # a parameter of the function (``index``, ``name``); the call site decides what it is
TENSOR = "tensor"  # a tensor the function computes (torch ops, a model's output)
UNKNOWN = "unknown"  # a value nothing here knows (a global, an attribute of ``self``, a call nothing resolves)
DEVICE = "device"  # no value: waits for the device itself (``torch.cuda.synchronize()``)
GLOBAL = "global"  # a holder at module level (or a closure's), which outlives any call
RESULT = "result"  # local summaries only: the result of ``calls[index]`` (``name``: its element k, "k", where a
#                   tuple target unpacks it), known once that call is resolved


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
    history (a model's output with grad on does, a factory's tensor does not). ``device``: where
    a tensor lives when the walk knows (tensor_places.py): "cpu" for a tensor made on the host,
    "param:k" on the device parameter ``k`` names, "of:k" on the device of the tensor parameter
    ``k``, "" anywhere; for a parameter or a call's result, "moved" when it may have been moved."""

    kind: str
    index: int | None = None
    name: str | None = None
    graph: bool = True
    device: str = ""

    @property
    def key(self) -> tuple:
        return self.kind, -1 if self.index is None else self.index, self.name or "", self.graph, self.device


_OPERANDS: dict[tuple, Operand] = {}


def operand(kind: str, index: int | None = None, name: str | None = None, graph: bool = True,
            device: str = "") -> Operand:
    """Operands are few and compared often: one object each."""
    key = (kind, index, name, graph, device)
    found = _OPERANDS.get(key)
    if found is None:
        found = _OPERANDS[key] = Operand(kind, index, name, graph, device)
    return found


UNKNOWN_VALUE = (operand(UNKNOWN),)
GLOBAL_HOLDER = operand(GLOBAL)


def union(*parts: tuple[Operand, ...]) -> tuple[Operand, ...]:
    found = [part for part in parts if part]
    if len(found) <= 1:
        return found[0] if found else ()
    return tuple(dict.fromkeys(op for part in found for op in part))


def detached(ops: tuple[Operand, ...]) -> tuple[Operand, ...]:
    return tuple(operand(op.kind, op.index, op.name, False, op.device) if op.graph and op.kind in (PARAMETER, TENSOR)
                 else op for op in ops)


def public(ops: tuple[Operand, ...]) -> tuple[Operand, ...]:
    """Operands as a summary stores them: a tensor without the walk's note of which model call made it."""
    if all(op.kind != TENSOR or op.index is None for op in ops):
        return ops
    return tuple(dict.fromkeys(operand(TENSOR, None, None, op.graph, op.device) if op.kind == TENSOR else op
                               for op in ops))


@dataclass(frozen=True)
class Sync:
    """The host waits for the device. ``how``: "method" (``.item()``, ``.cpu()``, ``.numpy()``,
    ``.tolist()``), "conversion" (``float(t)``, ``int(t)``, ``bool(t)``), "print", "format" (an
    f-string, ``%`` or ``.format``), "log" (a value given to TensorBoard's ``add_scalar``),
    "guarded" (a method under a test that the value is a tensor: ``if torch.is_tensor(v):
    v = v.item()``) or "synchronize" (``torch.cuda.synchronize()``, which reads DEVICE).
    ``reads``: what the value may be: a method's receiver is a tensor whatever it is; a
    conversion, print, format, log or guarded read syncs only on a tensor, so ``float(x)`` on a
    parameter syncs where the caller passes one, and a Python number (``len(x)``, ``loss.item()``,
    an ``int`` parameter) is no sync at all and is not recorded."""

    effect: Effect
    reads: tuple[Operand, ...]
    how: str


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
class Convolution:
    """A convolution built: an ``nn.Conv1d/2d/3d`` (transposed and lazy forms too), or a
    ``torchvision.models`` network (2-D convolutions); or, ``functional``, one applied by a
    function (``F.conv2d(x, weight)``, as a layer's ``forward`` of its own does); ``dimension`` 1,
    2 or 3."""

    dimension: int
    effect: Effect
    functional: bool = False


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
    returned ``nn.Sequential``; ``parts``: the operands of each element when the value is a tuple
    written out (``return a, b``; None otherwise), which a caller that unpacks it reads apart."""

    value: tuple[Operand, ...]
    layer: Layer | None = None
    factory: Factory | None = None
    forward: Effect | None = None
    call: int | None = None
    layer_call: int | None = None
    parts: tuple[tuple[Operand, ...], ...] | None = None


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
    ``**kwargs`` given; ``looped``: in a loop of the function."""

    callee: str
    effect: Effect
    arguments: tuple[Argument, ...]
    receiver: Argument | None
    fallback: tuple[Operand, ...]
    periodic: bool
    grad: bool | None
    star: bool
    looped: bool = False


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
    (functions and classes defined in it, bound once), ``locals`` (every name bound in it) and
    ``results`` (a name bound once to the result of a call that is no ``C(...)``:
    ``logger = make_logger(...)``, the dotted callee)."""

    imports: dict[str, Import] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    nested: frozenset[str] = frozenset()
    locals: frozenset[str] = frozenset()
    results: dict[str, str] = field(default_factory=dict)


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
    ``builds``: the ``torch.nn`` classes it constructs (``Conv2d``, ``BatchNorm2d``), by name;
    ``convolutions``: the convolutions it builds, one of each dimension (transitively: the one
    reached by the shortest chain of calls).
    ``self_attributes``: ``self.<attr>`` assigned in this method, with the dotted callee when
    the value is ``C(...)`` ("" otherwise). ``returns_instance``: the dotted ``C`` (read in the
    function's scope) when every return gives ``C(...)`` or None, directly or through a local
    name bound only to those ("" otherwise): ``def make_logger(): ... return Logger(...)``.
    ``forwards``: the model calls it runs once per call, in any grad mode (outside its loops, and
    through calls outside them): a call of it evaluates or trains a model on one input, not a
    whole pass over a dataset. ``self_layers``: the fresh Conv/Linear (or ``nn.Sequential`` ending in
    one) assigned to ``self.<attr>`` in this method, each attribute assigned once."""

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
    builds: tuple[str, ...]
    returns: tuple[Returned, ...]
    calls: tuple[CallSite, ...]
    scope: Scope
    self_attributes: dict[str, str] = field(default_factory=dict)
    convolutions: tuple[Convolution, ...] = ()
    returns_instance: str = ""
    forwards: tuple[Effect, ...] = ()
    self_layers: dict[str, Layer] = field(default_factory=dict)

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

    def argument_for(self, index: int, bound: bool, positional: int,
                     keywords: typing.Sequence[str]) -> int | str | None:
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


_IMPORTS = tuple[Import, ...]
_CLASSES = dict[str, ClassSummary]
_FUNCTIONS = dict[str, FunctionSummary]


class ModuleSummary:
    """One file's index (imports, classes, module-level names, ``exports``: the names of its
    ``__all__`` when it assigns one a literal list or tuple of strings, else None) and its
    functions' local summaries. Built by function_facts.summarize_module, which leaves each
    function to be summarized on first request (``summarizer``), or read back from JSON complete."""

    def __init__(self, path: str, scope: Scope, star_imports: tuple[Import, ...], classes: dict[str, ClassSummary],
                 functions: dict[str, FunctionSummary] | None = None,
                 summarizer: typing.Callable[..., typing.Any] | None = None,
                 exports: tuple[str, ...] | None = None):
        self.path = path
        self.exports = exports
        self.scope = scope
        self.star_imports = star_imports
        self.classes = classes
        self.functions: dict[str, FunctionSummary] = functions or {}
        self._pending: dict[str, tuple[ast.AST, str | None]] = {}  # qualname -> (its def, its class)
        self._bindings: dict[str, typing.Any] = {}  # qualname -> its bindings, while not summarized
        self._summarizer = summarizer
        # functions whose trees were let go (release_trees) -> their first and last lines, their class
        self._released: dict[str, tuple[int, int, str | None]] = {}
        self._reload: typing.Callable[[], ModuleSummary | None] | None = None
        self._restore_definition: typing.Callable[[int, int], tuple[ast.AST, typing.Callable] | None] | None = None

    def holds_trees(self) -> bool:
        """Does the summary keep syntax trees of functions not summarized yet?"""
        return bool(self._pending)

    def release_trees(self, reload: typing.Callable[[], ModuleSummary | None],
                      restore: typing.Callable[[int, int], tuple[ast.AST, typing.Callable] | None] | None = None) -> None:
        """Let go of the trees of the functions not summarized yet, keeping the index and their
        lines. When one is asked for, ``restore(first, last)`` (the definition on those lines parsed
        alone, and a summarizer; or None) gives it back, else ``reload`` (a summary of a fresh
        parse of the same text, or None) gives them all back."""
        if self._pending:
            self._released = {qualname: (min((d.lineno for d in node.decorator_list), default=node.lineno),
                                         node.end_lineno, class_name)
                              for qualname, (node, class_name) in self._pending.items()}
            self._pending = {}
            self._reload, self._restore_definition, self._summarizer = reload, restore, None

    def _restore_one(self, qualname: str) -> bool:
        """Give back one released function's tree, parsed alone; False when that cannot be done."""
        if self._restore_definition is None:
            return False
        first, last, class_name = self._released[qualname]
        found = self._restore_definition(first, last)
        if found is None:
            return False
        del self._released[qualname]
        self._pending[qualname], self._summarizer = (found[0], class_name), found[1]
        return True

    def _restore(self) -> None:
        """The trees of the released functions, from a fresh parse: a nested function is registered
        when the function around it is summarized, so the fresh summary summarizes those first."""
        fresh, self._reload, self._restore_definition = self._reload(), None, None
        released, self._released = self._released, {}
        if fresh is None:
            return
        for qualname in sorted(released, key=lambda name: name.count(".")):
            parts = qualname.split(".")
            for end in range(1, len(parts)):
                if ".".join(parts[:end]) in fresh._pending:
                    fresh.function(".".join(parts[:end]))
            entry = fresh._pending.get(qualname)
            if entry is not None:
                self._pending[qualname] = entry
        self._summarizer = fresh._summarizer

    def function(self, qualname: str) -> FunctionSummary | None:
        """The local summary of a function or method (``train_step``, ``Meter.update``,
        ``outer.inner``), or None when the file defines none by that name."""
        found = self.functions.get(qualname)
        if found is not None:
            return found
        entry = self._entry(qualname, self.function)
        if entry is None:
            return None
        del self._pending[qualname]
        self._bindings.pop(qualname, None)
        try:
            summary = self.functions[qualname] = self._summarizer(self, entry[0], qualname, entry[1])
        except RecursionError:
            return None  # nested deeper than the walk can follow: nothing known about it
        return summary

    def bindings(self, qualname: str) -> typing.Any:
        """What a function's names mean, which is all that resolving a call written in it asks:
        its ``kind``, ``class_name``, ``self_name``, ``scope`` and ``self_attributes``, as its
        local summary holds them; from a walk of its bindings alone (function_facts.FunctionBindings)
        while nothing asked for the summary, a fraction of its cost. None as for ``function``."""
        found = self.functions.get(qualname) or self._bindings.get(qualname)
        if found is not None:
            return found
        entry = self._entry(qualname, self.bindings)
        if entry is None:
            return None
        try:
            found = self._bindings[qualname] = self._summarizer(self, entry[0], qualname, entry[1], True)
        except RecursionError:
            return None
        return found

    def _entry(self, qualname: str, walk: typing.Callable[[str], object]) -> tuple[ast.AST, str | None] | None:
        """The tree of a function not summarized yet and its class (a released one restored;
        a nested one registered by ``walk`` of the function around it), or None."""
        if self._reload is not None:
            released = qualname if qualname in self._released else qualname.rsplit(".", 1)[0]
            if released in self._released and not self._restore_one(released):
                self._restore()
        entry = self._pending.get(qualname)
        if entry is None and "." in qualname:
            parent = qualname.rsplit(".", 1)[0]
            if parent in self._pending and parent not in self.classes:
                walk(parent)  # walking a function registers what it defines inside
                entry = self._pending.get(qualname)
        return None if self._summarizer is None else entry

    def register(self, qualname: str, node: ast.AST, class_name: str | None) -> None:
        """A function to summarize when asked (a method, or a function defined in another)."""
        if qualname not in self.functions:
            self._pending[qualname] = (node, class_name)

    def summarize_all(self) -> None:
        """Every function's local summary, nested ones included; the tree is let go."""
        while self._pending:
            self.function(next(iter(self._pending)))
        self._summarizer, self._bindings = None, {}

    def __getstate__(self) -> dict:
        """Pickled (for another process), a summary is complete and holds no tree."""
        self.summarize_all()
        return self.__dict__

    def to_json(self) -> dict:
        self.summarize_all()
        return {"path": self.path, "scope": encode(self.scope), "star_imports": encode(self.star_imports, _IMPORTS),
                "classes": encode(self.classes, _CLASSES), "functions": encode(self.functions, _FUNCTIONS),
                "exports": None if self.exports is None else list(self.exports)}

    @classmethod
    def from_json(cls, data: dict) -> ModuleSummary:
        exports = data["exports"]
        return cls(checked(data["path"], str), decode(Scope, data["scope"]), decode(_IMPORTS, data["star_imports"]),
                   decode(_CLASSES, data["classes"]), decode(_FUNCTIONS, data["functions"]),
                   exports=None if exports is None else tuple(checked(name, str) for name in checked(exports, list)))
