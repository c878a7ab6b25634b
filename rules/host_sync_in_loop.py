"""
## What it does

Finds reads of a GPU tensor on the host on every step of a training loop: explicit ones
(`loss.item()`, `x.cpu()`, `x.numpy()`, `x.tolist()`) and implicit ones on the tensors the step
computes: `print(loss)`, an f-string, `%`- or `.format`-formatting of a tensor, `float(t)`,
`int(t)`, `bool(t)`, `math.isnan(t)`, `if`/`while`/`assert` on such a conversion, a tensor given to
TensorBoard's `add_scalar`, the legacy `loss.data[0]`, and `torch.cuda.synchronize()`. It also
sees them behind the project's own helpers: a `log_step(loss)` or a meter's `update(loss)` that
calls `.item()` inside (also under `if isinstance(v, torch.Tensor):`, when the step passes a
tensor), or a logger's method that gives the tensor to `add_scalar` (a logger made by a factory
function too), in this file or in one it imports, is reported at the call in the loop (that is
where each step pays), with the place inside the helper as related information. A statement
written over several lines is reported on each line that reads a tensor of its own. A step
is an iteration of a loop that calls `backward()` (also through a function it calls), a Lightning
`training_step`, or a step function that calls `backward()` once per call (`optimize_parameters`,
`train_step`), in a script that uses CUDA.

## Why is it slow

CUDA runs asynchronously: Python queues kernels and moves on, so the host can prepare the next
step while the GPU works on this one. Reading a value on the host ends that: the call waits until
every kernel queued before it has finished, then copies. Done every step, it makes the CPU and GPU
take turns instead of overlapping. PyTorch's tuning guide lists `print(cuda_tensor)`, `.item()`,
`.cpu()` and `.numpy()` among the operations that force a synchronization; Lightning's speed guide
says not to call `.item()` in the training loop at all.

## Expected gain

No published measurement found. A sync leaves the GPU idle while the host, which had to wait,
prepares and queues the next kernels: on a model whose step is long, one read per step costs little;
small, fast steps lose more. `torchlint verify --profile script.py` charges the measured time of
each sync to its line.

## Example

```python
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
    running_loss += loss.item()
```

## Use instead

```python
running_loss = torch.zeros((), device="cuda")
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
    running_loss += loss.detach()  # stays on the GPU, no sync
    if step % 100 == 0:
        print(running_loss.item() / (step + 1))  # one sync every 100 steps
```

## Fix safety

No automatic fix: where and how often to read the values is a decision about the code's output.
The rule does not fire under a condition that holds every k-th step (`if step % k == 0:`, or a
flag computed that way; also around an inner update loop, in a loop whose own iterations
backpropagate), for an explicit read that drives control flow (a NaN guard such as
`if loss.item() > 1e4: break`, or a name tested by an `if`/`assert`: the code reads the value on
purpose; an implicit one, `if math.isnan(loss):`, is reported with `torch._assert_async` as the
alternative), for a value an environment needs every step (`envs.step(action.cpu().numpy())`),
once per epoch (after an inner training loop), inside `self.log(...)` (TL903 `lightning-log-item`
covers it), in an `except` block or a `raise` statement's message, in the body of an `if` on a debugging flag (`if args.debug:`,
`if self.debug_mode:`: a debugging run's cost is chosen), in CPU-only scripts (nothing waits for a
GPU there), or in tests.
A helper's read of its parameter counts only when the argument may be a tensor (not a time, a
length or a number read with `.item()`), and a read of a tensor made on the CPU (`torch.from_numpy`,
a factory without a device) does not count.

Off by default: nearly every training script reads its loss every step on purpose for a progress
bar or a running average, and on a slow model one sync per step costs little, so the rule would
fire on most scripts. Enable it (`--extend-select TL802`) when tuning a loop's throughput.

## References

- https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization
- https://lightning.ai/docs/pytorch/stable/advanced/speed.html#item-numpy-cpu
- https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution
"""

from __future__ import annotations

import ast
import re

