"""A file's own facts, read from CPython's tree: its index (``summarize_module``) and, for each
function when first asked, what one call of it does by itself (``summarize_function``).

One walk over a function's statements, in order, keeps what each local name holds as a tuple of
operands (a parameter, a tensor computed here, a call's result, unknown; the empty tuple is a
plain Python value such as ``loss.item()`` or ``len(x)``), so that ``float(x)`` on a parameter,
``float(n)`` on a count and ``print(loss)`` on a model's loss are told apart. Calls of anything
that may be the project's code stay unresolved ``CallSite``s; callgraph.py resolves them.

What one call does, as documented here: statements under a periodic condition (a remainder test,
``if step % 100 == 0``, or a test of a flag passed in, ``if log_now:``) contribute no syncs and no
cache clears (they are left out, not recorded as conditional); ``except`` handlers, code after a
``return``/``raise``/``break``/``continue`` in the same block, nested functions and lambdas are
not part of the call; any other condition counts as taken. Never imports or runs the code.
"""

from __future__ import annotations

import ast
import re

from torchlint.analysis.summaries import (
    DEVICE, GLOBAL, PARAMETER, RESULT, TENSOR, UNKNOWN, Argument, CallSite, ClassSummary, Effect, Factory,
    FunctionSummary, Import, Keep, Layer, ModeCall, ModuleSummary, Operand, Returned, Scope, Sync,
)
from torchlint.matching import (
    BACKWARD_FUNCTIONS, BACKWARD_METHODS, MODEL_NAME, NO_GRAD_CONTEXTS, RANDOM_FACTORIES, TENSOR_FACTORIES,
)

# --- positions and names -------------------------------------------------------------------------

_NEWLINE = re.compile(r"\r\n|\r|\n")
_SNIPPET = 60


class SourceLines:
    """Positions and snippets of CPython tree nodes: ``ast`` counts columns in UTF-8 bytes,
    summaries in code points."""

    def __init__(self, source: str):
        self.source = source
        self.ascii = source.isascii()
        self._lines: list[str] | None = None

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            source = self.source
            self._lines = source.split("\n") if "\r" not in source else _NEWLINE.split(source)
        return self._lines

    def column(self, line: int, byte_column: int) -> int:
        if self.ascii:
            return byte_column
        text = self.lines[line - 1] if line - 1 < len(self.lines) else ""
        return len(text.encode("utf-8")[:byte_column].decode("utf-8", "replace"))

    def snippet(self, node: ast.AST) -> str:
        """The node's code on one line, shortened for a message."""
        lines = self.lines[node.lineno - 1:node.end_lineno]
        if not lines:
            return ""
        start, end = self.column(node.lineno, node.col_offset), self.column(node.end_lineno, node.end_col_offset)
        if len(lines) == 1:
            text = lines[0][start:end]
        else:
            text = "\n".join([lines[0][start:], *lines[1:-1], lines[-1][:end]])
        text = " ".join(text.split())
        return text if len(text) <= _SNIPPET else text[:_SNIPPET - 3] + "..."

    def effect(self, path: str, node: ast.AST, what: str | None = None) -> Effect:
        return Effect(path, node.lineno, self.column(node.lineno, node.col_offset), node.end_lineno,
                      self.column(node.end_lineno, node.end_col_offset), self.snippet(node) if what is None else what)


def dotted(expr: ast.AST) -> str | None:
    """``a.b.c`` for a chain of names, else None."""
    parts = []
    while type(expr) is ast.Attribute:
        parts.append(expr.attr)
        expr = expr.value
    if type(expr) is not ast.Name:
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


def import_bindings(node: ast.Import | ast.ImportFrom) -> list[tuple[str, Import | None]]:
    """The names an import statement binds, and what each names (None for ``*``)."""
    if isinstance(node, ast.Import):
        return [(alias.asname, Import(alias.name)) if alias.asname else
                (alias.name.split(".", 1)[0], Import(alias.name.split(".", 1)[0])) for alias in node.names]
    return [("*", None) if alias.name == "*" else
            (alias.asname or alias.name, Import(node.module or "", alias.name, node.level)) for alias in node.names]


