"""Arithmetic operators where one operand is an instance of a Python class, as CPython dispatches them.

`a + b` (abstract.c binary_op1 with typeobject.c's slot_nb_add, for every arithmetic slot):

1. if type(b) is a strict subclass of type(a) and overrides the reflected method (`__radd__`),
   b.__radd__(a) first;
2. a.__add__(b);
3. unless type(a) is type(b), b.__radd__(a);
4. NotImplemented from every one of them: TypeError "unsupported operand type(s) for +: ...".

`a += b` tries a.__iadd__(b) first, then the same as `a + b`. A builtin operand's own method answers
NotImplemented for a Python object where that is certain: numbers (int, float, complex, bool) and tensors
(torch wraps their TypeError into NotImplemented) of a class without `__torch_function__`. Any other builtin
operand whose method would have to run (a list, a str: sequence repetition, `%` formatting) breaks the graph.
"""
from __future__ import annotations

import operator
import types
from typing import Callable

from kiln.capture.values.base import INPLACE_TO_PLAIN, Value, unsupported

_NAMES = {
    operator.add: ("add", "+"), operator.sub: ("sub", "-"), operator.mul: ("mul", "*"),
    operator.truediv: ("truediv", "/"), operator.floordiv: ("floordiv", "//"), operator.mod: ("mod", "%"),
    operator.pow: ("pow", "** or pow()"), operator.matmul: ("matmul", "@"), operator.and_: ("and", "&"),
    operator.or_: ("or", "|"), operator.xor: ("xor", "^"), operator.lshift: ("lshift", "<<"),
    operator.rshift: ("rshift", ">>"),
}
_INPLACE_SYMBOL = {"** or pow()": "**="}


def handles(op: Callable, a: Value, b: Value) -> bool:
    """Whether `a <op> b` is dispatched here: an arithmetic operator with a Python object on either side."""
    from kiln.capture.values.ops import is_python_object

    return INPLACE_TO_PLAIN.get(op, op) in _NAMES and (is_python_object(a) or is_python_object(b))


def python_object_binary(tx, op: Callable, a: Value, b: Value) -> Value:
    """`a <op> b` (op may be in-place) with a Python object on one side, exactly as CPython orders it."""
    plain = INPLACE_TO_PLAIN.get(op, op)
    name, symbol = _NAMES[plain]
    if plain is not op:
        result = _call_if_defined(tx, a, f"__i{name}__", b)
        if result is not NotImplemented:
            return result
        symbol = _INPLACE_SYMBOL.get(symbol, symbol + "=")
    result = _binary_op1(tx, name, a, b)
    if result is NotImplemented:
        from kiln.capture.values.exceptions import raise_traced

        raise_traced(TypeError, f"unsupported operand type(s) for {symbol}: "
                                f"'{_type_name(a)}' and '{_type_name(b)}'")
    return result


def _binary_op1(tx, name: str, a: Value, b: Value):
    from kiln.capture.values.ops import is_python_object

    ta, tb = a.python_type(), b.python_type()
    forward, reflected = f"__{name}__", f"__r{name}__"
    a_python, b_python = is_python_object(a), is_python_object(b)
    b_slot = b_python and tb is not ta and _has_slot(tb, name)
    if a_python and _has_slot(ta, name):  # slot_nb_<name>(a, b): both sides' Python methods, in order
        do_other = b_slot
        if do_other and issubclass(tb, ta) and _overrides(ta, tb, reflected):
            result = _call_if_defined(tx, b, reflected, a)
            if result is not NotImplemented:
                return result
            do_other = False
        result = _call_if_defined(tx, a, forward, b)
        if result is not NotImplemented or tb is ta:
            return result
        if do_other:
            return _call_if_defined(tx, b, reflected, a)
    else:
        if not a_python:
            _builtin_answers_not_implemented(b, a, name)  # a's own method runs first
        if b_slot:
            return _call_if_defined(tx, b, reflected, a)
    if not b_python:
        _builtin_answers_not_implemented(a, b, name)  # b's method runs last
    return NotImplemented


def _has_slot(cls: type, name: str) -> bool:
    """A Python class has the nb_<name> slot when its MRO defines __name__ or __rname__."""
    return any(f"__{name}__" in vars(k) or f"__r{name}__" in vars(k) for k in cls.__mro__[:-1])


def _lookup(cls: type, name: str):
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return None


def _overrides(left: type, right: type, name: str) -> bool:
    """typeobject.c method_is_overloaded: right's `name` exists and differs from left's."""
    found = _lookup(right, name)
    return found is not None and found is not _lookup(left, name)


def _call_if_defined(tx, obj: Value, name: str, other: Value):
    """vectorcall_maybe: type(obj).name(obj, other), NotImplemented when the class has no such method."""
    from kiln.capture.values.objects import class_attribute
    from kiln.capture.values.ops import is_python_object

    if not is_python_object(obj):
        return NotImplemented
    found = _lookup(obj.python_type(), name)
    if found is None:
        return NotImplemented
    if not isinstance(found, types.FunctionType):
        unsupported(f"{obj.python_type().__name__}.{name} is a {type(found).__name__}, not a Python function")
    result = class_attribute(tx, obj.python_type(), name, obj).call(tx, [other], {})
    if result.python_type() is type(NotImplemented):  # (read without guarding a scalar's value)
        return NotImplemented
    return result


def _builtin_answers_not_implemented(python_obj: Value, builtin: Value, name: str) -> None:
    """Check that the builtin operand's method gives NotImplemented against a Python object; else break."""
    from kiln.capture.values.tensors import TensorValue

    if hasattr(python_obj.python_type(), "__torch_function__"):
        unsupported(f"operator with a {python_obj.python_type().__name__}, which has __torch_function__")
    if isinstance(builtin, TensorValue):
        return
    try:
        kind = builtin.python_type()
    except Exception:
        kind = None
    if kind in (int, float, complex, bool):
        return
    unsupported(f"__{name}__ of a {getattr(kind, '__name__', builtin)} with a "
                f"{python_obj.python_type().__name__}: kiln does not model the builtin's method")


def _type_name(v: Value) -> str:
    return v.python_type().__name__
