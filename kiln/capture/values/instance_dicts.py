"""`obj.__dict__` of an object from the frame, read key by key (each read guarded)."""
from __future__ import annotations

from kiln.capture.values.base import ConstantValue, Value, unsupported


class InstanceDictValue(Value):
    """`obj.__dict__` of an existing object, read key by key (each read guarded)."""

    def __init__(self, obj: "UserObjectValue"):
        self.obj = obj
        self.source = obj.attr_source("__dict__")

    def python_type(self) -> type:
        return dict

    def _lookup(self, tx, key: Value):
        from kiln.capture.sources import GetItemSource
        from kiln.capture.values.builder import wrap

        from kiln.capture.side_effects import DELETED

        k = key.as_constant()
        pending = tx.output.side_effects.load_attr(self.obj, k) if isinstance(k, str) else None
        if pending is not None:  # stored or deleted while tracing
            return None if pending is DELETED else pending
        d = self.obj.obj.__dict__
        tx.output.guards.contains(self.source, k, k in d)
        if k not in d:
            return None
        return wrap(tx, d[k], GetItemSource(self.source, k))

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.base import BoundMethodValue

        if name in ("get", "__getitem__", "__contains__", "keys", "values", "items", "__len__"):
            return BoundMethodValue(self, name)
        unsupported(f"__dict__.{name}")

    def _state(self, tx) -> list:
        """(name, value) of every attribute now, recorded stores and deletes included (keys guarded)."""
        from kiln.capture.values.copying import _instance_state

        return _instance_state(tx, self.obj) or []

    def items(self, tx) -> list[Value]:
        return [ConstantValue(name) for name, _ in self._state(tx)]

    def truth(self, tx) -> bool:
        return bool(self._state(tx))

    def getitem(self, tx, key: Value) -> Value:
        return self.call_method(tx, "__getitem__", [key], {})

    def call_method(self, tx, name, args, kwargs) -> Value:
        from kiln.capture.values.containers import ListIteratorValue, TupleValue

        if name in ("keys", "values", "items", "__len__"):
            state = self._state(tx)
            if name == "__len__":
                return ConstantValue(len(state))
            parts = {"keys": [ConstantValue(k) for k, _ in state], "values": [v for _, v in state],
                     "items": [TupleValue([ConstantValue(k), v]) for k, v in state]}[name]
            return ListIteratorValue(parts, kind=f"dict_{name}")
        found = self._lookup(tx, args[0])
        if name == "__contains__":
            return ConstantValue(found is not None)
        if name == "get":
            return found if found is not None else (args[1] if len(args) > 1 else ConstantValue(None))
        if found is None:
            unsupported(f"KeyError: {args[0].as_constant()!r}")
        return found
