"""Floats computed from symbolic sizes (capture/values/symbolic_float.py: ``SizePlace``): ``n / 3``,
``float(n)``, ``math.sqrt(n)``, ``n * 0.5`` of sizes stay symbolic (one dynamic graph for every size),
as Python computes them: a 0-dim float64 tensor made from the size (exact: sizes are far below 2**53),
then IEEE double arithmetic in the user's order; comparisons are guards evaluated with Python floats
over the sizes. Each call compared with eager, bit for bit where eager computes the scalar in the op
math type (eager and aot_eager; kiln's generated kernels to rounding)."""
import math

import pytest
import torch

import kiln
from kiln.api import config_of

BACKENDS = ["eager", "aot_eager", "kiln"]
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def compiles(compiled) -> int:
    return sum(1 for r in config_of(compiled).compiler.records if r.graph is not None)


def run(f, inputs, backend="kiln", graphs=1, dynamic=True, exact=True):
    kiln.reset()
    compiled = kiln.compile(f, backend=backend, dynamic=dynamic)
    for args in inputs:
        got, expected = compiled(*args), f(*args)
        for g, e in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
            if isinstance(e, torch.Tensor):
                assert g.dtype == e.dtype and g.shape == e.shape
                if exact and backend != "kiln":  # (kiln's fused kernels may contract a * b + c into an fma)
                    assert torch.equal(g, e), (g - e).abs().max()
                else:
                    torch.testing.assert_close(g, e)
            else:
                assert type(g) is type(e) and g == e, (g, e)
    assert compiles(compiled) == graphs, compiles(compiled)
    return compiled


def rand(*shape, device="cpu"):
    return torch.randn(*shape, device=device)


