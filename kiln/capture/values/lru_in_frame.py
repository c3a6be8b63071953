"""`functools.lru_cache` / `functools.cache` applied inside the compiled frame (a decorator on a nested
function, `cached = functools.cache(f)`).

The wrapper is made while tracing, so its cache starts empty as eager's does and lives only in this call:
kiln models the cache itself (values/functools_values.LruCacheFunctionValue handles wrappers from outside,
whose cache it cannot see). A call computes the key as CPython does (`functools._make_key`, on constant
hashable arguments: equal keys are equal as Python compares them, `typed` separates 1 and 1.0); a hit
hands back the very value the first call returned (same object, no second run of the body, so side
effects happen once as in eager); a miss traces the body and stores the result, evicting the least
recently used entry past `maxsize` (CPython's bounded wrapper: a hit moves the entry last; a key added by
a recursive call meanwhile is not added again). `maxsize=0` caches nothing. Arguments that are not
constants break the graph; so does handing the wrapper on with entries cached (a rebuilt wrapper would
start empty). Not modelled: `cache_info()`, `cache_parameters()` (a break); `cache_clear()` empties it.
"""
from __future__ import annotations

import collections
import functools
import types

from kiln.capture.values.base import BoundMethodValue, ConstantValue, Value, unsupported


class InFrameLruValue(Value):
    """A function wrapped by lru_cache while tracing, with its cache: key -> the result value."""

    has_identity = True

    def __init__(self, fn: Value, maxsize: int | None, typed: bool):
        self.fn, self.maxsize, self.typed = fn, maxsize, typed
        self.cache: collections.OrderedDict = collections.OrderedDict()

    def python_type(self) -> type:
        return functools._lru_cache_wrapper

    def getattr(self, tx, name: str) -> Value:
        if name == "__wrapped__":
            return self.fn
        if name in ("__name__", "__qualname__", "__module__", "__doc__"):
            return self.fn.getattr(tx, name)
        if name == "cache_clear":
            return BoundMethodValue(self, name)
        unsupported(f"attribute {name!r} of an lru_cache function made in the compiled frame")

    def call_method(self, tx, name, args, kwargs) -> Value:
        if name == "cache_clear" and not args and not kwargs:
            self.cache.clear()
            return ConstantValue(None)
        unsupported(f"lru_cache wrapper.{name}()")

    def call(self, tx, args, kwargs) -> Value:
        if self.maxsize == 0:
            return self.fn.call(tx, list(args), dict(kwargs))
        key = self._key(list(args), dict(kwargs))
        if key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key]
        result = self.fn.call(tx, list(args), dict(kwargs))
        if key in self.cache:  # a recursive call stored it meanwhile: CPython keeps that entry
            return result
        self.cache[key] = result
        if self.maxsize is not None and len(self.cache) > self.maxsize:
            self.cache.popitem(last=False)
        return result

    def _key(self, args: list[Value], kwargs: dict[str, Value]):
        values = [*args, *kwargs.values()]
        if not all(v.is_constant() for v in values):
            unsupported("a call of an lru_cache function made in the frame with arguments that are not constants",
                        hint="kiln runs the call as Python")
        real_args = tuple(a.as_constant() for a in args)
        real_kwargs = {k: v.as_constant() for k, v in kwargs.items()}
        key = functools._make_key(real_args, real_kwargs, self.typed)
        try:
            hash(key)
        except TypeError as exc:
            from kiln.capture.values.exceptions import raise_as_traced

            raise_as_traced(exc, "lru_cache key")
        return key

    def child_values(self) -> list[Value]:
        return [self.fn]

    def reconstruct(self, cg) -> None:
        if self.cache:
            unsupported("handing on an lru_cache function made in the frame after calls filled its cache "
                        "(a rebuilt wrapper would start empty)")
        cg.prepare_call(_wrap_again)
        cg.load_const(self.maxsize)
        cg.load_const(self.typed)
        cg.reconstruct(self.fn)
        cg.call(3)

    def __repr__(self) -> str:
        return f"InFrameLru({self.fn}, maxsize={self.maxsize})"


def _wrap_again(maxsize, typed, fn):
    return functools.lru_cache(maxsize=maxsize, typed=typed)(fn)


class LruDecoratorValue(Value):
    """What `functools.lru_cache(maxsize, typed)` returns: applied to a function it wraps it."""

    def __init__(self, maxsize: int | None, typed: bool):
        self.maxsize, self.typed = maxsize, typed

    def python_type(self) -> type:
        return types.FunctionType

    def call(self, tx, args, kwargs) -> Value:
        if len(args) != 1 or kwargs:
            unsupported("lru_cache's decorator takes one function (TypeError)")
        return _wrap(args[0], self.maxsize, self.typed)

    def reconstruct(self, cg) -> None:
        cg.prepare_call(functools.lru_cache)
        cg.load_const(self.maxsize)
        cg.load_const(self.typed)
        cg.call(2)


def _wrap(fn: Value, maxsize, typed) -> Value:
    from kiln.capture.values.functions import NestedFunctionValue, UserFunctionValue

    if not isinstance(fn, (NestedFunctionValue, UserFunctionValue)):
        unsupported(f"lru_cache of {fn}, which kiln does not trace as a Python function")
    return InFrameLruValue(fn, maxsize, typed)


def lru_cache_handler(tx, args, kwargs) -> Value:
    """functools.lru_cache(maxsize=128, typed=False) called while tracing, as CPython's lru_cache reads its
    arguments: an int (negative: 0) or None gives the decorator, a function is wrapped at once."""
    from kiln.capture.values.functions import NestedFunctionValue, UserFunctionValue

    bound = dict(zip(("maxsize", "typed"), args), **kwargs)
    if len(args) > 2 or not set(bound) <= {"maxsize", "typed"}:
        unsupported("functools.lru_cache() with other arguments than (maxsize, typed) (TypeError)")
    maxsize = bound.get("maxsize", ConstantValue(128))
    typed = bound.get("typed", ConstantValue(False))
    if not typed.is_constant():
        unsupported("functools.lru_cache(typed=...) of a value kiln does not know")
    if isinstance(maxsize, (NestedFunctionValue, UserFunctionValue)) and isinstance(typed.as_constant(), bool):
        return _wrap(maxsize, 128, typed.as_constant())
    size = maxsize.as_constant() if maxsize.is_constant() else unsupported(f"functools.lru_cache({maxsize})")
    if isinstance(size, int):
        size = max(size, 0)
    elif size is not None:
        unsupported("functools.lru_cache(): maxsize must be an int or None (TypeError)")
    return LruDecoratorValue(size, bool(typed.as_constant()))


def cache_handler(tx, args, kwargs) -> Value:
    """functools.cache(f): lru_cache(maxsize=None)(f)."""
    if len(args) != 1 or kwargs:
        unsupported("functools.cache() takes one function (TypeError)")
    return _wrap(args[0], None, False)


LIBRARY_HANDLERS = {functools.lru_cache: lru_cache_handler, functools.cache: cache_handler}
