"""
## What it does

Finds a loop that trains (calls `backward()`) and also evaluates (`model.eval()`, directly or in
a validation function of the file it calls), where nothing calls `model.train()` between the
evaluation and the training of the next iteration: the model goes into the second epoch in eval
mode. The file's own functions are followed, so a `model.train()` at the top of a `train_epoch()`
helper counts, and so does a `model.eval()` inside a `validate()` helper.

Off by default: whether a finding is real depends on things one file rarely settles: whether the
model has any layer that behaves differently in eval mode (a library model, or one built in
another file), and whether code the rule cannot follow switches it back. On public training code
(bench/results/catalog-2026-loops.md) 2 of its first 13 findings were right; each round of
tightening then met new wrong shapes on code it had not seen. Turn it on with
`--extend-select TL806` to audit a training script.

## Why is it wrong

`model.eval()` is a switch, not a scope: dropout stays off and batch normalization keeps using
(and stops updating) its running statistics until `model.train()` turns training mode back on.
When validation runs after the first epoch and nothing switches back, every later epoch trains
without dropout and with frozen batch-norm statistics: the model overfits or converges to
something else than the first epoch promised, and nothing fails (the `nn.Module.train` and
`nn.Module.eval` docs; the PyTorch tutorials call `model.train()` at the top of every training
epoch for this reason).

## Example

```python
model.train()
for epoch in range(epochs):
    for x, y in train_loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        for x, y in val_loader:
            correct += (model(x).argmax(1) == y).sum().item()
```

## Use instead

```python
for epoch in range(epochs):
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        for x, y in val_loader:
            correct += (model(x).argmax(1) == y).sum().item()
```

## Fix safety

The fix adds `model.train()` as the first statement of the loop. It is unsafe: it repairs the bug,
so from the second epoch on dropout and batch norm behave differently and the values change by
design (the first epoch is unchanged). A `model.eval()` put in a validation helper is reported at
the call of the helper, and the fix is offered when the model's name there is known at the loop
(passed as an argument, `self.model`, or a global). The rule stays silent when the `eval()` comes
before the iteration's training (a submodule frozen on purpose, such as `model.backbone.eval()`
after `model.train()`), or only on the loop's last iteration (`if i == len(steps) - 1:`; the loop
around it is checked instead); when any `train()` that may restore the model runs in between: on the
model, on a module that contains it, on a part of it (the training then sets the mode of each part
itself, as `model.head.train()` over a frozen encoder does), on a name the rule cannot relate to it,
or in a helper of another module named like training (`train_one_epoch(model)`); for a model kept
out of training on purpose (named like an EMA copy, a teacher or a target network, or only called
under `no_grad` in the loop); for a model built in the file from layers that behave the same in both
modes (no dropout, no batch norm, no instance norm that tracks running statistics;
`model = model.cuda()` keeps the model it moves, and an initialization that only names
`nn.BatchNorm2d` in an `isinstance` test builds none); and for an `eval()` on something the file never calls as a model.

## References

- https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.train
- https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.eval
- https://pytorch.org/tutorials/beginner/basics/optimization_tutorial.html#full-implementation
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cached_property

from torchlint.analysis.conditions import is_last_iteration_test
from torchlint.analysis.flow import argument_for, function_of_call
from torchlint.analysis.index import AST_SCOPES, span
from torchlint.analysis.loops import (BACKWARD_CALLEES, MODEL_NAME, ast_loop_lines,
                                      is_backward_call, is_eval_call, with_item_disables_grad)
from torchlint.analysis.syntax import (ast_callee, ast_contains, ast_dotted_name, dotted_name, find_keyword,
                                       function_parameters, is_literal, method_call, scope_types)
from torchlint.analysis.walk import walk
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex

MAX_DEPTH = 3
# Models kept out of training on purpose, whose eval mode is meant to stay: an exponential moving
# average, a distillation teacher, an RL target network, a momentum encoder.
FROZEN_NAME = re.compile(r"ema|teacher|target|averag|swa|shadow|momentum|frozen", re.IGNORECASE)
# A helper of another module that may switch a model to training mode: `train_one_epoch(model, ...)`,
# `set_train_mode(model)`.
TRAINING_HELPER = re.compile(r"(^|[._])(train|training)(_|$)|train_mode", re.IGNORECASE)
# Layers and functions whose behaviour depends on the training mode, by their name: dropout, batch
# normalization, RReLU, and torch's transformer layers (their dropout is 0.1 by default). Instance
# normalization depends on it only when it tracks running statistics (`track_running_stats=True`).
MODE_DEPENDENT_LAYER = re.compile(r"dropout|batchnorm|batch_norm|rrelu|transformer", re.IGNORECASE)
INSTANCE_NORM = re.compile(r"instancenorm", re.IGNORECASE)
# Code that reads or switches the training mode itself.
READS_MODE = re.compile(r"\btraining\b|\.train\(|\.eval\(", re.IGNORECASE)
# What a model is kept under when it is moved, cast or put in a mode: `model = model.cuda()`.
MOVES = ("to", "cuda", "cpu", "float", "double", "half", "train")


@dataclass(frozen=True)
class _Event:
    """What one step of an iteration does: "train", "eval" (of ``receiver``, as the loop's
    function names it; None when that name cannot be known there) or "backward"; ``site`` is the
    call in the loop body it happens in (the helper's call when it happens inside a helper)."""

    kind: str
    receiver: str | None
    site: cst.Call
    helper: str | None = None


def _mode(call: cst.Call) -> str | None:
    """"eval" for ``m.eval()`` and ``m.train(False)``, "train" for ``m.train()``, ``m.train(True)``
    and ``m.train(flag)`` (a mode that may be training)."""
    if is_eval_call(call):
        return "eval"
    if method_call(call, "train") and not any(a.keyword and a.keyword.value != "mode" for a in call.args):
        return "eval" if call.args and is_literal(call.args[0].value, False) else "train"
    return None


class EvalModeLeftOn(Rule):
    code = "TL806"
    name = "eval-mode-left-on"
    kind = "correctness"
    quiet_in_tests = True  # a test may evaluate in training mode on purpose
    summary = "`model.eval()` in a training loop with no `model.train()` before the next training steps"
    fix_applicability = "unsafe"
    default_enabled = False

    @classmethod
    def applies(cls, text: str) -> bool:
        return ".eval()" in text or ".train(False)" in text or ".train(mode=False)" in text

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # a loop whose iteration may reach a backward and, at or after it, an eval(): each in the
        # loop itself or in a function of the file it calls (found by name, as `_events` follows
        # them, through helpers of helpers)
        if not any(ast_loop_lines(index)):
            return False
        evals = [call for call in index.calls("eval", "train")
                 if _ast_may_put_in_eval(call) and not _ast_surely_restored(index, call)]
        backwards = index.calls(*BACKWARD_CALLEES)
        if not evals or not backwards:
            return False
        evals, backwards = _ast_reaching(index, evals), _ast_reaching(index, backwards)
        first: dict[int, tuple[int, int]] = {}  # each loop around a backward -> where its first one is
        for call in backwards:
            where = (call.lineno, call.col_offset)
            for loop in index.place(call).loops:
                first[id(loop)] = min(first.get(id(loop), where), where)
        return any(id(loop) in first and (call.lineno, call.col_offset) >= first[id(loop)]
                   for call in evals for loop in index.place(call).loops)

    def visit_For(self, node: cst.CSTNode) -> None:
        if type(node.body) is cst.SimpleStatementSuite:
            return
        events = self._events(node.body, 0, None, {}, frozenset())
        if not any(e.kind == "backward" for e in events):
            return
        last = _on_last_iteration(node)
        left: dict[int, list[_Event]] = {}  # per call site in the loop body, the models it leaves in eval mode
        for index, event in enumerate(events):
            if event.kind == "eval" and event.receiver is not None and id(event.site) not in last \
                    and self._is_model(event.receiver) \
                    and self._left_on(events, index) and self._trained(node, event.receiver) \
                    and not self._mode_free(event.receiver):
                same = left.setdefault(id(event.site), [])
                if all(other.receiver != event.receiver for other in same):
                    same.append(event)
        for found in left.values():
            self._report(node, found)

    visit_While = visit_For

    # the iteration's events ------------------------------------------------------------------------
    def _events(self, tree: cst.CSTNode, depth: int, site: cst.Call | None, names: dict[str, str | None],
                seen: frozenset[int], helper: str | None = None) -> list[_Event]:
        """The train/eval/backward events of a subtree in source order, following calls into the
        file's own functions; ``names`` maps a helper's parameters to what the loop passes."""
        found: list[_Event] = []

        def on_visit(node: cst.CSTNode) -> bool:
            if isinstance(node, scope_types()) and node is not tree:
                return False
            if type(node) is not cst.Call:
                return True
            here = site or node
            mode = _mode(node)
            if mode is not None:
                found.append(_Event(mode, self._receiver(node.func.value, depth, names), here, helper))
            elif is_backward_call(node, self.ctx.bindings):
                found.append(_Event("backward", None, here, helper))
            else:
                function = function_of_call(node, self.ctx.bindings)
                if function is None and TRAINING_HELPER.search(dotted_name(node.func) or ""):
                    found.append(_Event("train", None, here, helper))  # another module's helper may call train()
                elif function is not None and depth < MAX_DEPTH and id(function) not in seen:
                    found.extend(self._events(function.body, depth + 1, here, self._names(node, function, depth, names),
                                              seen | {id(function)}, helper or function.name.value))
            return True

        walk(tree, on_visit)
        return found

    def _names(self, call: cst.Call, function: cst.FunctionDef, depth: int,
               names: dict[str, str | None]) -> dict[str, str | None]:
        """What the helper's parameters (and ``self``) name in the loop's function."""
        mapped: dict[str, str | None] = {}
        for parameter in function_parameters(function):
            argument = argument_for(call, function, parameter)
            mapped[parameter] = self._receiver(argument, depth, names) if argument is not None else None
        parameters = function_parameters(function)
        if parameters and parameters[0] == "self" and type(call.func) is cst.Attribute:
            mapped["self"] = self._receiver(call.func.value, depth, names)
        return mapped

    def _receiver(self, expr: cst.BaseExpression, depth: int, names: dict[str, str | None]) -> str | None:
        """The dotted name of ``expr`` as the loop's function spells it: a helper's parameter
        becomes what was passed for it; a helper's own local is unknown (None)."""
        name = dotted_name(expr)
        if name is None or depth == 0:
            return name
        head, dot, rest = name.partition(".")
        if head in names:
            mapped = names[head]
            return mapped + dot + rest if mapped is not None else None
        return name if self.ctx.bindings.scope(self.ctx.module).assigned.get(head) else None

    # the verdict -----------------------------------------------------------------------------------
    def _left_on(self, events: list[_Event], index: int) -> bool:
        """After the eval at ``index``, does the next iteration reach a backward with no train()
        that may restore that model? (A backward later in the same iteration, or an eval() of the
        same model before the next backward, means the training wants it in eval mode: a frozen
        encoder or submodule, not a validation that forgot to switch back.)"""
        receiver = events[index].receiver
        for event in events[index + 1:]:
            if event.kind == "backward":
                return False
            if event.kind == "train" and _restores(event.receiver, receiver):
                return False
        for event in events[:index]:
            if event.kind == "backward":
                return True
            if event.kind == "train" and _restores(event.receiver, receiver) \
                    or event.kind == "eval" and event.receiver == receiver:
                return False  # restored, or put in eval mode again for the training on purpose
        return False

    def _is_model(self, receiver: str) -> bool:
        """Something the file runs as a model: named like one, or called, or asked for its
        parameters."""
        if MODEL_NAME.search(receiver.rsplit(".", 1)[-1]):
            return True
        return re.search(rf"(?<![\w.]){re.escape(receiver)}(\.forward)?\s*\(|(?<![\w.]){re.escape(receiver)}"
                         r"\.parameters\(", self.ctx.source) is not None

    def _trained(self, loop: cst.CSTNode, receiver: str) -> bool:
        """May the loop train this model? Not when it is named (or assigned from a name) like a
        model kept frozen on purpose (``ema_model``, ``teacher``, ``target_net``), when the loop calls
        it only under ``no_grad``, nor when the file builds its optimizers from parameters and none of them
        are this model's (an EMA copy); yes when that cannot be told (the model is a parameter of
        the function, or the optimizers are built from a name)."""
        names = [receiver, *(dotted_name(v) or "" for v in self.ctx.bindings.values(receiver) if v is not None)]
        if any(FROZEN_NAME.search(part) for name in names for part in name.split(".")):
            return False
        calls = _model_calls(loop, receiver, self.ctx.bindings)
        if calls and all(under_no_grad for under_no_grad in calls):
            return False
        optimizers = [self.ctx.code_for(call) for call in self._optimizers]
        if not optimizers or any(".parameters(" not in code for code in optimizers):
            return True
        root = receiver.split(".")[0]
        function = self.ctx.enclosing_function()
        if function is not None and root in function_parameters(function):
            return True
        pattern = re.compile(rf"(?<![\w.]){re.escape(receiver)}\b")
        return any(pattern.search(code) for code in optimizers)

    @cached_property
    def _optimizers(self) -> list[cst.Call]:
        """The file's optimizer constructions (``torch.optim.SGD(...)``)."""
        found: list[cst.Call] = []

        def on_visit(node: cst.CSTNode) -> bool:
            if type(node) is cst.Call:
                qualified = self.ctx.bindings.qualified_name(node.func) or ""
                if qualified.startswith("torch.optim.") and "lr_scheduler" not in qualified \
                        and qualified.rsplit(".", 1)[-1][:1].isupper():
                    found.append(node)
            return True

        walk(self.ctx.module, on_visit)
        return found

    def _mode_free(self, receiver: str) -> bool:
        """Is the model one the file builds from layers that behave the same in both modes (no
        dropout, no normalization, nothing that reads ``self.training``)? Then eval mode changes
        nothing, and there is nothing to report. ``model = model.cuda()`` keeps the model it moves."""
        values = [value for value in self._values(receiver) if not _moved_self(value, receiver)]
        return bool(values) and all(value is not None and self._built_mode_free(value, 0) for value in values)

    def _values(self, receiver: str) -> list[cst.BaseExpression | None]:
        """The values of the model's name where the loop runs: a local of the loop's function, or
        else a global (a name of the same spelling bound in another function is another variable);
        a dotted name (``self.model``) has the values the whole file gives it."""
        if "." in receiver:
            return self.ctx.bindings.values(receiver)
        function = self.ctx.enclosing_function()
        if function is not None:
            local = self.ctx.bindings.scope(function).assigned.get(receiver)
            if local is not None:
                return local
            if receiver in function_parameters(function):
                return []
        return self.ctx.bindings.scope(self.ctx.module).assigned.get(receiver, [])

    def _built_mode_free(self, value: cst.BaseExpression, depth: int) -> bool:
        value = _unmoved(value)
        if type(value) is not cst.Call or depth > MAX_DEPTH:
            return False
        qualified = self.ctx.bindings.qualified_name(value.func)
        if qualified is not None:
            return qualified.startswith("torch.nn.") and self._layers_mode_free(value, depth)
        classes = self.ctx.bindings.defined(dotted_name(value.func), cst.ClassDef)
        return len(classes) == 1 and self._layers_mode_free(classes[0], depth)

    def _layers_mode_free(self, tree: cst.CSTNode, depth: int) -> bool:
        """Every layer built in ``tree`` is a ``torch`` layer that does not depend on the mode, or
        a class or a builder function of the file built of such layers; nothing reads the mode.
        Only the calls count: ``isinstance(m, nn.BatchNorm2d)`` in a weight initialization builds
        no batch norm."""
        if READS_MODE.search(self.ctx.code_for(tree)):
            return False
        free = [True]

        def on_visit(node: cst.CSTNode) -> bool:
            if not free[0] or type(node) is not cst.Call:
                return free[0]
            qualified = self.ctx.bindings.qualified_name(node.func)
            if qualified is not None:
                free[0] = qualified.startswith("torch.") and not _mode_dependent_layer(node, qualified)
            else:
                name = dotted_name(node.func)
                built = [*self.ctx.bindings.defined(name, cst.ClassDef),
                         *self.ctx.bindings.defined(name, cst.FunctionDef)] if name and "." not in name else []
                if built:
                    free[0] = depth < MAX_DEPTH and len(built) == 1 and self._layers_mode_free(built[0], depth + 1)
            return free[0]

        walk(tree, on_visit)
        return free[0]

    def _report(self, loop: cst.CSTNode, events: list[_Event]) -> None:
        first = events[0]
        where = f" (in `{first.helper}`)" if first.helper else ""
        evals = " and ".join(f"`{event.receiver}.eval()`" for event in events)
        restores = [f"{event.receiver}.train()" for event in events]
        models = "the model" if len(events) == 1 else "the models"
        verb = "leaves" if len(events) == 1 else "leave"
        message = (f"{evals}{where} {verb} {models} in eval mode when the next iteration trains: dropout stays off and "
                   f"batch norm stops updating from then on; call {' and '.join(f'`{r}`' for r in restores)} at the "
                   "top of the loop")
        self.report(first.site, message, self._fix(loop, restores))

    def _fix(self, loop: cst.CSTNode, restores: list[str]):
        first = loop.body.body[0]
        indent = "".join(self.ctx.module.default_indent if block.indent is None else block.indent
                         for block in [*self.ctx.enclosing(cst.IndentedBlock), loop.body])
        lines = "".join(f"{indent}{restore}\n" for restore in restores)
        return self.fix(f"Call {' and '.join(f'`{r}`' for r in restores)} at the top of the loop",
                        self.insert_lines_before(first, lines))


def _ast_may_put_in_eval(call: ast.Call) -> bool:
    """May ``_mode`` read the call as "eval": ``m.eval()``, or ``m.train(...)`` given an argument?"""
    func = call.func
    return type(func) is ast.Attribute and (func.attr == "eval" and not call.args and not call.keywords
                                            or func.attr == "train" and bool(call.args or call.keywords))


def _ast_surely_restored(index: SyntaxIndex, evaluation: ast.Call) -> bool:
    """Does a ``.train()`` surely follow the eval in every walk of ``_events`` that meets it, so that
    ``_left_on`` answers no: later in the same function (in no function, lambda or class defined
    there), inside every loop of it that holds the eval, of the same model or one that contains it
    or is part of it (the names as written: a helper maps both the same way)?"""
    evaluated = ast_dotted_name(evaluation.func.value)
    if evaluated is None:
        return True  # the event has no receiver, and only one with a receiver is reported
    place = index.place(evaluation)
    where = place.scope
    loops = [loop for loop in place.loops if where is None or ast_contains(where, loop)]
    after = (evaluation.lineno, evaluation.col_offset)
    for train in index.calls("train"):
        if not (type(train.func) is ast.Attribute and train.func.attr == "train" and not train.args
                and not train.keywords and (train.lineno, train.col_offset) > after):
            continue
        trained = ast_dotted_name(train.func.value)
        if (trained is None or trained == evaluated or evaluated.startswith(trained + ".")
                or trained.startswith(evaluated + ".")) and index.place(train).scope is where \
                and all(loop in index.place(train).loops for loop in loops) \
                and not any(first <= train.lineno <= last for first, last in _nested_spans(index, where)):
            return True
    return False


def _nested_spans(index: SyntaxIndex, where: ast.AST | None) -> list[tuple[int, int]]:
    """The lines of the functions, lambdas and classes defined in ``where`` (the module: None)."""
    def compute() -> list[tuple[int, int]]:
        scopes = index.nodes(*AST_SCOPES)
        return [span(scope) for scope in scopes if scope is not where and (where is None or ast_contains(where, scope))]
    return index.memo(("nested spans", id(where)), compute)


def _ast_reaching(index: SyntaxIndex, calls: list[ast.Call]) -> list[ast.Call]:
    """The calls, and every call of a function of the file (by the name ``function_of_call`` reads)
    whose lines hold one of them, or a call of such a function, and so on: where ``_events`` may
    meet them."""
    found, names, frontier = list(calls), set(), calls
    while frontier:
        new = {function.name for call in frontier for function in index.place(call).functions} - names
        names |= new
        frontier = [call for call in index.calls(*new) if ast_callee(call) in new] if new else []
        found += frontier
    return found


def _on_last_iteration(loop: cst.CSTNode) -> set[int]:
    """The calls of the loop body that run only on its last iteration (under
    ``if i == len(steps) - 1:``): no iteration of this loop follows them."""
    found: set[int] = set()
    depth = [0]  # the last-iteration tests the walk is in

    def under(node: cst.CSTNode) -> bool:
        return type(node) is cst.If and is_last_iteration_test(node.test, loop)

    def on_visit(node: cst.CSTNode) -> bool:
        if isinstance(node, (*scope_types(), cst.For, cst.While)):
            return False  # an inner loop's tests are its own
        if under(node):
            depth[0] += 1
        elif type(node) is cst.Call and depth[0]:
            found.add(id(node))
        return True

    def on_leave(node: cst.CSTNode) -> None:
        if under(node):
            depth[0] -= 1

    walk(loop.body, on_visit, on_leave)
    return found


def _model_calls(loop: cst.CSTNode, receiver: str, bindings) -> list[bool]:
    """The calls of the model in the loop body (``model(x)``, ``model.forward(x)``), each as whether
    it runs under ``torch.no_grad()`` / ``inference_mode()``."""
    found: list[bool] = []
    depth = [0]

    def disables(node: cst.CSTNode) -> bool:
        return type(node) is cst.With and any(with_item_disables_grad(item, bindings) for item in node.items)

    def on_visit(node: cst.CSTNode) -> bool:
        if isinstance(node, scope_types()):
            return False
        if disables(node):
            depth[0] += 1
        if type(node) is cst.Call:
            func = node.func.value if type(node.func) is cst.Attribute and node.func.attr.value == "forward" \
                else node.func
            if dotted_name(func) == receiver:
                found.append(depth[0] > 0)
        return True

    def on_leave(node: cst.CSTNode) -> None:
        if disables(node):
            depth[0] -= 1

    walk(loop.body, on_visit, on_leave)
    return found


def _restores(trained: str | None, evaluated: str | None) -> bool:
    """Does ``trained.train()`` put ``evaluated`` back in training mode (the same module, one that
    contains it, or a name that cannot be related to it)? A part of the model switched back
    (``model.head.train()`` after ``model.eval()``) counts too: the training then chooses the mode of
    each part itself, as a linear probe over a frozen encoder does."""
    return trained is None or evaluated is None or trained == evaluated or evaluated.startswith(trained + ".") \
        or trained.startswith(evaluated + ".")


def _unmoved(value: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """``model`` of ``model.cuda().train()``: the module a chain of moves, casts and modes returns."""
    while type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in MOVES:
        value = value.func.value
    return value


def _moved_self(value: cst.BaseExpression | None, receiver: str) -> bool:
    """``model = model.cuda()``: a value that is the model itself, moved or cast."""
    return value is not None and _unmoved(value) is not value and dotted_name(_unmoved(value)) == receiver


def _mode_dependent_layer(call: cst.Call, qualified: str) -> bool:
    """A torch layer or function that behaves differently in eval mode: named so (``nn.Dropout``,
    ``nn.BatchNorm2d``, ``F.dropout``), an instance norm that tracks running statistics, or a layer
    given a dropout (``nn.LSTM(..., dropout=0.2)``)."""
    name = qualified.rsplit(".", 1)[-1]
    if MODE_DEPENDENT_LAYER.search(name):
        return True
    if INSTANCE_NORM.search(name):
        tracks = find_keyword(call, "track_running_stats")
        return tracks is not None and not is_literal(tracks.value, False)
    return any(arg.keyword is not None and "dropout" in arg.keyword.value and not _zero(arg.value)
               for arg in call.args)


def _zero(expr: cst.BaseExpression) -> bool:
    return type(expr) in (cst.Integer, cst.Float) and float(expr.evaluated_value) == 0
