"""A write through a view that has another layout than its base (``y.t().cumsum_(1)``): the base keeps
its strides, as in eager, so later views of it read the right elements (functionalize.keep_layout).
Found by a new-user trial: the slice read after the write indexed the column-major value row-major."""
from __future__ import annotations

import pytest
import torch

import kiln


def _scan(x):
    y = x.clone()
    y.t().cumsum_(1)
    y[:, 1:] *= 2
    return y


def _scatter(x):
    y = x.clone()
    y.t().scatter_add_(1, torch.tensor([[0, 1]] * 4), torch.ones(4, 2))
    y[:, 1:] *= 2
    return y


def _matmul(x):
    y = x.clone()
    y.t().copy_(torch.ones(4, 4) @ x.t())
    y[:, 1:] *= 2
    return y


def _channels_last(x):
    y = x.clone(memory_format=torch.channels_last)
    y.permute(0, 2, 3, 1).cumsum_(3)
    y[:, :, 1:] += 1
    return y


def _input(x):
    x.t().cumprod_(1)
    x[:, 1:] *= 2
    return x.sum(0)


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
@pytest.mark.parametrize("fn, shape", [(_scan, (5, 4)), (_scatter, (5, 4)), (_matmul, (5, 4)),
                                       (_channels_last, (2, 3, 4, 5)), (_input, (5, 4))])
def test_writes_through_a_transposed_view_keep_the_base_layout(fn, shape, backend):
    kiln.reset()
    x = torch.randn(*shape)
    want_in, got_in = x.clone(), x.clone()
    want = fn(want_in)
    got = kiln.compile(fn, backend=backend)(got_in)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_in, want_in)
    assert got.stride() == want.stride()


def test_writes_through_a_transposed_view_on_the_triton_path():
    pytest.importorskip("triton")
    kiln.reset()
    x = torch.randn(5, 4)
    got = kiln.compile(_scan, options=kiln.Options(cpu_codegen="triton", warm_cache=False))(x)
    torch.testing.assert_close(got, _scan(x))
    assert got.stride() == (4, 1)


def _expanded_slice(x):
    v = x.unsqueeze(0).expand(3, 3, 4)
    v[1].mul_(3)
    v.select(0, 0).add_(1)
    return x.sum()


def _expanded_column(x):
    y = x.clone()
    y[:, :1].expand(3, 4)[:, 0].fill_(7)
    return y


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
@pytest.mark.parametrize("fn", [_expanded_slice, _expanded_column])
def test_a_write_through_one_copy_of_an_expanded_view_reaches_the_base(fn, backend):
    """Scattering step by step wrote the whole expanded tensor back, its unchanged copies over the
    written one (functionalize._scatter_chain_by_index)."""
    kiln.reset()
    x = torch.randn(3, 4)
    want_in, got_in = x.clone(), x.clone()
    torch.testing.assert_close(kiln.compile(fn, backend=backend)(got_in), fn(want_in))
    torch.testing.assert_close(got_in, want_in)


def test_a_write_to_a_view_whose_elements_overlap_runs_as_python():
    """x.unfold(0, 2, 1).mul_(2): each element is written as often as the view shows it, in the order
    of eager's kernel; kiln breaks the graph there and eager's kernel runs."""
    def f(x):
        y = x + 0
        y.unfold(0, 2, 1).mul_(2)
        return y * 1

    kiln.reset()
    x = torch.arange(1.0, 6.0)
    torch.testing.assert_close(kiln.compile(f)(x), f(x))
    assert any("overlap in memory" in reason for reason in kiln.stats.graph_breaks)


def test_a_write_to_an_overlapping_view_with_symbolic_sizes_runs_as_python():
    def f(x):
        y = x + 0
        y.unfold(0, 2, 1).add_(1)
        return y

    kiln.reset()
    compiled = kiln.compile(f, dynamic=True)
    for n in (5, 7):
        x = torch.arange(1.0, n + 1)
        torch.testing.assert_close(compiled(x), f(x))
    assert any("overlap in memory" in reason for reason in kiln.stats.graph_breaks)
