"""
## What it does

Finds a `Conv1d`/`Conv2d`/`Conv3d` (or transposed, `ConvTranspose2d`...) or `Linear` layer with a
bias whose output goes straight into a BatchNorm of the same dimension: adjacent in
`nn.Sequential` (positional or `OrderedDict`), or in a module whose `forward` calls
`self.bn(self.conv(x))` or `x = self.conv(x)` then `x = self.bn(x)`.

Also in the layer lists a function builds and unpacks into `nn.Sequential(*layers)`: adjacent in
one list literal (`layers += [conv, nn.BatchNorm2d(c), nn.ReLU()]`, `layers.extend([...])`), or
added by two statements in a row (`layers.append(conv)` then `layers.append(nn.BatchNorm2d(c))`),
the second maybe the first statement of an `if` without `else` (`if batch_norm: layers += [nn.BatchNorm2d(c)]`).
The conv may be bound to a name first (`conv2d = nn.Conv2d(...)`, as torchvision's VGG
`make_layers` does). And when the layer comes from a helper of the project's, in any module:
`self.conv1 = conv3x3(c, c)` where `def conv3x3(...): return nn.Conv2d(...)`, or a module of the
project whose `forward` returns its conv's output as is (tacotron2's `ConvNorm`: `__init__` assigns
`self.conv = nn.Conv1d(..., bias=bias)` once, `forward` returns `self.conv(signal)`), the bias read
through the helper's or the module's own `bias` parameter when it has one. A layer built with
`bias=<a parameter of the function around it>` (`DepthWiseConv2d(..., bias=True)` passing
`bias=bias` to its conv) counts as biased unless every call of that function or module in the file
passes `False` (or, with no call in the file, its default is `False`). A `Sequential` handed to
code that is not torch's (`MaskConv(nn.Sequential(conv, bn, ...))`, which masks the output of each
module) is not read: the layers may not meet as a `Sequential` runs them.

## Why is it slow

BatchNorm subtracts the per-channel mean of its input, and a per-channel bias added just before
it moves that mean by exactly the bias: the bias cancels and never affects the output, while
its parameters, its gradient and its optimizer state are still computed and stored every step.
The PyTorch tuning guide: "disable bias for convolutions directly followed by a batch norm".
BatchNorm's own `beta` already provides the shift.

## Expected gain

Small. No published measurement found. The bias holds one number per output channel, a tiny share of
the layer (64 of the 36,928 parameters of `Conv2d(64, 64, 3)`), and adding it costs at most one
elementwise pass over the layer's output; the fix mainly removes parameters that never learn
anything. `torchlint verify --each --unsafe-fixes --imports script.py` measures the step time and
memory before and after on your machine. `--imports` fixes the model's module too, which is where
the layers usually are. On the zoo's VAE, the three fixes in `models/vanilla_vae.py` trained within
tolerance (bench/results/verify-zoo.md).

## Example

```python
nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())
```

## Use instead

```python
nn.Sequential(nn.Conv2d(3, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
```

## Fix safety

Unsafe. The outputs are unchanged, but the module's `state_dict` loses the `conv.bias` entry, so
existing checkpoints no longer load with `strict=True`, and code that reads `layer.bias` finds
`None`. The fix is withheld in files that read a `.bias` attribute (weight initialisation loops
often call `nn.init.zeros_(m.bias)`, which fails on `None`), and the rule is silent when the layer
is called anywhere else in the module, or when anything sits between the layer and the norm. No fix
for a layer bound to a name that is also used elsewhere (SSD's `vgg` lists the same conv with a norm
under `if batch_norm:` and without one otherwise). A norm added under `if <condition>:` gets
`bias=not <condition>`, which keeps the bias exactly when no norm follows. A condition other than
a plain name or attribute gets no fix. A helper's layer is fixed at the call, by passing
`False` to the helper's own parameter that sets the bias (`conv3x3(c, c, bias=False)`,
`ConvNorm(c, c, bias=False)`), which changes this call alone. A helper without such a parameter gets no fix: the fix would belong in the helper,
whose other callers may use it without a norm. The finding points to where the helper builds the
layer.

## References

- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#disable-bias-for-convolutions-directly-followed-by-a-batch-norm
- https://github.com/pytorch/pytorch/blob/main/torch/profiler/_pattern_matcher.py
- https://pytorch.org/docs/stable/generated/torch.nn.BatchNorm2d.html
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from torchlint.analysis.flow import passed_values
from torchlint.analysis.syntax import (ast_find_keyword, ast_is_literal, contains, dotted_name, find_argument,
                                       function_parameters, has_star_args, is_literal, names_in, string_value)
from torchlint.fixes import replace_arg_value, set_keyword
from torchlint.analysis.calls import ReturnedLayer, ast_returned_layer, related
from torchlint.analysis.calls import where as place_of
from torchlint.analysis.index import span
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex
from torchlint.rules._layer_lists import SEQUENTIAL, LayerLists, ast_listed_calls

# layer -> (dimension, positional index of `bias`)
BIASED_LAYERS = {
    "torch.nn.Linear": (1, 2), "torch.nn.modules.linear.Linear": (1, 2),
    # ConvTranspose's parameters differ (output_padding where Conv has dilation) but `bias` is 8th too
    **{f"torch.nn.{module}{kind}{dim}d": (dim, 7) for module in ("", "modules.conv.")
       for kind in ("Conv", "ConvTranspose") for dim in (1, 2, 3)},
}
NORMS = {"torch.nn.BatchNorm1d": 1, "torch.nn.BatchNorm2d": 2, "torch.nn.BatchNorm3d": 3,
         "torch.nn.modules.batchnorm.BatchNorm1d": 1, "torch.nn.modules.batchnorm.BatchNorm2d": 2,
         "torch.nn.modules.batchnorm.BatchNorm3d": 3, "torch.nn.SyncBatchNorm": 0}
LAYER_DIMENSIONS = {"Conv1d": 1, "Conv2d": 2, "Conv3d": 3, "Linear": 1}  # a helper's layer (summaries.Layer.kind)
READS_BIAS = re.compile(r"\.bias\b")  # e.g. nn.init.zeros_(m.bias): fails once the bias is None
ORDERED_DICT = frozenset({"collections.OrderedDict", "typing.OrderedDict"})


def _may_keep_bias(call: ast.Call, position: int) -> bool:
    """The precheck's _has_bias: no ``bias=False`` (by keyword, or at its place) in the call."""
    bias = ast_find_keyword(call, "bias")
    if bias is not None:
        return not ast_is_literal(bias.value, False)
    if any(isinstance(arg, ast.Starred) for arg in call.args[:position + 1]):
        return True  # `*args` may hold it
    return not (len(call.args) > position and ast_is_literal(call.args[position], False))


