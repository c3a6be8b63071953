"""The iteration order of a set holding tensors (`for t in {a, b}`, `sum({a, b})`).

A tensor hashes by its id (`torch.Tensor.__hash__`), so CPython's set order follows the addresses of
the tensor objects: it differs from call to call. Where every tensor member already exists when the
frame starts (an input, a tensor a module holds), the order is learned from a real set of the real
objects' hashes built as the program built its set, and guarded: the guard builds the same set from the
hashes of the tensors the next call passes (`___set_order_is((id(L['x']), ...), ops, order)`), so
another order recompiles. This is exact only where the program's set was made
from an empty one by adding and discarding members (BUILD_SET, set/frozenset of a list or tuple, add,
update with a list, discard/remove, clear) and merging such sets (update with a set made so, replayed
as a real set's update, i.e. CPython's table merge): that history (`SetValue.history`) is what the
guard replays, dummies and resizes included. A set changed otherwise (set operators, update with a
dict or a set from the frame, a copy)
or holding a tensor the graph makes, now or before (its address is not known until the graph runs),
breaks the graph, and so do other objects hashed by identity.
"""
from __future__ import annotations

import dataclasses

import torch

from kiln.capture.sources import Source
from kiln.capture.values.base import unsupported


@dataclasses.dataclass(frozen=True)
class SetOrderOfHashesSource(Source):
    """`___set_order_is((h0, h1, ...), ops, order)`: whether a set made from an empty one by `ops` ((1, i):
    add member i; (0, i): discard it; (2, ops): merge a set made from an empty one by those) iterates its members in `order` (their positions). Each `part` is a
    place's `id(...)` (a tensor passed in) or a fixed hash (a held tensor, a constant). Guarded to be
    True: one call per check."""

    parts: tuple  # Source or int
    ops: tuple
    order: tuple

    def name(self) -> str:
        texts = [f"id({p.name()})" if isinstance(p, Source) else repr(p) for p in self.parts]
        return f"___set_order_is(({', '.join(texts)},), {self.ops!r}, {self.order!r})"

    def emit(self, cg) -> None:
        raise NotImplementedError("a guard-only place")


class _Hashed:
    """A stand-in set member with a given hash, equal only to itself."""

    __slots__ = ("hash", "position")

    def __init__(self, h: int, position: int) -> None:
        self.hash, self.position = h, position

    def __hash__(self) -> int:
        return self.hash


def set_order(hashes: tuple, ops: tuple | None = None) -> tuple | None:
    """Positions of the members in the iteration order of a set made from an empty one by `ops` over
    members with these hashes (default: adding each in turn); None where two hashes are equal (CPython
    would compare the members then)."""
    if len(set(hashes)) != len(hashes):
        return None
    members = [_Hashed(h, position) for position, h in enumerate(hashes)]

    def replay(steps) -> set:
        built = set()
        for op, arg in steps:
            if op == 2:  # another set made by its own ops, merged (set.update with a set)
                built.update(replay(arg))
            elif op:
                built.add(members[arg])
            else:
                built.discard(members[arg])
        return built

    return tuple(member.position for member in replay(ops if ops is not None else
                                                       tuple((1, i) for i in range(len(hashes)))))


def set_order_is(hashes: tuple, ops: tuple, order: tuple) -> bool:
    return set_order(hashes, ops) == order


def identity_members_order(tx, value) -> list:
    """The member keys of `value` (a SetValue with tensor members) in CPython's iteration order, guarded."""
    if value.history is None or value.order is None:
        unsupported("iterating over a set of tensors that was changed by more than adding and removing "
                    "members: its order follows the tensors' addresses", hint="kiln runs it as Python")
    inputs = {id(fake): (source, real) for source, real, fake, *_ in tx.output._tensor_inputs}
    held = {id(fake): real for real, fake, _ in tx.output._held}
    keys, parts, hashes = [], [], []
    index: dict = {}

    def steps(history) -> tuple:
        """The history as ops over member positions (a merged set's own history nested: (2, its ops))."""
        ops = []
        for op, key in history:
            if op == "merge":
                ops.append((2, steps(key)))
                continue
            if key not in index:
                index[key] = len(keys)
                part, h = _hash_part(key, inputs, held)
                keys.append(key)
                parts.append(part)
                hashes.append(h)
            ops.append((int(op), index[key]))
        return tuple(ops)

    ops = steps(value.history)
    order = set_order(tuple(hashes), ops)
    if order is None:
        unsupported("iterating over a set whose members' hashes collide")
    if {keys[i] for i in order} != set(value.members):
        unsupported("a set whose recorded history does not give its members (internal inconsistency)")
    if any(isinstance(p, Source) for p in parts):
        tx.output.guards.constant(SetOrderOfHashesSource(tuple(parts), tuple(ops), order), True)
    return [keys[i] for i in order]


def _hash_part(key, inputs: dict, held: dict) -> tuple:
    """(what the guard reads for this member's hash, its hash now): a tensor passed in is read by id at
    each call; a held tensor (its identity guarded) and a constant have fixed hashes."""
    from kiln.capture.values.container_keys import ObjectKey, TensorKey

    if type(key) is not TensorKey:
        if isinstance(key, ObjectKey):
            unsupported("iterating over a set of Python objects: their order follows their addresses",
                        hint="kiln runs it as Python")
        if type(key) not in (int, str, bytes, bool, float, type(None)) or key != key:
            unsupported(f"iterating over a set of tensors and {type(key).__name__} {key!r}: its hash may "
                        f"not be the same object's on the next call", hint="kiln runs it as Python")
        return hash(key), hash(key)  # a constant: its own hash (fixed in this process)
    found = inputs.get(id(key.example))
    real = found[1] if found is not None else held.get(id(key.example))
    if real is None:
        unsupported("iterating over a set holding a tensor the graph makes: the order follows its "
                    "address, not known until the graph runs", hint="kiln runs the loop as Python")
    if type(real).__hash__ is not torch.Tensor.__hash__:
        unsupported(f"iterating over a set of {type(real).__name__} objects, whose class defines __hash__")
    return (found[0] if found is not None else hash(real)), hash(real)
