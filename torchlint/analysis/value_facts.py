"""What the expressions of a function hold and do, read from CPython's tree in statement order.

The walk keeps what each local name holds as a tuple of operands (a parameter, a tensor computed
here, a call's result, unknown; the empty tuple is a plain Python value such as ``loss.item()``
or ``len(x)``), so that ``float(x)`` on a parameter, ``float(n)`` on a count and ``print(loss)``
on a model's loss are told apart; and it records the facts expressions hold: host syncs, values
kept, model calls, backpropagation, mode calls, and the calls that may be the project's code
(``CallSite``s, resolved later by callgraph.py). function_facts.py walks the statements.
"""

from __future__ import annotations

import ast

from torchlint.analysis.module_index import ScopeNames, SourceLines, dotted, method_kind
from torchlint.analysis.summaries import (DEVICE, GLOBAL_HOLDER, PARAMETER, RESULT, TENSOR, UNKNOWN_VALUE, Argument,
                                          CallSite, Convolution, Effect, Keep, ModeCall, ModuleSummary, Operand, Sync,
                                          detached, operand, public, union)
from torchlint.analysis.devices import TENSOR_FACTORIES, names_python_value
from torchlint.analysis.tensor_places import (
    HOST_FACTORIES, MOVING_METHODS, RANDOM_FILLS, already_on_host, factory_places, moved, moves, moving_function,
)
from torchlint.analysis.loops import BACKWARD_FUNCTIONS, BACKWARD_METHODS, MODEL_BUILDER, MODEL_NAME, NO_GRAD_CONTEXTS
from torchlint.analysis.modules import ast_convolution_kind, is_optional

# --- what the walk knows about calls -------------------------------------------------------------

SYNC_METHODS = frozenset({"item", "tolist", "numpy"})  # and `.cpu()` without arguments
PYTHON_METHODS = frozenset({"size", "dim", "numel", "nelement", "element_size", "data_ptr", "is_contiguous",
                            "get_device", "stride", "storage_offset", "ndimension", "is_floating_point",
                            "is_complex", "keys"})
PYTHON_ATTRIBUTES = frozenset({"shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "is_leaf",
                               "grad_fn", "layout", "is_sparse", "names"})
DETACHING = frozenset({"detach", "detach_"})
# Methods of tensors (and of containers of them): never calls of the project's code, the result
# derives from the receiver and the arguments. A project class that defines one of these names
# is not followed through it.
TENSOR_METHODS = frozenset("""to cuda cpu float half double long int bool bfloat16 type type_as view view_as reshape
    reshape_as flatten squeeze unsqueeze permute transpose contiguous expand expand_as repeat clone mean sum max min
    argmax argmin softmax log_softmax exp log pow sqrt abs clamp clamp_ add add_ mul mul_ sub sub_ div div_ matmul mm
    bmm norm std var prod cumsum gather scatter index_select masked_fill masked_fill_ chunk split narrow t zero_
    fill_ copy_ sigmoid tanh relu topk sort eq ne gt lt ge le all any nonzero round floor ceil sign neg unbind
    values items get pop lerp_ addcmul_ addcdiv_""".split())
CONTAINER_MUTATORS = frozenset({"append", "extend", "insert", "add", "appendleft"})
IN_PLACE = frozenset({"add_", "sub_", "mul_", "div_", "copy_", "lerp_", "addcmul_", "addcdiv_"})
# Builtins whose result is a plain Python value; the others listed derive from their arguments.
PYTHON_BUILTINS = frozenset({"len", "str", "repr", "isinstance", "issubclass", "hasattr", "callable", "id", "hash",
                             "type", "range", "format", "chr", "ord", "open", "input", "vars", "dir", "globals",
                             "locals", "super", "setattr", "delattr", "print", "float", "int", "bool"})
DERIVING_BUILTINS = frozenset({"min", "max", "sum", "abs", "round", "sorted", "list", "tuple", "set", "dict", "zip",
                               "enumerate", "reversed", "map", "filter", "iter", "next", "getattr", "any", "all",
                               "frozenset"})
