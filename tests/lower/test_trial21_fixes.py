"""What a new user's trial of the scan, scatter, search and indexing families found (session 11), each
against eager: integer scans' dtype with symbolic sizes, ``searchsorted`` on boundaries that end in NaN,
a forward whose backward alone is invalid, a size-generic Triton gather of one row of an index tensor,
and the messages of out-of-range indices fused into a reduction and of a mis-shaped ``x[i] = v``."""
from __future__ import annotations

import pytest
import torch

import kiln
from kiln.errors import IndexOutOfBoundsError


@pytest.mark.parametrize("dynamic", [True, None])
def test_integer_and_bool_scans_promote_to_int64_with_symbolic_sizes(dynamic):
    def f(x):
        return torch.cumsum(x, 1), torch.cumprod(x.to(torch.int8) * 3, 1), (x > 0).cumsum(0)

    kiln.reset()
    cf = kiln.compile(f, dynamic=dynamic)
    for shape in [(4, 6), (3, 7), (5, 9)]:  # (None: the second size makes the graph size-generic)
        x = torch.randint(-3, 4, shape, dtype=torch.int32)
        for want, got in zip(f(x), cf(x)):
            assert got.dtype == want.dtype == torch.int64
            torch.testing.assert_close(got, want)


def test_scan_dtype_rule_of_symbolic_sizes():
    from kiln.fake.symbolic_ops import cumulative

    x = torch.empty(3, 4, dtype=torch.int16, device="meta")
    aten = torch.ops.aten
    assert cumulative(aten.cumsum.default, x, 1).dtype == torch.int64
    assert cumulative(aten.cumsum.default, x, 1, dtype=torch.float32).dtype == torch.float32
    assert cumulative(aten.cumprod.default, x.float(), 0).dtype == torch.float32
    assert cumulative(aten.cumsum.default, x.bool(), 0).dtype == torch.int64


def _search(s, x, right, out_int32):
    return torch.searchsorted(s, x, right=right, out_int32=out_int32), torch.bucketize(x, s, right=right)


