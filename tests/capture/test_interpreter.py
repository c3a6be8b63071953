"""Unit tests of the interpreter stage: a frame traced directly into an FX graph and transformed code,
and which files kiln looks inside."""
import dis
import os

import torch

from kiln.capture import skipfiles
from kiln.capture.interpreter import RootTracer
from kiln.errors import Unsupported
from kiln.options import Options


def trace(fn, **frame_locals):
    tracer = RootTracer(fn.__code__, frame_locals, fn.__globals__, __builtins__, fn.__closure__, Options())
    result = tracer.run()
    return tracer, result


def test_traces_tensor_ops_into_graph_with_inputs_and_guards():
    def fn(x, scale):
        y = x * scale
        for _ in range(3):
            y = torch.relu(y) + 1
        return y, x.shape[0]

    x = torch.randn(4, 2)
    tracer, result = trace(fn, x=x, scale=2.0)
    out = tracer.output
    targets = [n.target for n in out.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.relu) == 3
    assert [s.name() for s in out.input_sources] == ["L['x']"]
    assert out.example_inputs[0] is x
    kinds = {g.kind.value for g in out.guards}
    assert {"tensor", "constant"} <= kinds
    assert result.elements[1].as_constant() == 4


def test_unsupported_construct_names_the_line():
    def fn(x):
        y = x + 1
        return y.item()

    x = torch.randn(1)
    try:
        trace(fn, x=x)
    except Unsupported as exc:
        assert exc.lineno == fn.__code__.co_firstlineno + 2
        assert "item" in exc.reason
    else:
        raise AssertionError("expected Unsupported")


def test_skipfiles():
    assert skipfiles.is_skipped_file(os.__file__)
    assert skipfiles.is_skipped_file(torch.nn.functional.__file__)
    assert not skipfiles.is_skipped_file(torch.nn.Linear.forward.__code__.co_filename)
    assert skipfiles.is_skipped_file(torch.nn.Module.__call__.__code__.co_filename)
    assert not skipfiles.is_skipped_file(__file__)
    assert skipfiles.is_skipped_file(skipfiles.__file__)


def test_transformed_code_calls_graph_and_keeps_signature():
    import kiln

    def fn(a, b=2, *rest, k=3, **kw):
        return a * b + k

    seen = {}

    def backend(gm, inputs):
        seen["gm"] = gm
        return gm.forward

    x = torch.randn(3)
    out = kiln.compile(fn, backend=backend)(x, 4, k=5)
    torch.testing.assert_close(out, x * 4 + 5)
    compiler = kiln.api.config_of(kiln.compile(fn, backend=backend))
    assert "gm" in seen


def test_global_of_another_module_is_guarded():
    import kiln
    from tests.capture import other_module

    def fn(x):
        return other_module.scaled(x) + 1

    cf = kiln.compile(fn, backend="eager")
    x = torch.ones(2)
    torch.testing.assert_close(cf(x), x * 2 + 1)
    other_module.SCALE = 5.0
    try:
        torch.testing.assert_close(cf(x), x * 5 + 1)
    finally:
        other_module.SCALE = 2.0


def _sub(n):
    yield from range(n)
    return n * 10


def _delegate(n):
    got = yield from _sub(n)
    yield got
    yield from (i + 100 for i in range(2))


def test_yield_from_steps_sub_iterators_and_gives_generator_return_value():
    # GET_YIELD_FROM_ITER / SEND (/ END_SEND on 3.12): items of the sub-generator, then its return value
    def fn(x, n):
        return list(_delegate(n)), x + 1

    tracer, result = trace(fn, x=torch.randn(2), n=3)
    assert [v.as_constant() for v in result.elements[0].elements] == [0, 1, 2, 30, 100, 101]


def test_inference_mode_block_marks_what_eager_makes_inference_tensors():
    def fn(x):
        with torch.inference_mode():
            y = x * 2  # new storage inside: inference
            v = y[0]  # a view of it: inference
            x.add_(1)  # the input changed in place: stays normal
        z = y + 1  # made outside: normal
        return y, v, z, x

    tracer, result = trace(fn, x=torch.randn(2, 2))
    out = tracer.output
    assert out.inference.depth == 0
    flags = [out.inference.is_inference(t.example) for t in result.elements]
    assert flags == [True, True, False, False]
    nodes = [n.target for n in out.graph.nodes if n.op == "call_function"]
    assert nodes.count(torch._C._set_grad_enabled) == 2  # grad off inside, back on after


def test_inference_mode_in_place_on_inference_tensor_outside_is_refused():
    def fn(x):
        with torch.inference_mode():
            y = x * 2
        y.add_(1)
        return y

    try:
        trace(fn, x=torch.randn(2))
    except Unsupported as exc:
        assert "in-place" in exc.reason
    else:
        raise AssertionError("expected Unsupported")