def _ast_layer_slots(index: SyntaxIndex) -> list[ast.Call]:
    """The calls whose result may be a layer that feeds a norm: the modules of an ``nn.Sequential``
    and the values assigned to ``self.<name>``."""
    slots = [a for sequential in index.calls_of(SEQUENTIAL) for a in sequential.args if isinstance(a, ast.Call)]
    slots += [node.value for node in index.nodes(ast.Assign) if isinstance(node.value, ast.Call)
              and len(node.targets) == 1 and _ast_self_attribute(node.targets[0]) is not None]
    return slots


def _ast_helper_layer(index: SyntaxIndex, call: ast.Call) -> bool:
    """The precheck twin of ``_helper_layer``, loosely: the project's function returns a layer, or
    the project's module it constructs returns a layer's output."""
    return ast_returned_layer(index, call) is not None


def _ast_self_attribute(expr: ast.AST) -> str | None:
    """The twin of ``_self_attribute``: ``conv`` for ``self.conv``."""
    if type(expr) is ast.Attribute and type(expr.value) is ast.Name and expr.value.id == "self":
        return expr.attr
    return None


def _ast_class_pair(index: SyntaxIndex, biased: set[int], norms: set[int]) -> bool:
    """May ``leave_ClassDef`` find a pair: in one class (its nested classes apart, as the walk's
    stack of ``_ClassLayers`` keeps them), a norm assigned to ``self.n`` called on the output of a
    layer that keeps its bias, assigned to ``self.l`` and called once there?"""
    classes = sorted((span(node) for node in index.nodes(ast.ClassDef)), reverse=True)
    if not classes:
        return False

    def owner(node: ast.AST) -> tuple[int, int] | None:  # the innermost class around the node (by lines)
        return next((lines for lines in classes if lines[0] <= node.lineno <= lines[1]), None)

    layers: dict[tuple[tuple[int, int] | None, str], set[str]] = {}
    for node in index.nodes(ast.Assign):
        attribute = _ast_self_attribute(node.targets[0]) if len(node.targets) == 1 else None
        kind = "biased" if id(node.value) in biased else "norm" if id(node.value) in norms else None
        if attribute is not None and kind is not None:
            layers.setdefault((owner(node), kind), set()).add(attribute)

    def called_once(layer: str, where: tuple[int, int]) -> bool:
        return layer in layers.get((where, "biased"), ()) and sum(
            _ast_self_attribute(call.func) == layer and owner(call) == where for call in index.calls(layer)) == 1

    for (where, kind), names in layers.items():
        if where is None or kind != "norm" or not layers.get((where, "biased")):
            continue
        for call in index.calls(*names):
            arguments = [a.value if type(a) is ast.Starred else a for a in call.args] + [k.value for k in call.keywords]
            if _ast_self_attribute(call.func) not in names or len(arguments) != 1 or owner(call) != where:
                continue
            value = arguments[0]
            if type(value) is ast.Call and called_once(_ast_self_attribute(value.func), where):
                return True  # self.bn(self.conv(x))
            if type(value) is ast.Name and any(called_once(layer, where)
                                               for layer in _ast_assigned_before(index, call, value.id)):
                return True  # x = self.conv(x); x = self.bn(x)
    return False


