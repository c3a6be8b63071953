"""The iteration order of sets (values/containers.SetValue): CPython iterates a set in the order of its
hash table, which depends on the members' hashes (strings' are randomized per process) and on the
history of insertions and deletions. kiln computes it with real sets:

- a set made while tracing keeps a real set of its members (`SetValue.order`), changed by the same
  operations in the same order as the program changes it; operators and methods (|, &, -, ^, union,
  ...) run on those real sets, so results come out in the order eager's would;
- a set from the frame iterates in the real object's order, guarded by `list(s) == [...]`
  (`SetOrderSource`), besides the guard on its members; changed while tracing (a recorded side effect
  replayed after the graph), its later order is not known: iterating it then breaks the graph;
- rebuilt after the graph (a set made while tracing that escapes), BUILD_SET adds the members in
  order; kiln checks on real sets that this gives the same order, and breaks otherwise.
"""
from __future__ import annotations

import dataclasses

from kiln.capture.sources import Source
from kiln.capture.values.base import ConstantValue, Value, unsupported


@dataclasses.dataclass(frozen=True)
class SetOrderSource(Source):
    """`list(base)`: a set's members in iteration order."""

    base: Source

    def name(self) -> str:
        return f"___list({self.base.name()})"

    def emit(self, cg) -> None:
        cg.prepare_call(list)
        self.base.emit(cg)
        cg.call(1)


def real_set(tx, value, iterating: bool = True) -> set:
    """A real set (or frozenset) with `value`'s members in its iteration order."""
    if iterating and value.has_identity_members() and len(value.members) > 1:
        from kiln.capture.values.set_tensor_order import identity_members_order

        if tx is None:
            unsupported("iterating over a set of tensors or objects: their order follows their memory addresses")
        return identity_members_order(tx, value)  # learned from the real objects' hashes, guarded
    if value.order is not None:
        return value.order
    if value.outside is None:
        unsupported("iterating over a set from outside after changing it: kiln does not know its new "
                    "order", hint="kiln runs it as Python")
    if tx is not None and value.source is not None and len(value.outside) > 1:
        tx.output.guards.constant(SetOrderSource(value.source), list(value.outside))
    return value.outside


def set_method(tx, value, name: str, args: list[Value]) -> Value:
    """set.union/intersection/... on real sets (the result's order is the real one's)."""
    from kiln.capture.values.containers import SetValue

    refuse_hashed_members(value)
    real_args = [real_operand(tx, a) for a in args]
    try:
        result = getattr(real_set(tx, value, iterating=False), name)(*real_args)
    except TypeError as exc:  # frozenset().union(1): the program's own "not iterable"
        from kiln.capture.values.exceptions import raise_as_traced

        raise_as_traced(exc, f"set.{name}()")
    if isinstance(result, (set, frozenset)):
        return SetValue.from_real(result, values=_member_values(tx, [value, *args]))
    return ConstantValue(result)


def set_update_method(tx, value, name: str, args: list[Value]) -> None:
    """set.difference_update/intersection_update/symmetric_difference_update, in place: run on a real set
    with the same members (and order, for a set made while tracing: its `order` is changed by the same
    method), then keep the members that are left, in the order they were added."""
    refuse_hashed_members(value)
    real_args = [real_operand(tx, a) for a in args]
    real = value.order if value.order is not None else set(value.members)
    try:
        getattr(real, name)(*real_args)
    except TypeError as exc:  # s.intersection_update(1): the program's own "not iterable"
        from kiln.capture.values.exceptions import raise_as_traced

        raise_as_traced(exc, f"set.{name}()")
    known = _member_values(tx, [value, *args])
    added = [k for k in real if k not in value.members]
    if any(k not in known and not isinstance(k, _LITERAL_KEYS) for k in added):
        unsupported(f"set.{name}() adding members kiln has no value for", hint="kiln runs it as Python")
    for key in [k for k in value.members if k not in real]:
        del value.members[key]
    for key in added:
        value.members[key] = known.get(key) or ConstantValue(key)


_LITERAL_KEYS = (int, float, str, bytes, bool, type(None), tuple, frozenset)


def _member_values(tx, operands) -> dict:
    """key -> value of every member of the operands (a result's members are among them)."""
    from kiln.capture.values.containers import SetValue

    found = {}
    for v in operands:
        if isinstance(v, SetValue):
            found.update(v.members)
    return found


def set_binary(tx, op, a, b) -> Value:
    """a | b, a & b, a - b, a ^ b of two sets, computed on real sets."""
    from kiln.capture.values.containers import SetValue

    refuse_hashed_members(a)
    refuse_hashed_members(b)
    try:
        result = op(real_operand(tx, a), real_operand(tx, b))
    except TypeError as exc:
        unsupported(f"set operator raised TypeError: {exc}")
    return SetValue.from_real(result, values=_member_values(tx, [a, b]))


def set_compare(tx, op, a, b) -> Value:
    """a <= b, a < b, a == b, ... of two sets: members compared as keys (constants by value, tensors and
    objects by identity, as their id-based hashes make CPython's set lookups do)."""
    return ConstantValue(op(real_operand(tx, a), real_operand(tx, b)))


def real_operand(tx, v: Value):
    """What CPython's set code would get for `v`: a real set (same order) for sets, a real dict for
    dicts (their update path resizes first), constants as themselves, else the keys in order."""
    from kiln.capture.values.containers import DictValue, SetValue

    refuse_hashed_members(v)
    if isinstance(v, SetValue):
        return real_set(tx, v, iterating=False)
    if isinstance(v, DictValue):
        return dict.fromkeys(v.entries)
    if v.is_constant():
        return v.as_constant()
    return [_key(tx, item) for item in tx.items(v)]


def refuse_hashed_members(v) -> None:
    """Real-set operations compare members by identity; CPython calls a Python __eq__ between members of
    equal hash (values/hashed_keys.py): sets and dicts holding such objects break the graph here."""
    from kiln.capture.values.containers import DictValue, SetValue
    from kiln.capture.values.container_keys import HashedObjectKey

    keys = v.members if isinstance(v, SetValue) else v.entries if isinstance(v, DictValue) else ()
    if any(type(k) is HashedObjectKey for k in keys):
        unsupported("a set operation on members with a Python __hash__/__eq__",
                    hint="kiln runs it as Python")


def _key(tx, item: Value):
    from kiln.capture.values.container_keys import set_key

    return set_key(tx, item)


def rebuild_order(value) -> list:
    """The member keys in the order BUILD_SET must add them, checked to give the same iteration order."""
    if value.order is None or value.has_tensors():  # tensors: the order follows run-time addresses
        return list(value.members)
    wanted = list(value.order)
    # BUILD_SET adds the members one by one (frozenset(tuple) too): replaying the order they were added
    # in (the members dict keeps it) gives the same table when nothing was removed; else try the order
    for candidate in (list(value.members), wanted):
        if list(value.kind(tuple(candidate))) == wanted and _built_one_by_one(candidate) == wanted:
            return candidate
    unsupported("rebuilding a set after the graph would change its iteration order",
                hint="kiln runs the code that made it as Python")


def _built_one_by_one(keys: list) -> list:
    rebuilt = set()
    for key in keys:
        rebuilt.add(key)
    return list(rebuilt)
