"""Numbers computed from size and int symbols that kernels use as values are computed by the wrapper in
Python's ints (loopir.sizes.exact_value): a kernel's 64-bit arithmetic wrapped where Python's does not
(``x + n * 6364136223846793005 % 2**32`` with a dynamic ``n`` returned another number for n = 5)."""
import pytest
import sympy
import torch

import kiln
from kiln.api import config_of
from kiln.fake.symbolic import ShapeEnv
from kiln.loopir.sizes import DynamicUnsupported, guard, size_context

BIG = 6364136223846793005  # (an LCG multiplier: n * BIG overflows 64 bits for every n >= 2)
CODEGENS = ["cpp", "triton"]


def _compile(f, codegen):
    return kiln.compile(f, dynamic=True, options={"cpu_codegen": codegen, "dynamic_ints": True})


def _graphs(compiled) -> int:
    return sum(1 for r in config_of(compiled).compiler.records if r.graph is not None)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_hash_like_arithmetic_of_an_int_argument(codegen):
    def f(x, n):
        return x + n * BIG % 2**32, x * (n * BIG // 2**40 % 1000) - n * n * n * n * n

    c = _compile(f, codegen)
    x = torch.arange(6, dtype=torch.int64)
    for n in (3, 5, 11, 1009, 4999):  # (n**5 fits 64 bits up to 6208)
        for got, want in zip(c(x, n), f(x, n)):
            assert torch.equal(got, want), (n, got, want)
    assert _graphs(c) == 1


@pytest.mark.parametrize("codegen", CODEGENS)
def test_values_from_sizes_in_full_and_arange(codegen):
    def f(x):
        n = x.shape[0]
        start = n * BIG % 97
        return torch.full((3,), n * BIG % 1009), torch.arange(start, start + 4) + x[:4].long()

    c = _compile(f, codegen)
    for n in (5, 7, 12):
        x = torch.randint(0, 9, (n,))
        for got, want in zip(c(x), f(x)):
            assert torch.equal(got, want), (n, got, want)
    assert _graphs(c) == 1


def test_a_value_beyond_64_bits_raises_as_eager_does():
    def f(x, n):
        return x + (n - 2) * BIG * 4  # n = 3: about 2**64.5

    c = _compile(f, "cpp")
    x = torch.zeros(3, dtype=torch.int64)
    assert torch.equal(c(x, 2), f(x, 2))
    with pytest.raises(OverflowError, match="int too big to convert"):
        f(x, 3)
    with pytest.raises(OverflowError, match="int too big to convert"):
        c(x, 3)


def test_derived_values_are_symbols_the_wrapper_computes():
    env = ShapeEnv()
    s0 = env.create_symbol(5, "n")
    expr = sympy.Mod(BIG * s0, 2**32)
    v = env.derived_value(expr)
    assert v.name == "v0" and env.derived_value(expr) is v  # (one symbol per expression)
    assert env.size_hint(v + 1) == (5 * BIG) % 2**32 + 1  # heuristics see its exact value
    assert "computed by the wrapper" in env.describe()
    with size_context(env), pytest.raises(DynamicUnsupported):
        guard(sympy.Gt(v, 3))  # no fact is ever decided about a value: no guard could check it


@pytest.mark.parametrize("codegen", CODEGENS)
def test_full_checks_that_a_value_fits_the_dtype_as_eager_does(codegen):
    # eager's full (and fill_) convert the int with an overflow check; the kernels stored it wrapped
    programs = [lambda x, s: torch.full((3,), s, dtype=torch.int8) + x[:3],
                lambda x, s: x.half() + torch.full((2,), s * 1000, dtype=torch.half)[0]]
    x = torch.ones(4, dtype=torch.int8)
    for f in programs:
        c = _compile(f, codegen)
        for s in (3, 50):
            assert torch.equal(c(x, s), f(x, s))
        with pytest.raises(RuntimeError, match="without overflow"):
            f(x, 1000)
        with pytest.raises(RuntimeError, match="value cannot be converted to type (int8_t|c10::Half) without overflow"):
            c(x, 1000)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_ops_that_wrap_in_eager_wrap_here_too(codegen):
    # n - x and where() of a number convert it without a check in eager (int8 wraps, half overflows to inf)
    programs = [(lambda x, n: n - x, torch.int8, 300), (lambda x, n: torch.where(x > 0, n * 1000, x), torch.half, 70),
                (lambda x, n: x + n * 3, torch.int64, 2**62)]  # (the last: 2**63 + 2**62 wraps to int64)
    for f, dtype, big in programs:
        c = _compile(f, codegen)
        for n in (3, 5, big):
            x = torch.arange(4).to(dtype)
            assert torch.equal(c(x, n), f(x, n)), (n, c(x, n), f(x, n))


def test_a_value_above_int64_read_as_a_float_is_refused():
    # eager converts 2**63 + 2**62 exactly for a float tensor; the kernels take int64: refused with why
    c = _compile(lambda x, n: x + n * 3, "cpp")
    x = torch.zeros(2)
    assert torch.equal(c(x, 5), x + 15)
    with pytest.raises(OverflowError, match="above 2\\*\\*63 - 1"):
        c(x, 2**62)


def test_numbers_of_data_dependent_sizes_stay_in_the_graph():
    from kiln.debug.stats import stats

    def f(x):
        n = x.nonzero().shape[0]
        return x * (n * 3 - 1)

    stats.reset()
    c = kiln.compile(f, dynamic=True)
    for k in (2, 5):
        x = torch.tensor([0.0, 1.0] * k)
        assert torch.equal(c(x), f(x))
    assert not stats.graph_breaks, dict(stats.graph_breaks)
