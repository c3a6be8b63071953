"""Repeated calls with the same shapes must not recompile: values that are new objects on every call
(closures, bound methods made before a break) and numbers that change every call (loop counters,
item() results, clocks) live across a break are guarded by what the continuation depends on."""
import torch
import torch.nn as nn

import kiln

from .support import check_breaks, check_recompiles, graph_break, t


def test_closure_with_default_created_before_break_called_after():
    def fn(x, scale):
        def affine(v, k=scale):
            return v * k + 1

        y = affine(x)
        graph_break()
        return affine(y)

    # the default differs between calls: guarded by value through __defaults__, so the two scales
    # are two cache entries and never a wrong answer
    check_breaks(fn, t(3), 2.0, graphs=2, breaks=1)
    check_recompiles(fn, [(t(3), 2.0), (t(3), 3.0), (t(3), 2.0)], graphs=4)


def test_closure_over_changing_cell_called_after_break():
    def fn(x, offset):
        def shift(v):
            return v + offset

        graph_break()
        return shift(x)

    # the cell holds a tensor: a graph input, so new values do not recompile
    check_recompiles(fn, [(t(3), t(3, seed=1)), (t(3), t(3, seed=2)), (t(3), t(3, seed=3))], graphs=1)


def test_lambda_list_live_across_break():
    def fn(x):
        ops = [lambda v: v * 2, lambda v: v - 1]
        print("ops ready")
        for op in ops:
            x = op(x)
        return x

    check_breaks(fn, t(3), graphs=1, breaks=1, calls=3)


def test_transformer_encoder_layer_repeated_calls():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True).eval()

    def fn(x):
        return layer(x)

    counter = check_recompiles(fn, [(t(2, 4, 8),), (t(2, 4, 8, seed=1),), (t(2, 4, 8, seed=2),)],
                               graphs=range(1, 100))
    assert len(counter.graphs) == _graphs_after_first_call(fn, t(2, 4, 8)), "later calls recompiled"


def _graphs_after_first_call(fn, *args):
    from .support import CountingBackend, compile_fn, reset

    reset()
    counter = CountingBackend()
    compile_fn(fn, counter)(*args)
    return len(counter.graphs)


def test_step_counter_and_item_printed_do_not_recompile():
    w = t(3)

    def fn(x, step, tag):
        y = (x * w).sum()
        loss = y.item()
        print(f"[{tag!r}] step {step + 1:>3d} loss {loss:.4f} ok={loss > -1e9} half={step / 2}")
        return y * 2

    counter = check_recompiles(fn, [(t(3), 0, "a"), (t(3, seed=1), 1, "b"), (t(3, seed=2), 7, "c")],
                               graphs=range(1, 10))
    assert len(counter.graphs) == _graphs_after_first_call(fn, t(3), 0, "a"), "a new step value recompiled"
    check_breaks(fn, t(3), 5, "z", graphs=2, breaks=2)


def test_changing_float_used_in_control_flow_is_still_guarded():
    def fn(x, threshold):
        print("threshold", threshold)
        if threshold > 0.5:  # the value decides the branch: guarded where it is used
            return x * 2
        return x - 1

    check_recompiles(fn, [(t(3), 0.9), (t(3), 0.1), (t(3), 0.7)], graphs=3)


def test_changing_float_used_in_tensor_math_is_still_guarded():
    def fn(x, scale):
        print("scale", scale)
        return x * scale + scale * 2

    check_recompiles(fn, [(t(3), 0.5), (t(3), 2.0), (t(3), 0.5)], graphs=2)


def test_deferred_arithmetic_returned_and_stored():
    def fn(x, total, count, box):
        graph_break()
        box["mean"] = (total + 1.5) / count
        return x + 1, -total, total // 2, count % 3, f"{count!s:*^7}", total == count

    check_breaks(fn, arg_sets=[(t(3), 3.0, 4, {}), (t(3), 9.0, 5, {})], graphs=1, breaks=1, inputs_mutated=True)


class _Holder:
    pass


_HOLDER = _Holder()
_MODULE = nn.Linear(2, 2)


def test_hasattr_on_existing_objects_is_guarded():
    """An attribute added to (or deleted from) an object or module between calls changes hasattr's
    answer: the cached graph must not be reused."""
    import kiln

    def fn(x):
        y = x + 1 if hasattr(_HOLDER, "scale") else x - 1
        return y * 2 if hasattr(_MODULE, "extra") else y * 3

    compiled = kiln.compile(fn)
    x = torch.ones(2)
    try:
        for change in (lambda: None, lambda: setattr(_HOLDER, "scale", 1), lambda: setattr(_MODULE, "extra", 1),
                       lambda: delattr(_HOLDER, "scale")):
            change()
            torch.testing.assert_close(compiled(x), fn(x))
    finally:
        for obj, name in ((_HOLDER, "scale"), (_MODULE, "extra")):
            if hasattr(obj, name):
                delattr(obj, name)


class _AddOneToMul(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out + 1 if func is torch.mul else out


def test_torch_function_mode_is_guarded_both_ways():
    import kiln
    import pytest

    def fn(x):
        return torch.mul(x, 2)

    x = torch.ones(3)
    kiln.reset()
    compiled = kiln.compile(fn)
    torch.testing.assert_close(compiled(x), fn(x))  # compiled without a mode
    with _AddOneToMul():  # the entry must not serve a call under a mode: it runs eagerly
        torch.testing.assert_close(compiled(x), torch.full((3,), 3.0))
    kiln.reset()
    compiled = kiln.compile(fn)
    with _AddOneToMul():  # first call under the mode: nothing is traced through the mode
        torch.testing.assert_close(compiled(x), torch.full((3,), 3.0))
    torch.testing.assert_close(compiled(x), fn(x))  # and no entry made under it serves this call
    with _AddOneToMul(), pytest.raises(kiln.errors.GraphBreakError, match="TorchFunctionMode"):
        kiln.compile(fn, fullgraph=True)(x)


def test_parameter_changed_in_place_recompiles():
    # Module.to()/half()/to(memory_format=...) and `p.data = ...` keep the Parameter object and change
    # its strides, shape, dtype or device: the compiled code assumed the old ones
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    x = torch.randn(3, 4)
    with torch.no_grad():
        c = kiln.compile(m)
        torch.testing.assert_close(c(x), m(x))
        m[0].weight.data = torch.randn(4, 4).t()  # same shape, transposed strides
        torch.testing.assert_close(c(x), m(x))
        m[0].weight.data, m[0].bias.data = torch.randn(5, 4), torch.randn(5)  # another shape
        torch.testing.assert_close(c(x), m(x))
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).eval()
    y = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        c = kiln.compile(conv)
        torch.testing.assert_close(c(y), conv(y))
        conv.to(memory_format=torch.channels_last)
        torch.testing.assert_close(c(y), conv(y), rtol=1e-5, atol=1e-5)


def test_requires_grad_changed_after_compile_is_guarded():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    c = kiln.compile(m)
    c(x).sum().backward()
    assert m.weight.grad is not None
    m.weight.grad = None
    m.weight.requires_grad_(False)  # frozen after compiling: eager computes no gradient for it
    c(x).sum().backward()
    assert m.weight.grad is None and m.bias.grad is not None
