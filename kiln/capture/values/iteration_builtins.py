"""Builtins that make or consume iterators: iter, next, zip, map, filter, enumerate, reversed, sum, min,
max, all, any, sorted. They take ANY iterable value (containers, generators, iterators, dict views, user
iterables with a Python __iter__) and consume it lazily, item by item, where CPython does (any/all stop at
the first decisive item; next takes one). Registered into builtins._HANDLERS."""
from __future__ import annotations

import operator
import types

from kiln.capture.values.base import ConstantValue, Value, unsupported
from kiln.capture.values.dict_views import DictIterator, DictViewValue
from kiln.capture.values.iterator_combinators import EnumerateIterator, FilterIterator, MapIterator, ZipIterator
from kiln.capture.values.iterators import (
    CallableIterator, IteratorValue, ReversedListIterator, ReversedSequenceIterator, SequenceIterator, iterate,
    make_iterator, raise_stop_iteration, raise_traced,
)


def _user_object(value: Value) -> bool:
    from kiln.capture.values.objects import NewObjectValue, UserObjectValue

    return isinstance(value, (NewObjectValue, UserObjectValue))


def _python_method(value: Value, name: str) -> bool:
    return _user_object(value) and isinstance(getattr(value.python_type(), name, None), types.FunctionType)


def _iter(tx, obj, sentinel=None):
    if sentinel is not None:
        return CallableIterator(obj, sentinel)
    if _python_method(obj, "__iter__"):
        from kiln.capture.values.objects import class_attribute

        return class_attribute(tx, obj.python_type(), "__iter__", obj).call(tx, [], {})  # the object itself, often
    return make_iterator(tx, obj)


def _next(tx, it, default=None):
    if isinstance(it, IteratorValue):
        item = it.next_item(tx)
        if item is None:
            if default is not None:
                return default
            it.raise_stop()
        return item
    if _python_method(it, "__next__"):
        if default is None:
            return it.call_method(tx, "__next__", [], {})
        from kiln.capture.values.iterators import UserIteratorValue

        item = UserIteratorValue(it).next_item(tx)
        return default if item is None else item
    if it.is_constant() or hasattr(it, "elements") or hasattr(it, "entries"):
        raise_traced(TypeError, f"{it.python_type().__name__!r} object is not an iterator")
    from kiln.capture.generator_resume import is_parked

    if is_parked(getattr(it, "obj", None)):
        unsupported("next() on a generator handed on at a graph break: a real generator now, its steps run "
                    "as Python", hint="consume the generator (list(...)) before the graph break to keep "
                                      "its steps in the graph")
    unsupported(f"next() on {it}")


def _zip(tx, *iterables, strict=None):
    strict_flag = bool(strict.as_constant()) if strict is not None else False
    return ZipIterator([make_iterator(tx, v) for v in iterables], strict=strict_flag)


def _map(tx, fn, *iterables):
    if not iterables:
        unsupported("map() must have at least two arguments")
    return MapIterator(fn, [make_iterator(tx, v) for v in iterables])


def _filter(tx, fn, iterable):
    return FilterIterator(fn, make_iterator(tx, iterable))


def _enumerate(tx, iterable, start=None):
    if start is not None and not (start.is_constant() and isinstance(start.as_constant(), int)):
        unsupported("enumerate() with a start that is not an int constant")
    return EnumerateIterator(make_iterator(tx, iterable), start if start is not None else ConstantValue(0))


def _reversed(tx, seq):
    from kiln.capture.values.containers import DictValue, ListValue, SequenceValue

    if isinstance(seq, ListValue):
        return ReversedListIterator(seq)
    if isinstance(seq, SequenceValue):
        return ReversedSequenceIterator(seq)
    if isinstance(seq, DictValue) and type(seq) is DictValue:
        return DictIterator(seq, "keys", reverse=True)
    if isinstance(seq, DictViewValue):
        return seq.call_method(tx, "__reversed__", [], {})
    if seq.is_constant():
        const = seq.as_constant()
        if isinstance(const, range):
            return SequenceIterator(ConstantValue(const[::-1]), type(iter(const)))
        if isinstance(const, (tuple, str, bytes)):
            return ReversedSequenceIterator(seq)
    if _python_method(seq, "__reversed__"):
        return seq.call_method(tx, "__reversed__", [], {})
    from kiln.capture.values.iterators import ListIteratorValue

    if isinstance(seq, ListIteratorValue):
        unsupported("reversed() of a materialized iterator (it may stand for a view or a generator)")
    if isinstance(seq, IteratorValue):
        raise_traced(TypeError, f"{seq.python_type().__name__!r} object is not reversible")
    from kiln.capture.values.tensors import TensorValue

    if isinstance(seq, TensorValue):
        unsupported("reversed() of a tensor")
    return ListIteratorValue(list(reversed(tx.items(seq))))


def _sum(tx, iterable, start=None):
    """sum(): CPython adds the leading run of numbers with its own fast paths (floats summed with
    compensation on 3.12), then the rest one by one with `+`."""
    from kiln.capture.values.ops import binary_op

    total = start if start is not None else ConstantValue(0)
    if total.is_constant() and isinstance(total.as_constant(), (str, bytes, bytearray)):
        unsupported("sum() of strings (TypeError)")
    prefix = []
    items = iterate(tx, iterable)
    rest = None
    from kiln.capture.values.symbolic import is_symbolic_value

    for item in items:  # (a symbolic size is added as a graph node: as_constant would specialize it)
        if total.is_constant() and item.is_constant() and not is_symbolic_value(item) \
                and type(item.as_constant()) in (int, float, bool):
            prefix.append(item.as_constant())
            continue
        rest = item
        break
    if prefix:
        try:
            total = ConstantValue(sum(prefix, total.as_constant()))
        except Exception as exc:
            unsupported(f"sum() raised {type(exc).__name__}: {exc}")
    if rest is not None:
        total = binary_op(tx, operator.add, total, rest)
        for item in items:
            total = binary_op(tx, operator.add, total, item)
    return total