from torchlint.analysis.calls import related, where
from torchlint.analysis.devices import mentions_cuda
from torchlint.analysis.conditions import is_debug_test, is_periodic_test
from torchlint.analysis.loops import AST_FUNCTIONS, BACKWARD_CALLEES, ast_training_loop_lines
from torchlint.analysis.summaries import PARAMETER, TENSOR
from torchlint.analysis.tensor_places import DEFAULT_DEVICE_WORD, HOST, HOST_FACTORIES, HOST_NEUTRAL, host_literal
from torchlint.analysis.syntax import dotted_name, line_within, method_call, names_in, root_names, target_names
from torchlint.analysis.walk import Visitor, visit
from torchlint.lazy import libcst as cst
from torchlint.rule import Rule, SyntaxIndex
from torchlint.rules._host_sync import (CONVERSIONS, ENVIRONMENT, LOG_METHODS, SYNC_METHODS, TENSOR_LOGGERS,
                                        ast_may_sync_in_loops, ast_may_sync_in_training_step)

ADVICE = "every N steps (`if step % N == 0:`)"
# A function that runs one training step (called from the loop of another function or file)
STEP_FUNCTION = re.compile(r"(^|_)(optimi[sz]e_parameters|train_step|training_step|train_batch|train_on_batch|"
                           r"train_one_batch|train_iter|step)$")
# Builtins that give a Python number
NUMBERS = frozenset({"float", "int", "len", "round", "abs", "max", "min", "sum", "bool"})
# torch functions whose result is not a tensor on the device
NOT_TENSORS = frozenset({"torch.device", "torch.dtype", "torch.is_tensor", "torch.numel", "torch.no_grad",
                         "torch.get_default_dtype", "torch.finfo", "torch.iinfo", "torch.manual_seed",
                         "torch.load", "torch.save", "torch.from_numpy", "torch.tensor", "torch.as_tensor"})


