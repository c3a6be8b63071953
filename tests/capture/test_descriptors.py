"""Unit tests of user descriptors (values/objects.py class_attribute / set_through_descriptor): __get__ and
__set__ traced, the descriptor guarded through the class's own dict (replacing it recompiles)."""
import torch

import kiln


def setup_function():
    kiln.reset()
    kiln.stats.reset()


class Scaled:
    def __init__(self, factor):
        self.factor = factor

    def __set_name__(self, owner, name):
        self.slot = "_" + name

    def __get__(self, obj, objtype=None):
        return self if obj is None else getattr(obj, self.slot) * self.factor

    def __set__(self, obj, value):
        setattr(obj, self.slot, value)


class Holder:
    w = Scaled(2)

    def __init__(self, w):
        self.w = w


def test_descriptor_traced_and_guarded_by_the_class_dict():
    def fn(x):
        return x * Holder(3).w

    compiled = kiln.compile(fn, backend="eager")
    assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 6.0))
    assert kiln.stats.graphs == 1 and not kiln.stats.graph_breaks
    old = Holder.__dict__["w"]
    try:
        replacement = Scaled(5)
        replacement.slot = "_w"
        Holder.w = replacement  # a class-dict entry replaced: the guard on Holder.__dict__['w'] fails
        assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 15.0))
        old.factor = 4  # and the attributes __get__ read are guarded too
        Holder.w = old
        assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 12.0))
    finally:
        old.factor = 2
        Holder.w = old