SIZES = [(3, 4), (5, 8), (7, 6), (12, 10)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_true_division_of_a_size(backend):
    run(lambda x: x * (x.shape[0] / 3) - x.shape[1] / x.shape[0], [(rand(*s),) for s in SIZES], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sqrt_of_a_size_as_attention_scale(backend):
    run(lambda q, k: (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]),
        [(rand(2, t, d), rand(2, t, d)) for t, d in [(3, 4), (5, 8), (9, 16), (4, 2)]], backend, exact=False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_of_a_size_and_a_float_constant(backend):
    run(lambda x: x * float(x.shape[0]) + x.shape[1] * 0.5 - (x.shape[0] + 0.25), [(rand(*s),) for s in SIZES], backend)


def test_comparison_of_a_size_float_is_a_guard_not_a_value():
    def f(x):
        if x.shape[0] / 4 > 1.5:  # sizes 7 and 12 take it, 3 and 5 do not
            return x * 2
        return x - 1

    run(f, [(rand(*s),) for s in SIZES], graphs=2)


def test_guard_uses_python_float_semantics():
    # 1 / 3 as a float equals 0.3333333333333333 exactly; as a rational it is larger. The branch must follow
    # Python's float comparison for every size.
    def f(x):
        if x.shape[0] / (3 * x.shape[0]) == 0.3333333333333333:
            return x + 1
        return x - 1

    run(f, [(rand(*s),) for s in SIZES], graphs=1)


def test_returned_float_follows_the_size():
    run(lambda x: (x + 1, x.shape[0] / 4, math.sqrt(x.shape[1])), [(rand(*s),) for s in SIZES], backend="eager")


def test_int_tensor_times_size_float_promotes_like_a_python_float():
    run(lambda x: (x * 10).long() * (x.shape[0] / 2), [(rand(*s),) for s in SIZES], backend="aot_eager")


def test_division_by_a_size_expression_that_can_be_zero_is_guarded():
    def f(x, y):
        return x / (x.shape[0] - y.shape[0] + 0.0) if x.shape[0] != y.shape[0] else x

    compiled = kiln.compile(f, backend="aot_eager", dynamic=True)
    for a, b in [(3, 5), (4, 7), (6, 6), (8, 2)]:
        x, y = rand(a, 2), rand(b, 2)
        torch.testing.assert_close(compiled(x, y), f(x, y))


def test_uses_that_need_the_number_specialize():
    # torch.full's fill value needs the number: the size becomes a constant (one graph per size)
    run(lambda x: x + torch.full((x.shape[0],), float(x.shape[0])).unsqueeze(1), [(rand(*s),) for s in SIZES[:3]],
        backend="eager", graphs=3)


@CUDA
@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_cuda_size_floats(backend):
    run(lambda x: x * (x.shape[0] / 3) / math.sqrt(x.shape[1]) + float(x.shape[0]),
        [(rand(*s, device="cuda"),) for s in SIZES], backend)


@CUDA
def test_cuda_size_float_read_twice():
    # a number read by two kernels: it must not become a CPU buffer a CUDA kernel reads
    def f(x):
        s = x.shape[0] / 3
        return (x * s).sum(0), (x + s).amax(1)

    run(f, [(rand(*s, device="cuda"),) for s in SIZES], exact=False)


@CUDA
def test_cuda_float_argument():
    compiled = kiln.compile(lambda x, lr: x * lr + lr, backend="kiln")
    x = rand(8, 4, device="cuda")
    for lr in (0.3, 0.05, 0.7, 1e-3):
        torch.testing.assert_close(compiled(x, lr), x * lr + lr)


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_floor_ceil_int_of_a_size_ratio(backend):
    def f(x):
        n = x.shape[0]
        k = math.ceil(n / 3) + math.floor(n / 4) * 10 + int(n / 5) * 100 + int(-n / 4) * 1000
        return x[: math.ceil(n / 2)] * k  # (a slice bound from a ceil: a size expression)

    run(f, [(rand(b, 2),) for b in [3, 5, 8, 13, 21, 4]], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_round_of_a_size_ratio_rounds_halves_to_even(backend):
    # round(2.5) == 2, round(3.5) == 4, round(-2.5) == -2: Python's round, as integer arithmetic on n
    def f(x):
        n = x.shape[0]
        k = round(n / 2) + round(n / 4) * 10 + round(n / 3) * 100 + round(-n / 2) * 1000 + round(n / 1) * 10000
        return x[: round(n / 2)] * k

    run(f, [(rand(b, 2),) for b in [3, 5, 6, 7, 9, 10, 11, 13, 14, 4]], backend)


def test_padding_to_a_multiple_with_ceil():
    def f(x):
        pad = math.ceil(x.shape[-1] / 8) * 8 - x.shape[-1]
        return torch.nn.functional.pad(x, (0, pad)).view(x.shape[0], -1, 8).sum(-1)

    run(f, [(rand(2, n),) for n in [5, 8, 13, 21]], backend="aot_eager")


def test_ceil_of_a_float_ratio_specializes():
    # n * 0.3 is not a ratio of ints: floor/ceil of it would need the float's rounding: a constant size
    run(lambda x: x * math.floor(x.shape[0] * 0.3), [(rand(b, 2),) for b in [3, 5, 8]], backend="eager", graphs=3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_and_or_xor_of_a_size_and_a_constant(backend):
    # through the bits of n: (n // 2**j) % 2, for negative ints too (two's complement, as Python's)
    def f(x):
        n, m = x.shape[0], -x.shape[0]
        k = (n ^ 2) + (n | 5) * 10 + (n & 6) * 100 + (m ^ 3) * 1000 + (m | 4) * 10000 + (m & 9) * 100000
        return x * k + (12 & n) + (n ^ 0) + (n & 0)

    run(f, [(rand(b, 2),) for b in [3, 5, 8, 13, 21, 6, 2]], backend, exact=False)


def test_bit_operations_and_divmod_of_sizes():
    def f(x):
        n = x.shape[0]
        q, r = divmod(n, 3)
        return x * ((n & 1) + (n >> 1) + q * 10 + r * 100 + (n << 2) + (n & 7) * 1000)

    run(f, [(rand(b, 2),) for b in [3, 5, 8, 13, 21, 4]], backend="aot_eager")


def test_xor_with_a_negative_constant_specializes():
    # (infinitely many set bits: no finite sum of bit terms; n ^ 2 is symbolic, above)
    run(lambda x: x * (x.shape[0] ^ -2), [(rand(b, 2),) for b in [3, 5, 8]], backend="eager", graphs=3)


def test_sizes_at_or_above_2_to_the_53_leave_the_exact_path():
    # (found by review) p / k rounds once in Python; a float64 made from p >= 2**53 would round twice,
    # and floor/ceil of p / k is integer arithmetic only below 2**53: a guard keeps such sizes out
    big = 100000000000000002

    def f(x):
        n = x.shape[0]
        return x * ((n * big) / 3), math.ceil((n << 40) / 3), math.floor(n * 10 ** 17 / 3)

    kiln.reset()
    compiled = kiln.compile(f, backend="aot_eager", dynamic=True)
    for n in (2, 3, 12289, 2):
        x = torch.ones(n, dtype=torch.float64)
        got, expected = compiled(x), f(x)
        assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:], (n, got[1:], expected[1:])


def test_tensor_of_a_size_outside_int64_raises_as_eager():
    compiled = kiln.compile(lambda x: torch.tensor(x.shape[0] << 62), backend="aot_eager", dynamic=True)
    for n in (2, 3):
        with pytest.raises(ValueError):
            compiled(torch.ones(n))
