"""Writes and reads that depend on a tensor's storage, not only its shape: ``as_strided`` (which indexes
the storage from its start) on a transposed, offset or mutated tensor, and a direct write to a tensor
laid out unlike the value that computes it (``x.copy_(y)`` on a transposed ``x``). Found by a review:
the positions of an ``as_strided`` write were row-major from offset 0, and a view made after a direct
write to a transposed input read the new value in the other orientation."""
from __future__ import annotations

import pytest
import torch

import kiln

BACKENDS = ["aot_eager", "kiln"]


def _check(fn, *make_inputs, backend):
    kiln.reset()
    want_in = [make() for make in make_inputs]
    got_in = [make() for make in make_inputs]
    want = fn(*want_in)
    got = kiln.compile(fn, backend=backend)(*got_in)
    torch.testing.assert_close(got, want)
    for g, w in zip(got_in, want_in):
        torch.testing.assert_close(g, w)
    return got, want


def _transposed():
    return torch.arange(12.0).reshape(4, 3).t()


def _write_as_strided(x):
    x.as_strided((3,), (1,)).add_(1)
    return x + 0


def _write_as_strided_of_intermediate(x):
    y = (x * 2).t().contiguous().t()  # column-major intermediate
    y.as_strided((2, 2), (1, 4)).mul_(-1)
    return y + 0


def _read_as_strided_after_write(x):
    x.add_(1)
    return x.as_strided((2,), (3,)) * 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_write_as_strided, _write_as_strided_of_intermediate,
                                _read_as_strided_after_write])
def test_as_strided_indexes_the_storage_of_a_transposed_tensor(fn, backend):
    _check(fn, _transposed, backend=backend)


def _offset_input():
    return torch.arange(6.0)[1:]


def _write_below_the_view(x):
    x.as_strided((2,), (1,), 0).add_(10)  # storage element 0 is outside x
    return x + 0


def _read_after_write(x):
    x.add_(1)
    return x.as_strided((2,), (1,), 1) * 1


def _slice_after_write(x):
    x.exp_()
    return x[:2] * 2  # (the kernel read the written value through the slice at the input's offset)


def _view_after_write(x):
    x.mul_(3)
    return x.unsqueeze(0)[:, 1:] + 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_write_below_the_view, _read_after_write, _slice_after_write, _view_after_write])
def test_as_strided_of_an_input_with_an_offset(fn, backend):
    base_want, base_got = torch.arange(6.0), torch.arange(6.0)
    kiln.reset()
    want = fn(base_want[1:])
    got = kiln.compile(fn, backend=backend)(base_got[1:])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(base_got, base_want)


def _copy_then_view(x, y):
    x.copy_(y)
    return x.t().reshape(-1) * 1


def _add_then_view(x, y):
    x.add_(y.t().t())
    return x.t().reshape(-1) + x[0].sum()


def _intermediate_copy_then_view(x, y):
    z = torch.zeros(4, 3).t()
    z.copy_(y)
    return z.t().reshape(-1) * 1 + x.sum()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_copy_then_view, _add_then_view, _intermediate_copy_then_view])
def test_a_direct_write_keeps_the_layout_of_what_it_writes(fn, backend):
    got, want = _check(fn, lambda: torch.zeros(4, 3).t(), lambda: torch.arange(12.0).reshape(3, 4),
                       backend=backend)
    assert got.stride() == want.stride()


def _beyond_an_intermediate(x):
    return (x * 2).sum(0).as_strided((2,), (1,))  # a one-element storage


def _beyond_an_input(x):
    return x.as_strided((3,), (2,), 1) * 1


@pytest.mark.parametrize("fn", [_beyond_an_intermediate, _beyond_an_input])
def test_as_strided_beyond_the_storage_raises_eagers_error(fn):
    # meta tensors do not check the storage's bounds: kiln traced a view reaching outside it
    kiln.reset()
    x = torch.randn(3)
    with pytest.raises(RuntimeError, match="out of bounds for storage") as eager:
        fn(x)
    with pytest.raises(RuntimeError) as compiled:
        kiln.compile(fn)(x)
    assert str(compiled.value) == str(eager.value)


def _slice_of_a_wider_input():
    return torch.arange(24.0).reshape(4, 6)[:, :3]  # not dense: no tensor of its own has its strides


def _write_then_views(x):
    x.add_(1)
    return x[1:] * 2, x.t() + 0, x.sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_direct_write_to_a_slice_of_a_wider_input_then_views_compiles(backend):
    kiln.reset()
    kiln.stats.reset()
    _check(_write_then_views, _slice_of_a_wider_input, backend=backend)
    assert not kiln.stats.eager_fallbacks  # (its new value is compact; the views index it as it is)
