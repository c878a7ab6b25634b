"""
## What it does

Finds a model evaluated batch after batch with autograd still on: a loop that calls the model after
`model.eval()`, or in a function named like evaluation (`validate`, `evaluate`, `test`,
`predict`, `generate`, `sample`, `extract_features`...), that is not under `torch.no_grad()`,
`torch.inference_mode()` or `torch.set_grad_enabled(False)` (as a `with` block, a decorator, or a
statement before the loop). A model is a callee named like one (`model`, `net`, `encoder`,
`discriminator`...), a method of one that runs its forward pass (`model.forward_features(x)`,
`discriminator.feature_extraction(x)`), a name the function puts in eval mode, or a name bound to
a module (`self.G = Generator()`); it may
also run inside a helper the loop calls (`predict(model, x)`, in this file or one it imports),
which is then reported at the call, with the place inside the helper as related information.

## Why is it slow

`model.eval()` changes how dropout and batch norm behave; it does not turn autograd off. With
grad mode on, every forward pass records its graph and keeps the activations that a backward pass
would need, although evaluation never calls backward: memory grows with the batch, larger batches
run out of memory, and the bookkeeping costs time. PyTorch's tuning guide recommends disabling
gradient calculation for validation or inference.

## Expected gain

Mostly memory, some time: without a graph, evaluation keeps no activations for a backward pass, so
larger evaluation batches fit. The tuning guide says it speeds evaluation up and saves memory,
without a figure, and no published measurement was found. To see it on your model, time the
evaluation loop and read `torch.cuda.max_memory_allocated()` before and after the change (`torchlint
verify` measures the optimizer steps it runs, which may include no evaluation).

## Example

```python
model.eval()
for images, labels in val_loader:
    correct += (model(images).argmax(1) == labels).sum().item()
```

## Use instead

```python
model.eval()
with torch.no_grad():
    for images, labels in val_loader:
        correct += (model(images).argmax(1) == labels).sum().item()
```
(`torch.inference_mode()` is faster still, but its tensors can never enter autograd later.)

## Fix safety

The fix wraps the loop in `with torch.no_grad():` (adding `import torch` if the file lacks it),
re-indenting the loop with its comments. It is safe when the loop follows `model.eval()`: the
values are the same, only no graph is kept. It is unsafe when the loop is known only by its
function's name: the outputs might be backpropagated by a caller. No fix when the loop yields or
awaits (grad mode would leak into the consumer; decorate the function with `@torch.no_grad()`
instead). A loop that backpropagates is a training loop, never wrapped, also when the backward pass
runs in a function it calls (`train_one_epoch(...)` in an epoch loop), in this file or in the
project's own modules. The rule stays silent when gradients are wanted in the function (`backward`,
`torch.autograd.grad`, `enable_grad`, `requires_grad`, `torch.func` transforms, there or in a
function the loop calls, such as a saliency helper), in Lightning's
`validation_step`/`test_step`/`predict_step` hooks (the Trainer disables grad around them), for a
function whose every call in the file is already under `no_grad` (directly, or inside a function
whose every call is), for a method known only by its
name (no `.eval()` before the loop: frameworks such as Hugging Face pipelines call those under
their own `no_grad`), and in tests (`test_*.py`,
`tests/` folders, `test_*` functions, `Test*` classes), where speed is not the point.

## References

- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#disable-gradient-calculation-for-validation-or-inference
- https://pytorch.org/docs/stable/generated/torch.no_grad.html
- https://pytorch.org/docs/stable/notes/autograd.html#locally-disabling-gradient-computation
- https://pytorch.org/docs/stable/generated/torch.inference_mode.html
"""

from __future__ import annotations

import ast
import re

from torchlint.analysis.calls import ast_call_summary, related, where
from torchlint.analysis.index import span
from torchlint.analysis.modules import ast_module_holders
from torchlint.analysis.loops import (AST_FUNCTIONS, BACKWARD_CALLEES, EVAL_FUNCTION, MODEL_BUILDER,
                                      MODEL_NAME, ast_backwards_by_loop, ast_loop_lines, ast_surely_grad_disabled,
                                      decorator_disables_grad, with_item_disables_grad)
