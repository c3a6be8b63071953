"""Unit tests of the capture stage's models of tensors in Python containers: `element == item` with a
tensor (values/tensor_compare.py), Counters keyed by tensors (values/collections_values.py)."""
import collections

import pytest
import torch

from kiln.capture.guards import GuardKind
from kiln.capture.interpreter import RootTracer
from kiln.capture.values.exceptions import TracedRaise
from kiln.errors import Unsupported
from kiln.options import Options

def trace(fn, **frame_locals):
    tracer = RootTracer(fn.__code__, frame_locals, fn.__globals__, __builtins__, fn.__closure__, Options())
    return tracer, tracer.run()


def test_identity_decides_before_eq():
    def fn(x, y):
        a = x + 1
        return x in (x, y), [a, a].count(a), [y, a].index(y)

    tracer, result = trace(fn, x=torch.randn(3), y=torch.randn(3))
    assert [e.as_constant() for e in result.elements] == [True, 2, 0]
    eqs = [n for n in tracer.output.graph.nodes if n.op == "call_function" and "eq" in str(n.target)]
    assert eqs == []  # no == was needed


@pytest.mark.parametrize("shape, message", [((3,), "more than one value"), ((0,), "no values")])
def test_eq_of_several_or_no_elements_is_eagers_runtime_error(shape, message):
    def fn(x, y):
        return y in [x, y]

    with pytest.raises(TracedRaise) as info:
        trace(fn, x=torch.randn(shape), y=torch.randn(shape))
    assert info.value.exc_value.cls is RuntimeError
    with pytest.raises(RuntimeError, match=message):
        fn(torch.randn(shape), torch.randn(shape))
    assert message in str(info.value)


def test_eq_of_one_element_breaks():
    def fn(x, y):
        return [x].count(y)

    with pytest.raises(Unsupported) as info:
        trace(fn, x=torch.randn(1), y=torch.randn(1))
    assert not isinstance(info.value, TracedRaise) and "one-element tensor" in info.value.reason


class _Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        try:
            return self.w in [x]  # x == w (x is not w): RuntimeError
        except RuntimeError:
            return "raised"


def test_an_input_compared_with_a_held_tensor_is_guarded_not_to_be_it():
    m = _Holder()
    tracer = RootTracer(m.forward.__code__, {"self": m, "x": torch.randn(3)}, m.forward.__globals__,
                        __builtins__, None, Options())
    assert tracer.run().as_constant() == "raised"
    guards = [g for g in tracer.output.guards if g.kind is GuardKind.NOT_OBJECT]
    assert [g.source.name() for g in guards] == ["L['x']"]


def test_counter_keys_are_tensors_by_identity():
    def fn(x, y):
        c = collections.Counter([x, y, x])
        return c[x], c[y], c[x + 1], c.most_common(1)[0][0]

    x, y = torch.randn(2), torch.randn(2)
    tracer, result = trace(fn, x=x, y=y)
    counts = [e.as_constant() for e in result.elements[:3]]
    assert counts == [2, 1, 0]
    assert result.elements[3].example is tracer.output.example_inputs[0] or result.elements[3].source.name() == "L['x']"


def test_deque_searches_compare_identity_then_eq_and_stop_at_the_first_match():
    def fn(x, y):
        dq = collections.deque([x, y])
        return dq.index(x), x in dq, dq.count(y) if False else 0

    _, result = trace(fn, x=torch.randn(2), y=torch.randn(2))
    assert [e.as_constant() for e in result.elements] == [0, True, 0]

    def with_start(x):
        return collections.deque([x]).index(x, 0)

    with pytest.raises(Unsupported, match="start/stop"):
        trace(with_start, x=torch.randn(2))


def test_set_order_replays_adding_members_with_these_hashes():
    from kiln.capture.values.set_tensor_order import set_order

    for members in ([8, 16], [16, 8], [1, 9, 17, 25, 3], list(range(0, 400, 16)), ["a", "b", "c", 5]):
        real = set()
        for m in members:
            real.add(m)
        assert set_order(tuple(hash(m) for m in members)) == tuple(members.index(m) for m in real)
    assert set_order((5, 5)) is None  # equal hashes: CPython would compare the members
    # adds and discards replayed: the dummy a discard leaves decides where a later add lands
    members = [8, 16, 24, 32, 40, 48]
    real = set()
    ops = [(1, 0), (1, 1), (1, 2), (0, 1), (1, 3), (0, 0), (1, 4), (1, 1), (1, 5)]
    for is_add, i in ops:
        real.add(members[i]) if is_add else real.discard(members[i])
    assert set_order(tuple(members), tuple(ops)) == tuple(members.index(m) for m in real)


def test_iterating_a_set_of_inputs_guards_the_order_of_their_hashes():
    def fn(x, y, z):
        return [t is z for t in {x, y, z}]

    args = dict(x=torch.randn(2), y=torch.randn(2), z=torch.randn(2))
    tracer, result = trace(fn, **args)
    assert [e.as_constant() for e in result.elements] == [t is args["z"] for t in set(args.values())]
    orders = [g for g in tracer.output.guards if "___set_order_is((id(L['x']), id(L['y']), id(L['z']),), ((1, 0), (1, 1), (1, 2)),"
              in g.source.name()]
    assert len(orders) == 1


def test_iterating_a_set_holding_a_tensor_the_graph_makes_breaks():
    def fn(x, y):
        return list({x, y + 1})

    with pytest.raises(Unsupported, match="tensor the graph makes"):
        trace(fn, x=torch.randn(2), y=torch.randn(2))


def test_a_set_of_tensors_and_a_nan_breaks():
    def fn(x, y):
        return list({x, y, float("nan")})  # NaN hashes by identity: another object on the next call

    with pytest.raises(Unsupported, match="hash may"):
        trace(fn, x=torch.randn(2), y=torch.randn(2))
