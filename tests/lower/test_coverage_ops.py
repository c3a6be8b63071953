"""Ops that used to run as ATen fallbacks, now decomposed into core ops: through the loop-IR reference
evaluator and generated C++, against eager, with no fallback left; fused producers and consumers."""
import torch
import torch.nn.functional as F

from tests.lower.helpers import check, sample


def _specials(shape=(6, 9), scale=6.0, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
    flat = x.view(-1)
    flat[:9] = torch.tensor([0.0, -0.0, -3.0, float("nan"), float("inf"), -float("inf"), 1e-30, 8.0, 10.0])
    return x


def test_special_functions_fused_into_one_kernel():
    def f(x):
        y = x * 0.5 + 0.25
        return (torch.digamma(y) + torch.polygamma(1, y) + torch.special.i0e(y) + torch.special.i1(y)
                + torch.special.i1e(y) + torch.special.entr(y) + torch.sinc(y)).relu()

    check(f, _specials(), kernels=1)


def test_special_functions_float64_and_ints():
    def f(x, n):
        return (torch.digamma(x), torch.polygamma(1, x), torch.i0(x), torch.special.i1e(x), torch.special.i0e(n),
                torch.xlogy(n, x), torch.angle(x), torch.angle(n), torch.isposinf(x), torch.isneginf(n), torch.sinc(n))

    check(f, _specials(dtype=torch.float64), sample((6, 9), torch.int64))


def test_binary_specials():
    def f(x, y):
        return (torch.xlogy(x, y), torch.xlogy(x, 2.0), torch.special.xlog1py(x, y), torch.logaddexp2(x, y),
                torch.ldexp(x, y.round().clamp(-4, 4)))

    x, y = _specials(seed=1), _specials(seed=2).abs()
    x[1, :3] = 0.0
    y[1, 0] = float("nan")
    check(f, x, y)


def test_factories():
    def f(x, start, end):
        return (torch.linspace(-2.0, 3.0, 9) * x, torch.linspace(start, end, 9), torch.linspace(1.0, 1.0, 1),
                torch.linspace(0.0, 1.0, 0), torch.logspace(-1.0, 2.0, 9, base=3.0), torch.logspace(start, end, 5),
                torch.eye(4), torch.eye(3, 5, dtype=torch.int64), torch.eye(2, dtype=torch.bool),
                torch.linspace(0.0, 1.0, 7, dtype=torch.float64))

    check(f, torch.randn(9), torch.tensor(-1.5), torch.tensor(2.0))


def test_layout_ops():
    def f(x, d, e):
        return (torch.diag_embed(e, -1, 0, 2), torch.diag(d), torch.diagflat(d, 2), torch.block_diag(x[:2, :3], d, e[0, 0]),
                torch.rot90(x, 1), torch.rot90(x, 2), torch.rot90(x, -1, (1, 0)), F.pixel_shuffle(x.view(1, 4, 3, 5), 2),
                F.pixel_unshuffle(x.view(1, 1, 6, 10), 2), F.channel_shuffle(x.view(1, 4, 15), 2), torch.trace(x[:4, :4]),
                torch.squeeze_copy(x.view(1, 4, 15)), torch.t_copy(x), torch.unfold_copy(x, 1, 4, 3),
                torch.narrow_copy(x, 1, -5, 3), torch.unbind_copy(x[:2]), torch.split_with_sizes_copy(x, [1, 3]),
                torch.unsafe_split(x, 2, 1))

    check(f, torch.randn(4, 15), torch.randn(3), torch.randn(2, 3))


def test_norms_and_cross():
    def f(x, y, a, b):
        return (torch.norm(x, 3, [1], True), torch.norm(x), torch.dist(x, y, 1), torch.dist(x, y), torch.renorm(x, 2, 0, 1.5),
                torch.vdot(x[0], y[0]), torch.linalg.cross(a.T, b.T), torch.cross(a, b, dim=0))

    check(f, torch.randn(4, 6), torch.randn(4, 6), torch.randn(3, 5), torch.randn(3, 5))


def test_edge_cases():
    def f(x0, e, x):
        return (torch.softmax(e, 0), torch.log_softmax(e, 1), torch.max(x0, 0), torch.min(x0, 0, True), torch.aminmax(e, dim=1))

    check(f, torch.tensor(1.5), torch.randn(0, 3), torch.randn(3))


def test_index_reduce_all_modes():
    def f(x, idx, src):
        return tuple(x.index_reduce(0, idx, src, mode, include_self=inc)
                     for mode in ("prod", "mean", "amax", "amin") for inc in (True, False))

    src = torch.randn(5, 3)
    src[1, 1] = float("nan")
    check(f, torch.randn(4, 3), torch.tensor([0, 2, 0, 3, 2]), src)


def test_0dim_gathers_scatters_and_index_ops():
    def f(x, i, s, i1):
        return (torch.gather(x, 0, i), torch.scatter(x, 0, i, s), torch.scatter_add(x, 0, i, s),
                torch.scatter_reduce(x, 0, i, s, "amin"), torch.scatter(x, 0, i, 3.0), x.index_select(0, i1),
                x.index_add(0, i1, s, alpha=2), x.index_copy(0, i1, s), x.index_fill(0, i1, -1.0), x.index_reduce(0, i1, s, "prod"))

    check(f, torch.tensor(2.0), torch.tensor(0), torch.tensor(5.0), torch.tensor([0]))


def test_max_unpool_1d_2d_3d():
    def f(p1, i1, p2, i2, p3, i3):
        return (F.max_unpool1d(p1, i1, 2), F.max_unpool2d(p2, i2, 2, output_size=(5, 5)), F.max_unpool3d(p3, i3, 2))

    p1, i1 = F.max_pool1d(torch.randn(2, 3, 8), 2, return_indices=True)
    p2, i2 = F.max_pool2d(torch.randn(2, 5, 5), 2, return_indices=True)
    p3, i3 = F.max_pool3d(torch.randn(1, 2, 4, 4, 4), 2, return_indices=True)
    check(f, p1, i1, p2, i2, p3, i3)


def test_selection_ops():
    def f(x, mask, src, seq, v, seq2, v2, sorter):
        return (x.masked_scatter(mask, src), x[0].masked_scatter(mask, src), torch.isin(x.round(), src.round()),
                torch.isin(x.round(), src.round(), invert=True), torch.bucketize(v, seq), torch.bucketize(v, seq, right=True, out_int32=True),
                torch.searchsorted(seq, v, side="right"), torch.searchsorted(seq2, v2), torch.searchsorted(seq[sorter.argsort()], v, sorter=sorter.argsort().argsort()),
                torch.take(x, torch.tensor([0, -1])), x.put(torch.tensor([1, -2, 1]), torch.tensor([1.0, 2.0, 3.0]), accumulate=True))

    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 7, generator=g)
    mask = torch.rand(5, 7, generator=g) > 0.5
    seq = torch.tensor([-1.0, -0.5, 0.0, 0.0, 1.0, 2.0])
    v = torch.tensor([-2.0, -1.0, 0.0, 0.5, 2.0, 3.0, float("nan")])
    seq2 = torch.sort(torch.randn(3, 6, generator=g), -1).values
    check(f, x, mask, torch.randn(40, generator=g), seq, v, seq2, torch.randn(3, 4, generator=g), torch.randperm(6, generator=g))


