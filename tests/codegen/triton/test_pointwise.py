"""Pointwise kernels: ragged masks, dtypes as in ATen, views as inputs, math with eager semantics."""
import pytest
import torch

from tests.codegen.triton.helpers import check


def test_ragged_size_is_masked():
    cg = check(lambda x: x * 2 + 1, torch.randn(1000), triton_max_block=128)
    (k,) = cg.kernels.values()
    assert k.fn.config.XBLOCK == 128 and k.fn.grid == (8,)
    assert "xmask = xindex < xnumel" in k.source


def test_ragged_rows_are_masked():
    cg = check(lambda x: torch.softmax(x, -1), torch.randn(13, 6), triton_max_block=4)
    (k,) = cg.kernels.values()
    assert k.fn.config.XBLOCK == 4 and k.fn.grid == (4,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_float_dtypes(dtype):
    x = torch.randn(5, 17).to(dtype)
    y = torch.randn(17).to(dtype)
    # fused code rounds only at stores, eager after every op: compare at the dtype's precision
    tol = {"atol": 6e-2, "rtol": 2e-2} if dtype != torch.float32 else {}

    def f(x, y):
        return x * y + 1, torch.exp(x) - y, (x > y), x.sum(1), torch.softmax(x, -1)

    check(f, x, y, **tol)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_dtypes(dtype):
    x = torch.randint(-50, 50, (4, 9), dtype=dtype)
    y = torch.randint(1, 7, (4, 9), dtype=dtype) * torch.where(torch.rand(4, 9) > 0.5, 1, -1).to(dtype)

    def f(x, y):
        return (x + y * 3, x // y, x % y, torch.div(x, y, rounding_mode="trunc"), torch.fmod(x, y),
                torch.maximum(x, y), x.abs(), x >> 1, x & y, x.to(torch.float32) / 3)

    check(f, x, y)


def test_bool_dtype():
    a, b = torch.rand(3, 8) > 0.5, torch.rand(3, 8) > 0.3

    def f(a, b):
        return a & b, a | ~b, torch.logical_xor(a, b), a.to(torch.float32) + b, torch.where(a, 1.0, -1.0)

    check(f, a, b)


def test_mixed_dtype_promotion_and_casts():
    def f(x, i):
        return x + i, (x * 100).to(torch.int32), i.to(torch.float16), x.to(torch.bfloat16)

    check(f, torch.randn(6, 5), torch.randint(-5, 5, (6, 5), dtype=torch.int64))


def test_views_and_transposes_as_inputs():
    base = torch.randn(8, 12)

    def f(x, y):
        return x + y.t(), x[:, ::2].sum(1), x.expand(2, 12, 8).exp()

    check(f, base.t(), torch.randn(8, 12)[:, :12], atol=1e-5)


def test_strided_input_with_offset():
    big = torch.randn(10, 20)
    view = big[2:7, 3:15:2]
    check(lambda v: torch.sigmoid(v) * v.sum(0), view, atol=1e-5)


def test_float_math_matches_eager():
    x = torch.randn(4, 16) * 3
    y = torch.randn(4, 16) + 0.1
    x[0, 0] = float("nan")
    x[0, 1] = float("inf")

    def f(x, y):
        return (torch.tanh(x), torch.erf(x), torch.expm1(x), torch.log1p(x.abs()), torch.sqrt(x.abs()),
                torch.rsqrt(x.abs() + 1), torch.floor(x), torch.round(x), torch.trunc(x),
                x // y, torch.remainder(x, y), torch.fmod(x, y), torch.pow(x.abs(), y), torch.atan2(x, y),
                torch.maximum(x, y), torch.minimum(x, y), torch.fmax(x, y), torch.isnan(x), torch.isinf(x),
                torch.sign(x), torch.relu(x), torch.nan_to_num(x), torch.where(x > y, x, y))

    check(f, x, y, atol=1e-5, rtol=1e-5)


def test_scalar_output_and_constants():
    def f(x):
        return x.sum() * 2, torch.full((3,), 7.0) + x[0]

    check(f, torch.randn(5), atol=1e-5)


def test_arange_index_expr():
    def f(x):
        return x + torch.arange(x.shape[0], dtype=torch.float32)

    check(f, torch.randn(9))


def test_pow_by_small_constant_exponents_is_arithmetic_as_in_aten():
    # ATen's pow kernels multiply for 2 and 3 and call sqrt/rsqrt/reciprocal for 0.5/-0.5/-1/-2; a
    # general pow() is several times costlier (GPT-2's tanh-GELU cubes its input)
    x = torch.rand(64) + 0.5

    def f(x):
        return x ** 3, x ** 0.5, x ** -0.5, x ** -1, x ** -2.0, x ** 2.5

    cg = check(f, x, atol=1e-6, rtol=1e-6)
    assert cg.source.count("libdevice.pow(") == 1  # only the 2.5


def test_tanh_gelu_has_no_pow():
    x = torch.randn(8, 32)
    cg = check(lambda x: torch.nn.functional.gelu(x, approximate="tanh"), x, atol=1e-6, rtol=1e-6)
    assert "pow(" not in cg.source


def test_float64_sqrt_and_division():
    # tl.sqrt_rn takes float32 only: a float64 square root (a size's sqrt as an attention scale) uses tl.sqrt
    x = torch.rand(7, 5, dtype=torch.float64) + 0.5
    check(lambda x: (torch.sqrt(x) / 3.0, x.sqrt().float() * 2), x)