class HostSyncInLoop(Rule):
    code = "TL802"
    name = "host-sync-in-loop"
    kind = "performance"
    summary = "`.item()`, `.cpu()`, `print(tensor)` and other reads of a GPU tensor on every training step"
    default_enabled = False

    @classmethod
    def applies(cls, text: str) -> bool:
        # a training loop (`loss.backward()`, `manual_backward`), or Lightning's training_step; the
        # sync itself may sit in a helper of another file
        return "backward" in text or "training_step" in text

    @classmethod
    def precheck(cls, index: SyntaxIndex) -> bool:
        # what `_step` finds: a training loop in a script that names CUDA, a step function
        # (`optimize_parameters`) that calls backward, or Lightning's training_step, where the step
        # computes no tensors this rule follows: there only an explicit read, or a helper's sync
        # that needs none of them, is reported
        # (CUDA named in the text, comments too: the code's text costs a tokenization to find)
        if any(ast_training_loop_lines(index)) and mentions_cuda(index.source) and ast_may_sync_in_loops(index):
            return True
        functions = index.nodes(*AST_FUNCTIONS)
        backward = index.lines(index.calls(*BACKWARD_CALLEES))
        if any(f.name != "training_step" and STEP_FUNCTION.search(f.name) and any(backward[f.lineno:f.end_lineno + 1])
               for f in functions):
            return True
        steps = index.lines(f for f in functions if f.name == "training_step")
        return any(steps[call.lineno] and ast_may_sync_in_training_step(index, call) for call in index.nodes(ast.Call))

    def __init__(self, ctx):
        super().__init__(ctx)
        self._reported_lines: dict[int, list[cst.CSTNode]] = {}  # a statement -> the nodes reported in it
        self._tensor_names: dict[int, frozenset[str]] = {}

    # where a step runs -------------------------------------------------------------------------------
    def _step(self) -> tuple[cst.CSTNode | None, bool] | None:
        """(the step loop, whether this is a Lightning training_step) around the current node, when
        every step runs it on a GPU; None otherwise."""
        loop = self.ctx.loops.step_loop()
        if loop is not None:
            return (loop, False) if mentions_cuda(self.ctx.code) else None  # a CPU-only script waits for no GPU
        if self.ctx.loops.in_training_step():
            return None, True
        function = self.ctx.enclosing_function()
        if function is not None and STEP_FUNCTION.search(function.name.value) and not self.ctx.loops.enclosing_loops() \
                and self.ctx.loops.backpropagated_names(function.body) is not None:
            # `def optimize_parameters(self): ... loss.backward()`: one call is one training step
            return function, False
        return None

    def _tensors(self, loop: cst.CSTNode | None) -> frozenset[str]:
        """Names that hold a tensor on the device in this step: what the loop backpropagates, and
        names the loop assigns the result of a torch function (``grad_norm = clip_grad_norm_(...)``)."""
        if loop is None:
            return frozenset()
        if id(loop) not in self._tensor_names:
            names = set(self.ctx.loops.backpropagated_names(loop) or ())
            bindings = self.ctx.bindings
            backpropagated = frozenset(names)

            class TorchResults(Visitor):
                def visit_Assign(self, node: cst.Assign) -> None:
                    if any(type(t.target) is cst.Name and t.target.value in backpropagated for t in node.targets):
                        names.update(root_names(node.value))  # `loss = loss_l + loss_c`: its parts too
                    qualified = bindings.qualified_name(node.value.func) if type(node.value) is cst.Call else None
                    if qualified and qualified.startswith("torch.") and qualified not in NOT_TENSORS \
                            and not qualified.startswith(("torch.cuda.", "torch.backends.")):
                        for target in node.targets:
                            if type(target.target) is cst.Name:
                                names.add(target.target.value)

            visit(loop.body, TorchResults())
            self._tensor_names[id(loop)] = frozenset(names)
        return self._tensor_names[id(loop)]

    def visit_Subscript(self, node: cst.Subscript) -> None:
        """``loss.data[0]``: a Python number read from the tensor (the spelling of ``.item()`` before
        torch 0.4)."""
        value = node.value
        if not (type(value) is cst.Attribute and value.attr.value == "data" and len(node.slice) == 1
                and isinstance(node.slice[0].slice, cst.Index) and isinstance(node.slice[0].slice.value, cst.Integer)):
            return
        step = self._step()
        if step is None or not _holds_tensor(value, self._tensors(step[0])) \
                or not self._every_step(node, step[0], explicit=False):
            return
        self._report_once(node, f"`{self.ctx.code_for(node)}` reads a number from the tensor (as `.item()` does), "
                                f"which makes the host wait for the GPU on every training step; keep "
                                f"`{self.ctx.code_for(value.value)}` on the device and read it {ADVICE}")

    def _report_once(self, node: cst.CSTNode, message: str, related_places: tuple = ()) -> None:
        """One finding a line: a statement written over several lines (a progress bar's f-string)
        is reported on each line that holds a sync of its own."""
        position = self.ctx.statement_position()
        if position is None:
            return
        statement = position[0]
        reported = self._reported_lines.get(id(statement))
        if reported is None:
            self._reported_lines[id(statement)] = [node]
        elif any(line_within(statement, node) == line_within(statement, other) for other in reported):
            return
        else:
            reported.append(node)
        self.report(node, message, related=related_places)

    # calls -----------------------------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        step = self._step()
        if step is None:
            return
        loop, _ = step
        what = self._sync(node, loop)
        if what is not None:
            explicit = method_call(node, *SYNC_METHODS) is not None
            if self._every_step(node, loop, explicit) and not _feeds_an_environment(self.ctx, node, loop):
                shown, advice = what
                if self._in_a_test():
                    advice = ("check it on the device, where the step goes on without waiting "
                              "(`torch._assert_async(...)`), or test it")
                self._report_once(node, f"`{shown}` makes the host wait for the GPU on every training step; "
                                        f"{advice} {ADVICE}")
            return
        self._helper_sync(node, loop)

    def _sync(self, node: cst.Call, loop: cst.CSTNode | None) -> tuple[str, str] | None:
        """(the synchronizing call, what to write instead), or None."""
        method = method_call(node, *SYNC_METHODS)
        if method is not None:
            if method.attr.value in ("item", "cpu", "tolist") and node.args:
                return None
            parent = self.ctx.parent
            if type(parent) is cst.Attribute and parent.attr.value in SYNC_METHODS:
                return None  # `x.cpu().numpy()`: reported once, at the outer call
            value = method.value
            while method_call(value, *SYNC_METHODS) is not None:
                value = value.func.value  # `x.cpu().numpy()` -> `x`
            if _made_on_the_host(value, self.ctx):
                return None
            kept = self.ctx.code_for(value)
            return self.ctx.code_for(node), f"keep `{kept}` on the device (add it up there, detached) and read it"
        tensors = self._tensors(loop)
        if not tensors:
            return None
        callee = self.ctx.qualified_name(node.func) or dotted_name(node.func)
        if type(node.func) is cst.Name and node.func.value == "print" and self.ctx.qualified_name(node.func) is None:
            if any(_reads_tensor(arg.value, tensors) for arg in node.args):
                return self.ctx.code_for(node), "print it"
        elif callee in CONVERSIONS and len(node.args) == 1 and _holds_tensor(node.args[0].value, tensors):
            return self.ctx.code_for(node), f"keep `{self.ctx.code_for(node.args[0].value)}` on the device and read it"
        elif type(node.func) is cst.Attribute and node.func.attr.value in TENSOR_LOGGERS \
                and any(_holds_tensor(arg.value, tensors) for arg in node.args[1:2]):
            return self.ctx.code_for(node), "log the values"
        elif type(node.func) is cst.Attribute and node.func.attr.value == "format" \
                and any(_holds_tensor(arg.value, tensors) for arg in node.args):
            return self.ctx.code_for(node), "format the values"
        elif self.ctx.qualified_name(node.func) in ("torch.cuda.synchronize", "torch.cuda.current_stream.synchronize"):
            return self.ctx.code_for(node), "drop it (measure time with CUDA events), or synchronize"
        return None

    def _in_a_test(self) -> bool:
        """Is the current node in the test of an ``if``, ``while`` or ``assert``?"""
        chain = self.ctx.ancestors
        return any(type(parent) in (cst.If, cst.While) and child is parent.test
                   or type(parent) is cst.Assert and child is parent.test
                   for parent, child in zip(chain, chain[1:]))

    def _helper_sync(self, node: cst.Call, loop: cst.CSTNode | None) -> None:
        """A call of the project's own function that syncs on every call (``log_step(loss)`` doing
        ``loss.item()``; a meter's ``update(loss)``): reported at the call, where the step pays."""
        if type(node.func) not in (cst.Name, cst.Attribute) or dotted_name(node.func) is None:
            return
        resolved = self.ctx.calls.resolve(node)
        if resolved is None or not resolved.function.host_syncs or not self._every_step(node, loop):
            return
        tensors = self._tensors(loop)
        keywords = [a.keyword.value for a in node.args if a.keyword is not None]
        positional = [a for a in node.args if a.keyword is None and not a.star]
        for sync in resolved.function.host_syncs:
            if self._syncs_here(sync, resolved, positional, keywords, node, tensors):
                name = dotted_name(node.func)
                effect = sync.effect
                self._report_once(node, f"`{name}(...)` makes the host wait for the GPU on every training step: "
                                        f"`{effect.what}` in `{resolved.function.qualname}` ({where(effect)}); "
                                        f"call it {ADVICE}, or keep the values on the device",
                                  (related(effect, f"`{effect.what}` reads a tensor on the host"),))
                return

    def _syncs_here(self, sync, resolved, positional, keywords, node, tensors) -> bool:
        """Does this call make the helper's sync wait for the GPU? ``torch.cuda.synchronize()``
        always does; a sync of a tensor the helper computes too. A sync of a parameter does when
        the argument here is a tensor: for a method (``val.item()``, which only tensors and arrays
        have) one that may be a tensor; for a conversion, print or format, a tensor the step
        computes."""
        if sync.how == "synchronize":
            return True
        host = not self.ctx.calls.mentions(DEFAULT_DEVICE_WORD)  # factories without `device=` make on the CPU
        for operand in sync.reads:
            if operand.kind == TENSOR and operand.device and _on_host(operand.device, host, resolved, node):
                continue  # a tensor made on the CPU: reading it waits for no device
            if operand.kind == TENSOR or operand.kind != PARAMETER and sync.how == "method":
                return True
            if operand.kind != PARAMETER or operand.index is None:
                continue
            for argument in _arguments_for(operand.index, resolved, positional, keywords, node):
                if _holds_tensor(argument, tensors) or sync.how == "method" and self._may_be_tensor(argument):
                    return True
        return False

    def _may_be_tensor(self, expr: cst.BaseExpression, depth: int = 2) -> bool:
        """Might the value be a tensor? Not a literal, a number read from one (``.item()``,
        ``float(...)``, ``len(...)``), the time (``time.time() - start``), or a name the function
        only assigns such values."""
        if type(expr) in (cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString, cst.ConcatenatedString):
            return False
        if type(expr) is cst.Call:
            callee = self.ctx.qualified_name(expr.func) or dotted_name(expr.func) or ""
            return not (method_call(expr, "item", "tolist") or callee in NUMBERS or callee.startswith("time."))
        if isinstance(expr, (cst.BinaryOperation,)):
            return self._may_be_tensor(expr.left, depth) or self._may_be_tensor(expr.right, depth)
        if type(expr) is cst.UnaryOperation:
            return self._may_be_tensor(expr.expression, depth)
        if type(expr) is cst.Name and depth:
            function = self.ctx.enclosing_function()
            values = self.ctx.bindings.scope(function if function is not None else self.ctx.module).assigned.get(
                expr.value, [])
            return not values or any(v is None or self._may_be_tensor(v, depth - 1) for v in values)
        return True

    def _every_step(self, node: cst.CSTNode, loop: cst.CSTNode | None, explicit: bool = True) -> bool:
        """Runs on every step: not periodic, not an explicit guard (``if loss.item() > 1e4:``, which
        reads the value on purpose; an implicit one, ``if math.isnan(loss):``, is reported), not a
        log call, not error handling."""
        chain = self.ctx.ancestors[:-1]
        for parent, child in zip(chain, [*chain[1:], node]):
            if parent is loop:
                continue
            if type(parent) in (cst.If, cst.While, cst.IfExp) and child is parent.test and explicit:
                return False  # drives control flow
            if type(parent) is cst.Assert and explicit:
                return False
            if type(parent) in (cst.ExceptHandler, cst.ExceptStarHandler, cst.Raise):
                return False  # error handling; a message built only when raising
            if type(parent) is cst.If and child is parent.body and is_debug_test(parent.test):
                return False  # a debugging run's cost is chosen (`if self.debug_mode:`)
            if type(parent) is cst.If and self._periodic(parent.test) \
                    and _inside_a_step(chain, loop, parent, self.ctx.loops):
                return False
            if type(parent) is cst.Call and type(parent.func) is cst.Attribute \
                    and parent.func.attr.value in LOG_METHODS and dotted_name(parent.func.value) == "self":
                return False  # self.log(...): lightning-log-item
        return not explicit or not self._assigned_guard(loop)

    def _periodic(self, test: cst.BaseExpression) -> bool:
        """A condition that holds every k-th step: a remainder (``step % 100 == 0``), or a flag the
        function computes as one (``log_now = i % every == 0`` ... ``if log_now:``)."""
        if is_periodic_test(test):
            return True
        function = self.ctx.enclosing_function()
        scope = self.ctx.bindings.scope(function if function is not None else self.ctx.module)
        return any(value is not None and is_periodic_test(value)
                   for name in names_in(test) for value in scope.assigned.get(name, ()))

    def _assigned_guard(self, loop: cst.CSTNode | None) -> bool:
        """``value = loss.item()`` where ``value`` is then tested (``if value > 1e4:``)."""
        position = self.ctx.statement_position()
        if position is None:
            return False
        statement, body, index = position
        targets = set()
        if type(statement) is cst.SimpleStatementLine:
            for small in statement.body:
                if type(small) is cst.Assign:
                    for target in small.targets:
                        targets |= target_names(target.target)
        if not targets:
            return False
        tests = _Tests()
        for later in body[index + 1:]:
            visit(later, tests)
        return bool(targets & tests.names)


