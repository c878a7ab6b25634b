"""Losses and what reaches them: which calls compute a cross-entropy or a binary cross-entropy
(through the imports, a criterion built once and called later, a function kept under a name), and
what the value they are given went through last: a softmax, a log-softmax, a sigmoid, or a plain
linear layer (raw logits).

The value is followed back through the names it was assigned to (``flow.reaching_assignments``),
through shape-only methods (``.view``, ``.squeeze``, indexing) and into the file's own models: a
``nn.Sequential`` whose last layer is ``nn.Softmax()``, or an ``nn.Module`` class whose
``forward`` returns a softmax (element by element when it returns a tuple that the caller
unpacks). Where any path is unknown, or two paths disagree, the answer is None.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

from torchlint.analysis.bindings import Bindings, ast_values
from torchlint.analysis.flow import Ancestry, Assigned, reaching_assignments
from torchlint.analysis.index import AST_SCOPES, SyntaxIndex
from torchlint.analysis.syntax import (ast_callee, ast_contains, ast_dotted_name, dotted_name, find_argument,
                                       positional_args, returns_of)
from torchlint.lazy import libcst as cst

# kind of loss -> the functions and the classes that compute it
LOSSES = {
    "cross_entropy": ({"torch.nn.functional.cross_entropy"},
                      {"torch.nn.CrossEntropyLoss", "torch.nn.modules.loss.CrossEntropyLoss"}),
    "bce_with_logits": ({"torch.nn.functional.binary_cross_entropy_with_logits"},
                        {"torch.nn.BCEWithLogitsLoss", "torch.nn.modules.loss.BCEWithLogitsLoss"}),
    "bce": ({"torch.nn.functional.binary_cross_entropy"},
            {"torch.nn.BCELoss", "torch.nn.modules.loss.BCELoss"}),
}
LOSS_FUNCTIONS = {name: kind for kind, (functions, _) in LOSSES.items() for name in functions}
LOSS_CLASSES = {name: kind for kind, (_, classes) in LOSSES.items() for name in classes}

ACTIVATION_FUNCTIONS = {
    "torch.softmax": "softmax", "torch.nn.functional.softmax": "softmax", "torch.special.softmax": "softmax",
    "torch.log_softmax": "log_softmax", "torch.nn.functional.log_softmax": "log_softmax",
    "torch.special.log_softmax": "log_softmax",
    "torch.sigmoid": "sigmoid", "torch.nn.functional.sigmoid": "sigmoid", "torch.special.expit": "sigmoid",
}
ACTIVATION_METHODS = {"softmax": "softmax", "log_softmax": "log_softmax", "sigmoid": "sigmoid"}
ACTIVATION_LAYERS = {f"torch.nn.{prefix}{layer}": kind
                     for layer, kind in (("Softmax", "softmax"), ("LogSoftmax", "log_softmax"), ("Sigmoid", "sigmoid"))
                     for prefix in ("", "modules.activation.")}
# Layers and functions whose output is an unbounded score: a logit, when nothing follows.
LOGIT_LAYERS = frozenset({f"torch.nn.{prefix}{layer}" for prefix in ("", "modules.linear.", "modules.conv.")
                          for layer in ("Linear", "LazyLinear", "Bilinear", "Conv1d", "Conv2d", "Conv3d",
                                        "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")})
LOGIT_FUNCTIONS = frozenset({"torch.nn.functional.linear", "torch.nn.functional.conv1d",
                             "torch.nn.functional.conv2d", "torch.nn.functional.conv3d"})
LOG_FUNCTIONS = frozenset({"torch.log"})
# Methods and functions that change a tensor's shape, type or place, not what its values mean.
SHAPE_METHODS = frozenset({"view", "reshape", "squeeze", "unsqueeze", "flatten", "contiguous", "float", "double",
                           "half", "bfloat16", "to", "cuda", "cpu", "permute", "transpose", "type_as", "view_as",
                           "reshape_as", "clone"})
SHAPE_FUNCTIONS = frozenset({"torch.squeeze", "torch.unsqueeze", "torch.flatten", "torch.reshape"})
# What a model is kept under: moved, cast, put in a mode, wrapped for data parallelism or compiled.
MODEL_METHODS = frozenset({"to", "cuda", "cpu", "float", "double", "half", "train", "eval", "requires_grad_"})
MODEL_WRAPPERS = frozenset({"torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
                            "torch.nn.parallel.DistributedDataParallel", "torch.compile"})
SEQUENTIAL = frozenset({"torch.nn.Sequential", "torch.nn.modules.container.Sequential"})
MAX_DEPTH = 5


@dataclass(frozen=True)
class Activation:
    """What a value went through last before the loss.

    ``kind``: "softmax", "log_softmax", "sigmoid" or "logits" (a linear or convolution layer with
    nothing after it). ``node``: where it is applied (the call ``F.softmax(z, 1)``, or the layer
    ``nn.Softmax()`` a model ends with). ``source``: the input of a call applied to the value
    itself (``z``), which a fix can put in the call's place; None for a model's last layer.
    ``through``: the name or the model the value came through (None when the call is written in
    the loss's own arguments). ``assigned``: the one assignment it came through, if that is how.
    ``two_steps``: a log-softmax written as the log of a softmax (``torch.log(F.softmax(z))``),
    which underflows where a log-softmax does not.
    """

    kind: str
    node: cst.CSTNode
    source: cst.BaseExpression | None
    through: str | None = None
    assigned: Assigned | None = None
    two_steps: bool = False


def first_input(call: cst.Call) -> cst.BaseExpression | None:
    """The ``input`` of a loss or an activation call (``F.cross_entropy(input, target)``,
    ``F.softmax(input, dim)``, ``layer(input)``): its first positional argument or ``input=``."""
    found = find_argument(call, "input", 0)
    return found.value if found is not None and not found.star else None


def _strip(expr: cst.BaseExpression, bindings: Bindings, methods: frozenset[str],
           functions: frozenset[str]) -> cst.BaseExpression:
    """``expr`` without the method calls in ``methods`` after it and the calls of ``functions``
    around it (their first argument)."""
    while True:
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in methods \
                and bindings.qualified_name(expr.func) is None:
            expr = expr.func.value
        elif isinstance(expr, cst.Call) and bindings.qualified_name(expr.func) in functions and expr.args \
                and not expr.args[0].star and expr.args[0].keyword is None:
            expr = expr.args[0].value
        else:
            return expr


class Losses:
    """The losses of one file and the activations that reach them."""

    def __init__(self, module: cst.Module, bindings: Bindings):
        self.module = module
        self.bindings = bindings
        self._ancestry: Ancestry | None = None

    def _path(self, node: cst.CSTNode, start: cst.CSTNode | None = None) -> list[cst.CSTNode] | None:
        """The nodes from ``start`` (the module) down to ``node``."""
        if self._ancestry is None:
            self._ancestry = Ancestry(self.module)
        return self._ancestry.path(node, start)

    # which loss ------------------------------------------------------------------------------------
    def kind(self, call: cst.Call) -> str | None:
        """"cross_entropy", "bce_with_logits" or "bce" for a call that computes that loss:
        ``F.cross_entropy(x, y)``, ``nn.CrossEntropyLoss()(x, y)``, or ``criterion(x, y)`` where
        every value the file gives ``criterion`` is such a loss."""
        func = call.func
        found = LOSS_FUNCTIONS.get(self.bindings.qualified_name(func))
        if found is not None:
            return found
        if isinstance(func, cst.Call):
            return LOSS_CLASSES.get(self.bindings.qualified_name(func.func))
        name = dotted_name(func)
        if name is None or name.rsplit(".", 1)[-1] in ACTIVATION_METHODS:
            return None
        kinds = {self._loss_value(value) for value in self.bindings.values(name)}
        return kinds.pop() if len(kinds) == 1 else None

    def _loss_value(self, value: cst.BaseExpression | None) -> str | None:
        """The loss a value assigned to a name computes when called: ``nn.CrossEntropyLoss(...)``
        (moved or not), ``F.cross_entropy``, either branch of ``a if c else b`` when both agree."""
        if value is None:
            return None
        if isinstance(value, cst.IfExp):
            kinds = {self._loss_value(value.body), self._loss_value(value.orelse)}
            return kinds.pop() if len(kinds) == 1 else None
        value = _strip(value, self.bindings, MODEL_METHODS, frozenset())
        if isinstance(value, cst.Call):
            return LOSS_CLASSES.get(self.bindings.qualified_name(value.func))
        return LOSS_FUNCTIONS.get(self.bindings.qualified_name(value))

    # what reaches it -------------------------------------------------------------------------------
    def given(self, call: cst.Call, chain: list[cst.CSTNode]) -> tuple[str, cst.BaseExpression, Activation] | None:
        """For a loss call at the end of ``chain``: which loss, its input, and what that input went
        through last; None when the call is not a known loss or that is unknown."""
        kind = self.kind(call)
        predictions = first_input(call) if kind is not None else None
        found = self.activation(predictions, chain) if predictions is not None else None
        return (kind, predictions, found) if found is not None else None

    def activation(self, expr: cst.BaseExpression, chain: list[cst.CSTNode]) -> Activation | None:
        """What ``expr``, evaluated at the last node of ``chain`` (the nodes from the module down to
        the place), went through last; None when that is unknown or not one thing."""
        return self._activation(expr, chain, 0, None)

    def _activation(self, expr: cst.BaseExpression, chain: list[cst.CSTNode], depth: int,
                    element: int | None) -> Activation | None:
        if depth > MAX_DEPTH:
            return None
        expr = _strip(expr, self.bindings, SHAPE_METHODS, SHAPE_FUNCTIONS)
        if isinstance(expr, cst.Subscript):
            model = self._call_target(expr.value)
            index = expr.slice[0].slice if len(expr.slice) == 1 else None
            if model is not None and isinstance(index, cst.Index) and isinstance(index.value, cst.Integer):
                return self._activation(expr.value, chain, depth, int(index.value.value))
            return None if element is not None else self._activation(expr.value, chain, depth, None)
        if isinstance(expr, cst.Tuple) and element is not None:
            if element < len(expr.elements) and not isinstance(expr.elements[element], cst.StarredElement):
                return self._activation(expr.elements[element].value, chain, depth, None)
            return None
        if isinstance(expr, cst.Name):
            return self._through_name(expr.value, chain, depth, element)
        if isinstance(expr, cst.Call):
            return self._of_call(expr, chain, depth, element)
        return None

    def _through_name(self, name: str, chain: list[cst.CSTNode], depth: int,
                      element: int | None) -> Activation | None:
        assignments = reaching_assignments(name, chain)
        if not assignments or element is not None and any(a.element is not None for a in assignments):
            return None  # unknown, or an element of an element (not followed)
        first = _one_kind([self._assigned_activation(assigned, chain, depth, element) for assigned in assignments])
        if first is None:
            return None
        # the fix can drop an activation applied in the one assignment the value came through
        assigned = assignments[0] if len(assignments) == 1 and first.through is None else None
        return Activation(first.kind, first.node, first.source, first.through or name, assigned, first.two_steps)

    def _assigned_activation(self, assigned: Assigned, chain: list[cst.CSTNode], depth: int,
                             element: int | None) -> Activation | None:
        where = self._chain_to(chain, assigned.value)
        if where is None:
            return None
        return self._activation(assigned.value, where, depth + 1,
                                assigned.element if assigned.element is not None else element)

    def _of_call(self, call: cst.Call, chain: list[cst.CSTNode], depth: int,
                 element: int | None) -> Activation | None:
        qualified = self.bindings.qualified_name(call.func)
        if element is None:
            kind = ACTIVATION_FUNCTIONS.get(qualified)
            if kind is not None:
                return Activation(kind, call, first_input(call))
            if qualified is None and isinstance(call.func, cst.Attribute) \
                    and call.func.attr.value in ACTIVATION_METHODS and not self._is_module_name(call.func.value):
                return Activation(ACTIVATION_METHODS[call.func.attr.value], call, call.func.value)
            if qualified in LOGIT_FUNCTIONS:
                return Activation("logits", call, None)
            log = self._log_of_softmax(call, chain, depth)
            if log is not None:
                return log
        if isinstance(call.func, cst.Call):  # nn.Softmax(dim=1)(x)
            layer = self._layer(call.func)
            if layer is not None and element is None:
                return Activation(layer.kind, call, first_input(call) if layer.kind != "logits" else None)
            return None
        callee = self._call_target(call)
        if callee is None:
            return None
        return self._model_output(callee, call, depth, element)

    def _log_of_softmax(self, call: cst.Call, chain: list[cst.CSTNode], depth: int) -> Activation | None:
        """``torch.log(F.softmax(z))``, ``F.softmax(z).log()``: a log-softmax written in two steps."""
        if self.bindings.qualified_name(call.func) in LOG_FUNCTIONS:
            inner = first_input(call)
        elif isinstance(call.func, cst.Attribute) and call.func.attr.value == "log" and not call.args \
                and self.bindings.qualified_name(call.func) is None:
            inner = call.func.value
        else:
            return None
        if inner is None:
            return None
        found = self._activation(inner, chain, depth + 1, None)
        if found is None or found.kind != "softmax" or found.through is not None:
            return None
        return Activation("log_softmax", call, found.source, two_steps=True)

    def _is_module_name(self, expr: cst.BaseExpression) -> bool:
        """``torch``, ``F``: a module, whose ``.softmax`` is a function rather than a method."""
        name = dotted_name(expr)
        return name is not None and self.bindings.qualified_name(expr) is not None \
            and not self.bindings.values(name)

    def _call_target(self, expr: cst.BaseExpression) -> str | None:
        """The dotted name a call calls (``model`` for ``model(x)`` and ``model.forward(x)``)."""
        if not isinstance(expr, cst.Call):
            return None
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value == "forward":
            func = func.value
        name = dotted_name(func)
        if name is None or self.bindings.qualified_name(func) is not None and not self.bindings.values(name):
            return None
        return name

    def _model_output(self, name: str, call: cst.Call, depth: int, element: int | None) -> Activation | None:
        """What the module kept under ``name`` applies last, for every value the file gives it."""
        values = self.bindings.values(name)
        first = _one_kind([self._module_output(value, depth + 1, element) if value is not None else None
                           for value in values])
        if first is None:
            return None
        if first.source is not None and first.kind != "logits":
            # an activation layer called on the value (`self.softmax(x)`): its input can take its place
            return Activation(first.kind, call, first_input(call))
        return Activation(first.kind, first.node, None, name)

    def _module_output(self, value: cst.BaseExpression, depth: int, element: int | None) -> Activation | None:
        """What a module built by ``value`` applies last to its output."""
        if depth > MAX_DEPTH:
            return None
        value = _strip(value, self.bindings, MODEL_METHODS, MODEL_WRAPPERS)
        if not isinstance(value, cst.Call):
            return None
        if element is None:
            layer = self._layer(value)
            if layer is not None:
                # a layer called on a value: the call's input is what an activation replaces
                return Activation(layer.kind, value, value if layer.kind != "logits" else None)
        qualified = self.bindings.qualified_name(value.func)
        if qualified in SEQUENTIAL:
            layers = positional_args(value)
            if element is not None or not layers or any(a.star for a in value.args):
                return None
            last = self._layer(layers[-1].value)
            if last is not None:
                return Activation(last.kind, layers[-1].value, None)
            return self._module_output(layers[-1].value, depth + 1, None)
        name = dotted_name(value.func)
        classes = self.bindings.defined(name, cst.ClassDef) if name is not None else []
        if len(classes) != 1:
            return None
        return self._forward_output(classes[0], depth + 1, element)

    def _layer(self, value: cst.BaseExpression) -> Activation | None:
        """``nn.Softmax(dim=1)`` -> softmax, ``nn.Linear(8, 2)`` -> logits: a layer built in place."""
        if not isinstance(value, cst.Call):
            return None
        qualified = self.bindings.qualified_name(value.func)
        kind = ACTIVATION_LAYERS.get(qualified) or ("logits" if qualified in LOGIT_LAYERS else None)
        return Activation(kind, value, None) if kind is not None else None

    def _forward_output(self, cls: cst.ClassDef, depth: int, element: int | None) -> Activation | None:
        """What the ``forward`` of a model class of the file returns last (every return agreeing)."""
        forward = next((s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "forward"),
                       None)
        if forward is None:
            return None
        returns = returns_of(forward)
        if not returns or any(r.value is None for r in returns):
            return None
        first = _one_kind([self._activation(ret.value, chain, depth, element) if chain is not None else None
                           for ret, chain in ((ret, self._path(ret)) for ret in returns)])
        return Activation(first.kind, first.node, None) if first is not None else None

    def _chain_to(self, chain: list[cst.CSTNode], node: cst.CSTNode) -> list[cst.CSTNode] | None:
        """The nodes from the module down to ``node``, which lies in the innermost function of
        ``chain`` (or the module)."""
        for i in range(len(chain) - 1, -1, -1):
            if isinstance(chain[i], (cst.FunctionDef, cst.Module)):
                path = self._path(node, chain[i])
                return chain[:i] + path if path is not None else None
        return None


def _one_kind(found: list[Activation | None]) -> Activation | None:
    """The first answer, when there are answers, all known and all of one kind."""
    if not found or any(a is None for a in found) or len({a.kind for a in found}) != 1:
        return None
    return found[0]


# --- the precheck's questions ------------------------------------------------------------------------

def _last_part(name: str) -> str:
    return name.rsplit(".", 1)[-1]


# What a call that starts each answer of ``Losses.activation`` ends in, by kind (from the tables above:
# a log-softmax may also be written as the log of a softmax).
PRODUCERS: dict[str, frozenset[str]] = {
    kind: frozenset({_last_part(name) for name, of in (*ACTIVATION_FUNCTIONS.items(), *ACTIVATION_LAYERS.items(),
                                                        *ACTIVATION_METHODS.items()) if of in kinds})
    for kind, kinds in (("softmax", {"softmax"}), ("log_softmax", {"log_softmax", "softmax"}),
                        ("sigmoid", {"sigmoid"}))}
PRODUCERS["logits"] = frozenset(_last_part(name) for name in LOGIT_LAYERS | LOGIT_FUNCTIONS)


def ast_may_be_given(index: SyntaxIndex, losses: Iterable[str], activations: Iterable[str]) -> bool:
    """The precheck twin of ``Losses.given``: could a loss of one of the ``losses`` kinds be given a
    value that went through one of the ``activations`` kinds? Every answer starts at a call that
    produces the activation, and is found by following the loss's input back as ``Losses`` does
    (``_AstLosses`` follows every path it may take, and more)."""
    kinds = frozenset(activations)
    if not index.calls(*{name for kind in kinds for name in PRODUCERS[kind]}):
        return False
    twin = index.memo("losses", lambda: _AstLosses(index))
    # One `seen` for every input: the search is reachability (any path), so what an input's search
    # visited without finding the activation reaches none, and another input's search may skip it
    # (a fresh set per input made a file with many losses quadratic).
    seen: set = set()
    return any(twin.may_reach(value, kinds, seen) for value in twin.loss_inputs(frozenset(losses)))


_SHAPE_FUNCTIONS = frozenset(_last_part(name) for name in SHAPE_FUNCTIONS)
_MODEL_WRAPPERS = frozenset(_last_part(name) for name in MODEL_WRAPPERS)
_SEQUENTIAL = frozenset(_last_part(name) for name in SEQUENTIAL)
_LOG_FUNCTIONS = frozenset(_last_part(name) for name in LOG_FUNCTIONS)


def _ast_first_input(call: ast.Call) -> list[ast.AST]:
    """What ``first_input`` may answer for a call: ``input=``, or its first positional argument."""
    found = [k.value for k in call.keywords if k.arg == "input"]
    if call.args and not isinstance(call.args[0], ast.Starred):
        found.append(call.args[0])
    return found


class _AstLosses:
    """The precheck twin of ``Losses``, on CPython's tree: a loss call is matched by the last part
    of its name, a name is followed to every assignment of it in its scope (``Losses`` takes only
    those that reach the place), a call to every value the file gives its dotted name."""

    def __init__(self, index: SyntaxIndex):
        self.index = index
        self.values = ast_values(index)
        self.assigned: dict[str, list[ast.AST]] = {}  # plain name -> the assignments binding it, unpacked too
        for node in index.nodes(ast.Assign, ast.AnnAssign):
            if node.value is not None:
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for bound in _bound_names(target):
                        self.assigned.setdefault(bound, []).append(node)
        self._scopes: dict[int, list[ast.AST]] | None = None  # see _scope
        self._assigned_in: dict[tuple[int, str], list[ast.AST]] | None = None  # see _reaching
        self.classes: dict[str, list[ast.ClassDef]] = {}
        for node in index.nodes(ast.ClassDef):
            self.classes.setdefault(node.name, []).append(node)

    def loss_inputs(self, losses: frozenset[str]) -> list[ast.AST]:
        """The inputs of every call ``Losses.kind`` may take for a loss of the ``losses`` kinds: a
        loss function, a loss class's instance called in place, or a name given such a value."""
        functions = {_last_part(name) for kind in losses for name in LOSSES[kind][0]}
        classes = {_last_part(name) for kind in losses for name in LOSSES[kind][1]}
        calls = list(self.index.calls(*functions))
        if self.index.calls(*classes):
            wanted = self.index.names(classes)
            calls += [call for call in self.index.nodes(ast.Call)
                      if isinstance(call.func, ast.Call) and ast_callee(call.func) in wanted]
        criteria = self._criteria(self.index.names(functions | classes))
        calls += [call for name in criteria for call in self.index.calls(_last_part(name))
                  if ast_dotted_name(call.func) == name]
        return [value for call in calls for value in _ast_first_input(call)]

    def _criteria(self, wanted: frozenset[str]) -> set[str]:
        """The dotted names given a value that names one of ``wanted`` (``criterion =
        nn.CrossEntropyLoss()``, ``loss_fn = F.cross_entropy``): what ``Losses._loss_value`` needs."""
        if not any(node.id in wanted for node in self.index.nodes(ast.Name)) \
                and not any(node.attr in wanted for node in self.index.nodes(ast.Attribute)):
            return set()
        return {name for name, words in self._words().items() if _last_part(name) not in ACTIVATION_METHODS
                and not words.isdisjoint(wanted)}

    def _words(self) -> dict[str, set[str]]:
        """Each dotted name given values -> the names and attribute names those values mention (one
        walk of them, however many loss kinds ask)."""
        return self.index.memo("losses: words of values", lambda: {
            name: {node.id if isinstance(node, ast.Name) else node.attr for value in values for node in ast.walk(value)
                   if isinstance(node, (ast.Name, ast.Attribute))}
            for name, values in self.values.items()})

    def may_reach(self, expr: ast.AST, kinds: frozenset[str], seen: set) -> bool:
        """Could ``Losses._activation`` find one of ``kinds`` for ``expr``?"""
        key = (id(expr), kinds)
        if key in seen:
            return False
        seen.add(key)
        if isinstance(expr, ast.Subscript):
            return self.may_reach(expr.value, kinds, seen)
        if isinstance(expr, ast.Tuple):  # an element of a model's output
            return any(self.may_reach(element, kinds, seen) for element in expr.elts)
        if isinstance(expr, ast.Name):
            return any(self.may_reach(node.value, kinds, seen) for node in self._reaching(expr))
        if isinstance(expr, ast.Call):
            return self._may_call(expr, kinds, seen)
        return False

    def _may_call(self, call: ast.Call, kinds: frozenset[str], seen: set) -> bool:
        func = call.func
        callee = ast_callee(call)
        producers = self.index.names({name for kind in kinds for name in PRODUCERS[kind]})
        if callee in producers or isinstance(func, ast.Call) and ast_callee(func) in producers:
            return True  # an activation function, method or layer called on the value
        if isinstance(func, ast.Attribute) and func.attr in SHAPE_METHODS \
                and self.may_reach(func.value, kinds, seen):
            return True
        if callee in self.index.names(_SHAPE_FUNCTIONS) and call.args and not isinstance(call.args[0], ast.Starred) \
                and self.may_reach(call.args[0], kinds, seen):
            return True
        if "log_softmax" in kinds and callee in self.index.names(_LOG_FUNCTIONS):  # the log of a softmax
            inner = _ast_first_input(call) + ([func.value] if isinstance(func, ast.Attribute) else [])
            if any(self.may_reach(value, kinds | {"softmax"}, seen) for value in inner):
                return True
        if isinstance(func, ast.Attribute) and func.attr == "forward":
            func = func.value
        name = ast_dotted_name(func)
        return name is not None and any(self._may_module(value, kinds, seen) for value in self.values.get(name, ()))

    def _may_module(self, value: ast.AST, kinds: frozenset[str], seen: set) -> bool:
        """Could ``Losses._module_output`` find one of ``kinds`` for a module built by ``value``?"""
        key = (id(value), kinds, "module")
        if key in seen or not isinstance(value, ast.Call):
            return False
        seen.add(key)
        func, callee = value.func, ast_callee(value)
        if isinstance(func, ast.Attribute) and func.attr in MODEL_METHODS \
                and self._may_module(func.value, kinds, seen):
            return True
        if callee in self.index.names(_MODEL_WRAPPERS) and value.args \
                and self._may_module(value.args[0], kinds, seen):
            return True
        if callee in self.index.names({name for kind in kinds for name in PRODUCERS[kind]}):
            return True  # a layer
        if callee in self.index.names(_SEQUENTIAL) and value.args and not isinstance(value.args[-1], ast.Starred) \
                and self._may_module(value.args[-1], kinds, seen):
            return True
        for cls in self.classes.get(ast_dotted_name(func) or "", ()):
            if any(self.may_reach(returned, kinds, seen) for returned in self._forward_returns(cls)):
                return True
        return False

    def _forward_returns(self, cls: ast.ClassDef) -> list[ast.AST]:
        """What the class's ``forward`` methods return (every ``return`` with a value in them)."""
        return self.index.memo(("forward returns", id(cls)), lambda: [
            node.value for forward in cls.body
            if isinstance(forward, (ast.FunctionDef, ast.AsyncFunctionDef)) and forward.name == "forward"
            for node in ast.walk(forward) if isinstance(node, ast.Return) and node.value is not None])

    def _scope(self, node: ast.AST) -> ast.AST | None:
        """The innermost function, class or lambda around a name or an assignment (by its span: a
        definition's decorators are outside it); None at module level."""
        if self._scopes is None:  # line -> the scopes over it, outer first, built on first use
            self._scopes = {}
            for scope in sorted(self.index.nodes(*AST_SCOPES), key=lambda s: (s.lineno, s.col_offset)):
                for line in range(scope.lineno, scope.end_lineno + 1):
                    self._scopes.setdefault(line, []).append(scope)
        return next((scope for scope in reversed(self._scopes.get(node.lineno, ())) if ast_contains(scope, node)),
                    None)

    def _reaching(self, name: ast.Name) -> list[ast.AST]:
        """The assignments that may give ``name`` its value as ``flow.reaching_assignments`` finds
        them: every one in its scope (none in a lambda, which binds nothing)."""
        scope = self._scope(name)
        if isinstance(scope, ast.Lambda):
            return []
        if self._assigned_in is None:  # (scope, name) -> its assignments, built once
            self._assigned_in = {}
            for bound, nodes in self.assigned.items():
                for node in nodes:
                    self._assigned_in.setdefault((id(self._scope(node)), bound), []).append(node)
        return self._assigned_in.get((id(scope), name.id), [])


def _bound_names(target: ast.AST) -> list[str]:
    """The plain names an assignment target binds (``a``, ``a, (b, *c)``), as ``flow.target_binds``
    may find them."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _bound_names(element)]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return []