BUILTINS = PYTHON_BUILTINS | DERIVING_BUILTINS
HOST_CONVERSIONS = frozenset({"float", "int", "bool"})
# Loggers that take a tensor as their second argument and read it on the host (TensorBoard's
# SummaryWriter, and the project's classes derived from it)
TENSOR_LOGGERS = frozenset({"add_scalar", "add_scalars"})
PYTHON_COMPARISONS = (ast.In, ast.NotIn, ast.Is, ast.IsNot)
LITERALS = (bool, int, float, str, type(None))
PYTHON_ANNOTATIONS = frozenset({"int", "float", "bool", "str"})
ENABLE_GRAD = frozenset({"torch.enable_grad", "torch.autograd.enable_grad", "torch.autograd.grad_mode.enable_grad"})
SET_GRAD_ENABLED = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled",
                              "torch.autograd.grad_mode.set_grad_enabled"})
AUTOGRAD_FUNCTIONS = frozenset({"torch.autograd.grad"}) | ENABLE_GRAD
LAYERS = {f"torch.nn.{path}{name}": name for name in ("Conv1d", "Conv2d", "Conv3d", "Linear")
          for path in ("", "modules.conv." if name.startswith("Conv") else "modules.linear.")}
BIAS_POSITION = {"Linear": 2, "Conv1d": 7, "Conv2d": 7, "Conv3d": 7}
SEQUENTIALS = frozenset({"torch.nn.Sequential", "torch.nn.modules.container.Sequential"})


def _is_text(node: ast.AST) -> bool:
    """A string written out: ``"%d" % n`` formats, it takes no remainder."""
    return type(node) is ast.JoinedStr or (type(node) is ast.Constant and isinstance(node.value, str))


def is_periodic_remainder(test: ast.AST) -> bool:
    """A remainder is taken (``step % 100 == 0``), not a string formatted (``"%d" % n``)."""
    for node in ast.walk(test):
        if type(node) is ast.BinOp and type(node.op) is ast.Mod and not _is_text(node.left):
            return True
    return False


NO_CHANGE = object()


