"""Ordering symbolic values: sorted(), min(), max() with or without key=.

Python's own sort/min/max run over proxies (`_Ordered`) whose comparisons are decided while tracing:
constants compare as themselves; tuples and lists compare as CPython does (the first position whose
items differ, found with identity then `==`; then `<`/`>` there, or the lengths); anything that would
compare tensor data or objects kiln cannot order breaks the graph. So `sorted(d.items())` with tensor
values (keys differ, values never compared), `max(xs, key=lambda t: t.shape[0])` and ties (stable:
the first of equal items) give eager's order exactly. Keys are computed first, in item order, as
sorted() does; min()/max() interleave key calls and comparisons, which is invisible because the
comparisons have no effects.
"""
from __future__ import annotations

import operator

from kiln.capture.values.base import Value, unsupported


def _python_objects_compared(tx, op, a: Value, b: Value) -> bool | None:
    """`a <op> b` (as PyObject_RichCompare, then its truth) where one side is an object of a Python class (a
    dataclass with order=True, a class with __lt__): its methods are traced. None where neither is one."""
    from kiln.capture.values.ops import is_python_object, rich_compare

    if tx is None or not (is_python_object(a) or is_python_object(b)):
        return None
    return tx.truth(rich_compare(tx, op, a, b))


def _symbolic_compared(tx, op, a: Value, b: Value) -> bool | None:
    """`a <op> b` where one side is a symbolic size (``sorted(x.shape)``): a guard on the comparison's
    outcome, not on the sizes' values. None where neither is one (or the pair is not int-like)."""
    from kiln.capture.values.symbolic import is_symbolic_value, symbolic_binary

    if tx is None or not (is_symbolic_value(a) or is_symbolic_value(b)):
        return None
    result = symbolic_binary(tx, op, a, b)
    return None if result is None else result.truth(tx)


def _equal(a: Value, b: Value, tx=None) -> bool:
    if a is b:
        return True
    compared = _symbolic_compared(tx, operator.eq, a, b)
    if compared is not None:
        return compared
    if a.is_constant() and b.is_constant():
        return bool(a.as_constant() == b.as_constant())
    from kiln.capture.values.containers import SequenceValue

    if isinstance(a, SequenceValue) and isinstance(b, SequenceValue) and a.python_kind is b.python_kind:
        return len(a.elements) == len(b.elements) and all(_equal(x, y, tx) for x, y in zip(a.elements, b.elements))
    compared = _python_objects_compared(tx, operator.eq, a, b)
    if compared is not None:
        return compared
    unsupported(f"comparing {a} with {b} while ordering: kiln cannot decide it without tensor data",
                hint="sort by a key= that gives numbers or strings")


def _compare(op, a: Value, b: Value, tx=None) -> bool:
    from kiln.capture.values.containers import SequenceValue

    compared = _symbolic_compared(tx, op, a, b)
    if compared is not None:
        return compared
    if a.is_constant() and b.is_constant():
        try:
            return bool(op(a.as_constant(), b.as_constant()))
        except TypeError as exc:
            unsupported(f"ordering raised TypeError: {exc}")
    if isinstance(a, SequenceValue) and isinstance(b, SequenceValue) and a.python_kind is b.python_kind:
        for x, y in zip(a.elements, b.elements):
            if not _equal(x, y, tx):
                return _compare(op, x, y, tx)
        return op(len(a.elements), len(b.elements))
    compared = _python_objects_compared(tx, op, a, b)
    if compared is not None:
        return compared
    unsupported(f"ordering {a} and {b}: kiln cannot compare them without tensor data",
                hint="sort by a key= that gives numbers or strings")


class _Ordered:
    __slots__ = ("value", "tx")

    def __init__(self, value: Value, tx=None):
        self.value = value
        self.tx = tx

    def __lt__(self, other):
        return _compare(operator.lt, self.value, other.value, self.tx)

    def __gt__(self, other):
        return _compare(operator.gt, self.value, other.value, self.tx)


def _keys(tx, items: list[Value], key: Value | None) -> list:
    if key is None or key.is_constant() and key.as_constant() is None:
        return [_Ordered(v, tx) for v in items]
    return order_proxies([key.call(tx, [v], {}) for v in items], tx)


def order_proxies(keys: list[Value], tx=None) -> list:
    """Objects Python's sort/min/max can order for already computed key values (functools.cmp_to_key's
    keys order themselves through the traced comparison function). With the tracer, objects of Python
    classes compare through their traced methods."""
    return [k.as_constant() if type(k).__name__ == "_CmpKeyValue" else _Ordered(k, tx) for k in keys]


def sort_values(tx, items: list[Value], key: Value | None, reverse: bool) -> list[Value]:
    proxies = _keys(tx, items, key)
    order = sorted(range(len(items)), key=lambda i: proxies[i], reverse=reverse)
    return [items[i] for i in order]


def min_max(tx, fn, items: list[Value], key: Value | None, default: Value | None) -> Value:
    if not items:
        if default is not None:
            return default
        unsupported(f"{fn.__name__}() of an empty sequence (ValueError)")
    proxies = _keys(tx, items, key)
    return items[fn(range(len(items)), key=lambda i: proxies[i])]
