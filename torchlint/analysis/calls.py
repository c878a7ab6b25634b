"""What a call in the file being linted does: the summary of the function it calls, in this file
or in the project's own modules (see summaries.py, callgraph.py, project.py).

Rules ask at the call site (``ctx.calls.summary(node)``), where a per-step cost is paid; the
summary's effects say where inside the callee it happens, for the finding's related information.
"""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.callgraph import Resolved
from torchlint.analysis.project import ProjectModules
from torchlint.analysis.summaries import FunctionSummary
from torchlint.analysis.syntax import dotted_name


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