FUNCTION_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def method_kind(node: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> str:
    if not in_class:
        return "function"
    for decorator in node.decorator_list:
        if dotted(decorator) in ("staticmethod", "classmethod"):
            return decorator.id
    return "method"


class ScopeNames:
    """A scope's bindings as its statements are read: how often each name is bound, its imports,
    and the names bound to ``C(...)`` or to a dotted name (kept when bound once)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.imports: dict[str, Import] = {}
        self.calls: dict[str, str] = {}
        self.aliases: dict[str, str] = {}
        self.defined: set[str] = set()

    def bind(self, name: str, value: ast.AST | None = None) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        kind = type(value)
        if kind is ast.Call:
            callee = dotted(value.func)
            if callee is not None:
                self.calls[name] = callee
        elif kind is ast.Name or kind is ast.Attribute:
            text = dotted(value)
            if text is not None:
                self.aliases[name] = text

    def bind_targets(self, target: ast.AST, value: ast.AST | None = None) -> None:
        kind = type(target)
        if kind is ast.Name:
            self.bind(target.id, value)
        elif kind is ast.Tuple or kind is ast.List:
            for element in target.elts:
                self.bind_targets(element)
        elif kind is ast.Starred:
            self.bind_targets(target.value)

    def bind_import(self, node: ast.Import | ast.ImportFrom, star_imports: list[Import] | None = None) -> None:
        for name, imported in import_bindings(node):
            if imported is None:
                if star_imports is not None:
                    star_imports.append(Import(node.module or "", None, node.level))
                continue
            self.bind(name)
            self.imports[name] = imported

    def define(self, name: str) -> None:
        self.bind(name)
        self.defined.add(name)

    def scope(self, annotated: dict[str, str] | None = None) -> Scope:
        once = {name for name, count in self.counts.items() if count == 1}
        instances = {name: text for name, text in (annotated or {}).items() if name in once}
        instances.update((name, text) for name, text in self.calls.items() if name in once)
        return Scope(imports={name: imp for name, imp in self.imports.items() if name in once},
                     instances=instances,
                     aliases={name: text for name, text in self.aliases.items() if name in once and name != text},
                     nested=frozenset(self.defined & once), locals=frozenset(self.counts))


def compound_bodies(body: list[ast.stmt]):
    """The statements of a block and of the blocks nested in its ``if``/``try``/``with``/loops
    (the same scope), without entering functions or classes."""
    for statement in body:
        yield statement
        kind = type(statement)
        if kind in (ast.If, ast.For, ast.AsyncFor, ast.While):
            yield from compound_bodies(statement.body)
            yield from compound_bodies(statement.orelse)
        elif kind in (ast.With, ast.AsyncWith):
            yield from compound_bodies(statement.body)
        elif kind in (ast.Try, ast.TryStar):
            for block in (statement.body, statement.orelse, statement.finalbody,
                          *(handler.body for handler in statement.handlers)):
                yield from compound_bodies(block)
        elif kind is ast.Match:
            for case in statement.cases:
                yield from compound_bodies(case.body)


def index_class(module: ModuleSummary, node: ast.ClassDef, qualname: str, scope: str | None) -> None:
    """Registers a class, its methods and the classes nested in it."""
    methods: dict[str, str] = {}
    for statement in compound_bodies(node.body):
        if isinstance(statement, FUNCTION_DEFS):
            methods[statement.name] = method_kind(statement, True)
            module.register(f"{qualname}.{statement.name}", statement, qualname)
        elif isinstance(statement, ast.ClassDef):
            index_class(module, statement, f"{qualname}.{statement.name}", scope)
    bases = tuple(text for text in (dotted(base.value if isinstance(base, ast.Subscript) else base)
                                    for base in node.bases) if text is not None)
    module.classes[qualname] = ClassSummary(qualname, node.lineno, bases, methods, scope)


def summarize_module(tree: ast.Module, source: str, path: str) -> ModuleSummary:
    """A file's index: its imports, classes and module-level names, read without entering
    function bodies; each function is summarized when ``ModuleSummary.function`` first asks."""
    names, star_imports, text = ScopeNames(), [], SourceLines(source)
    module = ModuleSummary(path, Scope(), (), {}, summarizer=lambda module, node, qualname, class_name:
                           _FunctionWalker(module, node, qualname, class_name, text).summary())
    for statement in compound_bodies(tree.body):
        kind = type(statement)
        if kind in FUNCTION_DEFS:
            names.define(statement.name)
            module.register(statement.name, statement, None)
        elif kind is ast.ClassDef:
            names.define(statement.name)
            index_class(module, statement, statement.name, None)
        elif kind is ast.Assign:
            for target in statement.targets:
                names.bind_targets(target, statement.value)
        elif kind is ast.AnnAssign:
            names.bind_targets(statement.target, statement.value)
        elif kind is ast.AugAssign or kind is ast.For or kind is ast.AsyncFor:
            names.bind_targets(statement.target)
        elif kind is ast.With or kind is ast.AsyncWith:
            for item in statement.items:
                if item.optional_vars is not None:
                    names.bind_targets(item.optional_vars)
        elif kind is ast.Import or kind is ast.ImportFrom:
            names.bind_import(statement, star_imports)
    module.scope = names.scope()
    module.star_imports = tuple(star_imports)
    return module


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
# Builtins whose result is a plain Python value; the others listed derive from their arguments.
PYTHON_BUILTINS = frozenset({"len", "str", "repr", "isinstance", "issubclass", "hasattr", "callable", "id", "hash",
                             "type", "range", "format", "chr", "ord", "open", "input", "vars", "dir", "globals",
                             "locals", "super", "setattr", "delattr", "print", "float", "int", "bool"})
DERIVING_BUILTINS = frozenset({"min", "max", "sum", "abs", "round", "sorted", "list", "tuple", "set", "dict", "zip",
                               "enumerate", "reversed", "map", "filter", "iter", "next", "getattr", "any", "all",
                               "frozenset"})
HOST_CONVERSIONS = frozenset({"float", "int", "bool"})
PYTHON_COMPARISONS = (ast.In, ast.NotIn, ast.Is, ast.IsNot)
HOST_NEUTRAL = frozenset({"detach", "clone", "float", "double", "long", "int", "half", "squeeze", "flatten", "view",
                          "reshape"})  # methods that leave a host copy on the host
PYTHON_ANNOTATIONS = frozenset({"int", "float", "bool", "str"})
ENABLE_GRAD = frozenset({"torch.enable_grad", "torch.autograd.enable_grad", "torch.autograd.grad_mode.enable_grad"})
SET_GRAD_ENABLED = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled",
                              "torch.autograd.grad_mode.set_grad_enabled"})
AUTOGRAD_FUNCTIONS = frozenset({"torch.autograd.grad"}) | ENABLE_GRAD
LAYERS = {f"torch.nn.{path}{name}": name for name in ("Conv1d", "Conv2d", "Conv3d", "Linear")
          for path in ("", "modules.conv." if name.startswith("Conv") else "modules.linear.")}
BIAS_POSITION = {"Linear": 2, "Conv1d": 7, "Conv2d": 7, "Conv3d": 7}
SEQUENTIALS = frozenset({"torch.nn.Sequential", "torch.nn.modules.container.Sequential"})
# Functions that build a model rather than run one: `build_model(cfg)` is named like a model.
MODEL_BUILDER = re.compile(r"^(build|create|get|make|load|init|setup|prepare|wrap|define|construct|new|save)_",
                           re.IGNORECASE)

_OPERANDS: dict[tuple, Operand] = {}


def operand(kind: str, index: int | None = None, name: str | None = None, graph: bool = True) -> Operand:
    """Operands are few and compared often: one object each."""
    key = (kind, index, name, graph)
    found = _OPERANDS.get(key)
    if found is None:
        found = _OPERANDS[key] = Operand(kind, index, name, graph)
    return found


UNKNOWN_VALUE = (operand(UNKNOWN),)
GLOBAL_HOLDER = operand(GLOBAL)
_NO_CHANGE = object()


def union(*parts: tuple[Operand, ...]) -> tuple[Operand, ...]:
    found = [part for part in parts if part]
    if len(found) <= 1:
        return found[0] if found else ()
    return tuple(dict.fromkeys(op for part in found for op in part))


def detached(ops: tuple[Operand, ...]) -> tuple[Operand, ...]:
    return tuple(operand(op.kind, op.index, op.name, False) if op.graph and op.kind in (PARAMETER, TENSOR) else op
                 for op in ops)


def public(ops: tuple[Operand, ...]) -> tuple[Operand, ...]:
    """Operands as a summary stores them: a tensor without the walk's note of which model call made it."""
    if all(op.kind != TENSOR or op.index is None for op in ops):
        return ops
    return tuple(dict.fromkeys(operand(TENSOR, None, None, op.graph) if op.kind == TENSOR else op for op in ops))


def _is_periodic_remainder(test: ast.AST) -> bool:
    """A remainder is taken (``step % 100 == 0``), not a string formatted (``"%d" % n``)."""
    for node in ast.walk(test):
        if type(node) is ast.BinOp and type(node.op) is ast.Mod and not (
                type(node.left) is ast.JoinedStr or (type(node.left) is ast.Constant and isinstance(node.left.value, str))):
            return True
    return False


# --- one function ----------------------------------------------------------------------------


class _FunctionWalker:
    """Reads one function's statements in order (see the module's docstring for what counts)."""

    def __init__(self, module: ModuleSummary, node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str,
                 class_name: str | None, text: SourceLines):
        self.module, self.node, self.qualname, self.class_name, self.text = module, node, qualname, class_name, text
        self.path = module.path
        self.kind = method_kind(node, class_name is not None)
        self.names = ScopeNames()
        self.env: dict[str, tuple[Operand, ...]] = {}
        self.grad: bool | None = True
        self.periodic = False
        self.declared_globals: set[str] = set()
        self.qualified_cache: dict[str, str | None] = {}
        self.syncs: list[Sync] = []
        self.clears: list[Effect] = []
        self.keeps: list[Keep] = []
        self.forwards: list[Effect] = []
        self.model_calls: list[Effect] = []  # TENSOR operands' index: which of these made the tensor
        self.backward: list[Effect] = []
        self.autograd: list[Effect] = []
        self.modes: list[ModeCall] = []
        self.returns: list[tuple[ast.AST | None, tuple[Operand, ...]]] = []
        self.calls: list[CallSite] = []
        self.call_index: dict[int, int] = {}  # id(ast.Call) -> index in calls
        self.fallbacks: dict[int, tuple[Operand, ...]] = {}  # index in calls -> the result if unresolved
        self.bound_values: dict[str, ast.AST | None] = {}
        self.self_attributes: dict[str, str] = {}
        self.generator = False
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
        self.defaults = tuple(repr(d.value) if type(d) is ast.Constant else None for d in defaults)
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
        found = self.qualified_cache.get(text, _NO_CHANGE)
        if found is _NO_CHANGE:
            root, _, rest = text.partition(".")
            imported = self.names.imports.get(root)
            if imported is None and root not in self.names.counts:
                imported = self.module.scope.imports.get(root)
            base = imported.qualified if imported is not None else None
            found = self.qualified_cache[text] = None if base is None else f"{base}.{rest}" if rest else base
        return found

    def _grad_switch(self, expr: ast.AST) -> object:
        """False/True when a ``with`` item or decorator turns grad off/on, None when it sets it
        to something unknown, _NO_CHANGE otherwise."""
        func = expr.func if type(expr) is ast.Call else expr
        name = self._qualify(dotted(func))
        if name is None:
            return _NO_CHANGE
        if name in NO_GRAD_CONTEXTS:
            return False
        if name in ENABLE_GRAD:
            return True
        if name in SET_GRAD_ENABLED and type(expr) is ast.Call:
            value = expr.args[0] if len(expr.args) == 1 else None
            return value.value if type(value) is ast.Constant and type(value.value) is bool else None
        return _NO_CHANGE

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
        if not self.periodic and ops:
            self.syncs.append(Sync(self._effect(node), public(ops), how))

    def _keep(self, node: ast.AST, ops: tuple[Operand, ...], holder: Operand, container: ast.AST, how: str) -> None:
        kept = [op for op in public(ops) if op.kind in (PARAMETER, TENSOR, RESULT)]
        if kept:
            effect, into = self._effect(node), self.text.snippet(container)
            self.keeps.extend(Keep(effect, op, holder, into, how, op.graph) for op in kept)

    # -- statements

    def block(self, body: list[ast.stmt]) -> None:
        for statement in body:
            kind = type(statement)
            handler = _STATEMENTS.get(kind)
            if handler is not None:
                handler(self, statement)
            if kind in _ENDS_BLOCK:
                return

    def _expression_statement(self, node: ast.Expr) -> None:
        self.value(node.value)
        value = node.value
        if type(value) is ast.Call and self._qualify(dotted(value.func)) in SET_GRAD_ENABLED:
            switch = self._grad_switch(value)
            if switch is not _NO_CHANGE:
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
        self.returns.append((node.value, self.value(node.value) if node.value is not None else ()))

    def _if(self, node: ast.If) -> None:
        self.value(node.test)
        periodic = self.periodic
        self.periodic = periodic or self._is_periodic(node.test)
        self.block(node.body)
        self.periodic = periodic
        self.block(node.orelse)

    def _is_periodic(self, test: ast.AST) -> bool:
        """Holds every k-th call: a remainder test, or a flag passed in (``if log_now:``)."""
        flag = test.operand if type(test) is ast.UnaryOp and type(test.op) is ast.Not else test
        if type(flag) is ast.Name and flag.id in self.parameter_index and flag.id != self.self_name:
            return True
        return _is_periodic_remainder(test)

    def _for(self, node: ast.For) -> None:
        ops = self.value(node.iter)
        target, iterated = node.target, node.iter
        if type(iterated) is ast.Call and dotted(iterated.func) == "enumerate" and type(target) is ast.Tuple \
                and len(target.elts) == 2:
            self.assign(target.elts[0], (), None, node, "assign")  # the count
            target = target.elts[1]
        self.assign(target, ops, None, node, "assign")
        self.block(node.body)
        self.block(node.orelse)

    def _while(self, node: ast.While) -> None:
        self.value(node.test)
        self.block(node.body)
        self.block(node.orelse)

    def _with(self, node: ast.With) -> None:
        grad = self.grad
        for item in node.items:
            self.value(item.context_expr)
            switch = self._grad_switch(item.context_expr)
            if switch is not _NO_CHANGE:
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

    # -- assignments

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
        elif kind is ast.Tuple or kind is ast.List:
            for element in target.elts:
                self.assign(element, ops, None, statement, how)
        elif kind is ast.Starred:
            self.assign(target.value, ops, None, statement, how)
        elif kind is ast.Attribute:
            receiver = target.value
            if type(receiver) is ast.Name and receiver.id == self.self_name:
                callee = dotted(value.func) if type(value) is ast.Call else None
                previous = self.self_attributes.get(target.attr)
                self.self_attributes[target.attr] = "" if callee is None or previous not in (None, callee) else callee
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

    # -- expressions

    def value(self, node: ast.AST) -> tuple[Operand, ...]:
        """What the expression's value derives from, recording the facts inside it."""
        handler = _EXPRESSIONS.get(type(node))
        return handler(self, node) if handler is not None else ()

    def _name(self, node: ast.Name) -> tuple[Operand, ...]:
        return self.env.get(node.id, UNKNOWN_VALUE)

    def _attribute(self, node: ast.Attribute) -> tuple[Operand, ...]:
        ops = self.value(node.value)
        if node.attr in PYTHON_ATTRIBUTES:
            return ()
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
        if type(node.op) is ast.Mod and (type(node.left) is ast.JoinedStr or (
                type(node.left) is ast.Constant and isinstance(node.left.value, str))):
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
        return union(self.value(node.body), self.value(node.orelse))

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
        if qualified is not None and qualified.startswith("torch."):
            return self._torch_call(node, qualified, positional, keywords)
        if method is None and text in PYTHON_BUILTINS | DERIVING_BUILTINS and text not in self.names.counts \
                and text not in self.module.scope.locals:
            return self._builtin_call(node, text, positional)
        fallback = self._computed(union(receiver, *positional, *keywords)) or UNKNOWN_VALUE
        result = None
        if text is not None and self._is_model_call(text):
            effect = self._effect(node)
            if self.grad is True:
                self.forwards.append(effect)
            result = fallback = (operand(TENSOR, len(self.model_calls), None, self.grad is True),)
            self.model_calls.append(effect)
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
            if not _on_host(func.value):  # `t.cpu().numpy()` waits once, at `.cpu()`
                self._sync(node, receiver, "method")
            return receiver if method == "cpu" else ()
        if method == "format" and type(func.value) is ast.Constant and isinstance(func.value.value, str):
            self._sync(node, union(*positional, *keywords), "format")  # "{:.3f}".format(loss)
            return ()
        if method == "backward" or method in BACKWARD_METHODS:
            self.backward.append(self._effect(node))
            return ()
        if method == "requires_grad_":
            self.autograd.append(self._effect(node))
            return receiver
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
        if method in TENSOR_METHODS:
            return self._computed(union(receiver, *positional, *keywords))
        return None

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
        elif name in TENSOR_FACTORIES:
            return (operand(TENSOR, None, None, False),)
        if name.startswith("torch.nn.") and name.rsplit(".", 1)[-1][:1].isupper():
            return UNKNOWN_VALUE  # a module built, not a tensor computed
        return self._computed(union(*positional, *keywords)) or UNKNOWN_VALUE

    def _builtin_call(self, node: ast.Call, name: str, positional: list) -> tuple[Operand, ...]:
        if name == "print":
            self._sync(node, union(*positional), "print")
        elif name in HOST_CONVERSIONS and len(positional) == 1:
            self._sync(node, positional[0], "conversion")
        if name in PYTHON_BUILTINS:
            return ()
        return union(*positional)

    def _is_model_call(self, text: str) -> bool:
        """A callee named like a model (``model``, ``self.net``, ``encoder``), or ``self(...)``."""
        if self.self_name is not None and text in (self.self_name, f"{self.self_name}.forward"):
            return True
        name = text[:-len(".forward")] if text.endswith(".forward") else text
        last = name.rsplit(".", 1)[-1]
        return bool(MODEL_NAME.search(last)) and not MODEL_BUILDER.match(last)

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
                                   public(fallback), self.periodic, self.grad, star))
        self.call_index[id(node)] = index
        self.fallbacks[index] = fallback
        return index

    def _argument(self, expr: ast.AST, ops: tuple[Operand, ...], keyword: str | None) -> Argument:
        literal = repr(expr.value) if type(expr) is ast.Constant and type(expr.value) in (bool, int, float, str, type(None)) \
            else None
        return Argument(public(ops), keyword, dotted(expr), literal, self._holder(expr))

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
            returns=tuple(self._returned(value, ops) for value, ops in self.returns), calls=tuple(self.calls),
            scope=self.names.scope(self.annotated), self_attributes=self.self_attributes)

    def _bound_once(self, node: ast.AST | None) -> ast.AST | None:
        """A local name bound once stands for the value it was bound to."""
        if type(node) is ast.Name and self.names.counts.get(node.id) == 1 and node.id in self.bound_values:
            return self.bound_values[node.id]
        return node

    def _returned(self, value: ast.AST | None, ops: tuple[Operand, ...]) -> Returned:
        node = self._bound_once(value)
        layer, layer_call = self._layer(node)
        forward = None
        for op in union(ops, *(self.fallbacks.get(o.index, ()) for o in ops if o.kind == RESULT)):
            if op.kind == TENSOR and op.index is not None and op.graph:
                forward = self.model_calls[op.index]
                break
        call = self.call_index.get(id(node)) if type(node) is ast.Call else None
        return Returned(public(ops), layer, self._factory(node), forward, call, layer_call)

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