def _feeds_an_environment(ctx, node: cst.Call, loop: cst.CSTNode | None) -> bool:
    """The value goes to an environment stepped in the loop (``envs.step(action.cpu().numpy())``,
    or through a name): the simulation needs it on the host every step."""
    if loop is None:
        return False
    position = ctx.statement_position()
    names = set()
    if position is not None and isinstance(position[0], cst.SimpleStatementLine):
        for small in position[0].body:
            if type(small) is cst.Assign:
                for target in small.targets:
                    names |= names_in(target.target)
    steps = _EnvironmentSteps()
    visit(loop, steps)
    return any(ctx.code_for(node) in code or names & used for code, used in steps.arguments)


def _made_on_the_host(expr: cst.BaseExpression, ctx) -> bool:
    """Is the value a tensor the function made on the CPU: a name it assigns only
    ``torch.from_numpy(...)`` (through methods that keep it there: ``counts.sum()``)? Reading it
    waits for no device."""
    while type(expr) is cst.Call and type(expr.func) is cst.Attribute \
            and expr.func.attr.value in HOST_NEUTRAL | {"sum", "mean", "max", "min", "prod"}:
        expr = expr.func.value
    if type(expr) is not cst.Name:
        return False
    function = ctx.enclosing_function()
    values = ctx.bindings.scope(function if function is not None else ctx.module).assigned.get(expr.value, [])
    return bool(values) and all(type(value) is cst.Call and ctx.qualified_name(value.func) in HOST_FACTORIES
                                for value in values)


