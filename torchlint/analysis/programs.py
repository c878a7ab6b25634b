"""What kind of code a place is: a program run as a script (where process-wide settings belong),
a CUDA training script, or test code (where performance advice does not apply)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from torchlint.analysis.bindings import Bindings, ast_values
from torchlint.analysis.devices import mentions_cuda
from torchlint.analysis.index import SyntaxIndex
from torchlint.analysis.loops import AST_FUNCTIONS, AST_LOOPS, Loops, ast_training_loop_lines, loop_types
from torchlint.analysis.summaries import Effect, FunctionSummary
from torchlint.analysis.syntax import ast_dotted_name, dotted_name, is_main_guard, is_literal, scope_name
from torchlint.analysis.walk import flat, walk
from torchlint.lazy import libcst as cst

if TYPE_CHECKING:
    from torchlint.analysis.calls import Calls


@dataclass(frozen=True)
class ProjectTraining:
    """A call of the script that trains in the project's code (``simclr.train(loader)``): the
    call, what it calls (``SimCLR.train``) and where that code backpropagates."""

    call: cst.Call
    name: str
    backward: Effect


class Programs:
    def __init__(self, path: str, code: Callable[[], str], module: cst.Module, loops: Loops, root: Path | None,
                 ancestors: list[cst.CSTNode], bindings: Bindings | None = None,
                 calls: Callable[[], Calls] | None = None, source: str | None = None):
        self.path = path
        self.bindings = bindings
        self._calls = calls  # what a call of the project's code does (built when first asked)
        self.source = source  # the file's text, as written
        self._code = code  # the source without comments and docstrings
        self.module = module
        self.loops = loops
        self.root = root
        self.ancestors = ancestors

    @cached_property
    def is_script(self) -> bool:
        """The file is run as a program: it has an ``if __name__ == "__main__":`` block or a
        training loop outside any function. Process-wide settings (``cudnn.benchmark``, the matmul
        precision) belong in such entry points, not in library modules or test helpers that other
        code imports."""
        def top_level(statements) -> bool:
            for statement in statements:
                if is_main_guard(statement):
                    return True
                if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                    continue
                if isinstance(statement, loop_types()) and self.loops.backpropagated_names(statement) is not None:
                    return True
                for attr in ("body", "orelse", "finalbody"):
                    child = getattr(statement, attr, None)
                    if isinstance(child, cst.IndentedBlock) and top_level(child.body):
                        return True
                    if isinstance(child, cst.Else) and top_level(child.body.body):
                        return True
                    if isinstance(child, cst.If) and top_level([child]):
                        return True
            return False

        return top_level(self.module.body)

    def cuda_training_script(self) -> cst.CSTNode | None:
        """The first training loop of a script (see ``is_script``) that names CUDA and that the
        script runs (see ``runs``): where rules about a whole training run (its precision, its
        process-wide settings) report."""
        loops = self.loops.training_loops
        if loops and self.is_script and mentions_cuda(self._code()):
            return next((loop for loop in loops if self.runs(loop)), None)
        return None

    def project_training(self) -> ProjectTraining | None:
        """In a script (see ``is_script``) that names CUDA, the first call that running it reaches
        (see ``runs``) of the project's code that trains: a function or method of the project
        whose code, or what it calls, runs ``backward`` (``simclr.train(train_loader)``,
        ``train(args, model)`` imported from ``engine``). ``model.train(loader)`` on a name bound
        to instances of several classes of the project (``model = DCGAN(args)`` in one branch,
        ``model = WGAN(args)`` in another, ``None`` before) trains when the method of each trains.
        Where whole-script rules report when the script's own loops do not train."""
        if self._calls is None or self.bindings is None or not self.is_script or not mentions_cuda(self._code()):
            return None
        calls = self._calls()
        if not calls.mentions("backward"):
            return None
        found: list[ProjectTraining] = []
        scopes: list[cst.CSTNode] = []

        def on_visit(node: cst.CSTNode) -> bool:
            if found:
                return False
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                scopes.append(node)
            elif isinstance(node, cst.Call) and self.runs(node):
                training = self._trains(node, scopes, calls)
                if training is not None:
                    found.append(training)
                    return False
            return True

        def on_leave(node: cst.CSTNode) -> None:
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                scopes.pop()

        walk(self.module, on_visit, on_leave)
        return found[0] if found else None

    def _trains(self, call: cst.Call, scopes: list[cst.CSTNode], calls: Calls) -> ProjectTraining | None:
        callee = dotted_name(call.func)
        if callee is None:
            return None
        scope = scope_name(scopes)
        backward = _backward(calls.runs(callee, scope))
        if backward is not None:
            return ProjectTraining(call, callee, backward)
        name, _, method = callee.partition(".")
        if not method or "." in method:
            return None
        values, parameter = self.bindings.values_at(name, list(reversed(scopes)))
        values = [value for value in values if not is_literal(value, None)]  # `model = None` first
        if parameter or len(values) < 2:
            return None  # bound once, the resolver has answered
        classes = [dotted_name(value.func) if isinstance(value, cst.Call) else None for value in values]
        backwards = [_backward(calls.runs(f"{cls}.{method}", scope)) if cls is not None else None for cls in classes]
        if any(found is None for found in backwards):
            return None
        return ProjectTraining(call, callee, backwards[0])

    def runs(self, loop: cst.CSTNode) -> bool:
        """Can running the file as a program reach this loop (or call)? Code outside any function can; code
        in a function or class only when the file names it (calls it, passes it as
        ``mp.spawn(main_worker)`` does, or names one of its methods) from code that is reached,
        starting from the module's own statements and the ``__main__`` block. A library module's
        ``Trainer.train`` loop is not run by a ``__main__`` block that only samples. Names are
        matched by their text, so a name written anywhere that is reached counts: in doubt, reached."""
        reached, enclosing = self._reached_definitions
        return all(scope in reached for scope in enclosing.get(id(loop), ()))

    @cached_property
    def _reached_definitions(self) -> tuple[frozenset[int], dict[int, tuple[int, ...]]]:
        """The functions and classes (by id) that running the file reaches (see ``runs``), and the
        definitions around each loop."""
        names: dict[int, set[str]] = {0: set()}  # what each definition's own code names (0: the module's)
        definitions: list[tuple[int, int, str, bool]] = []  # see _reached
        enclosing: dict[int, tuple[int, ...]] = {}
        # one pass over the module's flat node list (see walk.flat), with the definitions open at
        # each node on a stack: (where its subtree ends, its id, is it a class)
        nodes, ends, start = flat(self.module)
        stack: list[tuple[int, int, bool]] = [(ends[start], 0, False)]
        loop_kinds, name_type = set(loop_types()), cst.Name
        for index in range(start, ends[start]):
            while stack[-1][0] <= index:
                stack.pop()
            node = nodes[index]
            kind = type(node)
            if kind is name_type:
                names[stack[-1][1]].add(node.value)
            elif kind in loop_kinds or kind is cst.Call:
                enclosing[id(node)] = tuple(scope for _, scope, _ in stack[1:])
            elif kind is cst.FunctionDef or kind is cst.ClassDef:
                scope, in_class = stack[-1][1], stack[-1][2]
                definitions.append((id(node), scope, node.name.value, kind is cst.FunctionDef and in_class))
                names[id(node)] = set()
                for decorator in node.decorators:  # a decorator runs where the definition does
                    names[scope].update(_identifiers(decorator))
                stack.append((ends[index], id(node), kind is cst.ClassDef))
        return _reached(definitions, names), enclosing

    @cached_property
    def _test_file(self) -> bool:
        return is_test_file(self.path, self.root, self.source)

    def in_test_code(self) -> bool:
        """In a test: a ``conftest.py``, a file under a ``tests``/``testing`` folder, or a
        ``test_*.py``/``*_test.py`` that holds a test (where test runners look, see is_test_file),
        a ``test_*`` function that nothing in the file calls (a test runner's), or a method of a
        ``unittest`` ``TestCase`` class.
        Performance advice does not apply there. A ``test_net(...)`` that the script itself calls
        is evaluation code."""
        if self._test_file:
            return True
        for node in self.ancestors:
            if isinstance(node, cst.FunctionDef) and node.name.value.startswith("test_") \
                    and not self._called(node.name.value):
                return True  # a test runner's function: nothing in the file calls it
            if isinstance(node, cst.ClassDef) and any(
                    (dotted_name(base.value) or "").rsplit(".", 1)[-1].endswith("TestCase") for base in node.bases):
                return True
        return False

    def _called(self, name: str) -> bool:
        """Does the file call the function ``name`` itself (``test_net(...)`` in ``__main__``)?"""
        code = self._code()
        return len(re.findall(rf"(?<![\w.]){re.escape(name)}\s*\(", code)) > len(
            re.findall(rf"\bdef\s+{re.escape(name)}\s*\(", code))