class WalkerState:
    """One function's walk: what its names hold, where it is (grad mode, a periodic branch),
    and the facts found so far; how a binding is recorded."""

    def __init__(self, module: ModuleSummary, node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str,
                 class_name: str | None, text: SourceLines):
        self.module, self.node, self.qualname, self.class_name, self.text = module, node, qualname, class_name, text
        self.path = module.path
        self.kind = method_kind(node, class_name is not None)
        self.names = ScopeNames()
        self.env: dict[str, tuple[Operand, ...]] = {}
        self.grad: bool | None = True
        self.periodic = False
        self.tensor_guarded = False  # periodic only because a test asks whether a value is a tensor
        self.looped = False  # in a loop of the function
        self.declared_globals: set[str] = set()
        self.qualified_cache: dict[str, str | None] = {}
        self.syncs: list[Sync] = []
        self.clears: list[Effect] = []
        self.keeps: list[Keep] = []
        self.forwards: list[Effect] = []
        self.model_calls: list[Effect] = []  # TENSOR operands' index: which of these made the tensor
        self.forwards_once: list[Effect] = []  # the model calls outside the function's loops
        self.backward: list[Effect] = []
        self.autograd: list[Effect] = []
        self.modes: list[ModeCall] = []
        self.returns: list[tuple] = []  # (value, its operands, each element's where a tuple is written out)
        self.calls: list[CallSite] = []
        self.call_index: dict[int, int] = {}  # id(ast.Call) -> index in calls
        self.fallbacks: dict[int, tuple[Operand, ...]] = {}  # index in calls -> the result if unresolved
        self.bound_values: dict[str, ast.AST | None] = {}
        self.all_bound_values: dict[str, list[ast.AST | None]] = {}  # every value a local name is bound to
        self.self_values: dict[str, list[ast.AST | None]] = {}  # self.<attr> -> every value assigned to it
        self.generator = False
        self.builds: set[str] = set()
        self.convolutions: dict[tuple[int, bool], Convolution] = {}  # the first of each dimension, built or applied
        self.optional = 0  # inside `x if flag else None`: what is built there may never be
        self._parameters(node.args)
        self.grad_mode = self._decorated_grad_mode()
        if self.grad_mode == "disabled":
            self.grad = False

    # -- set-up

    def _parameters(self, args: ast.arguments) -> None:
        ordered = [*args.posonlyargs, *args.args]
        self.positional = len(ordered)
        defaults = [None] * (len(ordered) - len(args.defaults)) + list(args.defaults)
        self.star = self.double_star = None
        if args.vararg is not None:
            self.star = len(ordered)
            ordered.append(args.vararg)
            defaults.append(None)
        ordered += args.kwonlyargs
        defaults += args.kw_defaults
        if args.kwarg is not None:
            self.double_star = len(ordered)
            ordered.append(args.kwarg)
            defaults.append(None)
        self.parameters = tuple(arg.arg for arg in ordered)
        self.defaults = tuple(repr(d.value if type(d) is ast.Constant else tuple(e.value for e in d.elts)) if type(
            d) is ast.Constant or type(d) is ast.Tuple and all(type(e) is ast.Constant for e in d.elts) else None
                              for d in defaults)  # `(None, None)` too
        self.parameter_index = {name: index for index, name in enumerate(self.parameters)}
        self.self_name = self.parameters[0] if self.class_name and self.kind != "staticmethod" and self.positional \
            else None
        self.annotated: dict[str, str] = {}
        for index, arg in enumerate(ordered):
            self.names.bind(arg.arg)
            annotation = arg.annotation
            if type(annotation) is ast.Constant and isinstance(annotation.value, str) \
                    and annotation.value.replace(".", "").isidentifier():
                text = annotation.value
            else:
                text = dotted(annotation) if annotation is not None else None
            if arg.arg == self.self_name:
                self.env[arg.arg] = UNKNOWN_VALUE  # its attributes are state nothing here knows
            elif text in PYTHON_ANNOTATIONS:
                self.env[arg.arg] = ()
            else:
                self.env[arg.arg] = (operand(PARAMETER, index, arg.arg),)
                if text is not None and not (self._qualify(text) or "").startswith("torch."):
                    self.annotated[arg.arg] = text

    def _decorated_grad_mode(self) -> str | None:
        for decorator in self.node.decorator_list:
            switch = self._grad_switch(decorator)
            if switch is False:
                return "disabled"
            if switch is True:
                self.autograd.append(self._effect(decorator))
                return "enabled"
        return None

    # -- helpers

    def _effect(self, node: ast.AST, what: str | None = None) -> Effect:
        return self.text.effect(self.path, node, what)

    def _qualify(self, text: str | None) -> str | None:
        """The imported name a dotted name stands for (``torch.nn.Conv2d`` for ``nn.Conv2d``)."""
        if text is None:
            return None
        found = self.qualified_cache.get(text, NO_CHANGE)
        if found is NO_CHANGE:
            root, _, rest = text.partition(".")
            imported = self.names.imports.get(root)
            if imported is None and root not in self.names.counts:
                imported = self.module.scope.imports.get(root)
            base = imported.qualified if imported is not None else None
            found = self.qualified_cache[text] = None if base is None else f"{base}.{rest}" if rest else base
        return found

    def _grad_switch(self, expr: ast.AST) -> object:
        """False/True when a ``with`` item or decorator turns grad off/on, None when it sets it
        to something unknown, NO_CHANGE otherwise."""
        func = expr.func if type(expr) is ast.Call else expr
        name = self._qualify(dotted(func))
        if name is None:
            return NO_CHANGE
        if name in NO_GRAD_CONTEXTS:
            return False
        if name in ENABLE_GRAD:
            return True
        if name in SET_GRAD_ENABLED and type(expr) is ast.Call:
            value = expr.args[0] if len(expr.args) == 1 else None
            return value.value if type(value) is ast.Constant and type(value.value) is bool else None
        return NO_CHANGE

    def _computed(self, ops: tuple[Operand, ...]) -> tuple[Operand, ...]:
        """A value computed here: under no_grad it carries no history."""
        return detached(ops) if self.grad is False else ops

    def _holder(self, expr: ast.AST) -> Operand | None:
        """Who holds the container an expression names, when it outlives the call: a parameter
        (``self`` is one) or the module; None for a local container."""
        while type(expr) in (ast.Attribute, ast.Subscript):
            expr = expr.value
        if type(expr) is not ast.Name:
            return None
        name = expr.id
        index = self.parameter_index.get(name)
        if index is not None and self.names.counts.get(name) == 1:
            return operand(PARAMETER, index, name)
        if name in self.declared_globals or (name not in self.names.counts and name not in self.module.scope.imports):
            return GLOBAL_HOLDER
        return None

    def _sync(self, node: ast.AST, ops: tuple[Operand, ...], how: str) -> None:
        if ops and (not self.periodic or self.tensor_guarded):
            if self.tensor_guarded and how == "method":
                how = "guarded"  # `if isinstance(v, torch.Tensor): v = v.item()`: a sync where v is a tensor
            self.syncs.append(Sync(self._effect(node), public(ops), how))

    def _keep(self, node: ast.AST, ops: tuple[Operand, ...], holder: Operand, container: ast.AST, how: str) -> None:
        kept = [op for op in public(ops) if op.kind in (PARAMETER, TENSOR, RESULT)]
        if kept:
            effect, into = self._effect(node), self.text.snippet(container)
            self.keeps.extend(Keep(effect, op, holder, into, how, op.graph) for op in kept)

    def _mode_call(self, node: ast.Call, method: str) -> None:
        receiver = dotted(node.func.value)
        if receiver is None:
            return
        if not node.args and not node.keywords:
            mode = method
        elif method == "train" and len(node.args) + len(node.keywords) == 1 and \
                (not node.keywords or node.keywords[0].arg == "mode"):
            value = node.args[0] if node.args else node.keywords[0].value
            if type(value) is not ast.Constant or type(value.value) is not bool:
                return
            mode = "train" if value.value else "eval"
        else:
            return
        self.modes.append(ModeCall(receiver, mode, self._effect(node)))

    # -- bindings

    def assign(self, target: ast.AST, ops: tuple[Operand, ...], value: ast.AST | None, statement: ast.AST,
               how: str) -> None:
        kind = type(target)
        if kind is ast.Name:
            name = target.id
            if name in self.declared_globals:
                self._keep(statement, ops, GLOBAL_HOLDER, target, how)
            self.env[name] = ops
            self.names.bind(name, value)
            self.bound_values[name] = value
            self.all_bound_values.setdefault(name, []).append(value)
        elif kind is ast.Tuple or kind is ast.List:
            call = self.call_index.get(id(value)) if type(value) is ast.Call else None
            whole = call is None or ops != (operand(RESULT, call),) or any(type(e) is ast.Starred for e in target.elts)
            for position, element in enumerate(target.elts):  # `a, b = f()`: each its element of what f returns
                self.assign(element, ops if whole else (operand(RESULT, call, str(position)),), None, statement, how)
        elif kind is ast.Starred:
            self.assign(target.value, ops, None, statement, how)
        elif kind is ast.Attribute:
            receiver = target.value
            if type(receiver) is ast.Name and receiver.id == self.self_name:
                self.self_values.setdefault(target.attr, []).append(value)
            holder = self._holder(target)
            if holder is not None:
                if how == "assign" and value is not None and _mentions(value, dotted(target)):
                    how = "augment"  # self.total = self.total + loss
                self._keep(statement, ops, holder, target, how)
        elif kind is ast.Subscript:
            self.value(target.slice)
            holder = self._holder(target.value)
            if holder is not None:
                self._keep(statement, ops, holder, target.value, "item" if how == "assign" else how)


