"""Python's builtin functions and types, applied to symbolic values."""
from __future__ import annotations

import builtins
import functools
import math
import operator
from typing import Callable

import torch

from kiln.capture.values.base import BINARY_OPERATORS, ConstantValue, KnownFunctionValue, Value, unsupported
from kiln.capture.values.containers import (
    DictValue, ListIteratorValue, ListValue, NamedTupleValue, SequenceValue, SetValue, SliceValue, TupleValue,
)
from kiln.capture.values.tensors import TensorValue

# pure functions that may be evaluated on Python constants at trace time
PURE_CONSTANT_FUNCTIONS: set = {
    abs, all, any, bool, chr, divmod, float, format, hash, int, len, max, min, ord, pow, repr, round,
    sorted, str, sum, isinstance, issubclass, callable, complex, bin, hex, oct,
} | {getattr(math, n) for n in dir(math) if callable(getattr(math, n)) and not n.startswith("_")} \
  | {getattr(operator, n) for n in dir(operator) if callable(getattr(operator, n)) and not n.startswith("_")
     and n not in ("setitem", "delitem", "iadd", "iand", "iconcat", "ifloordiv", "ilshift", "imod", "imul",
                   "imatmul", "ior", "ipow", "irshift", "isub", "itruediv", "ixor", "attrgetter",
                   "itemgetter", "methodcaller")}