from torchlint.analysis.syntax import ast_contains, ast_dotted_name, ast_is_literal, dotted_name
from torchlint.analysis.walk import Visitor, visit
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

# Gradients are wanted somewhere in the function: saliency maps, adversarial examples, probes.
WANTS_GRAD = re.compile(r"backward|autograd\.grad|enable_grad|requires_grad|torch\.func|functorch|\bvjp\b|jacrev|"
                        r"jacfwd|\bhessian\b|set_grad_enabled\(True\)")
# Hooks the Lightning Trainer runs under no_grad / inference_mode.
LIGHTNING_EVAL_HOOKS = re.compile(r"^(validation|test|predict)_step$|^on_(validation|test|predict)_|_epoch_end$")


MAX_CALLER_DEPTH = 6  # how far up its callers a function is followed to find them all under no_grad
# A model's methods that run its forward pass on their input (``model.forward_features(x)``, a GAN
# discriminator's ``feature_extraction(x)``): a call of one is a call of the model.
FORWARD_METHODS = frozenset({"forward", "forward_features", "extract_features", "extract_feature",
                             "feature_extraction"})
# Prefilter patterns open with a literal, which the regex engine finds fast (a `\b` first does not).
FUNCTION_NAME = re.compile(r"def\s+(\w+)")
EVAL_RECEIVER = re.compile(r"([\w.]+)\.eval\(\)")


def eval_receivers(code: str) -> set[str]:
    """What ``code`` calls ``.eval()`` on (the regex only where ``.eval()`` is written: it scans slowly)."""
    return set(EVAL_RECEIVER.findall(code)) if ".eval()" in code else set()


def _ast_method_of_other(func: ast.AST) -> bool:
    """The twin of ``EvalWithoutNoGrad._method_of_other`` on CPython's tree."""
    return type(func) is ast.Attribute and type(func.value) is ast.Name \
        and func.value.id not in ("self", "cls") and not MODEL_NAME.search(func.value.id)


def _ast_in_silent_function(index: SyntaxIndex, call: ast.Call) -> bool:
    """Is the call surely in a function where ``visit_Call`` stays silent whatever its loop: a
    Lightning evaluation hook, or a method that ``_framework_method`` excuses (written directly in
    the body of a class with a base other than ``object``, with no ``.eval()``/``.train(...)``
    anywhere in it, so no eval mode set before its loop, and no class in it to be the nearer one)?
    Decided before asking the summaries what the file's calls run."""
    functions = index.place(call).functions
    if not functions:
        return False
    function = functions[-1]
    return index.memo(("TL103 silent", id(function)), lambda: _ast_silent_function(index, function))


