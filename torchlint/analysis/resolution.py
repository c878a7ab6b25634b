"""Which function a call calls: a call's dotted text, in a scope of a file, resolved as Python
would find it, through the file's names and the project's modules.

A call resolves to: a function of the file (module level, or nested in an enclosing function);
``self.m()`` in a method of C -> C.m, through C's bases in the file or the project (an external
base such as ``nn.Module`` is skipped, not searched); ``obj.m()`` where ``obj`` is bound once, in
the scope or at module level, to ``C(...)``, or is a parameter annotated ``C``; ``self.attr.m()``
where C's methods assign ``self.attr`` only ``C2(...)``; a name bound once to a dotted name
(``step = self.train_step``); an imported name (``from utils import f``, ``import utils as U``,
``from .meters import Meter``, re-exports through a package's ``__init__``, ``from m import *``, a
package's module ``from pkg import sub``; a module that is no package has none).
``C(...)`` calls ``C.__init__``; calling an instance calls its ``__call__``, else its ``forward``
(an ``nn.Module``). Anything else, including a name bound more than once, is unresolved: None,
never a guess. Dispatch is static: ``self.m()`` is C.m even where a subclass overrides it.
"""

from __future__ import annotations

import os
import typing
from dataclasses import dataclass

from torchlint.analysis.summaries import Import, ModuleSummary, Scope

_MODULE, _CLASS, _INSTANCE, _FUNCTION = "module", "class", "instance", "function"
_MISSING = object()


class ModuleSource(typing.Protocol):
    """Where summaries come from (project.ProjectModules): a file's index, and the file an
    import in a file names (None when it is not the project's)."""

    def summary(self, path: str) -> ModuleSummary | None: ...

    def resolve_import(self, path: str, module: str, level: int) -> str | None: ...


@dataclass(frozen=True)
class Target:
    """Where a call lands: a function, whether the call passes its first parameter implicitly
    (``obj.m()``, ``C()``), and whether it is a class called (its ``__init__``)."""

    path: str
    qualname: str
    bound: bool
    constructor: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.path, self.qualname