def _reached(definitions: list[tuple[int, int, str, bool]], names: dict[int, set[str]]) -> frozenset[int]:
    """The definitions that running the file reaches, from (its id, its scope's id (0: the
    module), its name, is it a method) and the names each one's own code writes: those of a
    reached scope that reached code names, and the special methods of a reached class, to a
    fixpoint."""
    reached_names, reached = set(names[0]), {0}
    changed = True
    while changed:
        changed = False
        for key, scope, name, method in definitions:
            if key in reached or scope not in reached:
                continue
            if name in reached_names or method and name.startswith("__") and name.endswith("__"):
                reached.add(key)
                reached_names |= names[key]
                changed = True
    return frozenset(reached)


def _identifiers(node: cst.CSTNode) -> set[str]:
    found: set[str] = set()
    walk(node, lambda child: found.add(child.value) if isinstance(child, cst.Name) else None)
    return found


# What a test runner collects or a test uses: pytest's ``test*`` functions and ``Test*`` classes,
# a unittest ``TestCase``, the runners themselves (not in a comment).
HOLDS_TEST = re.compile(r"^[ \t]*(async[ \t]+)?def[ \t]+test|^[ \t]*class[ \t]+Test"
                        r"|^[^#\n]*(TestCase|\bpytest\b|\bunittest\b)", re.MULTILINE)


