"""Models: the file's ``torch.nn`` module classes, the layers it builds, and what a module class
does with the attributes it sets (are they registered submodules, how are they used)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from torchlint.analysis.bindings import Bindings
from torchlint.analysis.convolutions import ProjectConvolution, project_convolutions
from torchlint.analysis.data import FULLY_SHARD, FULLY_SHARDED_DATA_PARALLEL
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.frameworks import LIGHTNING_MODULE_PATHS, lightning_names
from torchlint.analysis.syntax import ast_dotted_name, dotted_name, function_parameters
from torchlint.analysis.walk import Visitor, visit, walk
from torchlint.lazy import libcst as cst

if TYPE_CHECKING:
    from torchlint.analysis.calls import Calls  # calls.py reaches value_facts.py, which reads this module

CONVOLUTIONS = {f"torch.nn.{module}{kind}{dim}d": dim for module in ("", "modules.conv.")
                for kind in ("Conv", "ConvTranspose", "LazyConv", "LazyConvTranspose") for dim in (1, 2, 3)}
# The functions that apply a convolution (cuDNN's, on CUDA): what a layer's own forward calls
FUNCTIONAL_CONVOLUTIONS = {f"torch.{module}{kind}{dim}d": dim for module in ("", "nn.functional.")
                           for kind in ("conv", "conv_transpose") for dim in (1, 2, 3)}


# Parts of ``torch.nn`` whose capitalized names are not layers (``torch.nn.utils.rnn.PackedSequence``,
# ``torch.nn.attention.SDPBackend``), and ``torch.nn`` classes that are tensors, not modules.
NOT_LAYER_PACKAGES = frozenset({"functional", "init", "utils", "parameter", "attention", "common_types", "grad"})
NOT_LAYERS = frozenset({"Parameter", "UninitializedParameter", "UninitializedBuffer", "Buffer"})
# Layers with no parameters, no buffers and no train/eval behaviour: leaving them unregistered
# changes nothing (``Dropout``, ``BatchNorm`` and ``RReLU`` do depend on the mode and are not here).
STATELESS_LAYERS = frozenset({
    "ReLU", "ReLU6", "LeakyReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Sigmoid", "Tanh", "Hardtanh",
    "Hardsigmoid", "Hardswish", "Hardshrink", "Softshrink", "Tanhshrink", "Softplus", "Softsign", "LogSigmoid",
    "Threshold", "GLU", "Softmax", "Softmin", "LogSoftmax", "Softmax2d", "Identity", "Flatten", "Unflatten",
    "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d", "PixelShuffle", "PixelUnshuffle", "ChannelShuffle",
    "Fold", "Unfold", "CosineSimilarity", "PairwiseDistance",
    *(f"{kind}{dim}d" for kind in ("MaxPool", "AvgPool", "AdaptiveAvgPool", "AdaptiveMaxPool", "LPPool",
                                   "FractionalMaxPool", "MaxUnpool", "ZeroPad", "ConstantPad", "ReflectionPad",
                                   "ReplicationPad", "CircularPad") for dim in (1, 2, 3)),
})
# Wrappers that return a module: DDP and FSDP1 build one around the model, FSDP2 shards it in place.
MODULE_WRAPPERS = FULLY_SHARDED_DATA_PARALLEL | FULLY_SHARD
# Methods of a module that return the module itself.
SELF_RETURNING = frozenset({"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "train", "eval",
                            "requires_grad_", "to_empty", "share_memory", "apply"})
# Containers that register what they hold.
CONTAINERS = frozenset({"ModuleList", "ModuleDict", "Sequential"})
# The public attributes of an `nn.ModuleDict` (torch 2.13): a key of that name raises KeyError there.
MODULE_ATTRIBUTES = frozenset({
    "T_destination", "add_module", "apply", "bfloat16", "buffers", "call_super_init", "children", "clear",
    "compile", "cpu", "cuda", "double", "dump_patches", "eval", "extra_repr", "float", "forward", "get_buffer",
    "get_extra_state", "get_parameter", "get_submodule", "half", "ipu", "items", "keys", "load_state_dict",
    "modules", "mtia", "named_buffers", "named_children", "named_modules", "named_parameters", "parameters",
    "pop", "register_backward_hook", "register_buffer", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "register_full_backward_pre_hook", "register_load_state_dict_post_hook",
    "register_load_state_dict_pre_hook", "register_module", "register_parameter", "register_state_dict_post_hook",
    "register_state_dict_pre_hook", "requires_grad_", "set_extra_state", "set_submodule", "share_memory",
    "state_dict", "to", "to_empty", "train", "training", "type", "update", "values", "xpu", "zero_grad",
})


def layer_class(qualified: str | None) -> bool:
    """Does a qualified name name a ``torch.nn`` module class (``torch.nn.Linear``,
    ``torch.nn.modules.conv.Conv2d``, ``torch.nn.parallel.DistributedDataParallel``), rather than a
    function, a tensor class (``nn.Parameter``) or a helper class of ``torch.nn.utils``?"""
    if not qualified or not qualified.startswith("torch.nn."):
        return False
    parts = qualified.split(".")
    last = parts[-1]
    return last[:1].isupper() and last not in NOT_LAYERS and not NOT_LAYER_PACKAGES.intersection(parts[2:-1])


# torchvision.models functions that build no network of a known kind: the registry's lookups
# (``get_model(name)`` may build a video network, with 3-D convolutions, as well as an image one)
# and the weights' helpers
REGISTRY_LOOKUPS = frozenset({"torchvision.models.get_model", "torchvision.models.get_model_builder"})
NOT_IMAGE_NETWORKS = frozenset({
    "torchvision.models.get_weight", "torchvision.models.get_model_weights", "torchvision.models.list_models",
    "torchvision.models.feature_extraction.get_graph_node_names",
})


# the networks of torchvision.models.video (3-D convolutions), as the registry names them
VIDEO_NETWORKS = frozenset({"r3d_18", "mc3_18", "r2plus1d_18", "s3d", "mvit_v1_b", "mvit_v2_s", "swin3d_t",
                            "swin3d_s", "swin3d_b"})


def convolution_dimension(qualified: str | None, network: str | None = None) -> int | None:
    """1, 2 or 3 for ``nn.Conv1d``/``Conv2d``/``Conv3d`` and their transposed and lazy forms; 3
    for a ``torchvision.models.video`` network, 2 for another ``torchvision.models`` network
    (image models: 2-D convolutions); else None. ``get_model(name)`` counts only with the name
    written out (``network``: the call's first argument when it is a string), the weights'
    helpers never."""
    if qualified is None:
        return None
    if qualified.startswith("torchvision.models."):
        if qualified in REGISTRY_LOOKUPS:
            return None if network is None else 3 if network in VIDEO_NETWORKS else 2
        if qualified in NOT_IMAGE_NETWORKS or "_Weights" in qualified:
            return None
        return 3 if qualified.startswith("torchvision.models.video.") else 2
    return CONVOLUTIONS.get(qualified)


def ast_convolution_kind(node: ast.Call, qualified: str | None) -> tuple[int | None, bool]:
    """(the dimension of the convolution a call builds or applies, whether it applies one: ``F.conv2d``);
    (None, True) for a call that is neither."""
    first = node.args[0] if node.args else None
    network = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
    dimension = convolution_dimension(qualified, network)
    return (dimension, False) if dimension is not None else (functional_convolution_dimension(qualified), True)


def is_optional(node: ast.IfExp | cst.IfExp) -> bool:
    """``layer if flag else None`` (or the other way round): the layer may never be built."""
    if isinstance(node, ast.IfExp):
        return any(type(b) is ast.Constant and b.value is None for b in (node.body, node.orelse))
    return any(type(b) is cst.Name and b.value == "None" for b in (node.body, node.orelse))


def functional_convolution_dimension(qualified: str | None) -> int | None:
    """1, 2 or 3 for ``torch.nn.functional.conv2d`` and the other functions that apply a
    convolution (``conv_transpose2d``, ``torch.conv3d``); else None."""
    return FUNCTIONAL_CONVOLUTIONS.get(qualified) if qualified is not None else None


def is_module_root(qualified: str) -> bool:
    """Does a base class's qualified name make a class that derives from it a module: a ``torch.nn``
    class (``nn.Module``, ``nn.Sequential``...) or ``LightningModule``?"""
    return qualified.startswith("torch.nn.") or lightning_names(qualified, *LIGHTNING_MODULE_PATHS)


class Modules:
    def __init__(self, module: cst.Module, bindings: Bindings, calls: Callable[[], Calls] | None = None):
        self.module = module
        self.bindings = bindings
        self._calls = calls  # what a call of the project's code does (built when first asked)

    @cached_property
    def classes(self) -> frozenset[str]:
        """Names of the classes in the file that are ``torch.nn`` modules: deriving from a
        ``torch.nn`` class (``nn.Module``, ``nn.Sequential``...), from ``LightningModule``, or from
        another such class of the file."""
        return self.bindings.derived_classes(lambda name: name is not None and is_module_root(name))

    def holds_module(self, name: str | None) -> bool:
        """Is a (dotted) name bound to a module: an instance of one of the file's ``nn.Module``
        classes or of a ``torch.nn`` layer (``self.G = Generator()``, ``net = nn.Linear(2, 2)``)?"""
        for value in self.bindings.values(name):
            if isinstance(value, cst.Call):
                qualified = self.bindings.qualified_name(value.func) or ""
                if dotted_name(value.func) in self.classes or qualified.startswith("torch.nn.") \
                        and qualified.rsplit(".", 1)[-1][:1].isupper():
                    return True
        return False

    def constructed_class(self, expr: cst.BaseExpression) -> str | None:
        """The class (its last name) of the module an expression builds: a call of a ``torch.nn``
        layer or of one of the file's module classes (``nn.Linear(2, 2)``, ``Block(d)``), possibly
        moved or cast right away (``nn.Linear(2, 2).cuda()``), or either branch of a conditional
        expression when both build one; None when it is not provably a new module."""
        if isinstance(expr, cst.IfExp):
            body, orelse = self.constructed_class(expr.body), self.constructed_class(expr.orelse)
            return body if body is not None and orelse is not None else None
        if not isinstance(expr, cst.Call):
            return None
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("to", "cuda", "cpu", "float", "half", "double",
                                                                   "bfloat16"):
            return self.constructed_class(func.value)
        if layer_class(self.bindings.qualified_name(func)):
            return dotted_name(func).rsplit(".", 1)[-1]
        if isinstance(func, cst.Name) and func.value in self.classes \
                and len(self.bindings.scope(self.module).assigned.get(func.value, ())) == 1:
            return func.value  # the class, not rebound at the module's level
        return None

    def is_module_value(self, expr: cst.BaseExpression | None) -> bool:
        """Does an expression evaluate to a module: a module built here (see constructed_class),
        wrapped in DDP/FSDP, or a method of a module that returns it (``.to(device)``, ``.eval()``)
        applied to one?"""
        if expr is None:
            return False
        if self.constructed_class(expr) is not None:
            return True
        if not isinstance(expr, cst.Call):
            return False
        if self.bindings.qualified_name(expr.func) in MODULE_WRAPPERS:
            return True
        func = expr.func
        return isinstance(func, cst.Attribute) and func.attr.value in SELF_RETURNING \
            and self.constructed_class(func.value) is not None

    def is_module_here(self, expr: cst.BaseExpression, scopes: list[cst.CSTNode]) -> bool:
        """Does an expression, read inside ``scopes`` (the enclosing functions and classes,
        innermost first: ``ctx.enclosing(cst.ClassDef, cst.FunctionDef)``), provably hold a module?
        A name whose every assignment in the scope that binds it is a module (see is_module_value;
        ``m = m.to(device)`` keeps it one), never a parameter; ``self.<attr>`` in a method of one
        of the file's module classes whose every assignment in the class's family is a module; an
        element of such an attribute that holds a ``ModuleList``, ``ModuleDict`` or ``Sequential``
        (``self.blocks[i]``)."""
        if isinstance(expr, cst.Name):
            return self._name_holds_module(expr.value, scopes, 0)
        if isinstance(expr, cst.Subscript):
            values = self._self_attribute_values(expr.value, scopes)
            return bool(values) and all(isinstance(v, cst.Call) and layer_class(self.bindings.qualified_name(v.func))
                                        and dotted_name(v.func).rsplit(".", 1)[-1] in CONTAINERS for v in values)
        values = self._self_attribute_values(expr, scopes)
        return bool(values) and all(self.is_module_value(v) for v in values)

    def _name_holds_module(self, name: str, scopes: list[cst.CSTNode], depth: int) -> bool:
        values, parameter = self.bindings.values_at(name, scopes)
        if parameter or not values or depth > 3:
            return False
        provable = False
        for value in values:
            while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
                    and value.func.attr.value in SELF_RETURNING and isinstance(value.func.value, (cst.Name, cst.Call)) \
                    and self.constructed_class(value) is None:
                value = value.func.value  # `model.to(device)`: the module it was called on
            if isinstance(value, cst.Name) and value.value == name:
                continue  # `model = model.cuda()`: a module if the other assignments make one
            if not (self.is_module_value(value) or isinstance(value, cst.Name)
                    and self._name_holds_module(value.value, scopes, depth + 1)):
                return False
            provable = True
        return provable

    def _self_attribute_values(self, expr: cst.BaseExpression, scopes: list[cst.CSTNode]) -> list[cst.BaseExpression]:
        """The values assigned to ``self.<attr>`` in the family of the module class whose method
        the place is in; empty when ``expr`` is not such an attribute."""
        cls_index = next((i for i, s in enumerate(scopes) if isinstance(s, cst.ClassDef)), None)
        if not isinstance(expr, cst.Attribute) or not isinstance(expr.value, cst.Name) or not cls_index:
            return []
        cls, method = scopes[cls_index], scopes[cls_index - 1]
        params = function_parameters(method)
        if cls.name.value not in self.classes or not params or params[0] != expr.value.value \
                or any(params[0] in function_parameters(f) for f in scopes[:cls_index - 1]):
            return []
        return self.attribute_uses(cls, expr.attr.value).assigned

    def stateless(self, layer: str, depth: int = 0) -> bool:
        """Is a layer (the last name of a ``torch.nn`` class, or a module class of the file) free of
        parameters, buffers and train/eval behaviour, so that registering it changes nothing? A
        ``torch.nn`` layer of STATELESS_LAYERS or a loss; a class of the file that derives from
        ``nn.Module`` only (through the file's classes), makes no parameter or buffer, and assigns
        its attributes only stateless layers or values that are not calls."""
        if layer in STATELESS_LAYERS or layer.endswith("Loss"):
            return True
        found = self.bindings.defined(layer, cst.ClassDef)
        if layer not in self.classes or len(found) != 1 or depth > 5:
            return False
        for cls in self._ancestors(found[0]):
            bases = [self.bindings.qualified_name(b.value) or dotted_name(b.value) for b in cls.bases if b.keyword is None]
            if any(b not in self.classes and b not in ("torch.nn.Module", "torch.nn.modules.module.Module")
                   for b in bases):
                return False
            if not self._builds_no_state(cls, depth):
                return False
        return True

    def _builds_no_state(self, cls: cst.ClassDef, depth: int) -> bool:
        state: list[cst.CSTNode] = []

        def on_visit(node: cst.CSTNode) -> bool:
            if state:
                return False
            if isinstance(node, cst.Call):
                name = (dotted_name(node.func) or "").rsplit(".", 1)[-1]
                if name in ("register_buffer", "register_parameter", *NOT_LAYERS):
                    state.append(node)
            elif isinstance(node, cst.Assign) and isinstance(node.value, cst.Call) \
                    and any(isinstance(t.target, cst.Attribute) for t in node.targets):
                layer = self.constructed_class(node.value)
                if layer is None or not self.stateless(layer, depth + 1):
                    state.append(node)
            return True

        walk(cls.body, on_visit)
        return not state

    def _ancestors(self, cls: cst.ClassDef) -> list[cst.ClassDef]:
        """The class and the classes of the file it derives from."""
        family = self.class_family(cls)
        return [node for node in family if node is cls or _derives_from(cls, node, family)]

    def class_family(self, cls: cst.ClassDef) -> list[cst.ClassDef]:
        """The class, the classes of the file it derives from and those that derive from it: what
        one of them sets on ``self``, the others may use."""
        classes = {node.name.value: node for node in self.module.body if isinstance(node, cst.ClassDef)}

        def file_bases(node: cst.ClassDef) -> list[cst.ClassDef]:
            return [classes[name] for b in node.bases
                    if b.keyword is None and (name := dotted_name(b.value)) in classes]

        ancestors, todo = [cls], [cls]
        while todo:
            for base in file_bases(todo.pop()):
                if base not in ancestors:
                    ancestors.append(base)
                    todo.append(base)
        descendants, changed = [cls], True
        while changed:
            changed = False
            for node in classes.values():
                if node not in descendants and any(base in descendants for base in file_bases(node)):
                    descendants.append(node)
                    changed = True
        return ancestors + descendants[1:]

    def attribute_uses(self, cls: cst.ClassDef, attribute: str) -> AttributeUses:
        """What the class (with its family of the file's classes) does with ``self.<attribute>``."""
        uses = AttributeUses()
        family = self.class_family(cls)
        for member in family:
            _AttributeReader(member, attribute, uses).read()
        uses.handed = uses.handed or _handed_elsewhere(self.module, family, attribute)
        return uses

    @cached_property
    def convolution_dimensions(self) -> frozenset[int]:
        """The dimensions of the convolutions the file builds (see convolution_dimension)."""
        found: set[int] = set()
        bindings = self.bindings

        class Convolutions(Visitor):
            def visit_IfExp(self, node: cst.IfExp) -> bool:
                return not is_optional(node)  # `nn.Conv2d(...) if talking_heads else None`: an option's layer

            def visit_Call(self, node: cst.Call) -> None:
                first = node.args[0].value if node.args and node.args[0].keyword is None else None
                network = first.evaluated_value if isinstance(first, cst.SimpleString) else None
                dimension = convolution_dimension(bindings.qualified_name(node.func), network)
                if dimension is not None:
                    found.add(dimension)

        visit(self.module, Convolutions())
        return frozenset(found)

    @cached_property
    def project_convolutions(self) -> dict[int, ProjectConvolution]:
        """The convolutions that the project's own modules build for this file, one of each
        dimension (convolutions.project_convolutions)."""
        return project_convolutions(self.module, self._calls)


def ast_module_classes(index: SyntaxIndex) -> frozenset[str]:
    """The precheck twin of ``Modules.classes``: the file's classes with a base that an import may
    name a ``torch.nn`` class or a ``LightningModule`` (``nn.Module``, ``torch.nn.Linear``), or that
    derive from such a class of the file."""
    def compute() -> frozenset[str]:
        classes = index.nodes(ast.ClassDef)
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for node in classes:
                if node.name in found:
                    continue
                bases = [base.value if isinstance(base, ast.Starred) else base for base in node.bases]
                if any(ast_dotted_name(base) in found or any(map(is_module_root, index.qualified_names(base)))
                       for base in bases):
                    found.add(node.name)
                    changed = True
        return frozenset(found)
    return index.memo("module_classes", compute)


def ast_module_holders(index: SyntaxIndex) -> frozenset[str]:
    """The precheck twin of ``Modules.holds_module``: names assigned a call of a class of the file
    that derives from a ``Module`` (by name), or of a capitalized ``nn.`` layer."""
    def compute() -> frozenset[str]:
        classes = {node.name for node in index.classes_deriving("Module", "LightningModule")}
        found = set()
        for node in index.nodes(ast.Assign):
            if isinstance(node.value, ast.Call):
                callee = ast_dotted_name(node.value.func) or ""
                last = callee.rsplit(".", 1)[-1]
                if callee in classes or "." in callee and last[:1].isupper():
                    found.update(name for target in node.targets if (name := ast_dotted_name(target)))
        return frozenset(found)
    return index.memo("module-holders", compute)



# --- what a class does with one of its attributes ------------------------------------------------------

# Calls that only read a container: its length, or its elements one by one.
READING_CALLS = frozenset({"len", "enumerate", "reversed", "zip", "iter"})
# Methods of a list or dict that read it the same way on ``ModuleList``/``ModuleDict``.
READING_METHODS = frozenset({"items", "keys", "values"})
ADDING_METHODS = frozenset({"append", "extend", "insert"})
# Ways a module registers a submodule by hand.
REGISTERING_CALLS = frozenset({"add_module", "register_module", "setattr"})


@dataclass
class AttributeUses:
    """The uses of ``self.<attribute>`` in a class and its family (Modules.attribute_uses).

    ``assigned``: the values assigned to it (``self.a = v``); ``added``: the values appended,
    extended or inserted (``self.a.append(v)``, the elements of ``self.a.extend([...])`` and of
    ``self.a += [...]``; None for one that cannot be read); ``handed``: it is passed to a call that
    may keep or register it (``nn.Sequential(*self.a)``, ``helper(self.a)``, or from outside the
    family ``nn.Sequential(*block.a)``), one of its elements is assigned, returned or passed on
    (``self.backbone = self.a[name]``), or the class registers submodules by hand (``add_module``,
    ``setattr``); ``other``: a use that is not
    iterating, indexing (not slicing), ``len()``, ``in``, ``.items()``/``.keys()``/``.values()``."""

    assigned: list[cst.BaseExpression] = field(default_factory=list)
    added: list[cst.BaseExpression | None] = field(default_factory=list)
    handed: bool = False
    other: bool = False


def _derives_from(cls: cst.ClassDef, base: cst.ClassDef, classes: list[cst.ClassDef], depth: int = 0) -> bool:
    """Does ``cls`` derive from ``base`` through the given classes?"""
    names = {dotted_name(b.value) for b in cls.bases if b.keyword is None}
    if base.name.value in names:
        return True
    return depth < 20 and any(_derives_from(other, base, classes, depth + 1)
                              for other in classes if other.name.value in names)


def _handed_elsewhere(module: cst.Module, family: list[cst.ClassDef], attribute: str) -> bool:
    """Is an ``<object>.<attribute>`` outside the family's classes passed to a call
    (``nn.Sequential(*block.layers)``): a class that builds layers for its caller to register."""
    found: list[cst.Arg] = []

    def on_visit(node: cst.CSTNode) -> bool:
        if found or any(node is member for member in family):
            return False
        if isinstance(node, cst.Call) and (dotted_name(node.func) or "") not in READING_CALLS:
            found.extend(arg for arg in node.args if isinstance(arg.value, cst.Attribute)
                         and arg.value.attr.value == attribute and not _is_self(arg.value.value))
        return True

    walk(module, on_visit)
    return bool(found)


def _is_self(expr: cst.BaseExpression) -> bool:
    """``self`` (another class's instance, not one of the family's)."""
    return isinstance(expr, cst.Name) and expr.value == "self"


class _AttributeReader:
    def __init__(self, cls: cst.ClassDef, attribute: str, uses: AttributeUses):
        self.cls, self.attribute, self.uses = cls, attribute, uses
        self.self_names: list[str] = []
        self.stack: list[cst.CSTNode] = []

    def read(self) -> None:
        walk(self.cls, self._visit, self._leave)

    def _visit(self, node: cst.CSTNode) -> bool:
        parent = self.stack[-1] if self.stack else None
        self.stack.append(node)
        if isinstance(node, cst.FunctionDef):
            params = function_parameters(node)
            # a method of the class: its first parameter is the instance; nested functions keep it
            own = parent is not None and len(self.stack) >= 3 and self.stack[-3] is self.cls
            self.self_names.append(params[0] if own and params else self.self_names[-1] if self.self_names else "")
        elif isinstance(node, cst.Call):
            name = dotted_name(node.func) or ""
            if name.rsplit(".", 1)[-1] in REGISTERING_CALLS:
                self.uses.handed = True
        elif isinstance(node, cst.Attribute) and node.attr.value == self.attribute and self.self_names \
                and isinstance(node.value, cst.Name) and node.value.value == self.self_names[-1]:
            self._classify(node)
            return False
        return True

    def _leave(self, node: cst.CSTNode) -> None:
        self.stack.pop()
        if isinstance(node, cst.FunctionDef):
            self.self_names.pop()

    def _classify(self, node: cst.Attribute) -> None:
        uses, parents = self.uses, self.stack[-2::-1]  # innermost first, the node itself left out
        parent = parents[0] if parents else None
        grand = parents[1] if len(parents) > 1 else None
        if isinstance(parent, cst.AssignTarget):
            assign = parents[1] if len(parents) > 1 else None
            if isinstance(assign, cst.Assign):
                uses.assigned.append(assign.value)
            return
        if isinstance(parent, (cst.AnnAssign, cst.NamedExpr)) and parent.target is node:
            if parent.value is not None:
                uses.assigned.append(parent.value)
            return
        if isinstance(parent, cst.AugAssign) and parent.target is node:
            if isinstance(parent.operator, cst.AddAssign) and isinstance(parent.value, (cst.List, cst.Tuple)):
                uses.added += [e.value if isinstance(e, cst.Element) else None for e in parent.value.elements]
            else:
                uses.other = True
            return
        if isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is node:
            return
        if isinstance(parent, cst.Subscript) and parent.value is node:
            store = isinstance(grand, (cst.AssignTarget, cst.Del)) or isinstance(grand, cst.AugAssign) \
                and grand.target is parent
            if store or any(isinstance(s.slice, cst.Slice) for s in parent.slice):
                uses.other = True
            elif isinstance(grand, (cst.Assign, cst.AnnAssign, cst.Return, cst.Arg)):
                uses.handed = True  # one element picked out: it may be registered where it goes
            return
        if isinstance(parent, cst.ComparisonTarget) and isinstance(parent.operator, (cst.In, cst.NotIn)):
            return
        if isinstance(parent, cst.Attribute) and parent.value is node and isinstance(grand, cst.Call) \
                and grand.func is parent:
            method = parent.attr.value
            if method in ADDING_METHODS:
                self._added(method, grand)
            elif method not in READING_METHODS:
                uses.other = True
            return
        if isinstance(parent, cst.Arg) and isinstance(grand, cst.Call):
            if parent.star or (dotted_name(grand.func) or "") not in READING_CALLS:
                uses.handed = True
            return
        uses.other = True

    def _added(self, method: str, call: cst.Call) -> None:
        args = [a for a in call.args if a.keyword is None and not a.star]
        if len(args) != len(call.args):
            self.uses.added.append(None)
        elif method == "append" and len(args) == 1:
            self.uses.added.append(args[0].value)
        elif method == "insert" and len(args) == 2:
            self.uses.added.append(args[1].value)
        elif method == "extend" and len(args) == 1 and isinstance(args[0].value, (cst.List, cst.Tuple)):
            self.uses.added += [e.value if isinstance(e, cst.Element) else None for e in args[0].value.elements]
        else:
            self.uses.added.append(None)
