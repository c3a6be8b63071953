"""Dict keys and set members that are objects of a class with a Python __hash__ (and __eq__).

CPython's dict and set lookups (dictobject.c, setobject.c) call `hash(key)` once per operation (a stored
key's hash is kept from its insertion: merging one dict into another never hashes again), and then
compare the key only with stored keys of the SAME hash: identity first, then `stored == key` (rich
comparison: a subclass's reflected `__eq__` first, NotImplemented falling back to identity) until one is
true. kiln models exactly that:

- the user's `__hash__` is traced where CPython calls it, and must give a known int;
- a `HashedObjectKey` keeps the key object and its hash; the symbolic dict's entries are keyed by the
  objects' identities, and `resolve` finds the stored key a new key is equal to by the comparisons
  CPython makes, in its order;
- with more than one stored key of the same hash, the order CPython compares them in depends on the
  table's history (deleted slots are reused): the graph breaks; likewise a constant key (a str, an int)
  of the same hash as a stored object key, or the reverse (their comparison would call the object's
  reflected `__eq__`), a comparison that changes the dict, and rebuilding such a dict or set after the
  graph (BUILD_MAP would call `__hash__` and `__eq__` again).

Keys hashed by identity (objects keeping object's __hash__, tensors) are taken never to share a hash with a
user __hash__'s int (their hashes come from addresses kiln does not know while tracing), as for constants.
"""
from __future__ import annotations

import operator

from kiln.capture.values.base import Value, unsupported


def has_python_hash(cls: type) -> bool:
    """The class hashes through a Python __hash__ (its __eq__ is a Python function or object's)."""
    from kiln.capture.values.objects import python_slot

    if cls.__hash__ is None or cls.__hash__ is object.__hash__:
        return False
    return python_slot(cls, "__hash__") is not None and \
        (cls.__eq__ is object.__eq__ or python_slot(cls, "__eq__") is not None)


def hashed_in_python(value: Value) -> bool:
    """An object of a Python class (over object alone) whose class hashes through a Python __hash__."""
    from kiln.capture.values.ops import is_python_object

    return is_python_object(value) and has_python_hash(value.python_type())


def user_hash(tx, key: Value) -> int:
    """hash(key): its class's Python __hash__, traced; the int CPython makes of its result."""
    from kiln.capture.values.objects import class_attribute

    result = class_attribute(tx, key.python_type(), "__hash__", key).call(tx, [], {})
    if not result.is_constant() or not isinstance(result.as_constant(), int):
        if result.is_constant():
            from kiln.capture.values.exceptions import raise_traced

            raise_traced(TypeError, "__hash__ method should return an integer")
        unsupported(f"{key.python_type().__name__}.__hash__ gave {result}, not a known int")
    value = int(result.as_constant())
    # typeobject.c slot_tp_hash: the int itself when it fits a Py_ssize_t, else int's hash of it; -1 is -2
    h = value if -2 ** 63 <= value < 2 ** 63 else hash(value)
    return -2 if h == -1 else h


def resolve(tx, key: Value, entries: dict, ident, hashed: int | None = None):
    """The entry key `key` finds in `entries` (a stored HashedObjectKey), else a new HashedObjectKey."""
    from kiln.capture.values.container_keys import HashedObjectKey, ObjectKey
    from kiln.capture.values.ops import binary_op, is_op

    h = user_hash(tx, key) if hashed is None else hashed
    same_hash = [k for k in entries if type(k) is HashedObjectKey and k.user_hash == h]
    if any(not isinstance(k, ObjectKey) and _constant_hash(k) == h for k in entries):
        unsupported(f"a {key.python_type().__name__} key with the hash of a constant key in the same dict/set: "
                    f"CPython would compare them with the object's __eq__")
    if not same_hash:
        return HashedObjectKey(key, ident, h)
    if len(same_hash) > 1:
        unsupported("several dict keys / set members of equal hash: the order CPython compares them in "
                    "depends on its table's history", hint="kiln runs the lookup as Python")
    stored = same_hash[0]
    if stored.ident == ident or is_op(tx, stored.value, key):
        return stored
    before = list(entries)
    equal = tx.truth(binary_op(tx, operator.eq, stored.value, key))
    if list(entries) != before:
        unsupported("a key's __eq__ changed the dict or set being looked up (CPython restarts the lookup)")
    return stored if equal else HashedObjectKey(key, ident, h)


def check_constant_key(key, entries) -> None:
    """A constant key looked up in entries holding object keys of a Python __hash__: only where no stored
    object key has its hash (else CPython would call the object's reflected __eq__)."""
    from kiln.capture.values.container_keys import HashedObjectKey

    if HashedObjectKey.made and entries and any(type(k) is HashedObjectKey for k in entries):
        h = _constant_hash(key)
        if any(type(k) is HashedObjectKey and k.user_hash == h for k in entries):
            unsupported(f"the constant key {key!r} has the hash of an object key in the same dict/set")


def merge(tx, target: dict, source: dict) -> None:
    """target.update(source) of two symbolic dicts' entries: keys with their kept hashes, in order."""
    from kiln.capture.values.container_keys import HashedObjectKey

    if not HashedObjectKey.made or not any(type(k) is HashedObjectKey for k in (*target, *source)):
        target.update(source)
        return
    for k, v in source.items():
        if type(k) is HashedObjectKey:
            found = resolve(tx, k.value, target, k.ident, hashed=k.user_hash)
        else:
            check_constant_key(k, target)
            found = k
        target[found] = v


def refuse_rebuild(keys, what: str) -> None:
    from kiln.capture.values.container_keys import HashedObjectKey

    if any(type(k) is HashedObjectKey for k in keys):
        unsupported(f"rebuilding a {what} keyed by objects with a Python __hash__ after the graph would call "
                    f"their __hash__/__eq__ again", hint="keep such dicts and sets inside the compiled function")


def _constant_hash(k):
    try:
        return hash(k)
    except TypeError:
        return None


class _KnownHash:
    """Stands for a value whose hash kiln knows, inside a real tuple: CPython's tuple hash reads only the
    items' hashes, so hash(tuple of these) is the tuple's hash exactly."""

    __slots__ = ("h",)

    def __init__(self, h: int):
        self.h = h

    def __hash__(self) -> int:
        return self.h


def _known_hash(tx, value: Value) -> int | None:
    from kiln.capture.values.containers import TupleValue

    if value.is_constant():
        try:
            return hash(value.as_constant())
        except TypeError:
            return None
    if hashed_in_python(value):
        return user_hash(tx, value)
    if type(value) is TupleValue:
        hashes = [_known_hash(tx, item) for item in value.elements]
        if all(h is not None for h in hashes):
            return hash(tuple(_KnownHash(h) for h in hashes))
    return None


def builtin_hash(tx, obj=None, *rest, **kwargs):
    """hash(obj) where kiln knows it: an object whose class has a Python __hash__ (a frozen dataclass's,
    traced), a tuple of such values and constants (CPython's tuple hash of the items' hashes)."""
    from kiln.capture.values.base import ConstantValue

    if obj is None or rest or kwargs or obj.is_constant():
        return NotImplemented  # (constants fold as before)
    found = _known_hash(tx, obj)
    return NotImplemented if found is None else ConstantValue(found)