def is_test_file(path: str, root: Path | None, source: str | None = None) -> bool:
    """A file where test runners look: ``conftest.py``, a file under a ``tests``/``test``/
    ``testing`` folder of the project (folders above the project root say nothing: a checkout in
    ``~/test/``), or a ``test_*.py``/``*_test.py`` that holds a test (given its ``source``: a
    ``test*`` function, a ``Test*`` class, a ``TestCase``, or pytest or unittest named). A
    ``feature_extraction_test.py`` holding an evaluation class and no test is a program whose
    name says what it measures, like ``test.py``."""
    relative = Path(path)
    try:
        relative = relative.resolve().relative_to(Path(root).resolve()) if root is not None else relative
    except (ValueError, OSError):
        pass
    parts = relative.as_posix().split("/")
    name = parts[-1]
    if name == "conftest.py" or any(part in ("tests", "test", "testing") for part in parts[:-1]):
        return True
    return (name.startswith("test_") or name.endswith("_test.py")) and (source is None
                                                                         or HOLDS_TEST.search(source) is not None)


def ast_is_script(index: SyntaxIndex) -> bool:
    """The file may run as a program: it has an ``if __name__ == "__main__":`` or a training loop
    outside any function (see Programs.is_script)."""
    if "__main__" in index.source:
        return True
    functions = index.lines(index.nodes(*AST_FUNCTIONS))
    training = ast_training_loop_lines(index)
    return any(not functions[loop.lineno] for loop in index.nodes(*AST_LOOPS) if training[loop.lineno])