def _ast_assigned_before(index: SyntaxIndex, call: ast.Call, variable: str) -> list[str]:
    """The twin of ``_assigned_just_before``, loosely: the layers ``variable = self.layer(...)``
    assigns in the statement before the line that holds the call, in its block (that line's own
    statements, joined by ``;``, count too: a precheck may not tell them apart)."""
    found = []
    for block in index.blocks():
        statement = next((i for i, node in enumerate(block) if span(node)[0] <= call.lineno <= node.end_lineno), None)
        if statement is None:
            continue
        first = statement
        while first > 0 and b";" in _between(index, block[first - 1], block[first]):
            first -= 1  # a `;` between two statements is (or is in a comment) on one line
        for previous in block[max(first - 1, 0):statement]:
            if type(previous) is ast.Assign and len(previous.targets) == 1 and type(previous.targets[0]) is ast.Name \
                    and previous.targets[0].id == variable and type(previous.value) is ast.Call \
                    and _ast_self_attribute(previous.value.func) is not None:
                found.append(_ast_self_attribute(previous.value.func))
    return found


def _between(index: SyntaxIndex, before: ast.AST, after: ast.AST) -> bytes:
    """The source between the end of one node and the start of the next (CPython's columns count
    bytes)."""
    lines = [line.encode() for line in index.source_lines[before.end_lineno - 1:after.lineno]]
    if len(lines) == 1:
        return lines[0][before.end_col_offset:after.col_offset]
    return b"\n".join([lines[0][before.end_col_offset:], *lines[1:-1], lines[-1][:after.col_offset]])


@dataclass(frozen=True)
class _Candidate:
    """A layer call whose bias a norm cancels: whether a fix may change it, the layer a project's
    helper returns when the call is the helper's, and the condition under which the norm follows."""

    layer: cst.Call
    fixable: bool
    helper: ReturnedLayer | None
    condition: cst.BaseExpression | None


@dataclass
class _ClassLayers:
    """What one module class defines (``self.x = nn.Conv2d(...)``) and how forward uses it."""

    layers: dict[str, cst.Call] = field(default_factory=dict)
    uses: dict[str, int] = field(default_factory=dict)
    pairs: list[tuple[str, str]] = field(default_factory=list)  # (layer, norm) fed directly


def _self_attribute(expr: cst.BaseExpression) -> str | None:
    name = dotted_name(expr)
    return name[5:] if name and name.startswith("self.") and name.count(".") == 1 else None


