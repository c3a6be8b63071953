"""Operators: arithmetic, in-place, matmul, power, comparisons, unary, Python scalars mixed with tensors."""
import torch

from .harness import check


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def test_binary_operators():
    def fn(x, y):
        return x + y, x - y, x * y, x / y, x // (y.abs() + 1), x % 3.0

    check(fn, _t(4, 5), _t(4, 5, seed=1) + 3.0)


def test_python_scalars_mixed_with_tensors():
    def fn(x):
        a = 2 * x + 1
        b = 1.5 - x
        c = 3 / (x.abs() + 1)
        d = 2 ** x
        return a, b, c, d

    check(fn, _t(3, 4))


def test_python_number_arithmetic_feeds_tensor():
    def fn(x):
        hidden = 64
        heads = 4
        head_dim = hidden // heads
        scale = head_dim ** -0.5
        return x * scale + heads % 3

    check(fn, _t(2, 8))


def test_inplace_add_on_tensor_local():
    def fn(x):
        y = x * 2
        y += 1
        y -= x
        y *= 3
        y /= 2
        return y

    check(fn, _t(5))


def test_inplace_add_on_python_numbers():
    def fn(x):
        total = 0
        total += 3
        total *= 2
        total -= 1
        total //= 2
        scale = 1.0
        scale /= 4
        return x * total + scale

    check(fn, _t(3))


def test_inplace_on_input_tensor():
    def fn(x, y):
        x += y
        x.mul_(2)
        return x.sum()

    check(fn, _t(3, 3), _t(3, 3, seed=1), inputs_mutated=True)


def test_inplace_keeps_alias():
    def fn(x):
        y = x.clone()
        z = y
        z += 1
        return y, z

    check(fn, _t(4))


def test_matmul_operator():
    def fn(a, b, v):
        return a @ b, a @ v, (a @ b) @ b.T

    check(fn, _t(3, 4), _t(4, 4, seed=1), _t(4, seed=2))


def test_batched_matmul_operator():
    def fn(q, k):
        return q @ k.transpose(-2, -1)

    check(fn, _t(2, 3, 5, 8), _t(2, 3, 5, 8, seed=1))


def test_power_operator():
    def fn(x):
        return x ** 2, x.abs() ** 0.5, 2.0 ** x, x ** x.new_tensor(3.0)

    check(fn, _t(6))


def test_comparisons_produce_bool_tensors():
    def fn(x, y):
        return x > y, x >= 0, x < y, x <= 0.5, x == y, x != y

    check(fn, _t(4, 4), _t(4, 4, seed=1))


def test_comparison_used_as_mask():
    def fn(x):
        mask = (x > 0) & (x < 1)
        other = (x < -1) | ~mask
        return torch.where(mask, x, torch.zeros_like(x)), other ^ (x > 0.5)

    check(fn, _t(3, 5))


def test_unary_operators():
    def fn(x):
        return -x, +x, abs(x), ~(x > 0)

    check(fn, _t(5))


def test_integer_tensor_ops():
    def fn(x):
        return x // 3, x % 4, x << 1, x >> 1, x & 6, x | 1, x ^ 5

    check(fn, torch.arange(12).reshape(3, 4))


def test_reflected_operators():
    def fn(x):
        return 1 - x, 2 / (x + 5), 3 ** x.clamp(max=2), 10 // (x.abs() + 1), 7 % (x.abs() + 1)

    check(fn, torch.arange(-3.0, 3.0))


def test_chained_python_comparison_on_constants():
    def fn(x):
        n = 5
        if 0 < n <= 8:
            return x * n
        return x

    check(fn, _t(3))


def test_operator_precedence_mix():
    def fn(x, y):
        return x + y * 2 - x / 4 ** 2 @ torch.eye(3) + -y ** 2

    check(fn, _t(3, 3), _t(3, 3, seed=1))


def test_float_int_python_division():
    def fn(x):
        a = 7 / 2
        b = 7 // 2
        c = -7 // 2
        d = -7 % 3
        e = divmod(17, 5)
        return x * a + b + c + d + e[0] * e[1]

    check(fn, _t(2))


def test_bool_tensor_arith_and_dtype_promotion():
    def fn(x, i):
        return x * (x > 0), i + 0.5, i * 2, (i + x).dtype == torch.float32, i.float() / 2

    check(fn, _t(4), torch.arange(4))


def test_augmented_matmul():
    def fn(x, w):
        h = x.clone()
        h @= w
        return h

    check(fn, _t(2, 4), _t(4, 4, seed=1))
