"""What the torch.compile-readiness rules share (TLC001 compile-graph-break, TLC005
compile-cudagraph-break): the code inside a compiled region that makes Dynamo end its graph
("a graph break"), each with why and what to write instead, and which expressions hold tensors.

Every kind of break listed here was checked against ``torch._dynamo.explain`` on torch 2.13
(tests/test_compile_explain.py); kinds that only break on older torch carry the version they
stopped breaking in. What is compiled, and what it reaches, is torchlint/analysis/compiled.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, cached_property

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.compiled import CompiledCode, Region, untraced_branch
from torchlint.analysis.syntax import dotted_name, method_call, positional_args, string_value
from torchlint.analysis.walk import children, walk
from torchlint.lazy import libcst as cst
from torchlint.rule import RuleContext


@dataclass(frozen=True)
class BreakKind:
    why: str  # what Dynamo cannot do here
    advice: str  # what to write instead
    before: str = ""  # the torch version from which this is no longer a break ("" = every version)


SCALAR_READ = BreakKind(
    "Dynamo cannot trace a tensor read into a Python number",
    "keep it a tensor (a 0-d tensor works in arithmetic), read it outside the compiled code, or let Dynamo "
    "capture it (`torch._dynamo.config.capture_scalar_outputs = True`)")
LIST_READ = BreakKind(
    "Dynamo cannot trace a tensor read into a Python list",
    "index the tensor instead, or read it outside the compiled code")
PRINT = BreakKind(
    "Dynamo does not trace `print`",
    "move it out of the compiled code, guard it with `if not torch.compiler.is_compiling():`, or let Dynamo "
    "print after the graph (`torch._dynamo.config.reorderable_logging_functions.add(print)`)")
TO_STRING = BreakKind(
    "Dynamo cannot turn a tensor into a string",
    "format it outside the compiled code")
LOGGING = BreakKind(
    "Dynamo does not trace logging and warnings",
    "move it out of the compiled code or guard it with `if not torch.compiler.is_compiling():`")
RANDOM = BreakKind(
    "Dynamo does not trace this function of Python's `random` (only `randint`, `randrange` and `uniform`)",
    "draw the number with torch (`torch.rand(())`, `torch.randint`) or outside the compiled code")
DATA_VALUE = BreakKind(
    "it returns a Python bool computed from tensor values",
    "compare on the device and keep the result a tensor (`torch.where`), or check outside the compiled code")
BRANCH = BreakKind(
    "the branch depends on tensor values, which Dynamo does not know while it traces",
    "compute both sides and pick with `torch.where(cond, a, b)` (or `torch.cond`), or test it outside the "
    "compiled code")
DYNAMIC_SHAPE = BreakKind(
    "its output's shape depends on tensor values",
    "keep the shape fixed (`torch.where(mask, x, 0)`, multiply by the mask), or let Dynamo capture it "
    "(`torch._dynamo.config.capture_dynamic_output_shape_ops = True`)")
BACKWARD = BreakKind(
    "Dynamo does not trace `backward()`",
    "compile the model or the loss computation and call `backward()` outside the compiled function")
SYNCHRONIZE = BreakKind(
    "torch before 2.12 does not put a device synchronization in the compiled graph",
    "synchronize outside the compiled code", before="2.12")
NUMPY = BreakKind(
    "torch before 2.1 does not trace NumPy",
    "use the torch function instead, or move the NumPy code out of the compiled code", before="2.1")
IMAGING = BreakKind(
    "Dynamo cannot trace PIL",
    "convert images outside the compiled code (in the data pipeline)")
CLOCK = BreakKind(
    "Dynamo does not trace the clock",
    "time the compiled call from outside it")

SCALAR_BUILTINS = frozenset({"float", "int", "bool", "complex"})
STRING_BUILTINS = frozenset({"str", "repr"})
TRACED_RANDOM = frozenset({"randint", "randrange", "uniform"})
LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})
DATA_VALUE_FUNCTIONS = frozenset({"torch.equal", "torch.allclose", "torch.is_nonzero"})
DYNAMIC_SHAPE_FUNCTIONS = frozenset({"torch.nonzero", "torch.argwhere", "torch.unique", "torch.unique_consecutive",
                                     "torch.masked_select"})
DYNAMIC_SHAPE_METHODS = frozenset({"nonzero", "argwhere", "unique", "unique_consecutive", "masked_select"})
SYNCHRONIZE_FUNCTIONS = frozenset({"torch.cuda.synchronize", "torch.accelerator.synchronize"})
CLOCK_FUNCTIONS = frozenset({"time.time", "time.perf_counter", "time.monotonic", "time.process_time"})

# What makes a tensor: torch's functions (but not these, which answer questions or configure)...
NOT_TENSOR_FUNCTIONS = frozenset({
    "numel", "device", "dtype", "Size", "finfo", "iinfo", "typename", "no_grad", "enable_grad", "inference_mode",
    "autocast", "compile", "save", "load", "equal", "allclose", "is_nonzero", "result_type", "promote_types",
    "can_cast", "broadcast_shapes", "cond", "vmap", "manual_seed", "seed", "initial_seed", "Generator",
})
TENSOR_NAMESPACES = ("torch.nn.functional.", "torch.linalg.", "torch.fft.", "torch.special.")
# ... and the methods of a tensor that give a tensor whose values depend on the data.
TENSOR_METHODS = frozenset("""
    sum mean max min amax amin norm abs std var prod any all argmax argmin eq ne gt lt ge le isnan isinf
    isfinite logical_and logical_or logical_not float double half long int bool detach clone exp log sqrt
    rsqrt pow matmul mm bmm softmax log_softmax sigmoid tanh relu mul add sub div clamp round floor ceil
    count_nonzero cumsum logsumexp square masked_fill median
