"""Reductions in both styles (persistent: the row in one block; looped: block accumulators), over
each axis and all axes, with NaN and tie semantics as in eager."""
import pytest
import torch

from tests.codegen.triton.helpers import check

LOOPED = dict(triton_persistent_max=8, triton_max_block=8)
STYLES = {"persistent": {}, "looped": LOOPED}


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("dim", [0, 1, None])
def test_sum_max_min(style, dim):
    x = torch.randn(6, 21)

    def f(x):
        if dim is None:
            return x.sum(), x.amax(), x.amin()
        return x.sum(dim), x.amax(dim), x.amin(dim, keepdim=True)

    check(f, x, atol=1e-4, **STYLES[style])


@pytest.mark.parametrize("style", STYLES)
def test_reduction_over_middle_dim_and_two_dims(style):
    x = torch.randn(3, 10, 4)

    def f(x):
        return x.sum(1), x.amax((0, 2)), x.prod(2)

    check(f, x, atol=1e-4, **STYLES[style])


@pytest.mark.parametrize("style", STYLES)
def test_max_propagates_nan(style):
    x = torch.randn(4, 13)
    x[1, 5] = float("nan")
    x[3, 12] = float("nan")
    check(lambda x: (x.amax(1), x.amin(1), x.sum(1)), x, **STYLES[style])


@pytest.mark.parametrize("style", STYLES)
def test_argmax_first_index_of_ties_and_nan(style):
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0, 2.0, 1.0, 3.0, 0.0, 1.0, 3.0],
                      [float("nan"), 1.0, float("nan"), 5.0, 5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                      [-1.0, -1.0, -2.0, -2.0, -1.0, -2.0, -2.0, -2.0, -2.0, -1.0, -2.0],
                      [float("-inf")] * 11])
    check(lambda x: (x.argmax(1), x.argmin(1)), x, **STYLES[style])
    check(lambda x: (x.argmax(0), x.argmin(0)), x, **STYLES[style])


def test_argmax_ties_across_chunks():
    x = torch.zeros(2, 40)
    x[0, 30] = x[0, 3] = 1.0
    x[1, 17] = x[1, 39] = -1.0
    check(lambda x: (x.argmax(1), x.argmin(1)), x, **LOOPED)


def test_argmax_int():
    x = torch.randint(-3, 3, (5, 12), dtype=torch.int32)
    check(lambda x: (x.argmax(1), x.argmin(0)), x)


@pytest.mark.parametrize("style", STYLES)
def test_any_all_and_integer_sums(style):
    b = torch.rand(5, 11) > 0.7
    i = torch.randint(-100, 100, (5, 11), dtype=torch.int64)
    check(lambda b, i: (b.any(1), b.all(0), i.sum(1), i.amax(0), i.amin(1), b.sum(1)), b, i, **STYLES[style])


def test_sum_then_pointwise_epilogue_and_reuse():
    def f(x):
        m = x.mean(1, keepdim=True)
        return (x - m) * 2, m

    check(f, torch.randn(9, 14), kernels=1, atol=1e-5)