def _ast_silent_function(index: SyntaxIndex, function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    if LIGHTNING_EVAL_HOOKS.search(function.name):
        return True
    owners = index.memo("TL103 method owners",
                        lambda: {id(statement): cls for cls in index.nodes(ast.ClassDef) for statement in cls.body})
    cls = owners.get(id(function))
    if cls is None or not any(ast_dotted_name(base) != "object" for base in cls.bases):
        return False
    first, last = span(function)
    return not any(first <= node.lineno <= last for node in index.nodes(ast.ClassDef)) and not any(
        type(mode.func) is ast.Attribute and first <= mode.lineno <= last for mode in index.calls("eval", "train"))


def _ast_in_training_loop(index: SyntaxIndex, call: ast.Call) -> bool:
    """Is the call surely where ``Loops.evaluation_loop`` finds no loop: in no loop of its function,
    or in one (the innermost) whose own code calls ``.backward(...)`` (outside the functions and
    lambdas defined in it, by lines: a precheck may miss one, not invent one)?"""
    loop = index.place(call).loop
    if loop is None:
        return True
    return index.memo(("TL103 backward", id(loop)), lambda: _backpropagates(index, loop))


def _backpropagates(index: SyntaxIndex, loop: ast.AST) -> bool:
    """Does the loop's own code call ``.backward(...)`` (outside the functions, lambdas and classes
    defined in it, their decorators included)?"""
    for backward in ast_backwards_by_loop(index).get(id(loop), ()):
        place = index.place(backward)
        scopes = (place.scope, *place.functions)
        if type(backward.func) is ast.Attribute and backward.func.attr in BACKWARD_CALLEES \
                and not any(scope is not None and ast_contains(loop, scope) for scope in scopes):
            return True
    return False


class EvalWithoutNoGrad(Rule):
    code = "TL103"
    name = "eval-without-no-grad"
    kind = "performance"
    summary = "A model evaluated in a loop with autograd on (no `torch.no_grad()`)"
    fix_applicability = "safe"

    @classmethod
    def applies(cls, text: str) -> bool:
        # an evaluation loop: a loop after `.eval()`/`.train(...)`, or in a function named like one
        if "for" not in text and "while" not in text:
            return False
        if ".eval(" in text or ".train(" in text:
            return True
        return any(EVAL_FUNCTION.search(name) for name in FUNCTION_NAME.findall(text))

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a model (or a helper that runs one) called in a loop of an evaluation: in a function named
        # like one, or one that puts something in eval mode (`.eval()`, `.train(False)`), or at
        # module level after such a call
        marks = index.lines(call for call in [*index.calls("eval"), *index.calls("train")]
                            if not call.args and call.func.__class__ is ast.Attribute and call.func.attr == "eval"
                            or call.args and ast_is_literal(call.args[0], False))
        functions = index.nodes(*AST_FUNCTIONS)
        evaluating = index.lines(f for f in functions if EVAL_FUNCTION.search(f.name)
                                 or any(marks[f.lineno:f.end_lineno + 1]))
        inside = index.lines(functions)
        module_level = any(marks[line] and not inside[line] for line in range(len(marks)))
        loops = ast_loop_lines(index)
        calls = [call for call in index.nodes(ast.Call) if loops[call.lineno]
                 and (evaluating[call.lineno] or module_level and not inside[call.lineno])]
        calls = [call for call in calls if not _ast_in_training_loop(index, call)
                 and not ast_surely_grad_disabled(index, call) and not _ast_in_silent_function(index, call)]
        if not calls:
            return False
        receivers = eval_receivers(index.source)
        module_holders = ast_module_holders(index)
        for call in calls:
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr in FORWARD_METHODS:
                func = func.value
            name = ast_dotted_name(func)
            if name in (None, "self"):
                continue
            last = name.rsplit(".", 1)[-1]
            if MODEL_NAME.search(last) and not MODEL_BUILDER.match(last) and not _ast_method_of_other(func) \
                    or name in receivers or name in module_holders:
                return True
        return any((summary := ast_call_summary(index, call)) is not None and summary.forwards_with_grad
                   for call in calls)

    def __init__(self, ctx):
        super().__init__(ctx)
        self._reported: set[int] = set()
        self._calls_under_no_grad: _CallSites | None = None
        self._receivers: dict[int, set[str]] = {}
        self._file_receivers: set[str] | None = None

    def visit_Call(self, node: cst.Call) -> None:
        if not self.ctx.loops.enclosing_loops():
            return  # only a loop evaluates batch after batch
        model = self._model(node)
        helper = None
        if model is None:
            helper = self._forward_helper(node)
            if helper is None:
                return
            model = dotted_name(node.func)
        loop = self.ctx.loops.evaluation_loop()
        if loop is None or id(loop) in self._reported or self.ctx.loops.grad_disabled():
            return
        function = self.ctx.enclosing_function()
        if self._wants_grad(loop) or function is not None and (
                LIGHTNING_EVAL_HOOKS.search(function.name.value)
                or self._always_called_without_grad(function.name.value)
                or self._framework_method(function)):
            return
        self._reported.add(id(loop))
        suspends = _Suspends()
        visit(loop, suspends)
        advice = f"decorate `{function.name.value}` with `@torch.no_grad()`" if suspends.found and function \
            else "wrap the loop in `with torch.no_grad():`"
        fix = None if suspends.found else self._fix(loop)
        if helper is not None:
            effect = helper.forwards_with_grad[0]
            self.report(node, f"`{model}(...)` runs a model with autograd on (`{effect.what}` in `{helper.qualname}`, "
                              f"{where(effect)}) in an evaluation loop: every batch records a graph that is never "
                              f"used (memory and time); {advice}", fix,
                        related=(related(effect, "the model runs here, with autograd on"),))
            return
        self.report(node, f"`{model}(...)` runs in an evaluation loop with autograd on: every batch records a graph "
                          f"that is never used (memory and time); {advice}", fix)

    @staticmethod
    def _method_of_other(func: cst.BaseExpression) -> bool:
        """``writer.generator(...)``: a method named like a model, of an object that is not one
        (the model is an attribute of ``self`` or a name, ``self.generator(z)``, ``model(x)``)."""
        return type(func) is cst.Attribute and type(func.value) is cst.Name \
            and func.value.value not in ("self", "cls") and not MODEL_NAME.search(func.value.value)

    def _forward_helper(self, node: cst.Call):
        """The summary of a helper that runs a model with grad on (``predict(x)``,
        ``generate(z)``), when the call is in a loop: the evaluation loop may be around it."""
        if dotted_name(node.func) is None or not self.ctx.loops.enclosing_loops():
            return None
        summary = self.ctx.calls.summary(node)
        if summary is None or not summary.forwards_with_grad or summary.grad_mode == "disabled" \
                or summary.backward or summary.autograd:
            return None
        return summary

    def _framework_method(self, function: cst.FunctionDef) -> bool:
        """A method known only by its name (no ``.eval()`` before the loop) of a class that derives
        from another class: its callers choose the grad mode (a module's ``inference`` method; a
        Hugging Face pipeline's ``_forward``, run under the framework's no_grad). A plain class
        of the project (``class GAN(object)``) runs its own evaluation."""
        cls = self.ctx.enclosing_class()
        if cls is None or function not in cls.body.body or self.ctx.loops.eval_mode_set():
            return False
        return any(base.keyword is None and dotted_name(base.value) != "object" for base in cls.bases)

    def _wants_grad(self, loop: cst.CSTNode) -> bool:
        """Gradients are asked for in the loop or beside it in its block (a training loop there
        left out)."""
        index = next(i for i, node in enumerate(self.ctx.ancestors) if node is loop)
        block = self.ctx.ancestors[index - 1]
        beside = [s for s in block.body if s is loop or not self.ctx.loops.runs_backward(s)]
        return any(WANTS_GRAD.search(self.ctx.code_for(s)) or self.ctx.loops.uses_autograd(s) for s in beside)

    def _model(self, node: cst.Call) -> str | None:
        """The model a call runs, as the message names the call: ``model(x)``, ``self.net(x)``,
        ``model.forward(x)`` (``model``), a method that runs the forward pass
        (``discriminator.feature_extraction``), or any callee put in eval mode in this function."""
        func = node.func
        method = func.attr.value if type(func) is cst.Attribute and func.attr.value in FORWARD_METHODS else None
        if method is not None:
            func = func.value
        name = dotted_name(func)
        if name is None or name == "self":
            return None
        last = name.rsplit(".", 1)[-1]
        if MODEL_NAME.search(last) and not MODEL_BUILDER.match(last) and not self._method_of_other(func) \
                or name in self._eval_receivers(name) or self.ctx.modules.holds_module(name):
            return name if method in (None, "forward") else f"{name}.{method}"
        return None

    def _eval_receivers(self, name: str) -> set[str]:
        """What ``.eval()`` is called on in the enclosing function (or module). The file's text
        answers first: rendering a function's code is only worth it for a name the file puts in
        eval mode somewhere."""
        if self._file_receivers is None:
            self._file_receivers = eval_receivers(self.ctx.source)
        if name not in self._file_receivers:
            return set()
        scope = self.ctx.enclosing_function()
        if scope is None:
            return self._file_receivers
        if id(scope) not in self._receivers:
            self._receivers[id(scope)] = eval_receivers(self.ctx.code_for(scope))
        return self._receivers[id(scope)]

    def _always_called_without_grad(self, function: str, seen: frozenset[str] = frozenset()) -> bool:
        """Every call of ``function`` in the file (``function(...)``, ``self.function(...)``) is
        already under no_grad / inference_mode, or in a function every call of which is (deep-text's
        ``validation`` called by ``benchmark_all_eval``, itself called under no_grad). Calls are
        counted in the raw text too, so a call in a definition the engine did not parse counts as
        one with grad on."""
        if self._calls_under_no_grad is None:
            self._calls_under_no_grad = _CallSites(self.ctx.bindings)
            visit(self.ctx.module, self._calls_under_no_grad)
        written = len(re.findall(rf"(?<![\w]){re.escape(function)}\s*\(", self.ctx.source)) \
            - len(re.findall(rf"\bdef\s+{re.escape(function)}\s*\(", self.ctx.source))
        disabled = self._calls_under_no_grad.disabled.get(function, 0)
        callers = self._calls_under_no_grad.callers.get(function, [])
        if written <= 0 or disabled + len(callers) != written:
            return False
        if callers and len(seen) >= MAX_CALLER_DEPTH:
            return False  # callers of callers this deep: not known (and the search stays small)
        return all(caller and caller not in seen and self._always_called_without_grad(caller, seen | {function})
                   for caller in callers)

    def _fix(self, loop: cst.CSTNode):
        fix = self.fix_builder("Wrap the loop in `with torch.no_grad():`",
                               applicability="safe" if self.ctx.loops.eval_mode_set() else "unsafe")
        torch = fix.ensure_import("torch")
        if torch is None:
            return None
        wrapped = cst.With(items=[cst.WithItem(cst.parse_expression(f"{torch}.no_grad()"))],
                           body=cst.IndentedBlock(body=[loop.with_changes(leading_lines=[])]))
        return fix.replace_statement(loop, [wrapped]).build()


class _Suspends(Visitor):
    """A ``yield`` or ``await`` (grad mode set by ``with`` would stay set while suspended)."""

    def __init__(self) -> None:
        self.found = False

    def visit_Yield(self, node: cst.Yield) -> None:
        self.found = True

    def visit_Await(self, node: cst.Await) -> None:
        self.found = True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False


class _CallSites(Visitor):
    """For each function name: how many of its calls in the file are under no_grad, and for the
    others the function each is in ("" at module level)."""

    def __init__(self, bindings) -> None:
        self.bindings = bindings
        self.depth = 0  # enclosing no_grad contexts
        self.disabled: dict[str, int] = {}
        self.callers: dict[str, list[str]] = {}
        self.functions: list[str] = []  # the names of the enclosing functions, innermost last

    def _grad_off(self, node: cst.CSTNode) -> bool:
        if type(node) is cst.With:
            return any(with_item_disables_grad(item, self.bindings) for item in node.items)
        if type(node) is cst.FunctionDef:
            return any(decorator_disables_grad(d, self.bindings) for d in node.decorators)
        return False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self._grad_off(node):
            self.depth += 1
        if type(node) is cst.FunctionDef:
            self.functions.append(node.name.value)
        elif type(node) is cst.Call:
            name = dotted_name(node.func)
            if name is not None:
                short = name.rsplit(".", 1)[-1]
                if self.depth:
                    self.disabled[short] = self.disabled.get(short, 0) + 1
                else:
                    self.callers.setdefault(short, []).append(self.functions[-1] if self.functions else "")
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if self._grad_off(original_node):
            self.depth -= 1
        if type(original_node) is cst.FunctionDef:
            self.functions.pop()