""".split())


@cache
def non_comparison_types() -> tuple[type, ...]:
    return (cst.Is, cst.IsNot, cst.In, cst.NotIn)


@dataclass(frozen=True)
class GraphBreak:
    """A place in compiled code where Dynamo ends its graph, what kind of break it is, and the
    compiled function it is in."""

    node: cst.CSTNode
    shown: str  # the code, as a message quotes it
    kind: BreakKind
    region: Region


def graph_breaks(ctx: RuleContext, compiled: CompiledCode) -> list[GraphBreak]:
    """Every graph break in the file's compiled regions, once per node, in file order."""
    found: list[GraphBreak] = []
    seen: set[int] = set()
    for region in compiled.regions():
        for node, kind in _RegionScan(ctx, compiled, region).breaks():
            if id(node) not in seen and (not kind.before or not ctx.torch_at_least(kind.before)):
                seen.add(id(node))
                found.append(GraphBreak(node, _shown(ctx, node), kind, region))
    return found


def describe_region(compiled: CompiledCode, region: Region) -> str:
    """``step`` (compiled by `@torch.compile`) / ``helper`` (reached from `step`, compiled by ...)."""
    name = compiled.display_name(region.function)
    if region.is_entry:
        return f"`{name}`, compiled by `{region.site.label}`"
    return f"`{name}` (reached from `{region.via[0]}`, compiled by `{region.site.label}`)"


def _shown(ctx: RuleContext, node: cst.CSTNode) -> str:
    if isinstance(node, (cst.If, cst.While)):
        text = f"{'if' if isinstance(node, cst.If) else 'while'} {ctx.code_for(node.test)}:"
    else:
        text = ctx.code_for(node)
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:56] + " ..."


