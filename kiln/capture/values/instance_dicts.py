"""`obj.__dict__` of an object: read key by key (each read of an existing object's guarded), and written
(`obj.__dict__[k] = v`, `.update(...)`, `del obj.__dict__[k]`) as raw attribute stores and deletes that
bypass the class's `__setattr__`/`__delattr__`. A write of a name the class has a data descriptor for
(property, slot, user descriptor) breaks: the object would be rebuilt or replayed through the descriptor."""
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

        if name in READS or name in WRITES:
            return BoundMethodValue(self, name)
        unsupported(f"__dict__.{name}")

    def state(self, tx) -> list:
        return self._state(tx)

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

    def delitem(self, tx, key: Value) -> None:
        write_instance_dict(tx, self.obj, "__delitem__", [key], {})

    def call_method(self, tx, name, args, kwargs) -> Value:
        if name in WRITES:
            return write_instance_dict(tx, self.obj, name, args, kwargs)
        if name not in READS:
            unsupported(f"__dict__.{name}() of a {self.obj.python_type().__name__} object")
        if name in ("keys", "values", "items"):
            return InstanceDictView(self, name)
        if name == "__len__":
            return ConstantValue(len(self._state(tx)))
        return answer_read(name, self._lookup(tx, args[0]), args)


def answer_read(method: str, found: Value | None, args: list[Value]) -> Value:
    """What `d.__contains__(k)`, `d.get(k[, default])` or `d[k]` gives, `found` being d's value for k or None
    (a missing key's KeyError raised as the program's own)."""
    if method == "__contains__":
        return ConstantValue(found is not None)
    if method == "get":
        return found if found is not None else (args[1] if len(args) > 1 else ConstantValue(None))
    if found is None:
        from kiln.capture.values.exceptions import raise_traced

        raise_traced(KeyError, args[0].as_constant())
    return found


READS = frozenset({"get", "__getitem__", "__contains__", "keys", "values", "items", "__len__"})
WRITES = frozenset({"__setitem__", "__delitem__", "update"})


class InstanceDictView(Value):
    """vars(obj).keys() / .values() / .items(): a live view, as CPython's: every use (len, `in`, each
    iteration) reads the attributes the object has then (`owner.state(tx)`: an existing object's
    recorded stores and deletes included). Iterating takes the items when the iterator is made; an
    attribute added or removed during that loop (eager: RuntimeError) is not detected."""

    def __init__(self, owner: Value, kind: str):
        self.owner, self.kind = owner, kind

    def python_type(self) -> type:
        return type(getattr({}, self.kind)())

    def parts(self, tx) -> list[Value]:
        from kiln.capture.values.containers import TupleValue

        state = self.owner.state(tx)
        if self.kind == "keys":
            return [ConstantValue(k) for k, _ in state]
        if self.kind == "values":
            return [v for _, v in state]
        return [TupleValue([ConstantValue(k), v]) for k, v in state]

    def items(self, tx) -> list[Value]:
        return self.parts(tx)

    def truth(self, tx) -> bool:
        return bool(self.owner.state(tx))

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.base import BoundMethodValue

        if name in ("__len__", "__iter__", "__contains__"):
            return BoundMethodValue(self, name)
        unsupported(f"dict_{self.kind}.{name} of an instance __dict__")

    def call_method(self, tx, name, args, kwargs) -> Value:
        from kiln.capture.values.containers import ListIteratorValue

        if name == "__len__" and not args:
            return ConstantValue(len(self.owner.state(tx)))
        if name == "__iter__" and not args:
            return ListIteratorValue(self.parts(tx), iter_type=type(iter(getattr({}, self.kind)())))
        if name == "__contains__" and self.kind == "keys" and len(args) == 1 and args[0].is_constant():
            return ConstantValue(args[0].as_constant() in [k for k, _ in self.owner.state(tx)])
        unsupported(f"dict_{self.kind}.{name}() of an instance __dict__")

    def reconstruct(self, cg) -> None:
        from kiln.capture.values.dict_views import dict_view

        cg.prepare_call(dict_view)
        cg.reconstruct(self.owner)
        cg.load_const(self.kind)
        cg.call(2)


def write_instance_dict(tx, obj: Value, method: str, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """obj.__dict__.__setitem__/update/__delitem__ on a new object (NewObjectValue) or an existing one
    (UserObjectValue, a recorded raw store or delete)."""
    from kiln.capture.values.containers import DictValue

    if method == "__delitem__":
        _delete(tx, obj, _key(args[0]))
        return ConstantValue(None)
    if method == "__setitem__":
        pairs = [(args[0], args[1])]
    else:  # update(mapping=(), **kwargs)
        if len(args) > 1 or (args and not isinstance(args[0], DictValue)):
            unsupported(f"__dict__.update({args}): only a dict made or known while tracing")
        pairs = [(ConstantValue(k), v) for k, v in args[0].entries.items()] if args else []
        pairs += [(ConstantValue(k), v) for k, v in kwargs.items()]
    for key, value in pairs:
        _store(tx, obj, _key(key), value)
    return ConstantValue(None)


def _key(key: Value) -> str:
    name = key.as_constant() if key.is_constant() else None
    if not isinstance(name, str):
        unsupported(f"an instance __dict__ key {key} that is not a known str")
    return name


def _refuse_data_descriptor(obj: Value, name: str) -> None:
    from kiln.capture.values.objects import data_descriptor_of

    cls = obj.python_type()
    if data_descriptor_of(cls, name) is not None:
        unsupported(f"writing {name!r} into a {cls.__name__}'s __dict__: the class has a data descriptor of that "
                    f"name (the object's rebuild or replayed store would go through it)")


def _store(tx, obj: Value, name: str, value: Value) -> None:
    from kiln.capture.values.base import note_mutation
    from kiln.capture.values.objects import NewObjectValue, UserObjectValue

    _refuse_data_descriptor(obj, name)
    note_mutation(tx, obj)
    if type(obj) is UserObjectValue and obj.source is not None and hasattr(obj.obj, "__dict__"):
        tx.output.side_effects.store_attr(obj, name, value, raw=True)
    elif isinstance(obj, NewObjectValue) and obj.cls.__dictoffset__:
        obj.attrs[name] = value
    else:
        unsupported(f"writing into the __dict__ of {obj}")


def _delete(tx, obj: Value, name: str) -> None:
    from kiln.capture.values.objects import NewObjectValue, UserObjectValue

    _refuse_data_descriptor(obj, name)
    present = name in obj.attrs if isinstance(obj, NewObjectValue) else \
        type(obj) is UserObjectValue and obj.instance_dict_has(tx, name)
    if not present:
        unsupported(f"del obj.__dict__[{name!r}] of a missing key (KeyError)")
    obj.raw_delattr(tx, name, raw=True)
