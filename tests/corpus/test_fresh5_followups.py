"""End-to-end cases for what the fifth fresh-cases round's probes found beyond its 100 cases (each also has a
unit test in tests/capture/test_value_semantics.py). Counts are TorchDynamo's (KILN_CORPUS_ENGINE=dynamo)."""
import collections
import dataclasses
import enum
import functools
import operator
import typing

import torch

from .harness import check, dynamo_bug


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


@dynamo_bug("an lru_cache made in the frame runs its body on every call (the side effect happens twice)")
def test_lru_cache_decorating_a_nested_function():
    def fn(x):
        runs = []

        @functools.lru_cache(maxsize=None)
        def width(n):
            runs.append(n)
            return n * 4

        @functools.cache
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        return x * width(3) + width(3) + fib(10), runs

    check(fn, _t(3), breaks=0)


@dataclasses.dataclass(order=True)
class _Version:
    major: int
    minor: int = 0


def test_sorted_and_max_of_ordered_dataclasses():
    def fn(x):
        versions = [_Version(2), _Version(1, 5), _Version(1, 2)]
        ordered = sorted(versions)
        return x * ordered[0].minor, [(v.major, v.minor) for v in ordered], max(versions).major

    check(fn, _t(3), breaks=0)


class _Pool(enum.Enum):
    MAX = "max"
    AVG = "avg"

    def apply(self, t):
        return t.amax(-1) if self is _Pool.MAX else t.mean(-1)


def test_enum_lookup_by_value_and_method_with_a_tensor():
    def fn(x, kind="avg"):
        pool = _Pool(kind)
        return pool.apply(x), _Pool.MAX.apply(x), [p.value for p in _Pool]

    check(fn, _t(2, 3), breaks=0)


class _Steps:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        yield from range(0, self.n, 2)


class _Second:
    def __index__(self):
        return 1


class _Norm:
    def __init__(self, t):
        self.t = t

    def __abs__(self):
        return self.t.abs().sum()


def test_in_by_iteration_index_and_abs_dunders():
    def fn(x):
        parts = [x, x * 2, x * 3]
        return parts[_Second()], abs(_Norm(x)), 4 in _Steps(6), 3 in _Steps(6)

    check(fn, _t(3), breaks=0)


def test_deque_operators_and_set_comparisons():
    def fn(x):
        q = collections.deque([x], maxlen=3)
        q += [x * 2, x * 3, x * 4]
        a = {1, 2}
        a.difference_update([2])
        return sum(q), len(q), a <= {1, 5}, {1, 2} > a, operator.add.__name__

    check(fn, _t(3), breaks=0)


def test_typing_cast_and_tensor_class():
    def fn(x):
        y = typing.cast(torch.Tensor, x)
        return y * 2, x.__class__ is torch.Tensor

    check(fn, _t(3), breaks=0)


def test_no_grad_object_made_before_a_break_used_after_it():
    def fn(x):
        ctx = torch.no_grad()
        print(end="")
        with ctx:
            y = x * 2
        return y, y.requires_grad

    check(fn, torch.ones(3, requires_grad=True), breaks=1)
