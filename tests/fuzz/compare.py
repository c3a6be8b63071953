"""Recursive, type-exact comparison of what the eager run and the compiled run produced.

The eager and the compiled run each exec the program into their own module, so a class the
program defines exists twice; ``ModulePair`` maps one onto the other (same qualified name, eager
module vs compiled module) where plain code would compare ``type(a) is type(b)``.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import math
import types

import torch

_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
_PLAIN = (type(None), bool, int, str, bytes, complex, torch.dtype, torch.device, range, slice)


class Mismatch(AssertionError):
    """Compiled and eager differ; the message names the path (``out[1]['a'].b``) and both values.

    kind: type / length / keys / tensor / value (what differed, for telling failures apart).
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclasses.dataclass
class ModulePair:
    eager: str  # module names
    compiled: str

    def same_type(self, actual: type, expected: type) -> bool:
        if actual is expected:
            return True
        return (getattr(expected, "__module__", None) == self.eager
                and getattr(actual, "__module__", None) == self.compiled
                and actual.__qualname__ == expected.__qualname__)


def same(actual, expected, mods: ModulePair, path: str = "out") -> None:
    """Raise Mismatch where ``actual`` (compiled) differs from ``expected`` (eager)."""
    if not mods.same_type(type(actual), type(expected)):
        raise Mismatch("type", f"{path}: type {_tname(actual)} != expected {_tname(expected)} "
                       f"({_short(actual)} vs {_short(expected)})")
    if isinstance(expected, torch.Tensor):
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True)
        except AssertionError as exc:
            raise Mismatch("tensor", f"{path}: tensors differ: {str(exc).splitlines()[0]}\n  got {actual}\n  expected {expected}") from None
        if actual.requires_grad != expected.requires_grad:
            raise Mismatch("tensor", f"{path}: requires_grad {actual.requires_grad} != {expected.requires_grad}")
        return
    if isinstance(expected, torch.Size) or isinstance(expected, _PLAIN):
        if actual != expected:
            raise Mismatch("value", f"{path}: {actual!r} != expected {expected!r}")
        return
    if isinstance(expected, float):
        if not (actual == expected or (math.isnan(actual) and math.isnan(expected))):
            raise Mismatch("value", f"{path}: {actual!r} != expected {expected!r}")
        return
    if isinstance(expected, (list, tuple) + _VIEWS):
        a, e = list(actual), list(expected)
        if len(a) != len(e):
            raise Mismatch("length", f"{path}: length {len(a)} != expected {len(e)} ({_short(actual)} vs {_short(expected)})")
        for i, (x, y) in enumerate(zip(a, e)):
            same(x, y, mods, f"{path}[{i}]")
        if hasattr(expected, "__dict__"):  # namedtuple subclasses may carry attributes
            same(vars(actual), vars(expected), mods, f"{path}.__dict__")
        return
    if isinstance(expected, dict):
        a, e = list(actual.items()), list(expected.items())
        if len(a) != len(e):
            raise Mismatch("keys", f"{path}: dict keys {list(actual)} != expected {list(expected)}")
        for (ka, va), (ke, ve) in zip(a, e):
            same(ka, ke, mods, f"{path}.keys()")
            same(va, ve, mods, f"{path}[{ke!r}]")
        return
    if isinstance(expected, (set, frozenset)):
        _same_set(actual, expected, mods, path)
        return
    if isinstance(expected, (types.GeneratorType, collections.abc.Iterator)):
        return  # an iterator's state is not observable without consuming it: its type was compared
    if isinstance(expected, BaseException):
        same(actual.args, expected.args, mods, f"{path}.args")
        return
    if isinstance(expected, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)):
        if actual is not expected and getattr(actual, "__qualname__", 1) != getattr(expected, "__qualname__", 2):
            raise Mismatch("value", f"{path}: {actual!r} != expected {expected!r}")
        return
    if hasattr(expected, "__dict__"):
        same(vars(actual), vars(expected), mods, f"{path}.__dict__")
        return
    if actual != expected:
        raise Mismatch("value", f"{path}: {actual!r} != expected {expected!r}")


def _same_set(actual, expected, mods, path):
    if len(actual) != len(expected):
        raise Mismatch("value", f"{path}: {_short(actual)} != expected {_short(expected)}")
    if all(isinstance(v, _PLAIN) for v in expected):
        if actual != expected:
            raise Mismatch("value", f"{path}: {actual!r} != expected {expected!r}")
        return
    left = list(actual)
    for e in expected:  # program-defined objects: match each element to one that compares the same
        for i, a in enumerate(left):
            try:
                same(a, e, mods, path)
            except Mismatch:
                continue
            del left[i]
            break
        else:
            raise Mismatch("value", f"{path}: no element of the compiled set matches {_short(e)}")


def _tname(v) -> str:
    t = type(v)
    return f"{t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else t.__qualname__


def _short(v, n: int = 120) -> str:
    try:
        s = repr(v)
    except Exception as exc:  # a program-defined __repr__ may raise
        s = f"<repr failed: {type(exc).__name__}>"
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 3] + "..."