def _holds_tensor(expr: cst.BaseExpression, tensors: frozenset[str]) -> bool:
    """The expression is (a view of) a tensor the step backpropagates, not a number read from
    one: ``loss``, ``loss.data``, ``loss.mean()``; not ``loss.item()`` or ``len(loss)``."""
    while type(expr) in (cst.Attribute, cst.Subscript, cst.Call):
        if type(expr) is cst.Call:
            if type(expr.func) is not cst.Attribute or expr.func.attr.value in SYNC_METHODS:
                return False
            expr = expr.func.value
        elif type(expr) is cst.Attribute:
            expr = expr.value
        else:
            expr = expr.value
    return type(expr) is cst.Name and expr.value in tensors


def _reads_tensor(expr: cst.BaseExpression, tensors: frozenset[str]) -> bool:
    """Printing or formatting reads a tensor: the tensor itself, or one in an f-string."""
    if type(expr) is cst.FormattedString:
        return any(type(part) is cst.FormattedStringExpression and _holds_tensor(part.expression, tensors)
                   for part in expr.parts)
    return _holds_tensor(expr, tensors)


def _inside_a_step(chain: list[cst.CSTNode], loop: cst.CSTNode | None, node: cst.CSTNode, loops) -> bool:
    """``node`` (a periodic ``if``) holds every k-th step: it lies inside the step ``loop``
    (None: the function), or inside an outer loop whose own body backpropagates, so that each
    of its iterations is a step and the inner loop under the ``if`` runs on every k-th of them
    (``if step % policy_frequency == 0: for _ in range(policy_frequency): actor_loss.backward()``)."""
    if loop is None:
        return True
    position = chain.index(node)
    if position > chain.index(loop):
        return True
    for outer in reversed(chain[:position]):
        if type(outer) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            return False
        if type(outer) in (cst.For, cst.While) and loops.backpropagates_itself(outer):
            return True
    return False


