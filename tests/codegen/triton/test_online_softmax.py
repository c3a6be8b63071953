"""Online softmax in looped kernels: a row's max and sum(exp(x - max)) in one pass (codegen/triton/online.py)."""
import pytest
import torch

from kiln.codegen.triton.online import online_pairs  # noqa: F401  (the module under test)
from tests.codegen.triton.helpers import check

LOOPED = dict(triton_persistent_max=16, triton_max_block=16)


def _special_rows(n, dtype):
    torch.manual_seed(0)
    x = torch.randn(10, n, dtype=dtype) * 4
    x[1, 3] = float("nan")
    x[2, 10] = float("inf")
    x[3, :] = float("-inf")  # the whole row: NaN softmax, as eager
    x[4, 5] = float("-inf")  # one -inf among finite values: 0
    x[5, 0] = x[5, -1] = float("inf")
    x[6, n // 2] = 1e4  # the maximum grows late: earlier sums are rescaled
    x[7, : n // 2] = float("-inf")  # lanes that see only -inf first
    x[8, n // 2:] = float("-inf")
    x[9] = torch.arange(n, dtype=dtype)  # increasing: the maximum changes every block
    return x


def test_looped_softmax_reads_the_row_twice():
    cg = check(lambda x: torch.softmax(x, -1), torch.randn(3, 70), kernels=1, **LOOPED)
    (k,) = cg.kernels.values()
    assert k.style == "looped"
    assert k.source.count("for roffset in range(0, 70, RBLOCK)") == 2  # max and sum together, then the output
    assert "online softmax" in k.source


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [70, 64])
def test_special_values_as_eager(dtype, n):
    x = _special_rows(n, dtype)
    check(lambda x: torch.softmax(x, -1), x, **LOOPED)
    check(lambda x: torch.log_softmax(x, -1), x, **LOOPED)
    check(lambda x: torch.logsumexp(x, -1), x, **LOOPED)


def test_bfloat16_and_multiple_rows_per_program():
    x = _special_rows(70, torch.bfloat16)
    check(lambda x: torch.softmax(x, -1), x, atol=1e-2, rtol=1e-2, **LOOPED)
    check(lambda x: torch.softmax(x.float() * 2, -1), x, triton_persistent_max=16, triton_max_block=4)


def test_other_reductions_are_left_alone():
    # max and sum of exp(x - max) of *another* value: no pair
    def f(x, y):
        m = x.amax(-1, keepdim=True)
        return (y - m).exp().sum(-1), m

    cg = check(f, torch.randn(3, 70), torch.randn(3, 70), **LOOPED)
    assert all("online softmax" not in k.source for k in cg.kernels.values())
