"""Modules imported at their first use: sympy, and the warm cache for ``kiln.save`` / ``kiln.load``.

Importing sympy takes about half a second, and only symbolic sizes (dynamic shapes) and the loop IR
need it: ``import kiln`` and a static-shape warm start (capture, guards, a graph loaded from the warm
cache) never do. Modules on those paths write

    from kiln.lazy import sympy

and use ``sympy.X`` as before: the first attribute read imports sympy; each attribute read once is then
kept on the proxy (later reads cost what a module attribute costs). Modules that define sympy classes
(``kiln.loopir.index``) import sympy itself and are imported only where sizes are symbolic or code is
generated. ``LazyModule(name)`` does the same for any module. ``tests/test_lazy_imports.py`` checks both
paths in fresh processes.
"""
from __future__ import annotations

import importlib
import types


class LazyModule(types.ModuleType):
    """A stand-in for a module that imports it at the first attribute read. With ``keep`` (for modules
    nothing patches, like sympy), each attribute read is kept on the stand-in; without, every read goes
    to the module (a test's monkeypatch of the module is seen)."""

    def __init__(self, name: str, keep: bool = True):
        super().__init__(name)
        self._keep = keep

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(importlib.import_module(self.__name__), name)
        if self._keep:
            setattr(self, name, value)
        return value


sympy = LazyModule("sympy")
