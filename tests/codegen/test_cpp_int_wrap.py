"""int32/int64 arithmetic that overflows wraps as eager's in the C++ kernels. A signed overflow is
undefined in C++: ``(arange(5) * 6364136223846793005) % 7`` gave -6 where eager gives 1 (the optimizer
took the product of two nonnegative values as nonnegative and dropped the floor-mod's sign fix). The
kernels now add, subtract, multiply and negate through the unsigned type (codegen/cpp/prelude.h)."""
import pytest
import torch

import kiln

LCG = 6364136223846793005  # (a multiplier that overflows int64 from the second element on)


def _check(fn, *args):
    kiln.reset()
    got = kiln.compile(fn, options={"warm_cache": False, "choose_faster": False})(*args)
    want = fn(*args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert all(torch.equal(g, w) for g, w in zip(got, want)), (got, want)


def test_wrapped_product_then_floor_mod():
    _check(lambda x: (torch.arange(5) * LCG) % 7 + x, torch.zeros(5, dtype=torch.int64))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_overflowing_add_sub_mul_neg_then_mod_and_floordiv(dtype):
    info = torch.iinfo(dtype)
    x = torch.tensor([info.max, info.min, info.max // 2 + 7, -3, 0, 12345], dtype=dtype)

    def fn(x):
        a = x * 3 + info.max  # wraps
        b = -x - 1
        c = (x * x) % 1000003
        return a % 13, b // 7, c, (a - x) % -5

    _check(fn, x)


def test_overflowing_integer_sum_and_cumulative_ops():
    x = torch.full((64,), 2 ** 62, dtype=torch.int64)
    _check(lambda x: (x.sum() % 1000, (x * 3).sum(0)), x)


def test_dynamic_size_times_a_big_constant():
    def fn(x):
        n = x.shape[0]
        return (torch.arange(n) * LCG + n * 2 ** 40) % 2 ** 32 + x

    kiln.reset()
    compiled = kiln.compile(fn, dynamic=True, options={"warm_cache": False, "choose_faster": False})
    for n in (5, 17, 33):
        x = torch.zeros(n, dtype=torch.int64)
        assert torch.equal(compiled(x), fn(x)), n