def ast_training_script(index: SyntaxIndex) -> bool:
    """A training loop, in a file that may run as a program."""
    return any(ast_training_loop_lines(index)) and ast_is_script(index)


def _backward(summaries: tuple[FunctionSummary, ...]) -> Effect | None:
    return next((summary.backward[0] for summary in summaries if summary.backward), None)


_AST_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# Leaves that write no identifier (a constant's string is no name): a data file is mostly these.
_NO_IDENTIFIERS = frozenset({ast.Constant, ast.Load, ast.Store, ast.Del})


def _ast_identifiers(node: ast.AST) -> list[str]:
    """The names a node writes itself (``cst.Name``s in LibCST's tree), and more: every string
    field but a constant's, a dotted one by its parts."""
    found = []
    for field, value in ast.iter_fields(node):
        if type(value) is str and field != "kind" and type(node) is not ast.Constant:
            found += value.split(".")
        elif type(value) is list:
            found += [part for item in value if type(item) is str for part in item.split(".")]
    return found


def ast_reached_calls(index: SyntaxIndex) -> frozenset[int]:
    """The precheck twin of ``Programs.runs`` for calls, looser: the ids of the calls that running
    the file may reach (a definition's names are every identifier its own nodes write)."""
    def compute() -> frozenset[int]:
        names: dict[int, set[str]] = {0: set()}
        definitions: list[tuple[int, int, str, bool]] = []  # see _reached
        enclosing: dict[int, tuple[int, ...]] = {}
        stack: list[tuple[ast.AST, tuple[int, ...], bool]] = [(index.tree, (0,), False)]
        while stack:
            node, scopes, in_class = stack.pop()
            identifiers = _ast_identifiers(node)
            if type(node) in _AST_DEFINITIONS:
                definitions.append((id(node), scopes[-1], node.name, in_class and type(node) is not ast.ClassDef))
                for decorator in node.decorator_list:  # a decorator runs where the definition does
                    names[scopes[-1]].update(name for child in ast.walk(decorator) for name in _ast_identifiers(child))
                names[id(node)] = set(identifiers)
                scopes, in_class = scopes + (id(node),), type(node) is ast.ClassDef
            else:
                names[scopes[-1]].update(identifiers)
                if type(node) is ast.Call:
                    enclosing[id(node)] = scopes[1:]
            stack.extend((child, scopes, in_class) for child in ast.iter_child_nodes(node)
                         if type(child) not in _NO_IDENTIFIERS)
        reached = _reached(definitions, names)
        return frozenset(call for call, scopes in enclosing.items() if all(scope in reached for scope in scopes))

    return index.memo("reached-calls", compute)


def ast_project_training(index: SyntaxIndex) -> bool:
    """The precheck twin of ``Programs.project_training``, looser: a call of the file that may
    train in the project's code (``a.m(...)`` also as ``C.m`` for any ``C(...)`` the file assigns
    to ``a``); True when the index knows no project."""
    return index.memo("project-training", lambda: _ast_project_training(index))


def _ast_project_training(index: SyntaxIndex) -> bool:
    summaries = index.project_summaries()
    if summaries is None:
        return True
    if not index.project_mentions("backward"):
        return False
    values = ast_values(index)
    reached = ast_reached_calls(index)
    for call in index.nodes(ast.Call):
        callee = ast_dotted_name(call.func)
        if callee is None or id(call) not in reached:
            continue
        scope = index.scope_of(call)
        name, _, method = callee.partition(".")
        candidates = [callee] + [f"{cls}.{method}" for value in values.get(name, ()) if method and "." not in method
                                 and type(value) is ast.Call and (cls := ast_dotted_name(value.func)) is not None]
        if any(_backward(summaries.runs(index.path, candidate, scope)) for candidate in candidates):
            return True
    return False