@pytest.mark.parametrize("n", [0, 1, 2, 5, 8, 33])
def test_searchsorted_takes_atens_binary_search_steps(n):
    """Boundaries ending in NaN (as torch.sort leaves them) and unsorted ones: the answer is the one
    ATen's binary search finds, not the count of boundaries below the value."""
    g = torch.Generator().manual_seed(n)
    cases = [torch.randn(n, generator=g).sort().values, torch.randn(n, generator=g)]
    if n:
        nan = torch.randn(n, generator=g)
        nan[torch.randint(0, n, (max(1, n // 3),), generator=g)] = float("nan")
        cases.append(nan.sort().values)
    x = torch.randn(9, generator=g)
    x[2] = float("nan")
    if n:
        x[3] = cases[0][n // 2]
    for s in cases:
        for right in (False, True):
            kiln.reset()
            want = _search(s, x, right, False)
            got = kiln.compile(_search)(s, x, right, False)
            for w, o in zip(want, got):
                assert w.dtype == o.dtype and torch.equal(w, o), (s, x, right)
    rows, values = torch.randn(3, n, generator=g), torch.randn(3, 4, generator=g)
    kiln.reset()
    for w, o in zip([torch.searchsorted(rows, values, out_int32=True)],
                    [kiln.compile(lambda a, b: torch.searchsorted(a, b, out_int32=True))(rows, values)]):
        assert w.dtype == o.dtype and torch.equal(w, o)


def test_searchsorted_case_of_the_trial():
    s = torch.tensor([0.0, 1.0, 1.0, 2.0, float("nan")])
    x = torch.tensor([1.0, -3.0, 0.5, 2.0])
    kiln.reset()
    got = kiln.compile(_search)(s, x, False, False)
    assert got[0].tolist() == [1, 0, 1, 5] and got[1].tolist() == [1, 0, 1, 5]


def test_a_forward_whose_backward_alone_is_invalid_runs():
    """scatter_add with a source larger than its index: eager's forward works and only its backward
    raises; kiln's forward must work too (it could not trace the joint graph)."""
    def f(x, i, s):
        return x.scatter_add(1, i, s).sin()

    kiln.reset()
    x = torch.randn(4, 6, requires_grad=True)
    i = torch.randint(0, 6, (4, 3), generator=torch.Generator().manual_seed(0))
    s = torch.randn(4, 4, requires_grad=True)
    got = kiln.compile(f)(x, i, s)
    torch.testing.assert_close(got, f(x, i, s))
    with pytest.raises(RuntimeError, match="invalid gradient"):
        got.sum().backward()


def test_size_generic_triton_gather_of_one_row_of_an_index_tensor():
    pytest.importorskip("triton")

    def f(h, e):
        return h[e[0]]

    kiln.reset()
    cf = kiln.compile(f, dynamic=True, options=kiln.Options(cpu_codegen="triton", warm_cache=False))
    for m in (20, 25):
        h, e = torch.randn(30, 5), torch.randint(0, 7, (2, m))
        torch.testing.assert_close(cf(h, e), f(h, e))


def test_out_of_range_index_fused_into_a_reduction_names_the_indexing_line():
    def f(x, i):
        y = x.exp()
        z = y[i] * 2
        return z.sum(1).sigmoid()

    kiln.reset()
    x, i = torch.randn(6, 4), torch.tensor([0, 6])
    line = f.__code__.co_firstlineno + 2
    with pytest.raises(IndexOutOfBoundsError, match=rf"indexing x\[\.\.\.\] at .*:{line} "):
        kiln.compile(f)(x, i)


def test_index_put_with_a_value_of_the_wrong_shape_raises_eagers_error():
    def f(x, i, v):
        y = x.clone()
        y[i] = v
        return y

    kiln.reset()
    args = torch.randn(6, 4), torch.tensor([0, 1, 2]), torch.randn(2, 4)
    with pytest.raises(RuntimeError, match=r"shape mismatch: value tensor of shape \[2, 4\] cannot be broadcast "
                                           r"to indexing result of shape \[3, 4\]"):
        kiln.compile(f)(*args)
    ok = torch.randn(1, 4)
    torch.testing.assert_close(kiln.compile(f)(args[0], args[1], ok), f(args[0], args[1], ok))


def test_searchsorted_compares_in_atens_result_type():
    """A 0-dim float64 value among float32 boundaries is compared in float32, as ATen does (result_type:
    a 0-dim operand ranks below a dimensioned one), not in float64 (promote_types)."""
    b = torch.tensor([0.1, 0.2, 0.3])
    v = torch.tensor(float(b[0]) + 1e-12, dtype=torch.float64)
    kiln.reset()
    got = kiln.compile(lambda b, v: (torch.searchsorted(b, v), torch.bucketize(v, b)))(b, v)
    assert got[0].item() == torch.searchsorted(b, v).item() == 0
    assert got[1].item() == torch.bucketize(v, b).item() == 0


def _sorter_of_int32(b, v):
    return torch.searchsorted(b, v, sorter=torch.tensor([0, 1, 2], dtype=torch.int32))


def _bool_cumsum_(x):
    y = x > 0
    y.cumsum_(0)
    return y


def _bool_cumprod_(x):
    y = x > 0
    y.cumprod_(0)
    return y


@pytest.mark.parametrize("fn", [_sorter_of_int32, _bool_cumsum_, _bool_cumprod_])
def test_what_eager_rejects_kiln_rejects_with_eagers_error(fn):
    # the meta kernels accept these (an int32 sorter; an in-place scan of bools, whose result would be int64)
    kiln.reset()
    args = (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.5])) if fn is _sorter_of_int32 else (torch.randn(4),)
    with pytest.raises((RuntimeError, NotImplementedError)) as eager:
        fn(*args)
    with pytest.raises(type(eager.value)) as compiled:
        kiln.compile(fn)(*args)
    assert str(compiled.value) == str(eager.value)
