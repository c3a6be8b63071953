"""dataclasses.replace, dataclasses.asdict and dataclasses.astuple inside compiled code (values/dataclass_calls.py, polyfills.py):
one graph, as TorchDynamo; before, kiln broke the graph at each call."""
import collections
import dataclasses
import typing

import torch

from .harness import check


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


@dataclasses.dataclass
class _Inner:
    a: int = 1
    t: typing.Any = None


_NT = collections.namedtuple("_NT", "p q")


@dataclasses.dataclass
class _Outer:
    inner: _Inner
    xs: list = dataclasses.field(default_factory=list)
    d: dict = dataclasses.field(default_factory=dict)
    k: int = dataclasses.field(default=0, init=False)
    cv: typing.ClassVar[int] = 5
    iv: dataclasses.InitVar[int] = 3

    def __post_init__(self, iv):
        self.k = iv * 2


def test_asdict_recurses_and_copies():
    def fn(x):
        o = _Outer(_Inner(2, x * 2), [_Inner(3), _NT(1, 2)], {"z": (1, [2])})
        d = dataclasses.asdict(o)
        od = dataclasses.asdict(o.inner, dict_factory=collections.OrderedDict)
        return d, od, d["inner"]["t"] is o.inner.t, d["xs"][1]

    check(fn, _t(3), breaks=0)


def test_replace_runs_init_and_post_init():
    def fn(x, given):
        o = _Outer(_Inner(2, x))
        r = dataclasses.replace(o, iv=5)
        try:
            dataclasses.replace(o, k=1)
        except ValueError as e:
            msg = str(e)
        return r, r.k, r.inner is o.inner, msg, dataclasses.replace(given, t=x + 1)

    check(fn, _t(3), _Inner(7), breaks=0)


def test_replace_frozen_and_asdict_type_error():
    @dataclasses.dataclass(frozen=True)
    class Frozen:
        a: int = 1
        b: typing.Any = 2.0

    def fn(x):
        g = dataclasses.replace(Frozen(), b=x * 3)
        try:
            dataclasses.asdict(Frozen)
        except TypeError as e:
            return g.b, g.a, str(e)

    check(fn, _t(3), breaks=0)


def test_astuple_recurses_and_copies():
    def fn(x, given):
        o = _Outer(_Inner(2, x * 2), [_Inner(3), _NT(1, _Inner(4, x))], {"z": (1, [2])})
        t = dataclasses.astuple(o)
        as_list = dataclasses.astuple(o.inner, tuple_factory=list)
        return t, as_list, t[0][1] is o.inner.t, t[1][1], dataclasses.astuple(given)

    check(fn, _t(3), _Inner(7, [1, 2]), breaks=0)


def test_astuple_type_error():
    def fn(x):
        try:
            dataclasses.astuple(_Inner)
        except TypeError as e:
            return x + 1, str(e)

    check(fn, _t(3), breaks=0)


def test_hasattr_of_a_namedtuple_made_here():
    def fn(x):
        nt = _NT(x * 2, [x])
        return nt, hasattr(nt, "_fields"), hasattr(nt, "_asdict"), hasattr([x], "append")

    check(fn, _t(3), breaks=0)
