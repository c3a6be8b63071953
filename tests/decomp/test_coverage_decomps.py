"""The decompositions that replaced ATen fallbacks, run eagerly on real tensors against the op itself:
exact where eager's result is exact (integers, bools, indices), within float tolerance otherwise, and
NotImplemented (the op stays whole) where a decomposition cannot match eager."""
import pytest
import torch

from kiln.decomp import decomposition_table

aten = torch.ops.aten
TABLE = decomposition_table()


def _specials(dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(64, generator=g, dtype=torch.float64) * 7).to(dtype)
    x[:10] = torch.tensor([0.0, -0.0, -3.0, float("nan"), float("inf"), -float("inf"), 1e-30, 8.0, 10.0, -2.5])
    return x


def _same(got, want, exact=False):
    for g, w in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if exact:
            assert torch.equal(g, w) or torch.equal(g.isnan(), w.isnan()) and torch.equal(g[~g.isnan()], w[~w.isnan()])
        else:
            torch.testing.assert_close(g, w, equal_nan=True, atol=1e-5, rtol=1e-5)


UNARY = [aten.digamma.default, aten.i0.default, aten.special_i0e.default, aten.special_i1.default,
         aten.special_i1e.default, aten.special_entr.default, aten.sinc.default, aten.angle.default,
         aten.special_modified_bessel_i0.default, aten.special_modified_bessel_i1.default,
         aten.special_modified_bessel_k0.default, aten.special_modified_bessel_k1.default,
         aten.special_scaled_modified_bessel_k0.default, aten.special_scaled_modified_bessel_k1.default,
         aten.special_spherical_bessel_j0.default, aten.special_bessel_j0.default, aten.special_bessel_j1.default,
         aten.special_ndtri.default,
         aten.special_airy_ai.default]


