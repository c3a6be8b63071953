"""The iteration order of a set holding tensors (`for t in {a, b}`, `sum({a, b})`).

A tensor hashes by its id (`torch.Tensor.__hash__`), so CPython's set order follows the addresses of
the tensor objects: it differs from call to call. Where every tensor member already exists when the
frame starts (an input, a tensor a module holds), the order is learned from a real set of the real
objects' hashes built as the program built its set, and guarded: the guard builds the same set from the
hashes of the tensors the next call passes (`___set_order((id(L['x']), id(L['y']), ...))`) and compares
the order, so another order recompiles. This is exact only where the program's set was made by adding
members one by one (BUILD_SET, set/frozenset of a list or tuple, add, update with a list): that history
is replayed by adding `members` in their first-insertion order. A set changed otherwise (discard, set
operators, update with a set or dict) or holding a tensor the graph makes (its address is not known
until the graph runs) breaks the graph, and so do other objects hashed by identity.
"""
from __future__ import annotations

import dataclasses

import torch

from kiln.capture.sources import Source
from kiln.capture.values.base import unsupported


@dataclasses.dataclass(frozen=True)
class SetOrderOfHashesSource(Source):
    """`___set_order((h0, h1, ...))`: the positions of the members, in a real set's iteration order, of a
    set made by adding members of these hashes one by one. Each `part` is a place's `id(...)` (a tensor
    passed in) or a fixed hash (a held tensor, a constant)."""

    parts: tuple  # Source or int

    def name(self) -> str:
        texts = [f"id({p.name()})" if isinstance(p, Source) else repr(p) for p in self.parts]
        return f"___set_order(({', '.join(texts)},))"

    def emit(self, cg) -> None:
        raise NotImplementedError("a guard-only place")


class _Hashed:
    """A stand-in set member with a given hash, equal only to itself."""

    __slots__ = ("hash", "position")

    def __init__(self, h: int, position: int) -> None:
        self.hash, self.position = h, position

    def __hash__(self) -> int:
        return self.hash


def set_order(hashes: tuple) -> tuple | None:
    """Positions of the members in the iteration order of a set built by adding members with these
    hashes in turn; None where two hashes are equal (CPython would compare the members then)."""
    if len(set(hashes)) != len(hashes):
        return None
    built = set()
    for position, h in enumerate(hashes):
        built.add(_Hashed(h, position))
    return tuple(member.position for member in built)


def identity_members_order(tx, value) -> list:
    """The member keys of `value` (a SetValue with tensor members) in CPython's iteration order, guarded."""
    from kiln.capture.values.container_keys import ObjectKey, TensorKey

    if not value.added_one_by_one or value.order is None:
        unsupported("iterating over a set of tensors that was changed by more than adding members: its "
                    "order follows the tensors' addresses", hint="kiln runs it as Python")
    keys = list(value.members)
    inputs = {id(fake): (source, real) for source, real, fake, *_ in tx.output._tensor_inputs}
    held = {id(fake): real for real, fake, _ in tx.output._held}
    parts, hashes = [], []
    for key in keys:
        if type(key) is not TensorKey:
            if isinstance(key, ObjectKey):
                unsupported("iterating over a set of Python objects: their order follows their addresses",
                            hint="kiln runs it as Python")
            if type(key) not in (int, str, bytes, bool, float, type(None)) or key != key:
                unsupported(f"iterating over a set of tensors and {type(key).__name__} {key!r}: its hash may "
                            f"not be the same object's on the next call", hint="kiln runs it as Python")
            parts.append(hash(key))  # a constant: its own hash (fixed in this process)
            hashes.append(parts[-1])
            continue
        found = inputs.get(id(key.example))
        real = found[1] if found is not None else held.get(id(key.example))
        if real is None:
            unsupported("iterating over a set holding a tensor the graph makes: the order follows its "
                        "address, not known until the graph runs", hint="kiln runs the loop as Python")
        if type(real).__hash__ is not torch.Tensor.__hash__:
            unsupported(f"iterating over a set of {type(real).__name__} objects, whose class defines __hash__")
        parts.append(found[0] if found is not None else hash(real))  # held tensors: identity guarded
        hashes.append(hash(real))
    order = set_order(tuple(hashes))
    if order is None:
        unsupported("iterating over a set whose members' hashes collide")
    if any(isinstance(p, Source) for p in parts):
        tx.output.guards.constant(SetOrderOfHashesSource(tuple(parts)), order)
    return [keys[i] for i in order]
