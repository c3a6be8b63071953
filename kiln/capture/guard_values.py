"""Exact comparisons for guards on Python constants: same type all the way down, then same value.

A guard `type(x) is tuple and x == (0, 64)` is not exact. Tuple, set and list equality compare the
items with `==`, which

- calls the items' own `__eq__`: an object whose `__eq__` answers with a truthy object (Triton's
  interpreter tensors do, and numpy arrays of more than one element are truthy there) passes for
  `0`, the guard runs that user code, and the entry's code then uses the constant `(0, 64)` it was
  traced with instead of the objects it was called with;
- equates values of different types: `1 == True == 1.0`, so `(True,)` passes for `(1,)`;
- equates `0.0` and `-0.0`, which give different results (`x / -0.0` is `-inf`).

`same_constant(x, v)` checks the exact type of `x` and of every item before comparing any value, so
only the builtin comparisons of literals run, and tells the two zeros apart. `range` and `slice` are
compared by their start, stop and step (`range(0) == range(5, 5)`, `slice(True, 2) == slice(1, 2)`).
"""
from __future__ import annotations

import math
from typing import Any


def same_constant(x: Any, v: Any) -> bool:
    """Whether `x` is the constant `v` exactly: the same type at every level and the same value (a
    tensor, as a dict key, by identity)."""
    t = type(v)
    if type(x) is not t:
        return False
    if t in _BY_IDENTITY:
        return x is v
    if t is tuple:
        return len(x) == len(v) and all(map(same_constant, x, v))
    if t is float:
        return _same_float(x, v)
    if t is frozenset or t is set:
        # items of a set are distinct, so an exact match for each item of x (of the same count) is a
        # one-to-one match; same_constant checks types before it compares, so no user __eq__ runs
        return len(x) == len(v) and all(any(same_constant(a, b) for b in v) for a in x)
    if t is complex:
        return _same_float(x.real, v.real) and _same_float(x.imag, v.imag)
    if t is range or t is slice:
        return same_constant((x.start, x.stop, x.step), (v.start, v.stop, v.step))
    return x == v


def _by_identity() -> tuple:
    import torch

    return (torch.Tensor, torch.nn.Parameter)


_BY_IDENTITY = _by_identity()


def _same_float(x: float, v: float) -> bool:
    if v != v:  # NaN
        return x != x
    return x == v and (v != 0.0 or math.copysign(1.0, x) == math.copysign(1.0, v))


def same_keys(d: dict, keys: tuple) -> bool:
    """Whether the keys of dict `d`, in order, are exactly `keys` (a tuple of constants)."""
    return len(d) == len(keys) and all(map(same_constant, d.keys(), keys))


_EXACT_BY_EQ = (int, str, bytes, bool, type(None))


def inline_tuple_check(x: str, v: tuple, ref) -> str | None:
    """For a short flat tuple of ints, strs, ... (a shape, a kernel size): the guard text checking the
    type of each item, then `==` (a quarter of the cost of calling same_constant); None otherwise.
    `ref(obj)` names an object for the guard's namespace."""
    if len(v) > 8 or not all(type(i) in _EXACT_BY_EQ or type(i) is float and i == i and i != 0.0 for i in v):
        return None
    parts = [f"___type({x}) is {ref(tuple)}", f"___len({x}) == {len(v)}"]
    parts += [f"___type({x}[{i}]) is {ref(type(item))}" for i, item in enumerate(v)]
    return " and ".join(parts + [f"{x} == {ref(v)}"])


def needs_exact_compare(v: Any) -> bool:
    """Whether `type(x) is type(v) and x == v` is not exact for the constant `v` (see the module doc)."""
    if type(v) is float:
        return v == 0.0  # (NaN has its own guard)
    return type(v) in (tuple, frozenset, set, complex, range, slice)