class _RegionScan:
    """The breaks in one compiled function (nested functions and classes are regions of their
    own, or not compiled; branches Dynamo never traces are left out)."""

    def __init__(self, ctx: RuleContext, compiled: CompiledCode, region: Region):
        self.ctx = ctx
        self.bindings: Bindings = ctx.bindings
        self.compiled = compiled
        self.function = region.function
        self.tensors = TensorValues(ctx, compiled, region.function)

    def breaks(self) -> list[tuple[cst.CSTNode, BreakKind]]:
        found: list[tuple[cst.CSTNode, BreakKind]] = []
        eager = self.compiled.eager_branches(self.function)
        stack: list[cst.CSTNode] = [self.function.body]
        targets: set[int] = set()  # `x[mask] = 0` writes through a mask: Dynamo keeps that in the graph
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Assign):
                targets.update(id(target.target) for target in node.targets)
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
                targets.add(id(node.target))
            kind = self._break(node) if id(node) not in targets else None
            if kind is not None:
                found.append((node, kind))
            for child in reversed(children(node)):
                if isinstance(child, (cst.FunctionDef, cst.ClassDef)) or id(child) in eager \
                        or untraced_branch(node, child, self.bindings):
                    continue
                stack.append(child)
        return found

    def _break(self, node: cst.CSTNode) -> BreakKind | None:
        if isinstance(node, cst.Call):
            return self._call_break(node)
        if isinstance(node, (cst.If, cst.While, cst.IfExp, cst.CompIf)) and self.tensors.data_dependent(node.test):
            return BRANCH
        if isinstance(node, cst.Subscript) and any(
                isinstance(element.slice, cst.Index) and self.tensors.is_mask(element.slice.value)
                for element in node.slice):
            return DYNAMIC_SHAPE
        return None

    def _call_break(self, call: cst.Call) -> BreakKind | None:
        func = call.func
        qualified = self.ctx.qualified_name(func) or ""
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        if isinstance(func, cst.Name) and not qualified and self.bindings.count(func.value) == 0:
            return self._builtin_break(func.value, call)
        if method in ("item", "tolist") and not call.args and not qualified:
            return SCALAR_READ if method == "item" else LIST_READ
        if qualified in DATA_VALUE_FUNCTIONS or method in ("equal", "allclose") and not qualified and call.args:
            return DATA_VALUE
        if qualified in DYNAMIC_SHAPE_FUNCTIONS or method in DYNAMIC_SHAPE_METHODS and not qualified \
                or qualified == "torch.where" and len(call.args) == 1 and not call.args[0].keyword:
            return DYNAMIC_SHAPE
        if method == "backward" and not qualified:
            return BACKWARD
        return self._library_break(qualified, method, call)

    def _builtin_break(self, name: str, call: cst.Call) -> BreakKind | None:
        if name == "print":
            return PRINT
        values = positional_args(call)
        if len(values) == 1 and self.tensors.is_tensor(values[0].value):
            if name in SCALAR_BUILTINS:
                return SCALAR_READ
            if name in STRING_BUILTINS:
                return TO_STRING
        return None

    def _library_break(self, qualified: str, method: str | None, call: cst.Call) -> BreakKind | None:
        module, _, function = qualified.rpartition(".")
        if qualified == "warnings.warn" or module == "logging" and function in LOG_METHODS:
            return LOGGING
        if method in LOG_METHODS and self._is_logger(call.func.value):
            return LOGGING
        if module == "random" and function not in TRACED_RANDOM:
            return RANDOM
        if qualified in SYNCHRONIZE_FUNCTIONS:
            return SYNCHRONIZE
        if qualified.startswith("numpy.") or method == "numpy" and not call.args and not qualified:
            return NUMPY
        if qualified.startswith("PIL."):
            return IMAGING
        if qualified in CLOCK_FUNCTIONS:
            return CLOCK
        return None

    def _is_logger(self, expr: cst.BaseExpression) -> bool:
        """A name assigned ``logging.getLogger(...)``."""
        return any(isinstance(value, cst.Call) and self.ctx.qualified_name(value.func) == "logging.getLogger"
                   for value in self.bindings.values(dotted_name(expr)))


