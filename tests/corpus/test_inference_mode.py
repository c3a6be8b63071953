"""`with torch.inference_mode():` traced into the graph: inference tensors, grad mode and eager's errors.

check() compares is_inference() and requires_grad of every tensor result with eager's. The last cases run
the "aot_eager" and "kiln" backends (kiln only).
"""
import pytest
import torch

from . import harness
from .harness import assert_same, check


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def _returns_inference_tensors_and_views(x):
    with torch.inference_mode():
        y = x.sin() * 2
        row = y[1]  # a view of an inference tensor: one too, sharing its storage
        inside = (torch.is_inference_mode_enabled(), torch.is_grad_enabled())
    z = y.cos()  # made outside from an inference tensor: a normal tensor
    return y, row, z, x * 3, inside, y.is_inference(), z.is_inference(), row.is_inference()


def test_outputs_made_inside_are_inference_tensors():
    check(_returns_inference_tensors_and_views, _t(2, 3).requires_grad_(), graphs=1, dynamo_graphs=(1, 2, 3, 4))


def test_outputs_made_inside_share_storage_as_in_eager():
    def fn(x):
        with torch.inference_mode():
            y = x + 1
            v = y.t()
        return y, v

    harness.reset()
    y, v = harness.compile_fn(fn, harness.CountingBackend())(_t(2, 3))
    assert y.is_inference() and v.is_inference()
    assert v.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()


def test_grad_is_off_inside_and_on_after():
    def fn(x, w):
        with torch.inference_mode():
            a = x * w
        b = x * w
        return a, b, a.requires_grad, b.requires_grad

    check(fn, _t(3), _t(3, seed=1).requires_grad_(), graphs=1)


def test_inputs_changed_in_place_inside_stay_normal():
    def fn(x):
        with torch.inference_mode():
            x.add_(1)
            y = x * 2
        return x, y

    check(fn, _t(3), graphs=1, inputs_mutated=True)


def test_view_of_a_tensor_that_requires_grad_inside_breaks():
    def fn(x):
        with torch.inference_mode():
            v = x.view(3)  # requires grad in eager (unlike under no_grad): kiln breaks at the with
            y = x * 2
        return v, y, v.requires_grad

    check(fn, _t(3).requires_grad_(), graphs=1, dynamo_graphs=(1, 2))


def test_enable_grad_inside_breaks():
    def fn(x):
        with torch.inference_mode():
            with torch.enable_grad():
                y = x * 2
        return y, torch.is_grad_enabled()

    check(fn, _t(3).requires_grad_(), graphs=1, dynamo_graphs=(0, 1, 2))


def test_graph_break_inside_block_moves_to_the_with():
    def fn(x):
        a = x + 1
        with torch.inference_mode():
            y = a * 2
            print("inside", end="\r")
            y = y + 1
        return y, y.is_inference(), a

    # the block runs under the real mode from its with on: a resume function's graph before the print and
    # one after it
    check(fn, _t(3), graphs=3, dynamo_graphs=(1, 2, 3))


def test_block_in_an_inlined_helper_with_exception():
    def helper(x):
        with torch.inference_mode():
            y = x * 2
            if y.shape[0] == 3:
                raise ValueError("left the block")
        return y

    def fn(x):
        try:
            helper(x)
        except ValueError:
            pass
        return torch.is_inference_mode_enabled(), torch.is_grad_enabled(), x + 1

    check(fn, _t(3).requires_grad_(), graphs=1, dynamo_graphs=2)


def test_decorated_helper_returns_inference_tensors():
    @torch.inference_mode()
    def helper(x):
        return x * 3, torch.is_inference_mode_enabled()

    def fn(x):
        y, inside = helper(x)
        return y, inside, y.is_inference(), x + 1

    check(fn, _t(3).requires_grad_(), graphs=1, dynamo_graphs=(1, 2))


def test_inference_mode_false_outside_is_a_no_op():
    def fn(x):
        with torch.inference_mode(False):
            y = x * 2
        return y

    check(fn, _t(3).requires_grad_(), graphs=1)


def test_called_under_an_outer_inference_mode():
    def fn(x):
        with torch.inference_mode():
            y = x * 2
        return y, y + 1

    harness.reset()
    compiled = harness.compile_fn(fn, harness.CountingBackend())
    with torch.inference_mode():
        assert_same(compiled(_t(3)), fn(_t(3)))
    assert_same(compiled(_t(3)), fn(_t(3)))


# ---- what eager refuses ------------------------------------------------------------------------


def _in_place_after_the_block(x):
    with torch.inference_mode():
        y = x * 2
    y.add_(1)  # eager: RuntimeError (in-place update to an inference tensor outside InferenceMode)
    return y


def _saved_for_backward(x, w):
    with torch.inference_mode():
        y = x * 2
    return y * w  # eager: RuntimeError (inference tensors cannot be saved for backward)


def _view_made_inside_changed_after(x):
    with torch.inference_mode():
        v = x.view(3)
    v.mul_(2)  # x requires grad: RuntimeError (a view created in inference mode changed in place in normal mode)
    return v


def test_view_made_inside_changed_after_without_grad():
    def fn(x):
        with torch.inference_mode():
            v = x.view(3)
        v.mul_(2)  # x does not require grad: eager runs it (kiln breaks before it, conservatively)
        return v, x

    check(fn, _t(3), graphs=1, inputs_mutated=True)


@pytest.mark.parametrize("fn, args", [
    (_in_place_after_the_block, (_t(3),)),
    (_saved_for_backward, (_t(3), _t(3, seed=1).requires_grad_())),
    (_view_made_inside_changed_after, (_t(3).requires_grad_(),)),
])
def test_errors_eager_raises_are_raised(fn, args):
    with pytest.raises(RuntimeError) as eager:
        fn(*args)
    harness.reset()
    compiled = harness.compile_fn(fn, harness.CountingBackend())
    with pytest.raises(RuntimeError) as compiled_error:
        compiled(*args)
    if not harness.USE_DYNAMO:  # the same error, raised by the op itself (run as Python at a break)
        assert str(compiled_error.value)[:40] == str(eager.value)[:40]


def test_inference_tensor_with_grad_input_not_saved_runs():
    def fn(x, w):
        with torch.inference_mode():
            y = x * 2
        return y + w  # add saves nothing: eager runs it (kiln breaks before it, conservatively)

    check(fn, _t(3), _t(3, seed=1).requires_grad_(), graphs=1, dynamo_graphs=1)


# ---- other backends -----------------------------------------------------------------------------


@pytest.mark.skipif(harness.USE_DYNAMO, reason="kiln's backends (dynamo's aot_eager gives normal tensors)")
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_backends_give_inference_tensors(backend):
    import kiln

    x = _t(2, 3).requires_grad_()
    expected = _returns_inference_tensors_and_views(x)
    kiln.reset()
    out = kiln.compile(_returns_inference_tensors_and_views, backend=backend)(x)
    assert_same(out, expected, rtol=1e-5, atol=1e-6)
    if backend != "kiln":  # the kiln backend's training runtime copies an output viewing another one
        assert out[1].untyped_storage().data_ptr() == out[0].untyped_storage().data_ptr()
