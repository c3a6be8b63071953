"""Numbers and strings read from the frame are guarded by value only once their value is used.

A float from `loss.item()` handed to a resume function, a step counter, `time.perf_counter()`: such
values change on every call. Guarding them by value where they are only passed along (to a print, a
list, the next resume function, the return value) would recompile on every call. So

- `wrap` gives an int/float/str read through a guardable place as an `UnguardedScalar`: its type is
  guarded at once, its value only when something reads it (`.value`, hence `as_constant()`, `truth()`,
  dict keys, tensor-op arguments, ...). Handing it on emits its place again: the same object.
- Pure operations on such values (arithmetic, comparisons, f-string formatting and joining) give a
  `DeferredScalar`: the result is known while tracing (for anything that later needs it, which then
  guards the inputs), and the transformed code computes it again from the inputs at run time.

Everything that reads a value goes through the `value` property, so nothing depends on a value
without its guard: sound by construction.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

from kiln.capture.values.base import ConstantValue, Value

SCALAR_TYPES = (int, float, str)
_OPERAND_TYPES = (int, float, str, bool, type(None))


class _KnownScalar(ConstantValue):
    """A scalar known while tracing (``_value``) whose guards are taken only when ``value`` is read."""

    _value: Any

    def peek(self) -> Any:
        """The value, for a deferred computation (no guard: the transformed code recomputes it)."""
        return self._value

    def python_type(self) -> type:
        return type(self._value)


class UnguardedScalar(_KnownScalar):
    """An int, float or str read from `source`, guarded by value when first read."""

    def __init__(self, value: Any, source, guards):
        self._value = value
        self.source = source
        self._guards = guards
        self.guarded = False

    @property
    def value(self) -> Any:
        if not self.guarded:
            self.guarded = True
            self._guards.constant(self.source, self._value)
        return self._value

    def reconstruct(self, cg) -> None:
        self.source.emit(cg)

    def __repr__(self) -> str:
        return f"Scalar({self._value!r} at {self.source.name()})"


class DeferredScalar(_KnownScalar):
    """`fn(*args)` of unguarded scalars: known now, computed again at run time where it is handed on."""

    def __init__(self, fn: Callable, args: list[Value], result: Any):
        self.fn, self.args, self._value = fn, args, result
        self.source = None

    @property
    def value(self) -> Any:
        for a in self.args:
            a.as_constant()  # guards the inputs this result depends on
        return self._value

    def reconstruct(self, cg) -> None:
        cg.prepare_call(self.fn)
        for a in self.args:
            cg.reconstruct(a)
        cg.call(len(self.args))

    def __repr__(self) -> str:
        return f"Deferred({getattr(self.fn, '__name__', self.fn)}{tuple(self.args)!r} = {self._value!r})"


def _unguarded(v: Value) -> bool:
    return isinstance(v, DeferredScalar) or (isinstance(v, UnguardedScalar) and not v.guarded)


def _peek(v: Value) -> Any:
    return v.peek() if isinstance(v, _KnownScalar) else v.value


def defer(fn: Callable, args: list[Value]) -> Value | None:
    """A DeferredScalar for fn(*args) when some argument is an unguarded scalar and all are plain
    numbers/strings/None; None otherwise (or when fn raises: the usual path reports it)."""
    if not any(_unguarded(a) for a in args):
        return None
    if not all(isinstance(a, ConstantValue) and type(_peek(a)) in _OPERAND_TYPES for a in args):
        return None
    try:
        result = fn(*[_peek(a) for a in args])
    except Exception:
        return None
    if type(result) not in _OPERAND_TYPES:
        return None
    return DeferredScalar(fn, list(args), result)


def format_value(value, conversion: int, spec: str) -> str:
    """FORMAT_VALUE at run time: conversion 1 str, 2 repr, 3 ascii, then format(value, spec)."""
    if conversion == 1:
        value = str(value)
    elif conversion == 2:
        value = repr(value)
    elif conversion == 3:
        value = ascii(value)
    return format(value, spec)


def join_strings(*parts: str) -> str:
    """BUILD_STRING at run time."""
    return "".join(parts)


PURE_OPERATORS = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod, operator.pow,
    operator.neg, operator.pos, operator.abs, operator.eq, operator.ne, operator.lt, operator.le, operator.gt,
    operator.ge, operator.and_, operator.or_, operator.xor, operator.lshift, operator.rshift, operator.invert,
}
