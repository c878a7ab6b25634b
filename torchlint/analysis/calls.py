"""What a call in the file being linted does: the summary of the function it calls, in this file
or in the project's own modules (see summaries.py, callgraph.py, project.py).

Rules ask at the call site (``ctx.calls.summary(node)``), where a per-step cost is paid; the
summary's effects say where inside the callee it happens, for the finding's related information.
"""

from __future__ import annotations

import ast

import libcst as cst

from torchlint.analysis.callgraph import Resolved
from torchlint.analysis.project import ProjectModules
from torchlint.analysis.summaries import FunctionSummary
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.summaries import Effect
from torchlint.analysis.syntax import ast_dotted_name, dotted_name
from torchlint.diagnostics import Related


def related(effect: Effect, message: str) -> Related:
    """Where an effect happens, as a finding's related location (0-based lines, as Diagnostic)."""
    return Related(effect.path, effect.line - 1, effect.column, effect.end_line - 1, effect.end_column, message)


def where(effect: Effect) -> str:
    """``utils.py:4`` for messages: the file's name and the line."""
    return f"{effect.path.replace(chr(92), '/').rsplit('/', 1)[-1]}:{effect.line}"


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
        scopes = [node for node in self.ancestors[:-1] if isinstance(node, (cst.FunctionDef, cst.ClassDef))]
        while scopes and not isinstance(scopes[-1], cst.FunctionDef):
            scopes.pop()  # a class body runs once, as module-level code does
        return ".".join(node.name.value for node in scopes) or None

    def resolve(self, call: cst.Call) -> Resolved | None:
        """The function a call calls (with how it binds the arguments), or None when unknown."""
        callee = dotted_name(call.func)
        if callee is None:
            return None
        if not self._used:
            self.project.use_source(self.path, self.source)
            self._used = True
        return self.project.summaries.resolve(self.path, callee, self.scope())

    def summary(self, call: cst.Call) -> FunctionSummary | None:
        """What one call of the function ``call`` calls does, transitively; None when unknown."""
        resolved = self.resolve(call)
        return None if resolved is None else resolved.function

    def release(self) -> None:
        """Let go of the linted text's summary (and the tree it holds) once the file is done."""
        if self._used:
            self.project.release(self.path)


def ast_project_mentions(index: SyntaxIndex, word: str) -> bool:
    """Could a call in the file reach project code that contains ``word`` (see
    ProjectModules.mentions)? Always True when the index knows no project: a precheck may only
    say no when it is sure."""
    if index.project is None or index.path is None:
        return True
    return index.memo(("mentions", word), lambda: index.project.mentions(index.path, word, index.source))


def ast_call_summary(index: SyntaxIndex, call: ast.Call) -> FunctionSummary | None:
    """The precheck twin of ``Calls.summary``: what a call on CPython's tree does, when the index
    knows the file's project (None otherwise, and for calls of what is not the project's own)."""
    project = index.project
    callee = ast_dotted_name(call.func)
    if project is None or index.path is None or callee is None:
        return None
    if not index.memo("project-source", lambda: project.use_source(index.path, index.source, index.tree) or True):
        return None
    return project.summaries.resolve_call(index.path, callee, index.scope_of(call))
