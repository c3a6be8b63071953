"""Stores to class attributes inside a compiled function (`Cls.counter += 1`, `type(self).x = ...`,
`setattr(Cls, ...)`, replacing a method): kiln breaks the graph at the store (it runs as Python), and
no later read, in the same frame or on a later call through a cached graph, sees the old value.

The class is shared state, so each case runs a sequence of calls eagerly, resets the class, runs the
same sequence compiled, and compares every result and the class's final attributes."""
import pytest
import torch

from .harness import USE_DYNAMO, CountingBackend, assert_same, compile_fn, dynamo_bug, reset


def _run_sequences(fn, restore, state, args_per_call, max_graphs=None):
    restore()
    eager = [fn(*args) for args in args_per_call]
    eager_state = state()
    restore()
    reset()
    backend = CountingBackend()
    compiled = compile_fn(fn, backend)
    got = [compiled(*args) for args in args_per_call]
    assert_same(got, eager, path="results")
    assert state() == eager_state
    if max_graphs is not None:
        assert backend.graph_count <= max_graphs
    restore()
    return backend


class Counted:
    counter = 0
    scale = 2.0

    def __init__(self):
        type(self).counter += 1  # `type(self).x = ...` inside an inlined __init__
        self.id = type(self).counter

    def doubled(self, x):
        return x * 2

    def tripled(self, x):
        return x * 3


def _restore():
    Counted.counter = 0
    Counted.scale = 2.0
    Counted.doubled = Counted.__dict__.get("_orig_doubled", Counted.doubled)


Counted._orig_doubled = Counted.doubled


def _state():
    return Counted.counter, Counted.scale, Counted.doubled is Counted._orig_doubled


@dynamo_bug("wrong result: class attribute stores in a compiled function")
def test_counter_incremented_through_class_and_type_self():
    def fn(x):
        Counted.counter += 1
        a = Counted()
        b = Counted()
        return x * Counted.counter + a.id + b.id * 10 + a.counter

    _run_sequences(fn, _restore, _state, [(torch.ones(3),)] * 3)


@dynamo_bug("wrong result: setattr on a class then a read through a new instance")
def test_setattr_on_class_then_read_through_new_instance():
    def fn(x):
        setattr(Counted, "scale", Counted.scale + 1)
        c = Counted()
        return x * c.scale, type(c).scale

    _run_sequences(fn, _restore, _state, [(torch.ones(3),)] * 3)


def test_class_attribute_changed_between_calls_read_through_new_instance():
    def fn(x):
        return x * Counted().scale

    def calls():
        for s in (2.0, 5.0, 9.0):
            Counted.scale = s
            yield (torch.ones(2),)

    restore_and_eager = []
    _restore()
    for args in calls():
        restore_and_eager.append(fn(*args))
    _restore()
    reset()
    compiled = compile_fn(fn, CountingBackend())
    got = [compiled(*args) for args in calls()]
    _restore()
    assert_same(got, restore_and_eager, path="results")


@pytest.mark.skipif(USE_DYNAMO, reason="kiln's own guards on methods of classes compiled code stored into")
def test_method_replaced_by_compiled_code_is_not_reused_from_the_cache():
    def fn(x):
        c = Counted()
        out = c.doubled(x)
        Counted.doubled = Counted.tripled  # runs as Python at a graph break
        return out

    _run_sequences(fn, _restore, _state, [(torch.ones(3),)] * 3)
