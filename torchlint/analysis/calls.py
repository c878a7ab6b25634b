"""What a call in the file being linted does: the summary of the function it calls, in this file
or in the project's own modules (see summaries.py, callgraph.py, project.py).

Rules ask at the call site (``ctx.calls.summary(node)``), where a per-step cost is paid; the
summary's effects say where inside the callee it happens, for the finding's related information.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache

from torchlint.analysis.callgraph import Resolved, Summaries
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.project import ProjectModules
from torchlint.analysis.summaries import Effect, FunctionSummary, Import, Layer
from torchlint.analysis.syntax import ast_dotted_name, dotted_name, is_literal, scope_name
from torchlint.analysis.walk import walk
from torchlint.diagnostics import Related
from torchlint.lazy import libcst as cst


@cache
def _definition_types() -> tuple[type, ...]:
    return (cst.FunctionDef, cst.ClassDef, cst.Lambda)


def related(effect: Effect, message: str) -> Related:
    """Where an effect happens, as a finding's related location (0-based lines, as Diagnostic)."""
    return Related(effect.path, effect.line - 1, effect.column, effect.end_line - 1, effect.end_column, message)


def where(effect: Effect) -> str:
    """``utils.py:4`` for messages: the file's name and the line."""
    return f"{effect.path.replace(chr(92), '/').rsplit('/', 1)[-1]}:{effect.line}"


@dataclass(frozen=True)
class ReturnedLayer:
    """``Calls.returned_layer``: the layer, its bias at this call ("default", "True", "False" or
    "unknown"), the function's parameter that sets it, the call's argument for that parameter, and
    ``wrapped``: the call constructs a module of the project whose ``forward`` returns the layer's
    output (rather than calling a function that returns the layer)."""

    layer: Layer
    bias: str
    parameter: str | None = None
    argument: cst.Arg | None = None
    wrapped: bool = False


class Calls:
    def __init__(self, path: str, source: str, project: ProjectModules, ancestors: list[cst.CSTNode]):
        self.path = path
        self.source = source
        self.project = project
        self.ancestors = ancestors
        self._used = False

    def scope(self) -> str | None:
        """The qualified name of the function the current node is in, as the summaries name it
        (``Trainer.fit``, ``outer.inner``); None at module level."""
        return scope_name(self.ancestors[:-1])

    def resolve(self, call: cst.Call) -> Resolved | None:
        """The function a call calls (with how it binds the arguments), or None when unknown."""
        callee = dotted_name(call.func)
        if callee is None:
            return None
        return self._summaries().resolve(self.path, callee, self.scope())

    def runs(self, name: str | Import, scope: str | None, instance: bool = False) -> tuple[FunctionSummary, ...]:
        """What calling ``name`` runs (a dotted text read in function ``scope``, as ``scope_name``
        names it, or the name an import statement brings in): the transitive summaries of the
        function, or of each ``__init__`` of a class and its bases, or with ``instance`` of what
        calling an instance of the class runs (its ``forward``) (callgraph.Summaries.runs)."""
        return self._summaries().runs(self.path, name, scope, instance)

    def exports(self, name: str, scope: str | None) -> tuple[str, ...] | None:
        """The names of ``__all__`` of the project's module that ``name`` means in function
        ``scope`` (None: no module of the project, or no literal ``__all__``)."""
        return self._summaries().exports(self.path, name, scope)

    def external_bases(self, call: cst.Call) -> frozenset[str]:
        """When ``call`` constructs a class of the project (``BalancedDataParallel(...)``), the
        qualified names of the bases outside the project that it and its bases of the project
        derive from (``torch.nn.parallel.DataParallel``); empty otherwise."""
        callee = dotted_name(call.func)
        return frozenset() if callee is None else self._summaries().external_bases(self.path, callee, self.scope())

    def mentions(self, word: str) -> bool:
        """Could a call in the file reach project code that contains ``word`` (one of
        project.WORDS)? The text-level gate before asking summaries (ProjectModules.mentions)."""
        return self.project.mentions(self.path, word, self.source)

    def _summaries(self) -> Summaries:
        if not self._used:
            self.project.use_source(self.path, self.source)
            self._used = True
        return self.project.summaries

    def summary(self, call: cst.Call) -> FunctionSummary | None:
        """What one call of the function ``call`` calls does, transitively; None when unknown."""
        resolved = self.resolve(call)
        return None if resolved is None else resolved.function

    def returned_layer(self, call: cst.Call) -> ReturnedLayer | None:
        """The fresh Conv/Linear that a call of the project's own function returns (``conv3x3(c, c)``
        returning ``nn.Conv2d(...)``), or whose output an instance of the project's class that the
        call constructs returns (``ConvNorm(c, c)``; ``Summaries.returned_layer``). Its bias is read
        through this call's arguments as the summaries' bindings read it (``callgraph._Binding.layer``)
        when the function passes a parameter of its own (``bias=bias``): that parameter's name, and the
        argument the call gives it, if any."""
        callee = dotted_name(call.func)
        if callee is None or any(arg.star for arg in call.args):
            return None
        summaries, scope = self._summaries(), self.scope()
        resolved = summaries.resolve(self.path, callee, scope)
        layer = summaries.returned_layer(self.path, callee, scope, resolved) if resolved else None
        if layer is None:
            return None
        wrapped = resolved.constructor
        if layer.bias != "parameter":
            return ReturnedLayer(layer, layer.bias, wrapped=wrapped)
        summary = resolved.function
        parameter = summary.parameters[layer.parameter.index]
        positional = [arg for arg in call.args if arg.keyword is None]
        keywords = {arg.keyword.value: arg for arg in call.args if arg.keyword is not None}
        passed = summary.argument_for(layer.parameter.index, resolved.bound, len(positional), list(keywords))
        if passed is None:
            return ReturnedLayer(layer, summary.defaults[layer.parameter.index] or "unknown", parameter,
                                 wrapped=wrapped)
        argument = keywords[passed] if isinstance(passed, str) else positional[passed] if passed >= 0 else None
        literal = next((text for value, text in ((True, "True"), (False, "False"))
                        if argument is not None and is_literal(argument.value, value)), None)
        return ReturnedLayer(layer, literal or "unknown", parameter, argument, wrapped)

    def forward_in(self, node: cst.CSTNode) -> Effect | None:
        """A model call that some call of the project's code in ``node`` runs once per call, in any
        grad mode (``self.test()`` whose method runs ``self.net_g(self.lq)`` under ``no_grad``; not
        ``self.evaluate()`` that loops over a dataset): the code evaluates or trains a model on one
        input. Functions, lambdas and classes defined in ``node`` are not entered; None when no
        call there is known to run one."""
        found: list[Effect] = []

        def on_visit(child: cst.CSTNode) -> bool:
            if found or type(child) in _definition_types():
                return False
            if type(child) is cst.Call:
                summary = self.summary(child)
                if summary is not None and summary.forwards:
                    found.append(summary.forwards[0])
            return True

        walk(node, on_visit)
        return found[0] if found else None