def test_chunk_cat_empty_permuted_and_pads():
    def f(a, b, x):
        return (torch._chunk_cat([a, b], 1, 3), torch.empty_permuted((2, 3, 4), (2, 0, 1)).shape,
                F.pad(x, (-1, 2, 1, -2), mode="replicate"), F.pad(x[0], (2, -1), mode="reflect"))

    check(f, torch.randn(2, 5), torch.randn(2, 7), torch.randn(1, 2, 5, 5))


def test_adaptive_max_pool_exact_indices_and_empty_batches():
    def f(x, x3, e):
        return (F.adaptive_max_pool2d(x, (3, 2), return_indices=True), F.adaptive_max_pool1d(x[0], 4, return_indices=True),
                F.adaptive_max_pool3d(x3, (2, 3, 1), return_indices=True), F.avg_pool2d(e, 2), F.adaptive_avg_pool2d(e, 3))

    x = torch.randn(2, 3, 7, 5)
    x[0, 0, 1, 1:3] = float("nan")
    x[1, 1] = -float("inf")
    x[1, 2] = 1.0  # ties: the first tap
    check(f, x, torch.randn(1, 2, 4, 5, 3), torch.randn(0, 2, 6, 6))


def test_modified_and_spherical_bessel_fused():
    def f(x):
        a = x.abs() + 0.01
        return (torch.special.modified_bessel_i0(x) + torch.special.modified_bessel_i1(x) + torch.special.modified_bessel_k0(a)
                + torch.special.modified_bessel_k1(a) + torch.special.scaled_modified_bessel_k0(x)
                + torch.special.scaled_modified_bessel_k1(x) + torch.special.spherical_bessel_j0(x)) * 0.5

    cg = check(f, _specials(scale=4.0))
    assert len(cg.kernels) <= 2  # (long chains are cut into a few kernels; their temporaries stay kernel-local)