class TensorValues:
    """Which expressions of a compiled function hold tensors, as far as one reading tells: torch's
    functions, data-dependent tensor methods, the outputs of the class's layers, its parameters and
    buffers, parameters annotated ``Tensor``, and names assigned any of these. Anything else (a
    parameter without annotation, an attribute) is not known to be a tensor: the rules stay silent
    rather than guess."""

    def __init__(self, ctx: RuleContext, compiled: CompiledCode, function: cst.FunctionDef):
        self.ctx = ctx
        self.compiled = compiled
        self.function = function
        self.owner = compiled.owner(function)
        self._names_read: dict[int, bool] = {}  # per Name node: does it hold a tensor there

    def data_dependent(self, test: cst.BaseExpression) -> bool:
        """Does the truth of ``test`` depend on tensor values (``x.sum() > 0``, ``mask.any()``)?"""
        if isinstance(test, cst.BooleanOperation):
            return self.data_dependent(test.left) or self.data_dependent(test.right)
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return self.data_dependent(test.expression)
        return self.is_tensor(test)

    def is_mask(self, expr: cst.BaseExpression) -> bool:
        """An index that selects by a boolean tensor: a comparison (``x[x > 0]``, ``logits[labels !=
        -100]``: indexing with a Python bool is not a thing code does), ``~mask``, or a name assigned
        only such values."""
        if isinstance(expr, cst.Name):
            values = self._assigned(expr.value)
            return bool(values) and all(v is not None and self.is_mask(v) for v in values)
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.BitInvert):
            return self.is_mask(expr.expression)
        return isinstance(expr, cst.Comparison) and not any(
            isinstance(c.operator, non_comparison_types()) for c in expr.comparisons)

    def is_tensor(self, expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Call):
            return self._tensor_call(expr)
        if isinstance(expr, cst.Comparison):
            return not any(isinstance(c.operator, non_comparison_types()) for c in expr.comparisons) and (
                self.is_tensor(expr.left) or any(self.is_tensor(c.comparator) for c in expr.comparisons))
        if isinstance(expr, cst.BinaryOperation):
            return self.is_tensor(expr.left) or self.is_tensor(expr.right)
        if isinstance(expr, cst.UnaryOperation):
            return not isinstance(expr.operator, cst.Not) and self.is_tensor(expr.expression)
        if isinstance(expr, cst.BooleanOperation):
            return self.is_tensor(expr.left) or self.is_tensor(expr.right)
        if isinstance(expr, cst.Subscript):
            return self.is_tensor(expr.value)
        if isinstance(expr, cst.IfExp):
            return self.is_tensor(expr.body) or self.is_tensor(expr.orelse)
        if isinstance(expr, cst.Attribute):
            return self._self_name(expr) in self._tensor_attributes
        if isinstance(expr, cst.Name):
            return self._tensor_name(expr)
        return False

    def _tensor_call(self, call: cst.Call) -> bool:
        qualified = self.ctx.qualified_name(call.func) or ""
        if qualified.startswith("torch."):
            rest = qualified[len("torch."):]
            if qualified.startswith(TENSOR_NAMESPACES):
                return True
            return "." not in rest and rest not in NOT_TENSOR_FUNCTIONS and not rest.startswith(
                ("is_", "get_", "set_", "use_", "are_", "_"))
        if qualified:
            return False  # another library's function
        method = method_call(call, *TENSOR_METHODS)
        if method is not None:
            return True
        attribute = self._self_name(call.func)
        return attribute is not None and attribute in self._layers

    def _tensor_name(self, name: cst.Name) -> bool:
        """Is the value a name holds at this place a tensor: the last value assigned to it before
        (in the order the function is written), or, with none, a ``Tensor`` annotation?"""
        known = self._names_read.get(id(name))
        if known is not None:
            return known
        self._names_read[id(name)] = False  # against cycles; earlier places only, but cheap to be sure
        place = self._places.get(id(name), len(self._places))
        earlier = [value for at, value in self._assignments.get(name.value, []) if at < place]
        if earlier:
            found = earlier[-1] is not None and self.is_tensor(earlier[-1])
        else:
            found = name.value in self._annotated_tensors
        self._names_read[id(name)] = found
        return found

    def _assigned(self, name: str) -> list[cst.BaseExpression | None]:
        return [value for _, value in self._assignments.get(name, [])]

    @cached_property
    def _places(self) -> dict[int, int]:
        """Each node of the function, numbered in the order the code is written."""
        return {id(node): at for at, node in enumerate(self._nodes)}

    @cached_property
    def _assignments(self) -> dict[str, list[tuple[int, cst.BaseExpression | None]]]:
        """Per plain name, where the function assigns it (after the assigned value: ``y = y + 1``
        reads the earlier ``y``) and what (None: a value that cannot be read, such as an unpacked
        tuple or a loop target). ``y += 1`` keeps what ``y`` holds."""
        found: dict[str, list[tuple[int, cst.BaseExpression | None]]] = {}

        def bind(target: cst.BaseExpression, value: cst.BaseExpression | None, at: int) -> None:
            if isinstance(target, cst.Name):
                found.setdefault(target.value, []).append((at, value))
            elif isinstance(target, (cst.Tuple, cst.List)):
                for element in target.elements:
                    bind(element.value, None, at)

        for node in self._nodes:
            at = self._ends[id(node)]
            if isinstance(node, cst.Assign):
                for target in node.targets:
                    bind(target.target, node.value, at)
            elif isinstance(node, (cst.AnnAssign, cst.NamedExpr)):
                bind(node.target, node.value, at)
            elif isinstance(node, (cst.For, cst.CompFor)):
                bind(node.target, None, self._places[id(node)])
        return found

    @cached_property
    def _walked(self) -> tuple[list[cst.CSTNode], dict[int, int]]:
        """The function's nodes in the order the code is written, and where each one's subtree ends."""
        nodes: list[cst.CSTNode] = []
        ends: dict[int, int] = {}

        def on_visit(node: cst.CSTNode) -> bool:
            nodes.append(node)
            return not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda))

        def on_leave(node: cst.CSTNode) -> None:
            ends[id(node)] = len(nodes)

        walk(self.function.body, on_visit, on_leave)
        return nodes, ends

    @property
    def _nodes(self) -> list[cst.CSTNode]:
        return self._walked[0]

    @property
    def _ends(self) -> dict[int, int]:
        return self._walked[1]

    @staticmethod
    def _self_name(expr: cst.BaseExpression) -> str | None:
        name = dotted_name(expr)
        return name[len("self."):] if name is not None and name.startswith("self.") and name.count(".") == 1 else None

    @cached_property
    def _annotated_tensors(self) -> frozenset[str]:
        params = self.function.params
        return frozenset(p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)
                         if p.annotation is not None and self._tensor_annotation(p.annotation.annotation))

    def _tensor_annotation(self, annotation: cst.BaseExpression) -> bool:
        text = string_value(annotation)
        name = text if text is not None else self.ctx.qualified_name(annotation) or dotted_name(annotation) or ""
        return name in ("torch.Tensor", "Tensor")

    @cached_property
    def _class_attributes(self) -> tuple[frozenset[str], frozenset[str]]:
        """The owner class's tensors (parameters, buffers) and layers (``torch.nn`` modules, modules of
        the file's classes), by attribute name."""
        tensors: set[str] = set()
        layers: set[str] = set()
        if self.owner is None:
            return frozenset(), frozenset()
        for statement in self.owner.body.body:
            if not isinstance(statement, cst.FunctionDef):
                continue
            scan = _AttributeScan(self.ctx, self.compiled)
            scan.scan(statement)
            tensors |= scan.tensors
            layers |= scan.layers
        return frozenset(tensors), frozenset(layers)

    @property
    def _tensor_attributes(self) -> frozenset[str]:
        return self._class_attributes[0]

    @property
    def _layers(self) -> frozenset[str]:
        return self._class_attributes[1]


