"""What host-sync-in-loop (TL802) counts as a read of a tensor on the host, and the questions its
precheck asks of CPython's tree: where the walk may find such a read in a training loop, or in a
Lightning ``training_step``, that ``_every_step`` would not spare."""

from __future__ import annotations

import ast
import re

from torchlint.analysis.calls import ast_call_summary
from torchlint.analysis.conditions import ast_is_periodic_test
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.loops import AST_LOOPS, BACKWARD_CALLEES, ast_backpropagated_names, ast_training_loop_lines
from torchlint.analysis.summaries import TENSOR
from torchlint.analysis.syntax import ast_contains, ast_dotted_name, ast_root_names
from torchlint.analysis.value_facts import TENSOR_LOGGERS

SYNC_METHODS = ("item", "cpu", "numpy", "tolist")
LOG_METHODS = frozenset({"log", "log_dict"})
# Turning a tensor into a Python number or text reads it on the host.
CONVERSIONS = frozenset({"float", "int", "bool", "math.isnan", "math.isinf", "math.isfinite"})
# Where an environment is stepped: the action it needs must come to the host every step.
ENVIRONMENT = re.compile(r"(^|_)envs?$", re.IGNORECASE)


def ast_may_sync_in_loops(index: SyntaxIndex) -> bool:
    """May the walk report something in a training loop: a read ``_sync`` or ``visit_Subscript``
    finds (of a name that may hold a tensor, where it needs one), or a call of the project's own
    function that syncs, none of them surely spared by ``_every_step`` (in an ``except``, under a
    remainder test inside the loop, in ``self.log(...)``; an explicit read in a test)?"""
    training = ast_training_loop_lines(index)
    tensors = _ast_tensor_names(index)
    backwards = index.calls(*BACKWARD_CALLEES)
    # the loops that call backward: the innermost around a node lies inside the step loop
    loops = [loop for loop in index.nodes(*AST_LOOPS) if any(ast_contains(loop, call) for call in backwards)]
    environments = [call for call in index.nodes(ast.Call) if training[call.lineno]
                    and type(call.func) is ast.Attribute and call.func.attr in ("step", "send", "step_async")
                    and ENVIRONMENT.search((ast_dotted_name(call.func.value) or "").rsplit(".", 1)[-1])]
    # the test of a `while` is left out: the loop itself may be the step loop, which _every_step skips
    tests = [node.test for node in index.nodes(ast.If, ast.IfExp)] + index.nodes(ast.Assert)
    spared = [node for node in index.nodes(ast.ExceptHandler) if training[node.lineno]]
    spared += [call for call in index.calls(*LOG_METHODS) if _ast_self_method(call.func) in LOG_METHODS]
    periodic = [node for node in index.nodes(ast.If) if training[node.lineno] and ast_is_periodic_test(node.test)]

    def every_step(node: ast.AST, explicit: bool, read: bool = True) -> bool:
        if any(other is not node and ast_contains(other, node) for other in spared) \
                or explicit and any(ast_contains(test, node) for test in tests):
            return False
        innermost = max((loop for loop in loops if ast_contains(loop, node)),
                        key=lambda loop: (loop.lineno, loop.col_offset), default=None)
        if innermost is None:
            return True
        if any(ast_contains(innermost, test) and ast_contains(test, node) for test in periodic):
            return False
        return not read or not _ast_feeds_an_environment(index, node, [call for call in environments
                                                                        if ast_contains(innermost, call)])

    helpers = []
    for call in (call for call in index.nodes(ast.Call) if training[call.lineno]):
        func = call.func
        arguments = [*(a.value if type(a) is ast.Starred else a for a in call.args), *(k.value for k in call.keywords)]
        if type(func) is ast.Attribute and func.attr in SYNC_METHODS and (func.attr == "numpy" or not arguments):
            if every_step(call, True):
                return True
        elif tensors and _ast_reads_tensor(func, arguments, tensors) and every_step(call, False):
            return True
        if type(func) in (ast.Name, ast.Attribute) and ast_dotted_name(func) is not None:
            helpers.append(call)
    if tensors and any(training[node.lineno] and type(node.value) is ast.Attribute and node.value.attr == "data"
                       and _ast_holds_tensor(node.value, tensors) and every_step(node, False)
                       for node in index.nodes(ast.Subscript)):
        return True
    return any(every_step(call, True, read=False) and (summary := ast_call_summary(index, call)) is not None
               and summary.host_syncs for call in helpers)


