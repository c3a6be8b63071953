"""Float arguments as graph inputs (Options.dynamic_floats, on by default): a float whose value changed
between compiles is a 0-dim float64 input from then on, so a learning-rate schedule or a `scale` passed
each call compiles twice (static first, then one entry for every later value); each call compared with
eager, bit for bit where eager computes the scalar in the op math type."""
import operator

import pytest
import torch

import kiln
from kiln.api import config_of

BACKENDS = ["eager", "aot_eager", "kiln"]
LRS = (0.3, 0.05, 0.123456789, 0.7, 1e-3, 3.3333333333)
FEW = (0.3, 0.123456789, 3.3333333333)  # (the first is the static compile's)


def compiles(compiled) -> int:
    return sum(1 for r in config_of(compiled).compiler.records if r.graph is not None)


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def _same(got, expected):
    if isinstance(expected, torch.Tensor):
        assert got.dtype == expected.dtype
        assert torch.equal(got, expected), (got - expected).abs().max()
    else:
        assert type(got) is type(expected) and got == expected


def run(f, make_args, backend, values=LRS, graphs=2, dynamic=None, options=None):
    compiled = kiln.compile(f, backend=backend, dynamic=dynamic, options=options)
    for v in values:
        got, expected = compiled(*make_args(v)), f(*make_args(v))
        if isinstance(expected, tuple):
            for g, e in zip(got, expected):
                _same(g, e)
        else:
            _same(got, expected)
    assert compiles(compiled) == graphs, compiles(compiled)
    return compiled


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "truediv"])
@pytest.mark.parametrize("reflected", [False, True], ids=["tensor_op_float", "float_op_tensor"])
def test_tensor_and_float_bit_exact(backend, dtype, op, reflected):
    fn = getattr(operator, op)
    x = torch.randn(16, 3) > 0 if dtype is torch.bool else (torch.randn(16, 3) * 10).to(dtype)
    if dtype is torch.bool and op == "sub":
        pytest.skip("bool - float: eager raises for bool subtraction")
    if backend == "kiln" and dtype in (torch.float64, torch.bool):
        pytest.skip("(kept fast: kiln compiles C++ per case; float32 and int64 cover its two paths)")
    run(lambda x, s: fn(s, x) if reflected else fn(x, s), lambda s: (x, s), backend, values=FEW)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", ["mul", "truediv"])
def test_low_precision_scale_bit_exact(backend, dtype, op):
    """x * s in eager computes in float32 with float(s) (the op math type), as the 0-dim input does."""
    fn = getattr(operator, op)
    x = (torch.randn(64, 3) * 10).to(dtype)
    run(lambda x, s: fn(x, s), lambda s: (x, s), backend, values=FEW)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_add_sub_keep_dtype(backend, dtype):
    """s - x + s: eager on CPU rounds s to the tensor's dtype for add/sub (not for mul); kiln's generated
    code adds float(s) in float32 (its static compiles too, except rsub with a Python scalar). Same
    dtype, values within the dtype's rounding."""
    x = (torch.randn(64, 3) * 10).to(dtype)

    def f(x, s):
        return s - x + s

    c = kiln.compile(f, backend=backend)
    for s in FEW:
        got = c(x, s)
        assert got.dtype == dtype
        torch.testing.assert_close(got, f(x, s), rtol=2e-2, atol=0.25)
    assert compiles(c) == 2


def test_lr_schedule_sgd_step(backend):
    """The usual case: a train step with the learning rate passed in, changing every step."""
    w0 = torch.randn(8, 4)
    x, y = torch.randn(16, 8), torch.randn(16, 4)

    def step(w, x, y, lr):
        loss = ((x @ w - y) ** 2).mean()
        grad = 2 * x.t() @ (x @ w - y) / x.shape[0]
        w.sub_(grad * lr)
        return loss

    c = kiln.compile(step, backend=backend)
    w_eager, w_compiled = w0.clone(), w0.clone()
    for i in range(6):
        lr = 0.1 * 0.9 ** i
        torch.testing.assert_close(c(w_compiled, x, y, lr), step(w_eager, x, y, lr), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(w_compiled, w_eager, rtol=1e-6, atol=1e-6)
    assert compiles(c) == 2


def test_branch_on_float_guards_the_comparison(backend):
    """`if s > 0.1` is a guard on the comparison: one entry per side, not one per value."""
    x = torch.randn(8)

    def f(x, s):
        if s > 0.1:
            return x * s
        return x - s

    run(f, lambda s: (x, s), backend, values=(0.5, 0.3, 0.7, 0.05, 0.01, 0.9, 0.02), graphs=3)


def test_truth_of_float_guards_truth(backend):
    x = torch.randn(8)

    def f(x, wd):
        return x * (1 - wd) if wd else x + 1

    run(f, lambda s: (x, s), backend, values=(0.1, 0.2, 0.3, 0.0, 0.4, 0.0), graphs=3)


def test_float_arithmetic_and_returned_float(backend):
    """Python arithmetic on the float stays in double precision; a returned float is computed again
    from the argument at run time (no guard on its value)."""
    x = torch.randn(8, 3)

    def f(x, s):
        t = (s * 0.5 - 1) / 3 + s
        return x * t, t, -s

    run(f, lambda s: (x, s), backend)


def test_division_by_a_float_argument_guards_nonzero(backend):
    x = torch.randn(4)

    def f(x, s):
        return x * (1.0 / s)

    c = run(f, lambda s: (x, s), backend, values=(0.5, 0.25, 2.0))
    with pytest.raises(ZeroDivisionError):
        c(x, 0.0)


def test_float_used_as_a_constant_specializes(backend):
    """Uses that need the number (an op's keyword argument) keep compiling per value, as before."""
    x = torch.randn(8)

    def f(x, s):
        return torch.add(x, x, alpha=s)

    run(f, lambda s: (x, s), backend, values=(0.5, 0.25, 2.0), graphs=3)


def test_dynamic_true_and_false(backend):
    x = torch.randn(6)
    run(lambda x, s: x * s, lambda s: (x, s), backend, dynamic=True, graphs=1)
    run(lambda x, s: x * s, lambda s: (x, s), backend, dynamic=False, graphs=len(LRS))


def test_option_off_compiles_per_value(backend):
    x = torch.randn(6)
    run(lambda x, s: x * s, lambda s: (x, s), backend, values=LRS[:3], graphs=3,
        options={"dynamic_floats": False})


def test_float_attribute_of_module(backend):
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 1.0

        def forward(self, x):
            return x * self.scale

    m = Scale()
    c = kiln.compile(m, backend=backend)
    x = torch.randn(5)
    for s in LRS:
        m.scale = s
        _same(c(x), x * s)
    assert compiles(c) == 2


def test_tensor_methods_with_a_float(backend):
    """x.mul(s), x.add_(s), ...: as the operators. (kiln's fused C++ of a chain can contract or
    reassociate, static compiles too: within float32 rounding.)"""
    x = torch.randn(5, 3)

    def f(x, s):
        y = x.mul(s).add(s).sub(s).div(s)
        y.mul_(s)
        return y

    c = kiln.compile(f, backend=backend)
    for s in LRS:
        torch.testing.assert_close(c(x.clone(), s), f(x.clone(), s), rtol=1e-6, atol=1e-7)
    assert compiles(c) == 2
