"""Unit tests of float arguments as graph inputs: the policy (capture/dynamic.py), the expressions and
guards of SymbolicFloat (capture/values/symbolic_float.py), and the captured graph."""
import torch

import kiln
from kiln.api import config_of
from kiln.capture.dynamic import DynamicPolicy, FrameShapes
from kiln.capture.sources import LocalSource
from kiln.capture.values import symbolic_float as sf


def test_policy_automatic_dynamic_after_a_change():
    shapes = FrameShapes()
    assert not DynamicPolicy(None, shapes, True, floats=True).float_is_dynamic("L['lr']", 0.1)
    assert not DynamicPolicy(None, shapes, True, floats=True).float_is_dynamic("L['lr']", 0.1)
    assert DynamicPolicy(None, shapes, True, floats=True).float_is_dynamic("L['lr']", 0.2)
    assert DynamicPolicy(None, shapes, True, floats=True).float_is_dynamic("L['lr']", 0.2)  # stays so
    assert not DynamicPolicy(None, shapes, True, floats=True).float_is_dynamic("L['other']", 0.2)


def test_policy_modes_and_option():
    assert DynamicPolicy(True, FrameShapes(), True, floats=True).float_is_dynamic("L['s']", 1.0)
    shapes = FrameShapes(floats={"L['s']": 1.0})
    assert not DynamicPolicy(False, shapes, True, floats=True).float_is_dynamic("L['s']", 2.0)
    assert not DynamicPolicy(None, shapes, True, floats=False).float_is_dynamic("L['s']", 2.0)
    # any backend takes the tensor input (not only those that take symbolic sizes)
    assert DynamicPolicy(True, FrameShapes(), False, floats=True).float_is_dynamic("L['s']", 1.0)
    # -0.0 and 0.0 are different values (x * -0.0 differs from x * 0.0)
    assert DynamicPolicy(None, FrameShapes(floats={"L['s']": 0.0}), True,
                                         floats=True).float_is_dynamic("L['s']", -0.0)


def test_substitute_and_merge_place_names():
    assert sf._substitute("(a0 * a1)", ["L['a1']", "L['a0']"]) == "(L['a1'] * L['a0'])"
    a = ("(a0 + a1)", [LocalSource("x"), LocalSource("y")], 0.0)
    b = ("(a0 * 2)", [LocalSource("y")], 0.0)
    ta, tb, places = sf._merge(a, b)
    assert (ta, tb, [p.name() for p in places]) == ("(a0 + a1)", "(a1 * 2)", ["L['x']", "L['y']"])


def test_literals_are_exact_or_refused():
    assert float(sf._literal(0.1)) == 0.1 and sf._literal(True) == "1"
    assert sf._literal(float("inf")) is None and sf._literal(1 + 2j) is None


def test_float_tensor_source_makes_a_double_tensor():
    t = sf.as_double_tensor(0.1)
    assert t.dtype == torch.float64 and t.dim() == 0 and t.device.type == "cpu" and t.item() == 0.1
    assert sf.FloatTensorSource(LocalSource("lr")).name() == "L['lr']"


def _graphs(compiled):
    return [r.graph for r in config_of(compiled).compiler.records if r.graph is not None]


def test_second_graph_takes_the_float_as_a_placeholder_and_guards_the_predicate():
    def f(x, lr):
        if lr > 0.1:
            return x * lr
        return x

    seen = []

    def backend(gm, example_inputs):
        seen.append(list(example_inputs))
        return gm

    c = kiln.compile(f, backend=backend)
    x = torch.randn(3)
    c(x, 0.5)
    c(x, 0.25)
    c(x, 0.75)  # the second entry: no compile
    assert len(seen) == 2
    assert len(seen[0]) == 1  # static: the float is a constant
    lr = seen[1][1]
    assert isinstance(lr, torch.Tensor) and lr.dtype == torch.float64 and lr.item() == 0.25
    guards = [r for r in config_of(c).compiler.records if r.graph is not None][-1].guards
    assert "(L['lr'] > 0.1) is True" in guards
    assert "L['lr'] ==" not in guards  # the value itself is not guarded


def test_pure_float_arithmetic_adds_no_graph_and_no_value_guard():
    """The graph node of a number is made only when a tensor op uses it: Python float code alone
    compiles no graph, and its result is computed from the argument at run time."""
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm

    def f(lr, step):
        return (lr * 0.5 - step) / 3

    c = kiln.compile(f, backend=backend)
    for lr in (0.1, 0.2, 0.3, 0.7):
        assert c(lr, 4) == f(lr, 4)
    assert seen == []
    x = torch.randn(3)
    c = kiln.compile(lambda x, lr, step: x * f(lr, step), backend=backend)
    for lr in (0.1, 0.2, 0.3, 0.7):
        torch.testing.assert_close(c(x, lr, 4), x * f(lr, 4), rtol=0, atol=0)
    assert len(seen) == 2  # (static, then the float input: its arithmetic is in the graph)
    assert sum(n.op == "placeholder" for n in seen[1].graph.nodes) == 2
