"""Stores to class attributes inside compiled code (values/class_stores.py): recorded, replayed after the
graph, seen by later reads through the class, subclasses and instances (one graph, as TorchDynamo); stores
kiln does not model (functions, torch's own classes) break at the store."""
import abc

import torch

from .harness import CountingBackend, assert_same, check, compile_fn, dynamo_bug, reset


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


class _Base:
    v = 1

    def m(self):
        return 1


class _Mid(_Base):
    pass


class _Leaf(_Mid):
    v = 100

    def up(self):
        return super().v


def test_store_seen_through_subclasses_instances_super_and_getattr():
    def fn(x, o):
        _Base.v = 5
        _Mid.new = 7
        return (x * o.v, _Mid.v, _Leaf.v, _Leaf().v, type(o).v, getattr(_Mid, "v", -1), _Leaf().up(),
                hasattr(o, "new"), getattr(o, "new", 0), hasattr(_Base, "new"), getattr(_Base(), "new", -2))

    try:
        check(fn, _t(2), _Mid(), breaks=0)
    finally:
        _Base.v = 1
        del _Mid.new


class _Abstract(abc.ABC):
    registry = None

    @abc.abstractmethod
    def run(self, x):
        ...


class _Impl(_Abstract):
    def __init__(self, k):
        self.k = k
        type(self).registry.append(k)

    def run(self, x):
        return x * self.k


@dynamo_bug("a list stored into a class, appended to through type(self), reads back empty")
def test_store_of_a_container_mutated_later_and_instance_shadowing():
    def fn(x, o):
        _Abstract.registry = []
        outs = [_Impl(k).run(x) for k in (1, 2)]
        o.v = 9  # an instance attribute shadows the class's
        _Base.v = 3
        return outs, list(_Abstract.registry), _Impl.registry is _Abstract.registry, o.v, _Base().v

    try:
        check(fn, _t(2), _Base(), inputs_mutated=True, breaks=0)
    finally:
        _Base.v = 1
        _Abstract.registry = None


class _Net(torch.nn.Module):
    scale = 1.0

    def forward(self, x):
        return x * self.scale


def _two(self):
    return 2


_NET = _Net()


def test_stores_of_functions_break_and_to_module_classes_do_not():
    original = _Base.m

    def fn(x):
        _Base.m = _two  # replaces a method: a break
        y = x * _Base().m()
        _Net.scale = 3.0  # an nn.Module class: recorded, seen by forward
        return y + _NET(x)

    try:
        check(fn, _t(2), graphs=1, breaks=1)  # (nothing before the break)
    finally:
        _Base.m = original
        _Net.scale = 1.0


class _Cached(torch.nn.Module):
    cache = None
    calls = 0

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)

    def forward(self, x):
        _Cached.cache = {"rows": x.shape[0]}  # a new dict each call
        type(self).calls = 1  # the same value each call (a bumped counter recompiles, as in dynamo)
        return self.lin(x) * self.calls + self.cache["rows"], hasattr(self, "cache"), getattr(self, "calls", -1)


class _CachedChild(_Cached):
    pass


def test_stores_to_nn_module_classes_are_one_graph():
    """`type(self).n = v` and `Cls.name = v` in forward: recorded, seen by reads through self, the class and
    a subclass's instances (before: a break at each store)."""
    def fn(x, m):
        out, has, calls = m(x)
        return out, has, calls, _Cached.cache, _CachedChild.calls, type(m).cache["rows"]

    try:
        torch.manual_seed(0)
        check(fn, _t(3, 2), _CachedChild(), breaks=0)
    finally:
        _Cached.cache, _Cached.calls = None, 0


class _Shadow(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))

    def forward(self, x):
        return x * self.w


def _forget_shadow():
    if "w" in vars(_Shadow):
        del _Shadow.w


@dynamo_bug("a wrong result: the parameter is read where eager reads the class attribute")
def test_a_module_class_store_shadowing_a_parameter_breaks():
    """After `Cls.w = 2.0`, `m.w` is the class attribute, not the parameter `w` (class attributes come
    before nn.Module.__getattr__): kiln breaks at such reads; calls are compared from the same class state."""
    m = _Shadow()

    def fn(x):
        y = m(x)
        _Shadow.w = 2.0
        return y, m(x), m.w

    x = _t(2)
    try:
        _forget_shadow()
        want = fn(x)
        _forget_shadow()
        reset()
        got = compile_fn(fn, CountingBackend())(x)
        assert_same(got, want)
    finally:
        _forget_shadow()