class BiasBeforeNorm(Rule):
    code = "TL401"
    name = "bias-before-norm"
    kind = "performance"
    summary = "Conv/Linear bias right before BatchNorm, which cancels it"
    fix_applicability = "unsafe"
    triggers = ("BatchNorm",)

    @classmethod
    def applies(cls, text: str) -> bool:
        return "BatchNorm" in text  # the layer may come from a helper of any name (`conv3x3(c, c)`)

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a layer that keeps its bias, right before a norm in an nn.Sequential, or both assigned
        # to attributes (`self.conv = ...`, `self.bn = ...`) for forward to chain
        norms = {id(call) for call in index.calls_of(NORMS)}
        if not norms:
            return False
        biased = {id(call) for name, (_, position) in BIASED_LAYERS.items()
                  for call in index.calls_of([name]) if _may_keep_bias(call, position)}
        # the project's helpers that return a layer (`self.conv1 = conv3x3(c, c)`, or in a Sequential)
        biased |= {id(call) for call in _ast_layer_slots(index) if _ast_helper_layer(index, call)}
        for calls in ast_listed_calls(index):  # nn.Sequential(*layers): a layer and a norm among what built it
            if any(id(call) in norms for call in calls) and any(id(call) in biased or isinstance(call, ast.Call)
                                                                and _ast_helper_layer(index, call) for call in calls):
                return True
        for sequential in index.calls_of(SEQUENTIAL):
            modules = [a for a in sequential.args if not isinstance(a, ast.Starred)]
            if len(modules) == 1 and index.is_call(modules[0], "OrderedDict"):  # nn.Sequential(OrderedDict([...]))
                pairs = modules[0].args[0] if len(modules[0].args) == 1 else None
                modules = [pair.elts[1] for pair in getattr(pairs, "elts", ())
                           if isinstance(pair, ast.Tuple) and len(pair.elts) == 2]
            if any(id(layer) in biased and id(norm) in norms for layer, norm in zip(modules, modules[1:])):
                return True
        # the class path, one class at a time: `self.bn(self.conv(x))`, or `x = self.conv(x)` then
        # `self.bn(x)`, with `self.conv` called once in the class
        return _ast_class_pair(index, biased, norms)

    def __init__(self, ctx):
        super().__init__(ctx)
        self.classes: list[_ClassLayers] = []
        self.lists = LayerLists(ctx)
        self.candidates: list[_Candidate] = []

    # which layer feeds which norm ---------------------------------------------------------
    def _dimension(self, call: cst.BaseExpression, table: dict) -> int | None:
        if isinstance(call, cst.Call):
            return table.get(self.ctx.qualified_name(call.func) or "")
        return None

    def _feeds(self, layer: cst.BaseExpression, norm: cst.BaseExpression) -> bool:
        dimension = self._dimension(layer, {k: v[0] for k, v in BIASED_LAYERS.items()})
        norm_dimension = self._dimension(norm, NORMS)
        return dimension is not None and norm_dimension is not None and norm_dimension in (0, dimension)

    def _has_bias(self, layer: cst.Call) -> bool:
        index = BIASED_LAYERS[self.ctx.qualified_name(layer.func)][1]
        bias = find_argument(layer, "bias", index)
        return bias is None or not is_literal(bias.value, False) and not self._caller_turns_off(layer, bias.value)

    def _caller_turns_off(self, layer: cst.Call, bias: cst.BaseExpression) -> bool:
        """``bias=bias``, a parameter of the function around the layer (a module's ``__init__``),
        that every call of it in the file passes as ``False`` (vit-pytorch's ``DepthWiseConv2d``),
        or whose default is ``False`` when the file makes no call of it."""
        if type(bias) is not cst.Name:
            return False
        # the walk is at the layer, or leaves the class whose methods build it
        owner = next((n for n in reversed(self.ctx.ancestors) if type(n) is cst.ClassDef), None)
        function = self.ctx.enclosing_function()
        if function is None and owner is not None:
            function = next((f for f in owner.body.body if type(f) is cst.FunctionDef and contains(f, layer)), None)
        if function is None or bias.value not in function_parameters(function):
            return False
        owner = owner if owner is not None and function in owner.body.body else None
        values = passed_values(self.ctx.module, function, owner, bias.value)
        if values is None:
            default = next((p.default for p in function.params.params if p.name.value == bias.value), None)
            values = [default]
        return all(is_literal(value, False) for value in values)

    def _candidate(self, layer: cst.BaseExpression, norm: cst.BaseExpression, fixable: bool = True,
                   condition: cst.BaseExpression | None = None) -> None:
        """``condition``: the norm follows only when it holds (``if batch_norm:``); the fix then
        passes ``bias=not <condition>`` when the condition is a plain name or attribute."""
        if condition is not None and not (isinstance(condition, (cst.Name, cst.Attribute))
                                          and dotted_name(condition) is not None):
            fixable = False
        if self._feeds(layer, norm) and self._has_bias(layer) and not self._off_when(layer, condition):
            self.candidates.append(_Candidate(layer, fixable, None, condition))
        elif isinstance(layer, cst.Call) and self._dimension(norm, NORMS) is not None \
                and self._dimension(layer, BIASED_LAYERS) is None:
            helper = self._helper_layer(layer)
            norm_dimension = NORMS[self.ctx.qualified_name(norm.func)]
            if helper is not None and norm_dimension in (0, LAYER_DIMENSIONS[helper.layer.kind]):
                self.candidates.append(_Candidate(layer, fixable and condition is None, helper, condition))

    def _off_when(self, layer: cst.Call, condition: cst.BaseExpression | None) -> bool:
        """Is the layer's bias already ``not <condition>``, as the fix writes it?"""
        if condition is None:
            return False
        bias = find_argument(layer, "bias", BIASED_LAYERS[self.ctx.qualified_name(layer.func)][1])
        value = bias.value if bias is not None else None
        return isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Not) \
            and self.ctx.code_for(value.expression).strip() == self.ctx.code_for(condition).strip()

    def _helper_layer(self, call: cst.Call) -> ReturnedLayer | None:
        """The fresh Conv/Linear with its bias on that a call of the project's own function returns
        (``conv3x3(c, c)`` returning ``nn.Conv2d(...)``)."""
        returned = self.ctx.calls.returned_layer(call)
        return returned if returned is not None and returned.bias in ("default", "True") else None

    # nn.Sequential ------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        self.lists.call(node, name)
        if name in SEQUENTIAL and not self._handed_to_project_code():
            modules = [a.value for a in node.args if not a.star and a.keyword is None]
            if len(modules) == 1 and isinstance(modules[0], cst.Call) and \
                    self.ctx.qualified_name(modules[0].func) in ORDERED_DICT:
                modules = self._ordered_dict_modules(modules[0])
            for layer, norm in zip(modules, modules[1:]):
                self._candidate(layer, norm)
        elif self.classes:
            self._record_use(node)

    def _handed_to_project_code(self) -> bool:
        """Is the ``nn.Sequential(...)`` at hand passed to a class or function of the project
        (deepspeech's ``MaskConv(nn.Sequential(conv, bn, ...))``, which runs the modules one by one
        and masks the output of each)? The layers may not meet as a Sequential runs them. A list's
        ``append`` or torch's own containers are not such code."""
        chain = self.ctx.ancestors
        if len(chain) < 3 or type(chain[-2]) is not cst.Arg or type(chain[-3]) is not cst.Call:
            return False
        call = chain[-3]
        if type(call.func) is cst.Name and self.ctx.bindings.defined(call.func.value):
            return True
        return type(call.func) is cst.Name and self.ctx.calls.resolve(call) is not None

    @staticmethod
    def _ordered_dict_modules(call: cst.Call) -> list[cst.BaseExpression]:
        if len(call.args) != 1 or not isinstance(call.args[0].value, (cst.List, cst.Tuple)):
            return []
        modules = []
        for element in call.args[0].value.elements:
            pair = element.value
            if isinstance(pair, cst.Tuple) and len(pair.elements) == 2 and string_value(pair.elements[0].value):
                modules.append(pair.elements[1].value)
            else:
                return []
        return modules

    # layer lists: layers += [conv, nn.BatchNorm2d(c)] ... nn.Sequential(*layers) (_layer_lists) ----
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.lists.enter()

    def visit_Name(self, node: cst.Name) -> None:
        self.lists.name(node)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.lists.aug_assign(node)

    def visit_If(self, node: cst.If) -> None:
        self.lists.if_statement(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        for pair in self.lists.leave(lambda call: self._dimension(call, NORMS) is not None):
            self._candidate(pair.layer, pair.follower, pair.fixable, pair.condition)

    # module classes: self.conv = nn.Conv2d(...) in __init__, self.bn(self.conv(x)) in forward ----
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.classes.append(_ClassLayers())

    def visit_Assign(self, node: cst.Assign) -> None:
        self.lists.assign(node)
        if self.classes and len(node.targets) == 1 and isinstance(node.value, cst.Call):
            attribute = _self_attribute(node.targets[0].target)
            if attribute is not None:
                self.classes[-1].layers[attribute] = node.value

    def _record_use(self, call: cst.Call) -> None:
        state = self.classes[-1]
        norm = _self_attribute(call.func)
        if norm is None:
            return
        state.uses[norm] = state.uses.get(norm, 0) + 1
        if len(call.args) != 1:
            return
        argument_value = call.args[0].value
        if isinstance(argument_value, cst.Call) and _self_attribute(argument_value.func):
            state.pairs.append((_self_attribute(argument_value.func), norm))  # self.bn(self.conv(x))
        elif isinstance(argument_value, cst.Name):
            layer = self._assigned_just_before(argument_value.value)  # x = self.conv(x); x = self.bn(x)
            if layer is not None:
                state.pairs.append((layer, norm))

    def _assigned_just_before(self, variable: str) -> str | None:
        position = self.ctx.statement_position()
        if position is None or position[2] == 0:
            return None
        statement, body, index = position
        previous = body[index - 1]
        if not (isinstance(previous, cst.SimpleStatementLine) and len(previous.body) == 1
                and isinstance(previous.body[0], cst.Assign)):
            return None
        assign = previous.body[0]
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name) \
                or assign.targets[0].target.value != variable or not isinstance(assign.value, cst.Call):
            return None
        # the layer's output must not be read again after the norm: x = self.bn(x) rebinds it
        rebinds = isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and \
            isinstance(statement.body[0], cst.Assign) and any(
                isinstance(t.target, cst.Name) and t.target.value == variable for t in statement.body[0].targets)
        if not rebinds and any(variable in names_in(later) for later in body[index + 1:]):
            return None
        return _self_attribute(assign.value.func)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        state = self.classes.pop()
        for layer, norm in state.pairs:
            if layer in state.layers and norm in state.layers and state.uses.get(layer) == 1:
                self._candidate(state.layers[layer], state.layers[norm])

    # report at the end, once we know whether the file reads `.bias` ----------------------------
    def leave_Module(self, original_node: cst.Module) -> None:
        reads_bias = READS_BIAS.search(self.ctx.source) is not None
        seen = set()
        for candidate in self.candidates:
            if id(candidate.layer) not in seen:
                seen.add(id(candidate.layer))
                if candidate.helper is not None:
                    self._report_helper(candidate, reads_bias)
                else:
                    self._report_layer(candidate, reads_bias)

    def _report_layer(self, candidate: _Candidate, reads_bias: bool) -> None:
        layer, condition = candidate.layer, candidate.condition
        kind = self.ctx.qualified_name(layer.func).rsplit(".", 1)[1]
        follows, value = "follows it", "False"
        if condition is not None:
            written = self.ctx.code_for(condition).strip()
            plain = isinstance(condition, (cst.Name, cst.Attribute))
            follows, value = f"follows it when `{written}` holds", f"not {written}" if plain else f"not ({written})"
        self.report(layer, f"the bias of this `{kind}` is cancelled by the BatchNorm that {follows}; "
                           f"pass `bias={value}` (a small gain: one parameter per channel)",
                    None if reads_bias or not candidate.fixable else self._fix(layer, value))

    def _report_helper(self, candidate: _Candidate, reads_bias: bool) -> None:
        """A helper's layer: fixed at the call through the helper's own bias parameter, if it has one."""
        layer, returned = candidate.layer, candidate.helper
        built, parameter, argument = returned.layer, returned.parameter, returned.argument
        fix = None
        if parameter and candidate.fixable and not reads_bias:
            new = replace_arg_value(layer, argument, cst.Name("False")) if argument is not None else \
                set_keyword(layer, parameter, cst.Name("False"))
            fix = self.fix(f"Pass `{parameter}=False`", self.replace(layer, new))
        advice = f"pass `{parameter}=False`" if parameter else "build it with `bias=False`"
        subject = f"this `{self.ctx.code_for(layer.func).strip()}` module returns the output of a `{built.kind}`" \
            if returned.wrapped else f"this call returns a `{built.kind}`"
        self.report(layer, f"{subject} whose bias is cancelled by the BatchNorm that "
                           f"follows it (built at {place_of(built.effect)}); {advice} "
                           "(a small gain: one parameter per channel)", fix,
                    related=(related(built.effect, f"the `{built.kind}` is built here with its bias"),))

    def _fix(self, layer: cst.Call, value: str = "False"):
        if has_star_args(layer):
            return None
        index = BIASED_LAYERS[self.ctx.qualified_name(layer.func)][1]
        bias = find_argument(layer, "bias", index)
        expression = cst.parse_expression(value)
        new = replace_arg_value(layer, bias, expression) if bias is not None else \
            set_keyword(layer, "bias", expression)
        return self.fix(f"Set `bias={value}`", self.replace(layer, new))