def _minmax(fn):
    def handler(tx, *args, key=None, default=None):
        from kiln.capture.values.tensors import TensorValue

        if len(args) == 1:
            items = list(iterate(tx, args[0]))
        else:
            if default is not None:
                unsupported(f"{fn.__name__}() with several arguments and a default (TypeError)")
            items = list(args)
        if not items:
            if default is not None:
                return default
            try:
                fn([])  # the message is this Python's own (3.11: "max() arg is an empty sequence")
            except ValueError as exc:
                raise_traced(ValueError, str(exc))
        keys = [key.call(tx, [v], {}) for v in items] if key is not None and not \
            (key.is_constant() and key.as_constant() is None) else items
        if all(k.is_constant() for k in keys):
            constants = [k.as_constant() for k in keys]
            try:
                best = fn(range(len(items)), key=constants.__getitem__)
            except Exception as exc:
                unsupported(f"{fn.__name__}() raised {type(exc).__name__}: {exc}")
            return items[best]
        if any(isinstance(v, TensorValue) for v in keys):
            unsupported(f"{fn.__name__}() of tensors compares their data",
                        hint=f"use torch.{'maximum' if fn is max else 'minimum'} instead")
        from kiln.capture.values.ordering import order_proxies

        proxies = order_proxies(keys, tx)  # Python's own min/max over comparisons decided while tracing
        return items[fn(range(len(items)), key=proxies.__getitem__)]
    return handler


def _all_any(fn):
    stop_on = fn is any  # any stops at the first true item, all at the first false one

    def handler(tx, iterable):
        for item in iterate(tx, iterable):
            if tx.truth(item) == stop_on:
                return ConstantValue(stop_on)
        return ConstantValue(not stop_on)
    return handler


def _sorted(tx, iterable, key=None, reverse=None):
    from kiln.capture.values.containers import ListValue, SetValue

    rev = bool(reverse.as_constant()) if reverse is not None else False
    no_key = key is None or key.is_constant() and key.as_constant() is None
    if no_key and isinstance(iterable, SetValue) and _sorts_the_same_in_any_order(iterable):
        # distinct members of one totally ordered kind: the result does not depend on the set's
        # iteration order (which kiln may not know: a set from outside changed while tracing)
        return ListValue([iterable.members[k] for k in sorted(iterable.members, reverse=rev)])
    items = list(iterate(tx, iterable))
    if not no_key:
        keys = [key.call(tx, [v], {}) for v in items]
    else:
        keys = items
    from kiln.capture.values.symbolic import is_symbolic_value

    if all(k.is_constant() and not is_symbolic_value(k) for k in keys):  # (sizes: compared as guards below)
        constants = [k.as_constant() for k in keys]
        try:
            order = sorted(range(len(items)), key=constants.__getitem__, reverse=rev)
        except Exception as exc:
            unsupported(f"sorted() raised {type(exc).__name__}: {exc}")
        return ListValue([items[i] for i in order])
    from kiln.capture.values.ordering import order_proxies

    proxies = order_proxies(keys, tx)  # Python's own (stable) sort over comparisons decided while tracing
    return ListValue([items[i] for i in sorted(range(len(items)), key=proxies.__getitem__, reverse=rev)])


def _sorts_the_same_in_any_order(value) -> bool:
    """A set of str, of bytes, or of ints and floats (no NaN): no two members tie and every pair compares."""
    members = list(value.members)
    kinds = {str if type(m) is str else bytes if type(m) is bytes else
             "number" if type(m) in (int, float, bool) and m == m else None for m in members}
    return len(kinds) == 1 and None not in kinds


def _len_of_view(tx, obj, **kw):
    if isinstance(obj, DictViewValue):
        return ConstantValue(len(obj.entries()))
    from kiln.capture.values.iterators import ListIteratorValue

    if isinstance(obj, IteratorValue) and not isinstance(obj, ListIteratorValue) and \
            not hasattr(obj.python_type(), "__len__"):  # (materialized ones may stand for views)
        raise_traced(TypeError, f"object of type {obj.python_type().__name__!r} has no len()")
    return NotImplemented


ITERATION_HANDLERS: dict = {
    iter: _iter, next: _next, zip: _zip, enumerate: _enumerate, reversed: _reversed, map: _map,
    filter: _filter, sum: _sum, min: _minmax(min), max: _minmax(max), all: _all_any(all), any: _all_any(any),
    sorted: _sorted,
}


def register(handlers: dict) -> None:
    """Install these handlers (and itertools') in builtins' table; len() learns dict views first."""
    from kiln.capture.values.itertools_values import ITERTOOLS_BUILDERS

    handlers.update(ITERATION_HANDLERS)
    handlers.update(ITERTOOLS_BUILDERS)
    plain_len = handlers[len]

    def _len(tx, obj, **kw):
        result = _len_of_view(tx, obj)
        return plain_len(tx, obj, **kw) if result is NotImplemented else result
    handlers[len] = _len