@pytest.mark.parametrize("op", UNARY, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_unary_specials(op, dtype):
    x = _specials(dtype)
    _same(TABLE[op](x), op(x))


@pytest.mark.parametrize("n", [0, 1])
def test_polygamma_low_orders(n):
    x = _specials()
    _same(TABLE[aten.polygamma.default](n, x), aten.polygamma.default(n, x))


def test_left_whole_where_eager_cannot_be_matched():
    x = _specials()
    assert TABLE[aten.polygamma.default](2, x) is NotImplemented  # Hurwitz zeta: data-dependent loop
    assert TABLE[aten.linspace.default](0, 10, 5, dtype=torch.int64) is NotImplemented  # ATen's vector blocks
    assert TABLE[aten.logspace.default](0, 3, 4, dtype=torch.int32) is NotImplemented


def test_integer_inputs_promote():
    n = torch.arange(-4, 5)
    for op in (aten.digamma.default, aten.i0.default, aten.sinc.default, aten.angle.default, aten.special_entr.default):
        _same(TABLE[op](n), op(n))
    _same(TABLE[aten.isposinf.default](n), aten.isposinf.default(n), exact=True)


def test_binary_specials():
    x, y = _specials(seed=1), _specials(seed=2).abs()
    x[10:14] = 0.0
    for op in (aten.xlogy.Tensor, aten.special_xlog1py.default, aten.logaddexp2.default):
        _same(TABLE[op](x, y), op(x, y))
    _same(TABLE[aten.xlogy.Scalar_Self](2.0, y), aten.xlogy.Scalar_Self(2.0, y))
    _same(TABLE[aten.ldexp.Tensor](x, torch.arange(64) % 7 - 3), aten.ldexp.Tensor(x, torch.arange(64) % 7 - 3))
    same_inf = torch.tensor([float("inf"), -float("inf")])
    _same(TABLE[aten.logaddexp2.default](same_inf, same_inf), aten.logaddexp2.default(same_inf, same_inf))


@pytest.mark.parametrize("steps", [0, 1, 2, 7, 50])
def test_linspace_logspace(steps):
    for start, end in ((-3.0, 5.5), (1e3, -2.0), (0.1, 0.1)):
        _same(TABLE[aten.linspace.default](start, end, steps), aten.linspace.default(start, end, steps))
        _same(TABLE[aten.logspace.default](start / 10, end / 10, steps, 2.0), aten.logspace.default(start / 10, end / 10, steps, 2.0))
    s, e = torch.tensor(-1.0, dtype=torch.float64), torch.tensor(4)
    _same(TABLE[aten.linspace.Tensor_Tensor](s, e, steps), aten.linspace.Tensor_Tensor(s, e, steps))


def test_eye_exact():
    for args, kw in (((3,), {}), ((2, 5), {"dtype": torch.int32}), ((4, 1), {"dtype": torch.bool})):
        op = aten.eye.m if len(args) == 2 else aten.eye.default
        _same(TABLE[op](*args, **kw), op(*args, **kw), exact=True)


def test_selection_exact():
    seq = torch.tensor([-1.0, 0.0, 0.0, 2.0])
    v = torch.tensor([[-5.0, 0.0, 1.0], [2.0, 9.0, float("nan")]])
    for right in (False, True):
        _same(TABLE[aten.bucketize.Tensor](v, seq, right=right), aten.bucketize.Tensor(v, seq, right=right), exact=True)
    x, t = torch.tensor([1, 2, 3, 4]), torch.tensor([[2, 9], [4, 4]])
    _same(TABLE[aten.isin.Tensor_Tensor](x, t, invert=True), aten.isin.Tensor_Tensor(x, t, invert=True), exact=True)
    mask = torch.tensor([[True, False], [True, True]])
    src = torch.arange(10.0)
    _same(TABLE[aten.masked_scatter.default](torch.zeros(2, 2), mask, src), aten.masked_scatter.default(torch.zeros(2, 2), mask, src), exact=True)


def test_index_reduce_matches_for_every_mode():
    x, idx, src = torch.randn(4, 3), torch.tensor([0, 2, 0, 3, 2]), torch.randn(5, 3)
    for mode in ("prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            _same(TABLE[aten.index_reduce.default](x, 0, idx, src, mode, include_self=include_self),
                  aten.index_reduce.default(x, 0, idx, src, mode, include_self=include_self))
    xi, srci = torch.tensor([5, 7, 9]), torch.tensor([2, 3, 4, 1])
    _same(TABLE[aten.index_reduce.default](xi, 0, torch.tensor([0, 0, 2, 1]), srci, "mean"),
          aten.index_reduce.default(xi, 0, torch.tensor([0, 0, 2, 1]), srci, "mean"), exact=True)


def test_adaptive_max_pool_exact():
    x = torch.randn(2, 3, 7, 5)
    x[0, 0, 1, 1:3] = float("nan")
    x[1, 1] = -float("inf")
    x[1, 2] = 1.0
    for size in ([3, 2], [7, 5], [1, 1], [4, 5]):
        _same(TABLE[aten.adaptive_max_pool2d.default](x, size), aten.adaptive_max_pool2d.default(x, size), exact=True)
    x3 = torch.randn(1, 2, 4, 5, 3)
    _same(TABLE[aten.adaptive_max_pool3d.default](x3, [2, 3, 2]), aten.adaptive_max_pool3d.default(x3, [2, 3, 2]), exact=True)


def test_large_cases_keep_atens_faster_kernels():
    from kiln.decomp import selection

    x = torch.randn(10)
    big = torch.sort(torch.randn(selection.SEARCH_MAX_BOUNDARIES + 1)).values
    assert TABLE[aten.bucketize.Tensor](x, big) is NotImplemented
    assert TABLE[aten.searchsorted.Tensor](big, x) is NotImplemented
    assert TABLE[aten.isin.Tensor_Tensor](x, torch.randn(selection.ISIN_MAX_TEST_ELEMENTS + 1)) is NotImplemented
    n = selection.MASKED_SCATTER_MAX_NUMEL + 1
    assert TABLE[aten.masked_scatter.default](torch.zeros(n), torch.ones(n, dtype=torch.bool), torch.zeros(n)) is NotImplemented


def test_im2col_and_max_pool_backward():
    import torch.nn.functional as F

    x = torch.randn(2, 3, 9, 8)
    for args in (((3, 2), (1, 1), (0, 0), (1, 1)), ((2, 3), (2, 1), (1, 2), (2, 3))):
        _same(TABLE[aten.im2col.default](x, *args), aten.im2col.default(x, *args), exact=True)
        _same(TABLE[aten.im2col.default](x[0], *args), aten.im2col.default(x[0], *args), exact=True)
    out, idx = F.max_pool2d(x, 3, 1, 1, dilation=2, return_indices=True)  # overlapping windows: gradients add up
    grad = torch.randn_like(out)
    args = (grad, x, [3, 3], [1, 1], [1, 1], [2, 2], False, idx)  # dilated: the scatter-add form
    _same(TABLE[aten.max_pool2d_with_indices_backward.default](*args), aten.max_pool2d_with_indices_backward.default(*args))
    out, idx = F.max_pool2d(x, 3, 1, 1, return_indices=True)
    args = (torch.randn_like(out), x, [3, 3], [1, 1], [1, 1], [1, 1], False, idx)  # lowered as a gather instead
    assert TABLE[aten.max_pool2d_with_indices_backward.default](*args) is NotImplemented


def test_distances_losses_and_renorm():
    x1, x2 = torch.randn(2, 4, 3), torch.randn(2, 30, 3)
    for p in (0.0, 1.0, 2.0, 3.0, float("inf")):
        for mode in (None, 1, 2):
            _same(TABLE[aten._cdist_forward.default](x1, x2, p, mode), aten._cdist_forward.default(x1, x2, p, mode))
    x, t, w = torch.randn(6, 5), torch.tensor([0, 4, 2, 2, 1, 3]), torch.rand(5)
    for p, margin, weight, reduction in ((1, 1.0, None, 1), (2, -0.5, w, 0), (1, 2.0, w, 2)):
        _same(TABLE[aten.multi_margin_loss.default](x, t, p, margin, weight, reduction),
              aten.multi_margin_loss.default(x, t, p, margin, weight, reduction))
    weight, idx = torch.randn(6, 4) * 2, torch.tensor([[0, 2], [2, 5]])
    for norm_type in (1.0, 2.0):
        _same(TABLE[aten.embedding_renorm.default](weight, idx, 1.0, norm_type),
              aten.embedding_renorm_.default(weight.clone(), idx, 1.0, norm_type))


def test_nonzero_static_exact():
    x = torch.tensor([[0, 1.0, 0], [2, 0, float("nan")]])
    for size in (0, 1, 3, 5):
        for fill in (-1, 7):
            _same(TABLE[aten.nonzero_static.default](x, size=size, fill_value=fill),
                  aten.nonzero_static.default(x, size=size, fill_value=fill), exact=True)


def test_upsample_bicubic2d():
    x = torch.randn(2, 3, 5, 7)
    for args in (([10, 14], False), ([10, 14], True), ([3, 4], False), ([1, 1], True), ([8, 9], False, 1.7, 1.3)):
        _same(TABLE[aten.upsample_bicubic2d.default](x, *args), aten.upsample_bicubic2d.default(x, *args))
