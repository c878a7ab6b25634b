"""LibCST, imported on first use.

Importing LibCST costs about 0.15 s, half of a small file's run, and most files of a tree never
reach it: their text or their CPython tree already shows that no rule can report anything there
(docs/writing-rules.md, "The filters"). So torchlint's own modules do not import it at their top::

    from torchlint.lazy import libcst as cst

``cst`` is a module object that imports the real LibCST the first time one of its attributes is
read (``cst.Call``), then holds LibCST's names itself, so every later read costs what a module's
does. A module that reads ``cst.X`` at its top level, where it is imported (a tuple of node types,
a visitor class), would import LibCST at start-up again: such names are built on first use instead
(``functools.cache``), and tests/test_startup.py proves that a file no rule parses deeply is linted
without importing LibCST.
"""

from __future__ import annotations

import importlib
import threading
import types


class LazyModule(types.ModuleType):
    """A stand-in for the module ``name`` that imports it when an attribute is first read."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_lazy_lock"] = threading.Lock()  # the language server lints off its message loop

    def __getattr__(self, attribute: str):  # only for a name the stand-in does not hold yet
        module = self.load()
        # a name the module did not hold when it was copied: ask it (its own __getattr__, if any)
        return self.__dict__[attribute] if attribute in self.__dict__ else getattr(module, attribute)

    def load(self) -> types.ModuleType:
        """The real module, imported now if it is not yet (a long-lived process pays the import
        while it starts rather than on its first file)."""
        with self._lazy_lock:
            module = self.__dict__.get("_lazy_module")
            if module is None:
                module = importlib.import_module(self.__name__)
                self.__dict__.update(module.__dict__)
                self.__dict__["_lazy_module"] = module
        return module

    @property
    def loaded(self) -> bool:
        """Whether the real module has been imported (for tests and start-up measurements)."""
        return "_lazy_module" in self.__dict__


libcst = LazyModule("libcst")