def _on_host(device: str, host: bool, resolved, node: cst.Call) -> bool:
    """Is a tensor the helper reads, placed as ``device`` (tensor_places.py), on the CPU at this
    call, or made on the device of a parameter the call leaves to a constant (no tensor, so
    that code does not run)?"""
    how, _, index = device.partition(":")
    if how == HOST:
        return host
    if not index or any(a.star for a in node.args):
        return False
    default = resolved.function.defaults[int(index)]
    keywords = [a.keyword.value for a in node.args if a.keyword is not None]
    positional = [a for a in node.args if a.keyword is None]
    passed = _arguments_for(int(index), resolved, positional, keywords, node)
    if how == "param" and len(passed) == 1 and type(passed[0]) is cst.SimpleString:
        return host and host_literal(passed[0].value)  # `device="cpu"`
    if passed or default is None:
        return False
    return how == "of" or host and host_literal(default)


def _arguments_for(index, resolved, positional, keywords, node) -> list[cst.BaseExpression]:
    """What the call passes to parameter ``index``: one argument, or for ``**kwargs`` every
    keyword argument it does not name and every ``**`` splat."""
    function = resolved.function
    if index == function.double_star:
        named = set(function.parameters)
        return [a.value for a in node.args if a.star == "**" or a.keyword is not None
                and a.keyword.value not in named]
    slot = resolved.argument_for(index, len(positional), keywords)
    if isinstance(slot, int) and 0 <= slot < len(positional):
        return [positional[slot].value]
    return [a.value for a in node.args if a.keyword is not None and a.keyword.value == slot]


class _EnvironmentSteps(Visitor):
    """The arguments of ``env.step(...)``-like calls in a loop: their code and the names they read."""

    def __init__(self) -> None:
        self.arguments: list[tuple[str, set[str]]] = []

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if type(func) is cst.Attribute and func.attr.value in ("step", "send", "step_async") \
                and ENVIRONMENT.search((dotted_name(func.value) or "").rsplit(".", 1)[-1]):
            module = cst.Module([])
            for arg in node.args:
                self.arguments.append((module.code_for_node(arg.value), names_in(arg.value)))


class _Tests(Visitor):
    """Names read by if/while tests and asserts."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_If(self, node: cst.If) -> None:
        self.names |= names_in(node.test)

    def visit_While(self, node: cst.While) -> None:
        self.names |= names_in(node.test)

    def visit_Assert(self, node: cst.Assert) -> None:
        self.names |= names_in(node.test)