def _ast_feeds_an_environment(index: SyntaxIndex, node: ast.AST, steps: list[ast.Call]) -> bool:
    """Does ``_feeds_an_environment`` surely answer yes: the node is in an assignment that starts
    its line (so that LibCST's statement is the line holding it) to a name that one of the
    environment steps (``envs.step(actions)``) reads?"""
    if not steps:
        return False
    statement = max((s for s in index.nodes(ast.Assign) if ast_contains(s, node)),
                    key=lambda s: (s.lineno, s.col_offset), default=None)
    lines = index.source_lines
    if statement is None or lines[statement.lineno - 1][:statement.col_offset].strip() \
            or statement.lineno > 1 and lines[statement.lineno - 2].endswith("\\"):
        return False
    assigned = {n.id for target in statement.targets for n in ast.walk(target) if type(n) is ast.Name}
    return any(type(n) is ast.Name and n.id in assigned
               for call in steps for argument in [*call.args, *call.keywords] for n in ast.walk(argument))


def _ast_reads_tensor(func: ast.AST, arguments: list[ast.AST], tensors: frozenset[str]) -> bool:
    """May ``_sync`` find an implicit read in the call: ``print`` of a tensor (in an f-string too),
    a conversion of one (``float(loss)``), a tensor given to a logger or to ``.format``, or
    ``torch.cuda.synchronize()``?"""
    name = ast_dotted_name(func) or ""
    if name == "print":
        return any(_ast_holds_tensor(value, tensors) for argument in arguments
                   for value in (argument.values if type(argument) is ast.JoinedStr else [argument]))
    if name in CONVERSIONS or name.rsplit(".", 1)[-1] in ("isnan", "isinf", "isfinite"):
        return len(arguments) == 1 and _ast_holds_tensor(arguments[0], tensors)
    if type(func) is ast.Attribute and (func.attr in TENSOR_LOGGERS and len(arguments) > 1 or func.attr == "format"):
        return any(_ast_holds_tensor(argument, tensors) for argument in arguments)
    return name.endswith("synchronize")


def _ast_tensor_names(index: SyntaxIndex) -> frozenset[str]:
    """Every name ``_tensors`` may give a loop of the file: what a backward backpropagates, the
    names assigned to those, and names assigned the result of what may be a torch function."""
    backpropagated = ast_backpropagated_names(index)
    names = set(backpropagated)
    for node in index.nodes(ast.Assign):
        if any(type(target) is ast.Name and target.id in backpropagated for target in node.targets):
            names |= ast_root_names(node.value)
        if type(node.value) is ast.Call \
                and any(name.startswith("torch.") for name in index.qualified_names(node.value.func)):
            names.update(target.id for target in node.targets if type(target) is ast.Name)
    return frozenset(names)


def _ast_holds_tensor(expr: ast.AST, tensors: frozenset[str]) -> bool:
    """The twin of ``_holds_tensor`` on CPython's tree (a formatted value of an f-string: its expression)."""
    if type(expr) is ast.FormattedValue:
        expr = expr.value
    while type(expr) in (ast.Attribute, ast.Subscript, ast.Call):
        if type(expr) is ast.Call:
            if type(expr.func) is not ast.Attribute or expr.func.attr in SYNC_METHODS:
                return False
            expr = expr.func.value
        else:
            expr = expr.value
    return type(expr) is ast.Name and expr.id in tensors


def _ast_self_method(func: ast.AST) -> str | None:
    """``log`` for ``self.log``."""
    if type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id == "self":
        return func.attr
    return None


def ast_may_sync_in_training_step(index: SyntaxIndex, call: ast.Call) -> bool:
    """May ``visit_Call`` report the call in a Lightning ``training_step``, where ``_tensors`` is
    empty: ``x.item()`` and the other explicit reads (``_sync``), or a call of the project's own
    function whose sync ``_syncs_here`` counts without a tensor of the step (``_helper_sync``)?"""
    func = call.func
    if type(func) is ast.Attribute and func.attr in SYNC_METHODS \
            and (func.attr == "numpy" or not (call.args or call.keywords)):
        return True
    if type(func) not in (ast.Name, ast.Attribute) or ast_dotted_name(func) is None:
        return False
    summary = ast_call_summary(index, call)
    return summary is not None and any(sync.how in ("synchronize", "method")
                                       or any(operand.kind == TENSOR for operand in sync.reads)
                                       for sync in summary.host_syncs)