def ast_project_mentions(index: SyntaxIndex, word: str) -> bool:
    """Could a call in the file reach project code that contains ``word`` (see
    ProjectModules.mentions)? Always True when the index knows no project: a precheck may only
    say no when it is sure."""
    return index.project_mentions(word)


def ast_forward_in(index: SyntaxIndex, node: ast.AST) -> bool:
    """The precheck twin of ``Calls.forward_in``: could a call in ``node`` (definitions in it
    entered: a precheck may say yes more often) run a model through the project's code?"""
    return any(type(call) is ast.Call and (summary := ast_call_summary(index, call)) is not None
               and bool(summary.forwards) for call in ast.walk(node))


def ast_call_summary(index: SyntaxIndex, call: ast.Call) -> FunctionSummary | None:
    """The precheck twin of ``Calls.summary``: what a call on CPython's tree does, when the index
    knows the file's project (None otherwise, and for calls of what is not the project's own)."""
    callee = ast_dotted_name(call.func)
    summaries = index.project_summaries() if callee is not None else None
    if summaries is None:
        return None
    return summaries.resolve_call(index.path, callee, index.scope_of(call))


def ast_returned_layer(index: SyntaxIndex, call: ast.Call) -> Layer | None:
    """The precheck twin of ``Calls.returned_layer``: the layer a call of the project's function
    returns, or whose output the project's module it constructs returns (None when the index knows
    no project, and for calls of what is not the project's own)."""
    callee = ast_dotted_name(call.func)
    summaries = index.project_summaries() if callee is not None else None
    if summaries is None:
        return None
    scope = index.scope_of(call)
    resolved = summaries.resolve(index.path, callee, scope)
    return None if resolved is None else summaries.returned_layer(index.path, callee, scope, resolved)


def ast_external_bases(index: SyntaxIndex, call: ast.Call) -> frozenset[str] | None:
    """The precheck twin of ``Calls.external_bases``; None when the index knows no project (a
    precheck may then only assume any base)."""
    callee = ast_dotted_name(call.func)
    summaries = index.project_summaries()
    if summaries is None:
        return None
    return frozenset() if callee is None else summaries.external_bases(index.path, callee, index.scope_of(call))
