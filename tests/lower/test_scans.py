"""Scans (cumsum, cumprod, logcumsumexp, cummax, cummin): lowering to Scan buffers, the loop-IR
reference evaluator and generated C++ against eager, fusion with producers and consumers."""
import pytest
import torch

from kiln.loopir.scan import is_scan
from kiln.lower.graph import lower_graph
from tests.lower.helpers import check, sample, trace, ties_nans_infs



def _cum_all(x):
    return (torch.cumsum(x, 1), torch.cumprod(x * 0.25, 0), torch.logcumsumexp(x, -1),
            *torch.cummax(x, 0), *torch.cummin(x, 1), *torch.cummax(x.abs(), 1), torch.cummin(x, 0)[1])


def test_scans_along_each_dim_with_nans_infs_and_ties():
    x = ties_nans_infs((37, 29))
    cg = check(_cum_all, x)
    assert all(not name.startswith("extern") for name in cg.sched.format().split())


def test_scans_of_3d_odd_sizes_middle_dim():
    def f(x):
        return torch.cumsum(x, 1), *torch.cummax(x, 1), torch.logcumsumexp(x, 1), torch.cumprod(x, 2)

    check(f, sample((3, 131, 5), torch.float32))


def test_scans_integer_and_bool_promote_as_aten():
    def f(a, b, c):
        return (torch.cumsum(a, 0), torch.cumprod(a, 1), torch.cumsum(b, 1), *torch.cummax(a, 1),
                *torch.cummin(b, 0), torch.cumsum(c, 1), torch.cumsum(a, 1, dtype=torch.float64),
                torch.cumsum(c, 0, dtype=torch.int32))

    check(f, sample((9, 33), torch.int32), sample((9, 33), torch.bool), sample((9, 33), torch.int8, low=-2, high=3))


def test_scans_low_precision_and_double():
    def f(h, b, d):
        return torch.cumsum(h, 1), *torch.cummax(b, 1), torch.cumsum(b, 0), torch.logcumsumexp(d, 0), torch.cumprod(d, 1)

    check(f, sample((6, 40), torch.float16, low=-1, high=1), sample((6, 40), torch.bfloat16),
          sample((6, 40), torch.float64, low=-1, high=1))


def test_scans_trivial_dims_empty_and_scalar():
    def f(a, b, s):
        return (torch.cumsum(a, 1), *torch.cummax(a, 1), torch.cumsum(b, 0), *torch.cummin(b, 1),
                torch.cumsum(s, 0), *torch.cummax(s, 0))

    check(f, sample((4, 1), torch.float32), torch.zeros(0, 3), torch.tensor(2.5))


def test_float32_cumsum_accumulates_in_double_on_cpu():
    check(lambda x: torch.cumsum(x, 0), torch.tensor([1e8, 1.0, -1e8, 3.0]))


def test_fused_producer_and_consumer_one_kernel():
    def f(x, y):
        return torch.cumsum(torch.relu(x) * y, 1).sigmoid() + 1

    cg = check(f, sample((64, 300), torch.float32), sample((64, 300), torch.float32), kernels=1)
    (group,) = cg.sched.groups()
    assert any(is_scan(m) for m in group.members) and group.locals


def test_scan_of_a_scan_in_one_kernel_keeps_one_loop():
    cg = check(lambda x: torch.cumsum(torch.cumsum(x, 1) * 2, 1) + 1, sample((20, 70), torch.float32), kernels=1)
    assert "#pragma omp simd" not in cg.source.split("cpp_fused")[-1]  # (no vectorized passes)


def test_cummax_values_and_indices_share_one_kernel():
    cg = check(lambda x: torch.cummax(x.exp(), 0), ties_nans_infs((50, 20)), kernels=1)
    assert "scan along loop x0" in cg.source


def test_scan_of_transposed_input_and_consumer_at_other_index():
    def f(x):
        c = torch.cumsum(x.t(), 1)
        return c, c.flip(1) * 2  # the flip reads the scan elsewhere: a separate kernel

    check(f, sample((70, 20), torch.float32), kernels=2)


def test_lowering_prints_the_scan():
    ag = trace(lambda x: torch.cumsum(x * 2, 1), [torch.randn(4, 5)])
    text = lower_graph(ag.gm).format()
    assert "scan sum along dim 1 of [4, 5]" in text
    assert "scan(sum, tmp2, dim=1)" in text and "mul(" in text


@pytest.mark.parametrize("shape,dim", [((5000,), 0), ((3, 40000), 1), ((40000, 3), 0), ((2, 300, 130), 1)])
def test_scans_large_parallel_shapes(shape, dim):
    x = sample(shape, torch.float32, low=-1, high=1)
    check(lambda x: (torch.cumsum(x, dim), *torch.cummax(x, dim)), x)
