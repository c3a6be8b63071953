"""grid_sampler_2d (kiln/decomp/grid_sampler.py) and histc (kiln/decomp/histogram.py) against ATen, and
end to end through kiln's lowering (reference evaluator and generated C++, no ATen fallback)."""
import itertools

import pytest
import torch

from kiln.decomp import decomposition_table
from tests.lower.helpers import check

aten = torch.ops.aten
TABLE = decomposition_table()


def _inputs(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 5, 7, generator=g, dtype=dtype)
    grid = (torch.rand(2, 4, 6, 2, generator=g, dtype=dtype) * 3.2 - 1.6)  # inside and outside [-1, 1]
    grid[0, 0, :4] = torch.tensor([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.5], [1.0, -1.0]], dtype=dtype)  # edges
    return x, grid


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_grid_sampler_2d_matches_aten(dtype):
    x, grid = _inputs(dtype)
    for mode, padding, align in itertools.product((0, 1), (0, 1, 2), (False, True)):
        expected = aten.grid_sampler_2d.default(x, grid, mode, padding, align)
        got = TABLE[aten.grid_sampler_2d.default](x, grid, mode, padding, align)
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6, msg=lambda m: f"{mode, padding, align}: {m}")
    # bicubic stays whole
    assert TABLE[aten.grid_sampler_2d.default](x, grid, 2, 0, False) is NotImplemented


def test_grid_sample_end_to_end():
    x, grid = _inputs(torch.float32, seed=1)

    def fn(x, grid):
        outs = []
        for mode, padding, align in itertools.product(("bilinear", "nearest"), ("zeros", "border", "reflection"),
                                                      (False, True)):
            outs.append(torch.nn.functional.grid_sample(x * 2, grid, mode=mode, padding_mode=padding,
                                                        align_corners=align))
        return outs

    check(fn, x, grid)


def _histc_cases():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 25, generator=g) * 2
    x[0, :5] = torch.tensor([-1.0, 1.0, 0.0, float("nan"), 3.0])  # edges, NaN, outside
    ints = torch.randint(-3, 4, (40,), generator=g).float()
    return [(x, 10, -1.0, 1.0), (x, 7, 0.0, 0.0), (x, 1, -5.0, 5.0), (ints, 6, 0.0, 0.0), (ints, 5, -2.0, 2.0),
            (torch.full((6,), 2.5), 4, 0.0, 0.0), (x.double(), 9, -0.3, 2.7), (ints, 3, 1.0, 1.0)]


def test_histc_matches_aten():
    for x, bins, lo, hi in _histc_cases():
        got = TABLE[aten.histc.default](x, bins, lo, hi)
        if lo == hi:  # the data's range: eager raises where it is not finite, so ATen's kernel runs it
            assert got is NotImplemented
            continue
        expected = torch.histc(x, bins, lo, hi)
        torch.testing.assert_close(got, expected, atol=0, rtol=0, msg=lambda m: f"{bins, lo, hi}: {m}")
    assert TABLE[aten.histc.default](x, 4, 1.0, float("inf")) is NotImplemented


def test_histc_data_range_formula():
    from kiln.decomp.histogram import data_range

    for x in (torch.tensor([3.0, -1.5, 2.0]), torch.full((4,), 2.5)):
        lo, hi = data_range(x)
        want = (x.min() - 1, x.max() + 1) if x.min() == x.max() else (x.min(), x.max())
        assert (lo.item(), hi.item()) == (want[0].item(), want[1].item())


def test_histc_end_to_end():
    x = torch.randn(8, 30, generator=torch.Generator().manual_seed(2))
    check(lambda t: [torch.histc(t * 2, 12, -2.0, 3.0), torch.histc(t.abs(), 5, 0.0, 1.5), torch.histc(t.round(), 4, -1, 1)], x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_grid_sampler_2d_backward_matches_aten(dtype):
    x, grid = _inputs(dtype, seed=3)
    grad = torch.randn(2, 3, 4, 6, generator=torch.Generator().manual_seed(4), dtype=dtype)
    op = aten.grid_sampler_2d_backward.default
    for mode, padding, align in itertools.product((0, 1), (0, 1, 2), (False, True)):
        for mask in ([True, True], [False, True], [True, False]):
            expected = op(grad, x, grid, mode, padding, align, mask)
            got = TABLE[op](grad, x, grid, mode, padding, align, mask)
            for wanted, e, g in zip(mask, expected, got):
                if not wanted:  # (not asked for: eager may compute it anyway)
                    continue
                torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5, msg=lambda m: f"{mode, padding, align, mask}: {m}")


def test_grid_sample_backward_end_to_end():
    from tests.lower.test_backward_windows_e2e import check_training

    x, grid = _inputs(torch.float32, seed=5)
    check_training(lambda x, g: [torch.nn.functional.grid_sample(x, g, mode=m, padding_mode=p, align_corners=a)
                                 for m, p, a in (("bilinear", "zeros", False), ("bilinear", "border", True),
                                                 ("bilinear", "reflection", False), ("nearest", "zeros", True))],
                   x, grid)