def _on_host(expr: ast.AST) -> bool:
    """Is the value already copied to the host (``t.cpu()``, ``t.detach().cpu().float()``)?"""
    while type(expr) is ast.Call and type(expr.func) is ast.Attribute:
        if expr.func.attr == "cpu":
            return True
        if expr.func.attr not in HOST_NEUTRAL:
            return False
        expr = expr.func.value
    return False


def _has_docstring(node: ast.AST) -> bool:
    body = node.body
    return bool(body) and type(body[0]) is ast.Expr and type(body[0].value) is ast.Constant \
        and isinstance(body[0].value.value, str)


def _mentions(value: ast.AST, text: str | None) -> bool:
    """Does the expression read the dotted name ``text``?"""
    return text is not None and any(type(node) in (ast.Attribute, ast.Name) and dotted(node) == text
                                    for node in ast.walk(value))


def _target_names(target: ast.AST) -> list[str]:
    return [node.id for node in ast.walk(target) if type(node) is ast.Name]


W = _FunctionWalker
_STATEMENTS = {
    ast.Expr: W._expression_statement, ast.Assign: W._assign_statement, ast.AnnAssign: W._annotated_assign,
    ast.AugAssign: W._augmented_assign, ast.Return: W._return, ast.If: W._if, ast.For: W._for,
    ast.AsyncFor: W._for, ast.While: W._while, ast.With: W._with, ast.AsyncWith: W._with, ast.Try: W._try,
    ast.TryStar: W._try, ast.Match: W._match, ast.FunctionDef: W._function_def,
    ast.AsyncFunctionDef: W._function_def, ast.ClassDef: W._class_def, ast.Import: W._import,
    ast.ImportFrom: W._import, ast.Global: W._global, ast.Nonlocal: W._global, ast.Assert: W._assert,
}
_ENDS_BLOCK = (ast.Return, ast.Raise, ast.Break, ast.Continue)
_EXPRESSIONS = {
    ast.Name: W._name, ast.Attribute: W._attribute, ast.Call: W._call, ast.Subscript: W._subscript,
    ast.BinOp: W._binary, ast.UnaryOp: W._unary, ast.BoolOp: W._several, ast.Tuple: W._several,
    ast.List: W._several, ast.Set: W._several, ast.Compare: W._compare, ast.Dict: W._dict,
    ast.IfExp: W._conditional, ast.JoinedStr: W._formatted, ast.Starred: W._starred, ast.NamedExpr: W._walrus,
    ast.Await: W._starred, ast.Yield: W._yield, ast.YieldFrom: W._yield, ast.Slice: W._slice,
    ast.ListComp: W._comprehension, ast.SetComp: W._comprehension, ast.GeneratorExp: W._comprehension,
    ast.DictComp: W._comprehension,
}
del W
