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


@pytest.mark.parametrize("op", ["floordiv", "remainder", "fmod", "trunc"])
def test_integer_division_by_zero_raises_as_eager(op):
    fn = {"floordiv": lambda a, b: a // b, "remainder": lambda a, b: a % b, "fmod": torch.fmod,
          "trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc")}[op]
    a = torch.tensor([5, -7, 3], dtype=torch.int32)
    kiln.reset()
    compiled = kiln.compile(fn, options={"warm_cache": False, "choose_faster": False})
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(a, torch.tensor([2, 0, 1], dtype=torch.int32))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        compiled(a, torch.tensor([2, 0, 1], dtype=torch.int32))
    b = torch.tensor([2, -3, 1], dtype=torch.int32)
    assert torch.equal(compiled(a, b), fn(a, b))  # (the flag was cleared: later calls run)


def test_integer_division_of_the_minimum_by_minus_one_does_not_trap():
    a = torch.tensor([-2 ** 31, 5, -7], dtype=torch.int32)
    kiln.reset()
    got = kiln.compile(lambda a: (a // -1, a % -1), options={"warm_cache": False, "choose_faster": False})(a)
    assert got[0].tolist() == [-2 ** 31, -5, 7] and got[1].tolist() == [0, 0, 0]  # (two's complement wrap)


@pytest.mark.parametrize("case", ["clamp_big", "fill_big", "full_like_big", "pow_big", "pow_negative", "mod_wraps_to_zero",
                                  "sub_bool", "cumsum_bool"])
def test_eagers_checks_of_numbers_given_to_integer_ops(case):
    """Eager refuses these for any data (kiln/fake/scalar_checks.py); generated code computed values."""
    i32 = torch.tensor([5, -7, 3], dtype=torch.int32)
    u8 = torch.tensor([1, 2, 3], dtype=torch.uint8)
    i8 = torch.tensor([2, 3, -1], dtype=torch.int8)
    fn, arg = {
        "clamp_big": (lambda a: torch.clamp(a, max=2 ** 40), i32),
        "fill_big": (lambda a: a.clone().fill_(300), u8),
        "full_like_big": (lambda a: torch.full_like(a, 2 ** 31), u8),
        "pow_big": (lambda a: a ** 300, i8),
        "pow_negative": (lambda a: a ** -1, i32),
        "mod_wraps_to_zero": (lambda a: a % 256, i8),
        "sub_bool": (lambda a: a.to(torch.int16) - (a > 0), i32),
        "cumsum_bool": (lambda a: (a > 0).cumsum(0, dtype=torch.bool), i32),
    }[case]
    with pytest.raises(Exception) as eager:
        fn(arg)
    kiln.reset()
    with pytest.raises(type(eager.value)) as got:
        kiln.compile(fn, options={"warm_cache": False, "choose_faster": False})(arg)
    assert str(got.value) == str(eager.value)


def test_symbolic_clamp_bound_is_range_checked_on_each_call():
    def fn(a, n: int):
        return torch.clamp(a, max=n)

    a = torch.tensor([5, -7, 3], dtype=torch.int32)
    kiln.reset()
    compiled = kiln.compile(fn, dynamic=True, options={"warm_cache": False, "choose_faster": False})
    for n in (7, 2, 11):
        assert torch.equal(compiled(a, n), fn(a, n)), n
    with pytest.raises(RuntimeError, match="without overflow"):
        fn(a, 2 ** 40)
    with pytest.raises(RuntimeError, match="value cannot be converted to type int without overflow"):
        compiled(a, 2 ** 40)
