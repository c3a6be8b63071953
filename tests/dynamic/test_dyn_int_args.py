"""Int arguments traced as symbols (Options.dynamic_ints): one compiled entry over several int values,
each call compared with eager, the number of graphs checked (dynamic=None: static first, then one
entry for every later value; dynamic=True: one entry)."""
import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln.api import config_of
from kiln.debug.stats import stats

BACKENDS = ["eager", "aot_eager", "kiln"]
ON = {"dynamic_ints": True}


def compiles(compiled) -> int:
    return sum(1 for r in config_of(compiled).compiler.records if r.graph is not None)


def run(f, make_args, values, backend, dynamic=None, options=ON):
    compiled = kiln.compile(f, backend=backend, dynamic=dynamic, options=options)
    for v in values:
        args = make_args(v)
        torch.testing.assert_close(compiled(*args), f(*make_args(v)), rtol=1e-5, atol=1e-5)
    return compiled


def check(f, make_args, backend, values=(4, 7, 9, 12), graphs=2, graphs_dynamic=1):
    """dynamic=None gives ``graphs`` graphs over ``values``, dynamic=True ``graphs_dynamic``."""
    c = run(f, make_args, values, backend)
    assert compiles(c) == graphs, f"dynamic=None: {compiles(c)} graphs, fallbacks {dict(stats.dynamic_fallbacks)}"
    before = stats.dynamic_graphs
    c = run(f, make_args, values, backend, dynamic=True)
    assert compiles(c) == graphs_dynamic, f"dynamic=True: {compiles(c)} graphs"
    if backend != "eager":  # the backend compiled size-generic code (no static fallback)
        assert stats.dynamic_graphs > before, dict(stats.dynamic_fallbacks)


X = torch.randn(24, 6)


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def test_slice(backend):
    check(lambda x, n: x[:n] * 2, lambda n: (X, n), backend)


def test_slice_from_end_and_narrow(backend):
    def f(x, n):
        return x[-n:].sum(0) + x.narrow(0, 1, n).sum(0)
    check(f, lambda n: (X, n), backend)


def test_negative_slice_bounds_past_the_size(backend):
    def f(x, n):
        return x[-n:].sum(0) + x[:-n].sum(0) + x[n:-2].sum(0)
    check(f, lambda n: (X, n), backend, values=(4, 30, 7, 23, 40))


def test_view(backend):
    def f(x, n):
        return torch.arange(n * 6, dtype=torch.float32).view(n, -1) * x[:n]
    check(f, lambda n: (X, n), backend)


def test_view_of_unrelated_size_falls_back_static(backend):
    # x.view(n, -1) of a tensor whose numel is not a multiple of n symbolically (24 / s0): compiled for
    # each value instead (sound), the reason counted in stats.dynamic_fallbacks
    def f(x, n):
        return x.view(n, -1).sum(1)
    c = run(f, lambda n: (X, n), (2, 3, 4, 6), backend, dynamic=True)
    assert compiles(c) == 4


def test_arange(backend):
    def f(x, n):
        return torch.arange(n, dtype=torch.float32) * x.sum()
    check(f, lambda n: (X, n), backend)


def test_pad(backend):
    def f(x, n):
        return F.pad(x, (0, n)) + 1, F.pad(x, (n, 1, 0, n), value=2.0)[1:]
    check(f, lambda n: (X, n), backend)


def test_arithmetic_kwarg(backend):
    def f(x, *, n):
        return x * n + (n // 3) - x[: n % 5 + 2].sum()
    c = kiln.compile(f, backend=backend, options=ON)
    for n in (4, 7, 9, 12):
        torch.testing.assert_close(c(X, n=n), f(X, n=n))
    assert compiles(c) == 2


def test_int_in_python_branch_guards(backend):
    def f(x, n):
        if n > 8:
            return x[:n] + 1
        return x[:n] - 1
    # 4 static; 7 dynamic (s0 <= 8); 9 fails that guard: one more entry (s0 > 8); 12 reuses it
    check(f, lambda n: (X, n), backend, graphs=3, graphs_dynamic=2)


def test_zero_one_negative_specialized(backend):
    def f(x, n):
        return x * n + x[:n].sum()
    # 4 static, 7 dynamic, 9 and 1 reuse it (nothing needed n >= 2); 0 and -3 are constants (each its own
    # entry), 5 reuses the dynamic one
    c = run(f, lambda n: (X, n), (4, 7, 9, 1, 0, -3, 5), backend)
    assert compiles(c) == 4
    c = run(f, lambda n: (X, n), (4, 7, 1, 0, -3, 5), backend, dynamic=True)
    assert compiles(c) == 3  # 4 dynamic (serving 7, 1, 5), 0, -3


def test_returned_and_stored_int(backend):
    class M(torch.nn.Module):
        def forward(self, x, n):
            self.last = n * 2
            return x[:n].relu(), n + 1
    m = M()
    c = kiln.compile(m, backend=backend, dynamic=True, options=ON)
    for n in (4, 7, 9):
        out, k = c(X, n)
        torch.testing.assert_close(out, X[:n].relu())
        assert k == n + 1 and type(k) is int and m.last == 2 * n
    assert compiles(c) == 1


def test_training_slice(backend):
    def f(x, n):
        return (x[:n] * n).sum()
    compiled = kiln.compile(f, backend=backend, dynamic=True, options=ON)
    for n in (4, 7, 9):
        a, b = X.clone().requires_grad_(), X.clone().requires_grad_()
        compiled(a, n).backward()
        f(b, n).backward()
        torch.testing.assert_close(a.grad, b.grad)
    assert compiles(compiled) == 1


def test_off_recompiles_per_value(backend):
    c = run(lambda x, n: x[:n] * 2, lambda n: (X, n), (4, 7, 9), backend, options={"dynamic_ints": False})
    assert compiles(c) == 3


def test_on_by_default_after_a_second_value(backend):
    # automatic dynamic, as torch.compile's ints: the first value compiles a constant, the second a symbol
    c = run(lambda x, n: x[:n] * 2, lambda n: (X, n), (4, 7, 9, 5), backend, options={})
    assert compiles(c) == 2


def test_bool_and_float_stay_constants(backend):
    def f(x, flag, scale):
        return x * scale if flag else x - scale
    c = run(f, lambda v: (X, v % 2 == 0, float(v)), (4, 7, 9), backend, dynamic=True,
            options={**ON, "dynamic_floats": False})
    assert compiles(c) == 3
    # with float arguments as graph inputs (Options.dynamic_floats, the default) only the bool is a constant
    c = run(f, lambda v: (X, v % 2 == 0, float(v)), (4, 7, 9), backend, dynamic=True)
    assert compiles(c) == 2


def test_int_attribute_of_module(backend):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.n = 2

        def forward(self, x):
            return x[: self.n] * self.n
    m = M()
    c = kiln.compile(m, backend=backend, options=ON)
    for n in (4, 7, 9, 12):
        m.n = n
        torch.testing.assert_close(c(X), X[:n] * n)
    assert compiles(c) == 2


def test_int_used_as_dim_specializes(backend):
    def f(x, d):
        return x.sum(d) * d
    x = torch.randn(2, 3, 4, 5)
    c = run(f, lambda d: (x, d), (2, 3, 2, 3), backend, dynamic=True)
    assert compiles(c) == 2  # a dim must be a constant: Eq(s, 2), then Eq(s, 3)
