"""Dict keys and set members: constants as themselves, Python objects and tensors by identity (with
the guards that keep a later call's objects as distinct, or as shared, as the traced ones)."""
from __future__ import annotations

from typing import Any

from kiln.capture.values.base import ConstantValue, Value, unsupported


class ObjectKey:
    """A dict key or set member that is a Python object whose class keeps object's __hash__ and __eq__:
    hashed and compared by identity, as CPython does. `value` is the symbolic object."""

    __slots__ = ("value", "ident")

    def __init__(self, value: Value, ident):
        self.value, self.ident = value, ident

    def __hash__(self) -> int:
        return hash(self.ident)

    def __eq__(self, other) -> bool:
        return isinstance(other, ObjectKey) and other.ident == self.ident

    def __repr__(self) -> str:
        return f"<{self.value!r}>"


class HashedObjectKey(ObjectKey):
    """A dict key / set member whose class has a Python __hash__: the object (by identity, as ObjectKey)
    and the hash its __hash__ gave, kept as CPython keeps a stored key's hash (values/hashed_keys.py)."""

    __slots__ = ("user_hash",)
    made = 0  # how many were ever made: lookups of constant keys skip their scan while none exists

    def __init__(self, value: Value, ident, user_hash: int):
        super().__init__(value, ident)
        self.user_hash = user_hash
        HashedObjectKey.made += 1

    def __hash__(self) -> int:
        return self.user_hash  # a real set of these keys has the table (and order) CPython's has


def key_value(key: Any) -> Value:
    """The symbolic value of a dict key / set member as dict_key stored it."""
    return key.value if isinstance(key, ObjectKey) else ConstantValue(key)


def dict_key(tx, key: Value, entries: dict | None = None) -> Any:
    """Dict keys are Python constants (strings, ints, ...), or objects compared by identity; objects with a
    Python __hash__ only where the dict's (or set's) `entries` are given: they are looked up in them with
    the __hash__ and __eq__ calls CPython makes (values/hashed_keys.py)."""
    from kiln.capture.values import hashed_keys
    from kiln.capture.values.ops import is_python_object

    if is_python_object(key):
        from kiln.capture.values.builder import identity_keyed

        real = getattr(key, "obj", None)
        if real is not None and key.source is not None and tx is not None and identity_keyed(real):
            tx.output.guards.identity(key.source, real)  # (pinned: the object itself is the key, exactly)
            return real
        if entries is not None and tx is not None and hashed_keys.has_python_hash(key.python_type()):
            return hashed_keys.resolve(tx, key, entries, _object_ident(tx, key))
        return _object_key(tx, key)
    if key.is_constant():
        constant = key.as_constant()
        try:
            hash(constant)
        except TypeError as exc:  # a list or dict as a key: the program's own "unhashable type"
            from kiln.capture.values.exceptions import raise_as_traced

            raise_as_traced(exc, "hash()")
        if entries:
            hashed_keys.check_constant_key(constant, entries)
        return constant
    from kiln.capture.values.tensors import TensorValue

    if isinstance(key, TensorValue):  # by identity, as tensors hash (compared with the other tensor keys:
        if tx is not None and entries:  # an input and a tensor a module holds may be one object later)
            from kiln.capture.values.ops import check_tensor_identity_guarded

            others = [k.value for k in entries if type(k) is TensorKey]
            if others:
                check_tensor_identity_guarded(tx, [key, *others])
        return TensorKey(key.example, key)
    unsupported(f"dict key {key}")


def _object_key(tx, key: Value) -> ObjectKey:
    """hash(obj) of a Python object: object's identity hash, TypeError for `__hash__ = None` (a class that
    defines __eq__ alone), a break for a Python __hash__. Objects from outside used as keys are guarded
    to stay distinct from each other (the same object passed in two places later is one key)."""
    cls = key.python_type()
    if cls.__hash__ is None:
        from kiln.capture.values.exceptions import raise_traced

        raise_traced(TypeError, f"unhashable type: '{cls.__name__}'")
    if cls.__hash__ is not object.__hash__ or cls.__eq__ is not object.__eq__:
        unsupported(f"a {cls.__name__} as a dict key or set member: its class defines __hash__/__eq__",
                    hint="kiln hashes objects by identity only")
    return ObjectKey(key, _object_ident(tx, key))


def _object_ident(tx, key: Value):
    """The identity of a Python object used as a key: made while tracing, or from outside (guarded)."""
    cls = key.python_type()
    real = getattr(key, "obj", None)
    if real is None:
        return ("new", id(key))
    if tx is None or key.source is None:
        unsupported(f"a {cls.__name__} from outside as a set member or key kiln cannot guard")
    keyed = tx.output.__dict__.setdefault("_outside_object_keys", {})
    for other in keyed.values():
        if other.obj is not real:
            tx.output.guards.not_same(key.source, other.source)
    keyed[id(real)] = key
    return ("object", id(real))


class TensorKey(ObjectKey):
    """A tensor as a set member or dict key: hashed and compared by identity, as tensors are. Two values
    stand for the same tensor object exactly when they share their fake tensor (inputs of one object are
    one input, held tensors are memoized, in-place ops return their input's fake). `value` is the
    TensorValue (an object key like any other: iterated, rebuilt and copied as itself)."""

    __slots__ = ("example",)

    def __init__(self, example, value: Value | None = None):
        super().__init__(value, None)
        self.example = example

    def __hash__(self) -> int:
        return id(self.example)

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorKey) and other.example is self.example


def set_key(tx, value: Value, members: dict | None = None) -> Any:
    """The key of a set member: a constant, or a tensor by identity (TensorKey); looked up in `members`
    where given (objects with a Python __hash__)."""
    from kiln.capture.values.tensors import TensorValue

    if isinstance(value, TensorValue):
        return TensorKey(value.example, value)
    return dict_key(tx, value, members)
