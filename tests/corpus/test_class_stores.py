"""Stores to class attributes inside compiled code (values/class_stores.py): recorded, replayed after the
graph, seen by later reads through the class, subclasses and instances (one graph, as TorchDynamo); stores
kiln does not model (functions, nn.Module classes) break at the store."""
import abc

import torch

from .harness import check, dynamo_bug


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


def test_stores_of_functions_and_to_module_classes_break():
    original = _Base.m

    def fn(x):
        _Base.m = _two  # replaces a method: a break
        y = x * _Base().m()
        _Net.scale = 3.0  # an nn.Module class: a break
        return y + _NET(x)

    try:
        check(fn, _t(2), graphs=2, dynamo_graphs=1, breaks=2)  # (nothing before the first break)
    finally:
        _Base.m = original
        _Net.scale = 1.0