class _AttributeScan:
    """The ``self.<name>`` attributes a method assigns a parameter, a buffer or a layer."""

    PARAMETERS = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})

    def __init__(self, ctx: RuleContext, compiled: CompiledCode):
        self.ctx = ctx
        self.compiled = compiled
        self.tensors: set[str] = set()
        self.layers: set[str] = set()

    def scan(self, method: cst.FunctionDef) -> None:
        stack: list[cst.CSTNode] = [method.body]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Assign) and len(node.targets) == 1:
                self._assigned(node.targets[0].target, node.value)
            elif isinstance(node, cst.Call) and method_call(node, "register_buffer", "register_parameter") \
                    and dotted_name(node.func.value) == "self" and node.args:
                name = string_value(node.args[0].value)
                if name is not None:
                    self.tensors.add(name)
            stack.extend(children(node))

    def _assigned(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        name = TensorValues._self_name(target)
        if name is None or not isinstance(value, cst.Call):
            return
        qualified = self.ctx.qualified_name(value.func) or ""
        if qualified in self.PARAMETERS:
            self.tensors.add(name)
        elif qualified.startswith("torch.nn.") and not qualified.startswith("torch.nn.functional.") \
                or dotted_name(value.func) in self.compiled.callees.module_classes:
            self.layers.add(name)