def test_bessel_first_and_second_kind():
    def f(x):
        return torch.special.bessel_j0(x), torch.special.bessel_j1(x), torch.special.airy_ai(x)

    check(f, _specials(scale=8.0))


def test_ndtri_unfold_and_max_pool_backward():
    def f(p, x, grad, idx):
        return (torch.special.ndtri(p), F.unfold(x, (3, 2), dilation=(2, 1), padding=1, stride=(1, 2)),
                torch.ops.aten.max_pool2d_with_indices_backward(grad * 2, x, [3, 3], [1, 1], [1, 1], [1, 1], False, idx))

    p = torch.rand(64)
    p[:6] = torch.tensor([0.0, 1.0, -0.5, 1.5, float("nan"), 1e-20])
    x = torch.randn(2, 3, 9, 8)
    out, idx = F.max_pool2d(x, 3, 1, 1, return_indices=True)
    check(f, p, x, torch.randn_like(out), idx)


def test_distances_losses_and_embedding_max_norm():
    def f(a, b, x, t, w, weight, idx):
        return (torch.cdist(a, b), torch.cdist(a, b, p=1.0), torch.cdist(a, b, compute_mode="use_mm_for_euclid_dist"),
                F.multi_margin_loss(x, t, p=2, weight=w), F.multi_margin_loss(x, t, reduction="none"),
                F.embedding(idx, weight.clone(), max_norm=1.0))

    check(f, torch.randn(2, 4, 3), torch.randn(2, 6, 3), torch.randn(6, 5), torch.tensor([0, 4, 2, 2, 1, 3]), torch.rand(5),
          torch.randn(6, 4) * 2, torch.tensor([[0, 2], [2, 5]]), allow_fallbacks=("bmm",))


def test_nonzero_static():
    def f(x, s):
        return torch.nonzero_static(x, size=4), torch.nonzero_static(x.relu(), size=9, fill_value=-5), torch.nonzero_static(s, size=2)

    x = torch.tensor([[0, 1.0, 0], [2, 0, -3], [0, 0, 4]])
    check(f, x, torch.tensor(1.0))


def test_bicubic_upsampling_fused_with_consumer():
    def f(x):
        return (F.interpolate(x, scale_factor=2, mode="bicubic") * 2).relu(), F.interpolate(x, (4, 9), mode="bicubic", align_corners=True)

    check(f, torch.randn(2, 3, 5, 7))