class ExpressionFacts(WalkerState):
    """What an expression's value derives from, recording the facts inside it."""

    def value(self, node: ast.AST) -> tuple[Operand, ...]:
        """What the expression's value derives from, recording the facts inside it."""
        handler = _EXPRESSIONS.get(type(node))
        return handler(self, node) if handler is not None else ()

    def _name(self, node: ast.Name) -> tuple[Operand, ...]:
        return self.env.get(node.id, UNKNOWN_VALUE)

    def _attribute(self, node: ast.Attribute) -> tuple[Operand, ...]:
        ops = self.value(node.value)
        if node.attr in PYTHON_ATTRIBUTES or names_python_value(self._qualify(dotted(node))):
            return ()  # `x.shape`; `torch.int32`, `math.pi`
        return detached(ops) if node.attr == "data" else ops

    def _subscript(self, node: ast.Subscript) -> tuple[Operand, ...]:
        self.value(node.slice)
        return self.value(node.value)

    def _formatted(self, node: ast.JoinedStr) -> tuple[Operand, ...]:
        for part in node.values:
            if type(part) is ast.FormattedValue:
                self._sync(part, self.value(part.value), "format")
                if part.format_spec is not None:
                    self.value(part.format_spec)
        return ()

    def _binary(self, node: ast.BinOp) -> tuple[Operand, ...]:
        left, right = self.value(node.left), self.value(node.right)
        if type(node.op) is ast.Mod and _is_text(node.left):
            self._sync(node, right, "format")  # "%.3f" % loss
            return ()
        return self._computed(union(left, right))

    def _unary(self, node: ast.UnaryOp) -> tuple[Operand, ...]:
        ops = self.value(node.operand)
        return () if type(node.op) is ast.Not else self._computed(ops)

    def _several(self, node: ast.AST) -> tuple[Operand, ...]:
        parts = node.values if type(node) is ast.BoolOp else node.elts
        return union(*(self.value(part) for part in parts))

    def _compare(self, node: ast.Compare) -> tuple[Operand, ...]:
        ops = self._computed(union(self.value(node.left), *(self.value(part) for part in node.comparators)))
        if any(type(op) in PYTHON_COMPARISONS for op in node.ops) or any(
                type(part) is ast.Constant and isinstance(part.value, (str, type(None)))
                for part in (node.left, *node.comparators)):
            return ()  # `x in seen`, `x is None`, `mode == "train"`: a Python bool
        return ops

    def _dict(self, node: ast.Dict) -> tuple[Operand, ...]:
        for key in node.keys:
            if key is not None:
                self.value(key)
        return union(*(self.value(value) for value in node.values))

    def _conditional(self, node: ast.IfExp) -> tuple[Operand, ...]:
        self.value(node.test)
        self.optional += (optional := is_optional(node))
        found = union(self.value(node.body), self.value(node.orelse))
        self.optional -= optional
        return found

    def _starred(self, node: ast.AST) -> tuple[Operand, ...]:
        return self.value(node.value)

    def _walrus(self, node: ast.NamedExpr) -> tuple[Operand, ...]:
        ops = self.value(node.value)
        self.assign(node.target, ops, node.value, node, "assign")
        return ops

    def _yield(self, node: ast.AST) -> tuple[Operand, ...]:
        self.generator = True
        if node.value is not None:
            self.value(node.value)
        return UNKNOWN_VALUE

    def _slice(self, node: ast.Slice) -> tuple[Operand, ...]:
        for part in (node.lower, node.upper, node.step):
            if part is not None:
                self.value(part)
        return ()

    def _comprehension(self, node: ast.AST) -> tuple[Operand, ...]:
        saved: dict[str, tuple[Operand, ...] | None] = {}
        for generator in node.generators:
            ops = self.value(generator.iter)
            for name in _target_names(generator.target):
                saved.setdefault(name, self.env.get(name))
                self.env[name] = ops
            for condition in generator.ifs:
                self.value(condition)
        if type(node) is ast.DictComp:
            result = union(self.value(node.key), self.value(node.value))
        else:
            result = self.value(node.elt)
        for name, ops in saved.items():
            if ops is None:
                self.env.pop(name, None)
            else:
                self.env[name] = ops
        return result

    # -- calls

    def _call(self, node: ast.Call) -> tuple[Operand, ...]:
        func, star = node.func, False
        positional = []
        for arg in node.args:
            if type(arg) is ast.Starred:
                star = True
                arg = arg.value
            positional.append(self.value(arg))
        keywords = []
        for keyword in node.keywords:
            star = star or keyword.arg is None
            keywords.append(self.value(keyword.value))
        method, receiver = None, ()
        if type(func) is ast.Attribute:
            method, receiver = func.attr, self.value(func.value)
            handled = self._method_call(node, method, receiver, positional, keywords)
            if handled is not None:
                return handled
        elif type(func) is not ast.Name:
            self.value(func)  # `f()(x)`, `layers[0](x)`: no dotted callee, only what is inside
            return self._computed(union(*positional, *keywords)) or UNKNOWN_VALUE
        text = dotted(func)
        qualified = self._qualify(text)
        self._convolution(node, qualified)
        if qualified is not None and qualified.startswith("torch."):
            return self._torch_call(node, qualified, positional, keywords)
        if method is None and text in BUILTINS and text not in self.names.counts \
                and text not in self.module.scope.locals:
            return self._builtin_call(node, text, positional)
        if names_python_value(qualified):
            return ()  # `math.log(2)`: a Python number
        fallback = moved(self._computed(union(receiver, *positional, *keywords))) or UNKNOWN_VALUE
        result = None
        if text is not None and self._is_model_call(text):
            effect = self._effect(node)
            if self.grad is True:
                self.forwards.append(effect)
            result = fallback = (operand(TENSOR, len(self.model_calls), None, self.grad is True),)
            self.model_calls.append(effect)
            if not self.looped:
                self.forwards_once.append(effect)
        root = text.partition(".")[0] if text is not None else None
        if root is None or (root in self.parameter_index and root != self.self_name and root not in self.annotated):
            return fallback  # a parameter's method: nothing says what the caller passes
        index = self._call_site(node, text, positional, keywords, receiver, fallback, star)
        return result or (operand(RESULT, index),)

    def _method_call(self, node: ast.Call, method: str, receiver: tuple[Operand, ...], positional: list,
                     keywords: list) -> tuple[Operand, ...] | None:
        """The methods that are no call of the project's code; None for the others."""
        func = node.func
        if method in SYNC_METHODS or (method == "cpu" and not node.args and not node.keywords):
            if not already_on_host(func.value):  # `t.cpu().numpy()` waits once, at `.cpu()`
                self._sync(node, receiver, "method")
            return receiver if method == "cpu" else ()
        if method == "format" and type(func.value) is ast.Constant and isinstance(func.value.value, str):
            self._sync(node, union(*positional, *keywords), "format")  # "{:.3f}".format(loss)
            return ()
        if method in TENSOR_LOGGERS:  # writer.add_scalar("loss", loss, step); a project's own method is followed too
            value = positional[1] if len(positional) > 1 else next(
                (ops for keyword, ops in zip(node.keywords, keywords) if keyword.arg in ("scalar_value",
                                                                                          "tag_scalar_dict")), ())
            self._sync(node, value, "log")
        if method == "backward" or method in BACKWARD_METHODS:
            self.backward.append(self._effect(node))
            return ()
        if method == "requires_grad_":
            self.autograd.append(self._effect(node))
            return receiver
        if method in RANDOM_FILLS:
            return receiver  # `t.bernoulli_(p)` fills t in place and returns it
        if method in DETACHING:
            return detached(receiver)
        if method in PYTHON_METHODS:
            return ()
        if method in ("train", "eval"):
            self._mode_call(node, method)
            return ()
        if method in CONTAINER_MUTATORS and positional:
            holder = self._holder(func.value)
            if holder is not None:
                self._keep(node, positional[1] if method == "insert" and len(positional) > 1 else positional[0],
                           holder, func.value, "append")
                return ()
        if method in IN_PLACE and positional:
            container = _in_place_target(func.value)
            holder = self._holder(container)
            if holder is not None:  # self.total.add_(loss): the stored tensor grows the graph
                self._keep(node, self._computed(union(*positional)), holder, container, "augment")
                return receiver
        if method in TENSOR_METHODS:
            ops = self._computed(union(receiver, *positional, *keywords))
            return moved(ops) if method in MOVING_METHODS and moves(node, method, self._qualify) else ops
        return None

    def _torch_call(self, node: ast.Call, name: str, positional: list, keywords: list) -> tuple[Operand, ...]:
        if name in BACKWARD_FUNCTIONS:
            self.backward.append(self._effect(node))
            return ()
        if name in AUTOGRAD_FUNCTIONS:
            self.autograd.append(self._effect(node))
        elif name == "torch.cuda.empty_cache":
            if not self.periodic:
                self.clears.append(self._effect(node))
            return ()
        elif name == "torch.cuda.synchronize":
            self._sync(node, (operand(DEVICE),), "synchronize")
            return ()
        elif name in TENSOR_FACTORIES or name in HOST_FACTORIES:
            places = factory_places(self, node, name.rsplit(".", 1)[-1], positional, keywords)
            return tuple(operand(TENSOR, None, None, False, place) for place in places)
        layer = name.rsplit(".", 1)[-1]
        if name.startswith("torch.nn.") and layer[:1].isupper():
            self.builds.add(layer)
            return UNKNOWN_VALUE  # a module built, not a tensor computed
        ops = self._computed(union(*positional, *keywords)) or UNKNOWN_VALUE
        return moved(ops) if moving_function(name, node) else ops

    def _convolution(self, node: ast.Call, qualified: str | None) -> None:
        """``nn.Conv2d(...)``, ``torchvision.models.resnet18()``: a convolution built;
        ``F.conv2d(x, w)``: one applied (the first of each dimension and kind is kept)."""
        # `nn.Conv2d(...) if talking_heads else None` (self.optional): an option's layer, off by default
        dimension, functional = (None, False) if self.optional else ast_convolution_kind(node, qualified)
        if dimension is not None and (dimension, functional) not in self.convolutions:
            self.convolutions[dimension, functional] = Convolution(dimension, self._effect(node), functional)

    def _builtin_call(self, node: ast.Call, name: str, positional: list) -> tuple[Operand, ...]:
        if name == "print":
            self._sync(node, union(*positional), "print")
        elif name in HOST_CONVERSIONS and len(positional) == 1:
            self._sync(node, positional[0], "conversion")
        if name in PYTHON_BUILTINS:
            return ()
        return union(*positional)

    def _is_model_call(self, text: str) -> bool:
        """A callee named like a model (``model``, ``self.net``, ``encoder``), one the function put
        in eval mode before (``self.net_g.eval()``, then ``self.net_g(x)``), or ``self(...)``."""
        if self.self_name is not None and self.kind == "method" and text in (self.self_name,
                                                                               f"{self.self_name}.forward"):
            return True  # `self(x)` runs the module; `cls()` in a classmethod builds one
        name = text[:-len(".forward")] if text.endswith(".forward") else text
        last = name.rsplit(".", 1)[-1]
        return bool(MODEL_NAME.search(last)) and not MODEL_BUILDER.match(last) \
            or any(call.mode == "eval" and call.receiver == name for call in self.modes)

    def _call_site(self, node: ast.Call, text: str, positional: list, keywords: list, receiver: tuple,
                   fallback: tuple, star: bool) -> int:
        arguments = [self._argument(arg.value if type(arg) is ast.Starred else arg, ops, None)
                     for arg, ops in zip(node.args, positional)]
        arguments += [self._argument(keyword.value, ops, keyword.arg or "**")
                      for keyword, ops in zip(node.keywords, keywords)]
        func = node.func
        receiver_argument = self._argument(func.value, receiver, None) if type(func) is ast.Attribute else None
        what = f"{text}(...)" if node.args or node.keywords else f"{text}()"
        index = len(self.calls)
        self.calls.append(CallSite(text, self._effect(node, what), tuple(arguments), receiver_argument,
                                   public(fallback), self.periodic, self.grad, star, self.looped))
        self.call_index[id(node)] = index
        self.fallbacks[index] = fallback
        return index

    def _argument(self, expr: ast.AST, ops: tuple[Operand, ...], keyword: str | None) -> Argument:
        literal = repr(expr.value) if type(expr) is ast.Constant and type(expr.value) in LITERALS else None
        return Argument(public(ops), keyword, dotted(expr), literal, self._holder(expr))


