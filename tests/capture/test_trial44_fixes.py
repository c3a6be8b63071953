"""What a new user's capture trial found (session 12), each against eager: Python attributes of tensors
read with getattr/hasattr, an assignment to a missing attribute of a __slots__ object caught by the
program, an out-of-range int index and an oversized unfold window with dynamic sizes."""
from __future__ import annotations

import pytest
import torch

import kiln


def test_getattr_and_hasattr_see_python_attributes_of_tensors():
    def fn(x):
        return x * getattr(x, "scale", 1.0), hasattr(x, "scale"), hasattr(x, "fake_device")

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    x = torch.ones(2)
    for scale in (None, 3.0, 4.0, None):
        if scale is None:
            x.__dict__.pop("scale", None)
        else:
            x.scale = scale
        got, want = compiled(x), fn(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:]


def test_a_counter_kept_on_a_tensor():
    def fn(x):
        x.count = getattr(x, "count", 0) + 1
        return x * x.count

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    a, b = torch.ones(1), torch.ones(1)
    for _ in range(3):
        torch.testing.assert_close(compiled(a), fn(b))
    assert a.count == b.count == 3


def test_a_parameters_python_attribute():
    def fn(p):
        return p * getattr(p, "lr_mult", 1.0)

    kiln.reset()
    p = torch.nn.Parameter(torch.ones(2))
    p.lr_mult = 3.0
    torch.testing.assert_close(kiln.compile(fn)(p), fn(p))


class _Slotted:
    __slots__ = ("a",)


def _store_missing(x, p):
    try:
        p.c = 1
    except AttributeError as e:
        return x - 1, str(e)
    return x + 1, ""


def _store_missing_on_a_new_object(x):
    q = _Slotted()
    try:
        q.c = 1
    except AttributeError as e:
        return x - 1, str(e)
    return x + 1, ""


def test_assigning_a_missing_slot_raises_where_the_program_catches_it():
    kiln.reset()
    x = torch.ones(2)
    got, want = kiln.compile(_store_missing, backend="eager")(x, _Slotted()), _store_missing(x, _Slotted())
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1]
    got, want = kiln.compile(_store_missing_on_a_new_object, backend="eager")(x), _store_missing_on_a_new_object(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1]


def test_an_int_index_out_of_range_with_dynamic_sizes_raises_eagers_error():
    # the kernel read outside the tensor (a segfault for a large index)
    def fn(x, i):
        return x[i] * 2

    kiln.reset()
    compiled = kiln.compile(fn)
    compiled(torch.arange(10.0), 3)
    compiled(torch.arange(8.0), 5)  # (sizes and the int are dynamic from here)
    for n, i in ((4, 6), (4, -5), (4, 10 ** 10)):
        with pytest.raises(IndexError) as eager:
            fn(torch.arange(float(n)), i)
        with pytest.raises(IndexError) as got:
            compiled(torch.arange(float(n)), i)
        assert str(got.value) == str(eager.value)
    torch.testing.assert_close(compiled(torch.arange(4.0), -4), fn(torch.arange(4.0), -4))


def test_an_unfold_window_longer_than_the_dim_raises_eagers_error():
    def fn(x, k):
        return x.unfold(0, k, k).sum(-1)

    kiln.reset()
    compiled = kiln.compile(fn)
    compiled(torch.arange(6.0), 2)
    compiled(torch.arange(9.0), 3)
    with pytest.raises(RuntimeError) as eager:
        fn(torch.arange(4.0), 6)
    with pytest.raises(RuntimeError) as got:
        compiled(torch.arange(4.0), 6)
    assert str(got.value) == str(eager.value)


def _reads_locals(x, k):
    y = k * 2
    return x + locals()["y"]


def _evaluates(x, k):
    y = k * 2
    return x + eval("y + k")


def _lists_names(x, k):
    y = k * 2
    return x * y, sorted(dir())


def _formats_with_locals(x, k):
    y = k * 2
    return x * 1, "{y}:{k}".format(**vars())


@pytest.mark.parametrize("fn", [_reads_locals, _evaluates, _lists_names, _formats_with_locals])
def test_what_reads_the_frames_locals_runs_the_frame_as_python(fn):
    # a graph break left values the trace kept out of the frame and showed kiln's temporaries
    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    for k in (1, 2):
        got, want = compiled(torch.ones(2), k), fn(torch.ones(2), k)
        if isinstance(want, tuple):
            torch.testing.assert_close(got[0], want[0])
            assert got[1] == want[1]
        else:
            torch.testing.assert_close(got, want)
    assert any("local variables" in reason for reason in kiln.stats.eager_fallbacks)


def test_locals_after_a_graph_break_sees_the_frames_variables():
    def fn(x):
        y = x + 1
        print("", end="")  # (a graph break)
        return sorted(locals()), eval("y")

    kiln.reset()
    got, want = kiln.compile(fn, backend="eager")(torch.ones(2)), fn(torch.ones(2))
    assert got[0] == want[0]
    torch.testing.assert_close(got[1], want[1])