class BuiltinValue(KnownFunctionValue):
    """A builtin function or type (len, isinstance, tuple, ...)."""

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.dict_objects import UnboundBaseMethod

        if (self.fn is object and name == "__setattr__") or (self.fn is dict and name in ("__setitem__", "__init__")):
            return UnboundBaseMethod(self.fn, name)  # object.__setattr__(self, k, v) in a __setattr__
        if self.fn is dict and name == "fromkeys":
            from kiln.capture.values.collections_values import FromKeysValue

            return FromKeysValue(dict)
        return super().getattr(tx, name)

    def call(self, tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
        fn = self.fn
        handler = _HANDLERS.get(fn)
        if handler is None:
            from kiln.capture.values.stdlib import BUILTIN_CALLS  # functools, collections (values/stdlib.py)

            handler = BUILTIN_CALLS.get(fn)
        if handler is not None:
            result = handler(tx, *args, **kwargs)
            if result is not NotImplemented:
                return result
        if isinstance(fn, type) and fn is not type and fn is not super:
            return construct_builtin_type(tx, fn, args, kwargs)
        op_name = _OPERATOR_BINARY.get(fn)
        if op_name is not None and len(args) == 2 and not kwargs:
            from kiln.capture.values.ops import binary_op

            return binary_op(tx, fn, args[0], args[1])
        if fn in _OPERATOR_UNARY and len(args) == 1:
            from kiln.capture.values.ops import unary_op

            return unary_op(tx, fn, args[0])
        if fn in PURE_CONSTANT_FUNCTIONS and all(a.is_constant() for a in args) \
                and all(v.is_constant() for v in kwargs.values()):
            return _fold(fn, args, kwargs)
        if any(isinstance(a, TensorValue) for a in args) and fn in (abs, pow, round, divmod, operator.getitem):
            return tx.output.call("call_function", fn, args, kwargs)
        unsupported(f"builtin {getattr(fn, '__qualname__', fn)}() with arguments {args}",
                    hint="")

    def __repr__(self) -> str:
        return f"Builtin({getattr(self.fn, '__name__', self.fn)})"


def _fold(fn, args, kwargs) -> Value:
    from kiln.capture.values.builder import wrap_constant_result

    try:
        result = fn(*[a.as_constant() for a in args], **{k: v.as_constant() for k, v in kwargs.items()})
    except Exception as exc:
        unsupported(f"{getattr(fn, '__name__', fn)}(...) raised {type(exc).__name__}: {exc}")
    return wrap_constant_result(result)


_OPERATOR_BINARY = {op: sym for sym, op in BINARY_OPERATORS.items()} | {
    operator.eq: "==", operator.ne: "!=", operator.lt: "<", operator.le: "<=", operator.gt: ">",
    operator.ge: ">=",
}
_OPERATOR_UNARY = {operator.neg, operator.pos, operator.invert, operator.not_, operator.abs}


# ---- handlers, one per builtin -------------------------------------------------------------------

def _len(tx, obj, **kw):
    if isinstance(obj, TensorValue):
        if obj.example.dim() == 0:
            unsupported("len() of a 0-d tensor")
        return ConstantValue(obj.example.shape[0])
    if isinstance(obj, SequenceValue):
        return ConstantValue(len(obj.elements))
    if isinstance(obj, DictValue):
        return ConstantValue(len(obj.entries))
    if isinstance(obj, SetValue):
        return ConstantValue(len(obj.members))
    if obj.is_constant():
        return ConstantValue(len(obj.as_constant()))
    from kiln.capture.values.modules import NNModuleValue

    if isinstance(obj, NNModuleValue):
        return ConstantValue(len(obj.module))
    if isinstance(obj, ListIteratorValue) and obj.kind.startswith("dict_"):
        return ConstantValue(len(obj.remaining))
    return obj.call_method(tx, "__len__", [], {})


def _isinstance(tx, obj, classes):
    cls = classes.as_constant() if classes.is_constant() else unsupported("isinstance() with a non-constant class")
    t = obj.python_type()
    if isinstance(obj, TensorValue):
        # a fake tensor stands for a torch.Tensor of the recorded type
        kinds = cls if isinstance(cls, tuple) else (cls,)
        return ConstantValue(any(isinstance(k, type) and issubclass(t, k) for k in kinds))
    try:
        return ConstantValue(issubclass(t, cls))
    except TypeError as exc:
        unsupported(f"isinstance(): {exc}")


def _issubclass(tx, a, b):
    return ConstantValue(issubclass(a.as_constant(), b.as_constant()))


def _getattr(tx, obj, name, default=None):
    from kiln.capture.values.exceptions import TracedRaise
    from kiln.capture.values.objects import NewObjectValue, UserObjectValue

    attr = name.as_constant()
    if default is None:
        return tx.getattr(obj, attr)
    if isinstance(obj, (NewObjectValue, UserObjectValue)):
        try:
            return tx.getattr(obj, attr)
        except TracedRaise as exc:  # the lookup (traced as written) raised AttributeError
            if exc.matches(AttributeError):
                return default
            raise
    if _hasattr(tx, obj, name).as_constant():
        return tx.getattr(obj, attr)
    return default


def _hasattr(tx, obj, name):
    from kiln.capture.values.builder import underlying_object
    from kiln.capture.values.objects import NewObjectValue
    from kiln.capture.values.modules import NNModuleValue

    from kiln.capture.values.exceptions import TracedRaise
    from kiln.capture.values.objects import UserObjectValue, has_generic_getattribute

    attr = name.as_constant()
    if isinstance(obj, TensorValue):
        return ConstantValue(hasattr(obj.example, attr))
    if isinstance(obj, NewObjectValue) or isinstance(obj, UserObjectValue) and obj.source is not None and \
            not has_generic_getattribute(type(obj.obj)):
        # traced as Python would (a Python __getattribute__ runs, and its AttributeError is caught)
        try:
            tx.getattr(obj, attr)
        except TracedRaise as exc:
            if exc.matches(AttributeError):
                return ConstantValue(False)
            raise
        return ConstantValue(True)
    if isinstance(obj, NNModuleValue):
        found = hasattr(obj.module, attr)
        if obj.source is not None:  # the same module may gain or lose the attribute between calls
            tx.output.guards.identity(obj.source, obj.module)
            tx.output.guards.hasattr(obj.source, attr, found)
        return ConstantValue(found)
    real = underlying_object(obj)
    if real is not None:
        found = hasattr(real, attr)
        source = getattr(obj, "source", None)
        if source is not None:
            tx.output.guards.hasattr(source, attr, found)
        return ConstantValue(found)
    if obj.is_constant():
        return ConstantValue(hasattr(obj.as_constant(), attr))
    unsupported(f"hasattr() on {obj}")


def _setattr(tx, obj, name, value):
    tx.setattr(obj, name.as_constant(), value)
    return ConstantValue(None)


def _type(tx, obj):
    from kiln.capture.values.objects import ClassValue

    return ClassValue(obj.python_type())


def _iter(tx, obj):
    return ListIteratorValue(tx.items(obj))


def _next(tx, it, default=None):
    if isinstance(it, ListIteratorValue):
        item = it.next_item(tx)
        if item is None:
            if default is not None:
                return default
            unsupported("next() on an exhausted iterator (StopIteration)")
        return item
    unsupported(f"next() on {it}")


def _zip(tx, *iterables, strict=None):
    lists = [tx.items(it) for it in iterables]
    if strict is not None and strict.as_constant() and len({len(x) for x in lists}) > 1:
        unsupported("zip(strict=True) with unequal lengths")
    return ListIteratorValue([TupleValue(list(group)) for group in zip(*lists)])


def _enumerate(tx, iterable, start=None):
    first = start.as_constant() if start is not None else 0
    return ListIteratorValue([TupleValue([ConstantValue(i + first), v])
                              for i, v in enumerate(tx.items(iterable))])


def _reversed(tx, seq):
    return ListIteratorValue(list(reversed(tx.items(seq))))


def _map(tx, fn, *iterables):
    lists = [tx.items(it) for it in iterables]
    return ListIteratorValue([fn.call(tx, list(group), {}) for group in zip(*lists)])


def _filter(tx, fn, iterable):
    out = []
    for v in tx.items(iterable):
        keep = v if fn.is_constant() and fn.as_constant() is None else fn.call(tx, [v], {})
        if tx.truth(keep):
            out.append(v)
    return ListIteratorValue(out)


def _range(tx, *args):
    return ConstantValue(range(*[a.as_constant() for a in args]))


def _sum(tx, iterable, start=None):
    items = tx.items(iterable)
    from kiln.capture.values.ops import binary_op

    total = start if start is not None else ConstantValue(0)
    if all(v.is_constant() for v in items) and total.is_constant():
        return ConstantValue(sum((v.as_constant() for v in items), total.as_constant()))
    for v in items:
        total = binary_op(tx, operator.add, total, v)
    return total


def _minmax(fn):
    def handler(tx, *args, key=None, default=None):
        items = tx.items(args[0]) if len(args) == 1 else list(args)
        if key is None and items and all(v.is_constant() for v in items):
            return ConstantValue(fn(v.as_constant() for v in items))
        if any(isinstance(v, TensorValue) for v in items) and key is None:
            unsupported(f"{fn.__name__}() of tensors compares their data",
                        hint=f"use torch.{'maximum' if fn is max else 'minimum'} instead")
        from kiln.capture.values.ordering import min_max

        return min_max(tx, fn, items, key, default)  # Python's own min/max over traced comparisons
    return handler


def _all_any(fn):
    def handler(tx, iterable):
        return ConstantValue(fn(tx.truth(v) for v in tx.items(iterable)))
    return handler


def _sorted(tx, iterable, key=None, reverse=None):
    items = tx.items(iterable)
    if key is None and all(v.is_constant() for v in items):
        values = sorted((v.as_constant() for v in items), reverse=bool(reverse and reverse.as_constant()))
        return ListValue([ConstantValue(v) for v in values])
    from kiln.capture.values.ordering import sort_values

    # Python's own sort over traced comparisons (values/ordering.py)
    return ListValue(sort_values(tx, items, key, bool(reverse and reverse.as_constant())))


def _print(tx, *args, **kwargs):
    unsupported("print() has a side effect outside the graph",
                hint="kiln runs the print between two graphs; move it out of hot code to keep one graph")


def _id(tx, obj):
    unsupported("id() of a value")


def _callable(tx, obj):
    from kiln.capture.values.functions import UserFunctionValue, NestedFunctionValue, UserMethodValue
    from kiln.capture.values.modules import NNModuleValue

    if isinstance(obj, (UserFunctionValue, NestedFunctionValue, UserMethodValue, NNModuleValue, BuiltinValue)):
        return ConstantValue(True)
    if isinstance(obj, (TensorValue, SequenceValue, DictValue, SetValue)):
        return ConstantValue(False)
    if obj.is_constant():
        return ConstantValue(callable(obj.as_constant()))
    return ConstantValue(callable(obj.python_type()) and hasattr(obj.python_type(), "__call__"))


def _super(tx, *args):
    return tx.make_super(args)


def _tensor_number(kind):
    def handler(tx, obj=None, *rest):
        if isinstance(obj, TensorValue):
            unsupported(f"{kind.__name__}() of a tensor needs its data",
                        hint="keep the value as a tensor, or read it outside the compiled function")
        return NotImplemented
    return handler


_HANDLERS: dict = {
    len: _len, isinstance: _isinstance, issubclass: _issubclass, getattr: _getattr, hasattr: _hasattr,
    setattr: _setattr, iter: _iter, next: _next, zip: _zip, enumerate: _enumerate, reversed: _reversed,
    map: _map, filter: _filter, range: _range, sum: _sum, min: _minmax(min), max: _minmax(max),
    all: _all_any(all), any: _all_any(any), sorted: _sorted, print: _print, id: _id, callable: _callable,
    super: _super, type: _type, int: _tensor_number(int), float: _tensor_number(float), bool: _tensor_number(bool),
}


def construct_builtin_type(tx, cls, args, kwargs) -> Value:
    """tuple(...), list(...), dict(...), set(...), slice(...), object() and the numeric types."""
    if cls is tuple:
        return TupleValue(tx.items(args[0]) if args else [])
    if cls is list:
        return ListValue(tx.items(args[0]) if args else [])
    if cls in (set, frozenset):
        from kiln.capture.values.set_order import real_operand

        if not args:
            return SetValue([], kind=cls)
        source = args[0]
        if isinstance(source, ListIteratorValue):  # consumed once: its items, in order
            source = ListValue(tx.items(source))
        operand = real_operand(tx, source)
        added = list(operand) if isinstance(operand, (list, tuple, str, dict)) else None
        values = {}
        if isinstance(source, SetValue):
            values = dict(source.members)
        elif isinstance(source, (SequenceValue, ListValue)):
            from kiln.capture.values.containers import set_key

            values = {set_key(tx, v): v for v in reversed(source.elements)}  # the first of equal ones
        return SetValue.from_real(cls(operand), added, values)  # CPython's order (values/set_order.py)
    if cls is dict or (issubclass(cls, dict) and cls.__module__ == "collections"):
        entries = {}
        if args:
            src = args[0]
            if isinstance(src, DictValue):
                entries.update(src.entries)
            else:
                for pair in tx.items(src):
                    k, v = tx.items(pair)
                    entries[k.as_constant()] = v
        entries.update(kwargs)
        return DictValue(entries, dict_type=cls)
    if cls is slice:
        parts = list(args) + [ConstantValue(None)] * (3 - len(args))
        if len(args) == 1:
            parts = [ConstantValue(None), args[0], ConstantValue(None)]
        return SliceValue(*parts)
    if cls in (int, float, bool, str, complex) or cls is torch.Size:
        handler = _HANDLERS.get(cls)
        if handler is not None:
            result = handler(tx, *args)
            if result is not NotImplemented:
                return result
        if cls is torch.Size:
            return ConstantValue(torch.Size([v.as_constant() for v in tx.items(args[0])]))
        if all(a.is_constant() for a in args):
            return _fold(cls, args, kwargs)
        if cls is bool and len(args) == 1:
            return ConstantValue(tx.truth(args[0]))
    if cls in (torch.device, torch.dtype, torch.finfo, torch.iinfo) and all(a.is_constant() for a in args):
        return ConstantValue(cls(*[a.as_constant() for a in args]))
    unsupported(f"constructing {cls.__module__}.{cls.__qualname__}")
