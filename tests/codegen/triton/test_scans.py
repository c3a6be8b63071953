"""Scans through the Triton generator (Triton's interpreter on CPU): persistent rows (one
tl.associative_scan per row block) and looped rows (blocks with a carried prefix), fused producers and
consumers, NaN/inf/ties, integer and low-precision dtypes."""
import pytest
import torch

from tests.codegen.triton.helpers import check
from tests.lower.helpers import ties_nans_infs



def _all_scans(x):
    a, b = torch.cummax(x, 0), torch.cummin(x, 1)
    return torch.cumsum(x, 1), torch.cumprod(x * 0.25, 0), torch.logcumsumexp(x, -1), a[0], a[1], b[0], b[1]


@pytest.mark.parametrize("looped", [False, True])
def test_scans_persistent_and_looped(looped):
    changes = {"triton_persistent_max": 4, "triton_max_block": 8} if looped else {}
    cg = check(_all_scans, ties_nans_infs((37, 29)), **changes)
    assert ("for roffset" in cg.source) == looped
    assert "tl.associative_scan" in cg.source


def test_fused_producer_and_consumer_one_kernel():
    def f(x, y):
        return torch.cumsum(torch.relu(x) * y, 1).sigmoid() + 1

    cg = check(f, torch.randn(16, 50), torch.randn(16, 50), kernels=1)
    assert "kernel-local" in cg.source


def test_integer_bool_and_half_scans():
    def f(a, b, h):
        m = torch.cummax(b, 1)
        return torch.cumsum(a, 0), torch.cumprod(a, 1), m[0], m[1], torch.cumsum(b, 1), torch.cumsum(h, 1)

    g = torch.Generator().manual_seed(1)
    a = torch.randint(-3, 4, (9, 33), generator=g, dtype=torch.int32)
    b = torch.randint(0, 2, (9, 33), generator=g).bool()
    h = torch.randn(9, 33, generator=g).half()
    check(f, a, b, h, atol=1e-2, rtol=1e-2, triton_persistent_max=16, triton_max_block=16)


def test_scan_middle_dim_of_3d():
    def f(x):
        m = torch.cummin(x, 1)
        return torch.cumsum(x, 1), m[0], m[1]

    check(f, ties_nans_infs((3, 41, 5)), triton_persistent_max=16, triton_max_block=16)


def test_sort_stays_a_library_call_under_triton():
    def f(x):
        a = torch.sort(x, 1)
        return a[0], a[1]

    cg = check(f, torch.randn(4, 8))
    assert "generated sort kernels are C++ (CPU) only" in cg.lg.format()


def test_scan_kernels_compile_for_sm90():
    from tests.codegen.triton.test_offline import needs_ptxas

    if needs_ptxas.args[0]:
        pytest.skip("Triton's NVIDIA backend (ptxas) is not installed")
    from kiln.codegen.triton.offline import compile_for_gpu
    from tests.codegen.triton.helpers import compile_fn

    def f(x, b, i):
        m = torch.cummax(x, 1)
        return (torch.cumsum(x.float(), 1).sigmoid(), torch.logcumsumexp(x.float(), 0), m[0], m[1],
                torch.cummin(b, 1)[1], torch.cumprod(i, 0))

    x = torch.randn(8, 40).bfloat16()
    b = torch.randn(8, 40) > 0
    i = torch.randint(-3, 4, (8, 40), dtype=torch.int32)
    for persistent_max in (4096, 16):
        _, cg = compile_fn(f, [x, b, i], triton_persistent_max=persistent_max)
        errors = compile_for_gpu(cg)
        assert errors and all(e is None for e in errors.values()), errors