class Resolver:
    """Resolved calls, kept for the process (``clear()`` forgets them). Each answer comes with
    the files read to find it, so that a file's answers know what they depend on."""

    def __init__(self, modules: ModuleSource):
        self.modules = modules
        self.clear()

    def clear(self) -> None:
        self._targets: dict[tuple, tuple[Target | None, frozenset[str]]] = {}
        self._runs: dict[tuple, tuple[tuple[Target, ...], frozenset[str]]] = {}
        self._class_facts: dict[tuple, tuple[object, frozenset[str]]] = {}  # bases, attributes of classes

    def _module(self, path: str, consulted: set[str]) -> ModuleSummary | None:
        consulted.add(path)
        return self.modules.summary(path)

    def target(self, path: str, scope: str | None, callee: str) -> tuple[Target | None, frozenset[str]]:
        """Where a call written ``callee`` in function ``scope`` (None: module level) of file
        ``path`` lands, and the files read to know."""
        key = (path, scope, callee)
        found = self._targets.get(key)
        if found is None:
            consulted: set[str] = set()
            found = self._targets[key] = (self._callable(self._object(path, scope, callee, consulted, set()),
                                                         consulted), frozenset(consulted))
        return found

    def runs(self, path: str, scope: str | None, name: str | Import,
             instance: bool = False) -> tuple[tuple[Target, ...], frozenset[str]]:
        """What calling ``name`` runs (its dotted text read in function ``scope`` of file ``path``,
        or the name an import statement of the file brings in, whatever else the file binds to
        it), and the files read to know: the function it calls; for a class, the ``__init__`` of
        every class of the project in its method resolution order (``super().__init__()`` runs
        its bases'), not only the first, or with ``instance``, what calling an instance of it
        runs (its ``__call__``, else its ``forward``; nothing for a function); nothing when unresolved."""
        key = (path, scope, name, instance)
        found = self._runs.get(key)
        if found is None:
            consulted: set[str] = set()
            if isinstance(name, Import):
                value = self._import(path, name, consulted, set())
            else:
                value = self._object(path, scope, name, consulted, set())
            if instance:  # a class's instances only
                target = self._callable((_INSTANCE, value[1], value[2]), consulted) \
                    if value is not None and value[0] == _CLASS else None
                targets = () if target is None else (target,)
            elif value is not None and value[0] == _CLASS:
                targets = tuple(Target(class_path, f"{class_name}.__init__", True, True) for class_path, class_name
                                in self._classes(value[1], value[2], consulted, set())
                                if "__init__" in self.modules.summary(class_path).classes[class_name].methods)
            else:
                target = self._callable(value, consulted)
                targets = () if target is None else (target,)
            found = self._runs[key] = (targets, frozenset(consulted))
        return found

    def exports(self, path: str, scope: str | None, name: str) -> tuple[tuple[str, ...] | None, frozenset[str]]:
        """The names of ``__all__`` of the project's module that ``name`` means (``import resnet``:
        ``resnet``), and the files read to know; None when it is no module of the project or
        declares no literal ``__all__``."""
        consulted: set[str] = set()
        value = self._object(path, scope, name, consulted, set())
        module = self._module(value[1], consulted) if value is not None and value[0] == _MODULE else None
        return (module.exports if module is not None else None), frozenset(consulted)

    def external_bases(self, path: str, scope: str | None, name: str) -> tuple[frozenset[str], frozenset[str]]:
        """The qualified names of the bases outside the project (``torch.nn.DataParallel``) of the
        class that ``name`` means (its dotted text read in function ``scope`` of file ``path``) and
        of each of its bases of the project, as their modules import them; and the files read to
        know. Empty when ``name`` is no class of the project, and for a base of a module that
        imports nothing by its first name (a base defined by an assignment, a parameter)."""
        key = ("external bases", path, scope, name)
        found = self._class_facts.get(key)
        if found is None:
            consulted: set[str] = set()
            value = self._object(path, scope, name, consulted, set(), classless=(_INSTANCE, _FUNCTION))
            bases: set[str] = set()
            for class_path, class_name in (self._classes(value[1], value[2], consulted, set())
                                           if value is not None and value[0] == _CLASS else ()):
                module = self.modules.summary(class_path)
                summary = module.classes[class_name]
                for base in summary.bases:
                    if self._object(class_path, summary.scope, base, consulted, set()) is not None:
                        continue  # the project's (its own bases are in the list) or a module
                    first, _, rest = base.partition(".")
                    imported = module.scope.imports.get(first)
                    qualified = imported.qualified if imported is not None else None
                    if qualified is not None:
                        bases.add(f"{qualified}.{rest}" if rest else qualified)
            found = self._class_facts[key] = (frozenset(bases), frozenset(consulted))
        return found

    def _object(self, path: str, scope: str | None, text: str, consulted: set[str], seen: set,
                classless: tuple[str, ...] = ()) -> tuple | None:
        """What a dotted name means in a scope: a module, class, instance or function (a tuple
        whose first item says which), or None. With ``classless`` (_INSTANCE, _FUNCTION), a
        question about classes only: None as soon as a prefix is one of those, whose attributes
        are never a class (``self.step()`` needs no search of the methods of ``self``'s bases)."""
        key = (path, scope, text)
        if key in seen:
            return None
        seen.add(key)
        first, *rest = text.split(".")
        found = self._name(path, scope, first, consulted, seen)
        for attribute in rest:
            if found is None or found[0] in classless:
                found = None
                break
            found = self._member(found, attribute, consulted, seen)
        seen.discard(key)
        return found

    def _name(self, path: str, scope: str | None, name: str, consulted: set[str], seen: set) -> tuple | None:
        module = self._module(path, consulted)
        if module is None:
            return None
        current = scope
        while current:
            if current not in module.classes:  # a class body does not enclose its methods
                function = module.bindings(current)
                if function is not None:
                    if name == function.self_name:
                        return (_CLASS if function.kind == "classmethod" else _INSTANCE, path, function.class_name)
                    found = self._in_scope(module, current, function.scope, name, consulted, seen)
                    if found is not _MISSING:
                        return found
            current = current.rpartition(".")[0]
        return self._global(module, name, consulted, seen)

    def _in_scope(self, module: ModuleSummary, scope_name: str | None, scope: Scope, name: str, consulted: set[str],
                  seen: set) -> object:
        if name not in scope.locals:
            return _MISSING
        text = scope.aliases.get(name)
        if text is not None:
            return self._object(module.path, scope_name, text, consulted, seen)
        text = scope.instances.get(name)
        if text is not None:
            found = self._object(module.path, scope_name, text, consulted, seen)
            return (_INSTANCE, found[1], found[2]) if found is not None and found[0] == _CLASS else None
        text = scope.results.get(name)
        if text is not None:
            return self._returned_instance(self._object(module.path, scope_name, text, consulted, seen), consulted, seen)
        imported = scope.imports.get(name)
        if imported is not None:
            return self._import(module.path, imported, consulted, seen)
        if name in scope.nested:
            qualname = f"{scope_name}.{name}" if scope_name else name
            return (_CLASS, module.path, qualname) if qualname in module.classes else \
                (_FUNCTION, module.path, qualname, False)
        return None  # a local whose value nothing here knows

    def _returned_instance(self, found: tuple | None, consulted: set[str], seen: set) -> tuple | None:
        """The instance a call of ``found`` gives back: a function of the project whose every
        return is ``C(...)`` or None (FunctionSummary.returns_instance); None otherwise."""
        if found is None or found[0] != _FUNCTION:
            return None
        module = self._module(found[1], consulted)
        function = module.function(found[2]) if module is not None else None
        if function is None or not function.returns_instance:
            return None
        value = self._object(found[1], found[2], function.returns_instance, consulted, seen)
        return (_INSTANCE, value[1], value[2]) if value is not None and value[0] == _CLASS else None

    def _global(self, module: ModuleSummary, name: str, consulted: set[str], seen: set) -> tuple | None:
        """A module-level name, through the module's imports (a cycle of re-exports is unresolved)."""
        key = ("global", module.path, name)
        if key in seen:
            return None
        seen.add(key)
        found = self._in_scope(module, None, module.scope, name, consulted, seen)
        if found is _MISSING:
            found = None
            for imported in reversed(module.star_imports) if not name.startswith("_") else ():
                path = self.modules.resolve_import(module.path, imported.module, imported.level)
                other = self._module(path, consulted) if path is not None else None
                found = self._global(other, name, consulted, seen) if other is not None else None
                if found is not None:
                    break
        seen.discard(key)
        return found

    def _import(self, path: str, imported: Import, consulted: set[str], seen: set) -> tuple | None:
        if imported.name is None:
            target = self.modules.resolve_import(path, imported.module, imported.level)
            return (_MODULE, target) if target is not None else None
        base = self.modules.resolve_import(path, imported.module, imported.level)
        if base is not None:
            found = self._member((_MODULE, base), imported.name, consulted, seen)
            if found is not None or os.path.basename(base) != "__init__.py":
                return found  # a module that is no package has no modules of its own
        submodule = f"{imported.module}.{imported.name}" if imported.module else imported.name
        target = self.modules.resolve_import(path, submodule, imported.level)  # a namespace package's module
        return (_MODULE, target) if target is not None else None

    def _member(self, found: tuple, attribute: str, consulted: set[str], seen: set) -> tuple | None:
        kind = found[0]
        if kind == _MODULE:
            module = self._module(found[1], consulted)
            member = self._global(module, attribute, consulted, seen) if module is not None else None
            if member is None and os.path.basename(found[1]) == "__init__.py":
                target = self.modules.resolve_import(found[1], attribute, 1)  # a package's submodule
                member = (_MODULE, target) if target is not None else None
            return member
        if kind not in (_CLASS, _INSTANCE):
            return None
        method = self._method(found[1], found[2], attribute, consulted, seen)
        if method is not None:
            path, qualname, method_kind = method
            bound = method_kind == "classmethod" or (kind == _INSTANCE and method_kind != "staticmethod")
            return _FUNCTION, path, qualname, bound
        if kind == _CLASS:
            module = self._module(found[1], consulted)
            nested = f"{found[2]}.{attribute}"
            return (_CLASS, found[1], nested) if module is not None and nested in module.classes else None
        assigned = self._instance_attribute(found[1], found[2], attribute, consulted, seen)
        if assigned is None:
            return None
        value = self._object(*assigned, consulted, seen)
        return (_INSTANCE, value[1], value[2]) if value is not None and value[0] == _CLASS else None

    def _classes(self, path: str, qualname: str, consulted: set[str], seen: set) -> list[tuple[str, str]]:
        """The class and its bases of the project, in method resolution order (depth first)."""
        key = ("mro", path, qualname)
        cached = self._class_facts.get(key)
        if cached is None:
            found: list[tuple[str, str]] = []
            mine: set[str] = set()
            self._add_bases(path, qualname, found, mine, seen)
            cached = self._class_facts[key] = (found, frozenset(mine))
        consulted |= cached[1]
        return cached[0]

    def _add_bases(self, path: str, qualname: str, found: list, consulted: set[str], seen: set) -> None:
        module = self._module(path, consulted)
        summary = module.classes.get(qualname) if module is not None else None
        if summary is None or (path, qualname) in found:
            return
        found.append((path, qualname))
        for base in summary.bases:
            value = self._object(path, summary.scope, base, consulted, seen)
            if value is not None and value[0] == _CLASS:
                self._add_bases(value[1], value[2], found, consulted, seen)

    def _method(self, path: str, qualname: str, name: str, consulted: set[str], seen: set) -> tuple | None:
        for class_path, class_name in self._classes(path, qualname, consulted, seen):
            summary = self.modules.summary(class_path).classes[class_name]
            if name in summary.methods:
                return class_path, f"{class_name}.{name}", summary.methods[name]
        return None

    def _instance_attribute(self, path: str, qualname: str, attribute: str, consulted: set[str],
                            seen: set) -> tuple | None:
        """``(path, scope, callee)`` when the class's methods (its bases' included) assign
        ``self.<attribute>`` only ``callee(...)``."""
        classes = self._classes(path, qualname, consulted, seen)
        key = ("attributes", path, qualname)
        assigned = self._class_facts.get(key)
        if assigned is None:
            found: dict[str, set] = {}
            for class_path, class_name in classes:
                module = self.modules.summary(class_path)
                for method in module.classes[class_name].methods:
                    function = module.bindings(f"{class_name}.{method}")
                    for name, callee in (function.self_attributes.items() if function is not None else ()):
                        found.setdefault(name, set()).add((class_path, function.qualname, callee))
            assigned = self._class_facts[key] = ({name: min(places) for name, places in found.items()
                                                  if len({callee for _, _, callee in places}) == 1
                                                  and min(places)[2]}, frozenset())
        return assigned[0].get(attribute)

    def _callable(self, found: tuple | None, consulted: set[str]) -> Target | None:
        if found is None:
            return None
        kind = found[0]
        if kind == _FUNCTION:
            return Target(found[1], found[2], found[3])
        if kind == _CLASS:
            method = self._method(found[1], found[2], "__init__", consulted, set())
            return Target(method[0], method[1], True, True) if method is not None else None
        if kind == _INSTANCE:
            method = self._method(found[1], found[2], "__call__", consulted, set()) or \
                self._method(found[1], found[2], "forward", consulted, set())
            return Target(method[0], method[1], True) if method is not None else None
        return None
