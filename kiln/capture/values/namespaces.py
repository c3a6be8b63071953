"""types.SimpleNamespace: configs as plain attribute bags.

A SimpleNamespace's attribute access is CPython's generic one (the type's tp_getattro/tp_setattro are
PyObject_GenericGetAttr/SetAttr; only its slot wrappers are the type's own), so an existing namespace
is read and written as any plain object (objects.has_generic_getattribute / has_generic_setattr).
One made while tracing, `SimpleNamespace(a=1, **cfg)`, is a `NamespaceValue`: a new object whose
attributes are the keyword arguments, in order, rebuilt after the graph as `SimpleNamespace(**attrs)`
(object.__new__ refuses the type). Its other C methods are not modelled: `==` (which compares the
dicts), repr, and hashing (unhashable) break the graph, as for any C slot (ops.rich_compare).
"""
from __future__ import annotations

import sys
import types

from kiln.capture.values.base import Value, unsupported
from kiln.capture.values.objects import NewObjectValue


class NamespaceValue(NewObjectValue):
    """A types.SimpleNamespace made while tracing (exactly that type: subclasses break at creation)."""

    def __init__(self, attrs: dict[str, Value]):
        super().__init__(types.SimpleNamespace)
        self.attrs.update(attrs)

    def reconstruct(self, cg) -> None:
        from kiln.capture.values.containers import DictValue

        cg.prepare_call(rebuild_namespace)
        cg.reconstruct(DictValue(self.attrs))
        cg.call(1)

    def __repr__(self) -> str:
        return f"Namespace({list(self.attrs)})"


def rebuild_namespace(attrs: dict) -> types.SimpleNamespace:
    return types.SimpleNamespace(**attrs)


def make_namespace(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """SimpleNamespace(**kwargs): the attributes in keyword order. A positional mapping (3.13) breaks;
    before 3.13 it is CPython's TypeError."""
    if args:
        if sys.version_info < (3, 13):
            from kiln.capture.values.exceptions import raise_traced

            raise_traced(TypeError, "no positional arguments expected")
        unsupported("SimpleNamespace(mapping): building it from a positional mapping is not modelled")
    for name in kwargs:
        if not isinstance(name, str):
            unsupported(f"SimpleNamespace() with a keyword {name!r} that is not a str")
    return NamespaceValue(dict(kwargs))


CLASS_HANDLERS = {types.SimpleNamespace: make_namespace}