def _mentions(value: ast.AST, text: str | None) -> bool:
    """Does the expression read the dotted name ``text``?"""
    return text is not None and any(type(node) in (ast.Attribute, ast.Name) and dotted(node) == text
                                    for node in ast.walk(value))


def _in_place_target(expr: ast.AST) -> ast.AST:
    """What a chain of in-place operations changes: ``self.ema`` for ``self.ema.mul_(d)``."""
    while type(expr) is ast.Call and type(expr.func) is ast.Attribute and expr.func.attr in IN_PLACE:
        expr = expr.func.value
    return expr


def _target_names(target: ast.AST) -> list[str]:
    return [node.id for node in ast.walk(target) if type(node) is ast.Name]


E = ExpressionFacts
_EXPRESSIONS = {
    ast.Name: E._name, ast.Attribute: E._attribute, ast.Call: E._call, ast.Subscript: E._subscript,
    ast.BinOp: E._binary, ast.UnaryOp: E._unary, ast.BoolOp: E._several, ast.Tuple: E._several,
    ast.List: E._several, ast.Set: E._several, ast.Compare: E._compare, ast.Dict: E._dict,
    ast.IfExp: E._conditional, ast.JoinedStr: E._formatted, ast.Starred: E._starred, ast.NamedExpr: E._walrus,
    ast.Await: E._starred, ast.Yield: E._yield, ast.YieldFrom: E._yield, ast.Slice: E._slice,
    ast.ListComp: E._comprehension, ast.SetComp: E._comprehension, ast.GeneratorExp: E._comprehension,
    ast.DictComp: E._comprehension,
}
del E
