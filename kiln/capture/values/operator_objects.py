"""`operator.itemgetter`, `operator.attrgetter` and `operator.methodcaller` objects.

Each is an immutable C object that only remembers what to look up; calling it is `obj[i]`,
`obj.a.b` or `obj.name(*args, **kwargs)`, which kiln traces like the same code written out. Made
while tracing, the arguments are values; read from the frame, the object is guarded by identity (it
cannot change) and its arguments are read once with `__reduce__`, which does not call anything.
"""
from __future__ import annotations

import operator

from kiln.capture.values.base import ConstantValue, Value, unsupported

OPERATOR_OBJECT_TYPES = (operator.itemgetter, operator.attrgetter, operator.methodcaller)


class ItemGetterValue(Value):
    """operator.itemgetter(*items): f(obj) is obj[item], or a tuple of obj[i] for several items."""

    def __init__(self, items: list[Value]):
        self.items = items

    def python_type(self) -> type:
        return operator.itemgetter

    def call(self, tx, args, kwargs) -> Value:
        from kiln.capture.values.containers import TupleValue
        from kiln.capture.values.ops import getitem

        if len(args) != 1 or kwargs:
            unsupported("itemgetter expects exactly one argument")
        found = [getitem(tx, args[0], item) for item in self.items]
        return found[0] if len(found) == 1 else TupleValue(found)

    def reconstruct(self, cg) -> None:
        cg.prepare_call(operator.itemgetter)
        for item in self.items:
            cg.reconstruct(item)
        cg.call(len(self.items))

    def __repr__(self) -> str:
        return f"ItemGetter({self.items!r})"


class AttrGetterValue(Value):
    """operator.attrgetter(*names): f(obj) is obj.a.b (dotted names), or a tuple for several names."""

    def __init__(self, names: list[str]):
        self.names = names

    def python_type(self) -> type:
        return operator.attrgetter

    def call(self, tx, args, kwargs) -> Value:
        from kiln.capture.values.containers import TupleValue

        if len(args) != 1 or kwargs:
            unsupported("attrgetter expects exactly one argument")
        found = []
        for dotted in self.names:
            value = args[0]
            for part in dotted.split("."):
                value = tx.getattr(value, part)
            found.append(value)
        return found[0] if len(found) == 1 else TupleValue(found)

    def reconstruct(self, cg) -> None:
        cg.prepare_call(operator.attrgetter)
        for name in self.names:
            cg.load_const(name)
        cg.call(len(self.names))

    def __repr__(self) -> str:
        return f"AttrGetter({self.names!r})"


class MethodCallerValue(Value):
    """operator.methodcaller(name, *args, **kwargs): f(obj) is obj.name(*args, **kwargs)."""

    def __init__(self, name: str, args: list[Value], kwargs: dict[str, Value]):
        self.name, self.args, self.kwargs = name, args, kwargs

    def python_type(self) -> type:
        return operator.methodcaller

    def call(self, tx, args, kwargs) -> Value:
        if len(args) != 1 or kwargs:
            unsupported("methodcaller expects exactly one argument")
        return tx.call(tx.getattr(args[0], self.name), list(self.args), dict(self.kwargs))

    def reconstruct(self, cg) -> None:
        from kiln.capture.values.containers import DictValue, TupleValue

        cg.prepare_call(_rebuild_methodcaller)
        cg.load_const(self.name)
        cg.reconstruct(TupleValue(list(self.args)))
        cg.reconstruct(DictValue(dict(self.kwargs)))
        cg.call(3)

    def __repr__(self) -> str:
        return f"MethodCaller({self.name!r})"


def _rebuild_methodcaller(name: str, args: tuple, kwargs: dict) -> operator.methodcaller:
    return operator.methodcaller(name, *args, **kwargs)


def make_operator_object(cls: type, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """The value of `cls(*args, **kwargs)` for one of OPERATOR_OBJECT_TYPES, with CPython's checks."""
    if cls is operator.methodcaller:
        if not args or not args[0].is_constant() or not isinstance(args[0].as_constant(), str):
            unsupported("operator.methodcaller() needs the method name as a constant string")
        return MethodCallerValue(args[0].as_constant(), list(args[1:]), dict(kwargs))
    if kwargs or not args:
        unsupported(f"operator.{cls.__name__}() takes positional arguments only, at least one")
    if cls is operator.attrgetter:
        if not all(a.is_constant() and isinstance(a.as_constant(), str) for a in args):
            unsupported("operator.attrgetter() needs constant attribute names")
        return AttrGetterValue([a.as_constant() for a in args])
    return ItemGetterValue(list(args))


def wrap_operator_object(tx, value, source) -> Value:
    """An itemgetter/attrgetter/methodcaller read from the frame: guarded by identity (immutable), its
    arguments read through __reduce__ (constants only; anything else is left opaque by the caller)."""
    from kiln.capture.values.builder import wrap_constant_result

    reduced = value.__reduce__()
    if type(value) is operator.methodcaller:
        maker, call_args = reduced[0], reduced[1]
        # (partial(methodcaller, name, **kwargs), args) or (methodcaller, (name, *args))
        name_and_args = (*getattr(maker, "args", ()), *call_args)
        kwargs = dict(getattr(maker, "keywords", {}) or {})
    else:
        name_and_args, kwargs = reduced[1], {}
    constants = [*name_and_args, *kwargs.values()]
    if not all(type(c) in (int, str, float, bool, type(None), tuple) for c in constants):
        return None
    tx.output.guards.identity(source, value)
    return make_operator_object(type(value), [wrap_constant_result(a) for a in name_and_args],
                                {k: wrap_constant_result(v) for k, v in kwargs.items()})
