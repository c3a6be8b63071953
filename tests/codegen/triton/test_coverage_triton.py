"""Decomposed special functions, factories, selections and layouts through the Triton generator
(Triton's interpreter on CPU): generated kernels only, eager's values, fused with producers and consumers."""
import pytest
import torch

from tests.codegen.triton.helpers import check


def _specials(shape=(6, 9), scale=6.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * scale
    flat = x.view(-1)
    flat[:8] = torch.tensor([0.0, -0.0, -3.0, float("nan"), float("inf"), -float("inf"), 1e-30, 8.0])
    return x


def _no_fallbacks(cg):
    assert not [s for s in cg.sched.steps if not hasattr(s, "members")], cg.sched.format()


def test_special_functions_fused_one_kernel():
    def f(x):
        y = x * 0.5 + 0.25  # producer, inlined
        return (torch.digamma(y) + torch.polygamma(1, y) + torch.i0(y) * 0 + torch.special.i0e(y)
                + torch.special.i1(y) + torch.special.i1e(y) + torch.special.entr(y) + torch.sinc(y)).relu()

    cg = check(f, _specials(), kernels=1, atol=1e-4, rtol=1e-4)
    _no_fallbacks(cg)


def test_binary_specials():
    def f(x, y):
        return torch.xlogy(x, y), torch.special.xlog1py(x, y), torch.logaddexp2(x, y), torch.ldexp(x, y.round())

    x, y = _specials(seed=1), _specials(seed=2).abs()
    x[0, 0] = 0.0
    _no_fallbacks(check(f, x, y, atol=1e-4, rtol=1e-4))


def test_linspace_logspace_eye_consumers():
    def f(x):
        return (x * torch.linspace(-2.0, 3.0, 9) + torch.logspace(0.0, 1.0, 9, base=2.0),
                torch.eye(6, 9) * x[:6])

    _no_fallbacks(check(f, torch.randn(6, 9)))


def test_selection_ops():
    def f(x, mask, src, seq, v):
        return (x.masked_scatter(mask, src), torch.isin(x.round(), src.round()), torch.bucketize(v, seq),
                torch.searchsorted(seq, v, right=True))

    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 7, generator=g)
    mask = torch.rand(5, 7, generator=g) > 0.5
    src = torch.randn(40, generator=g)
    seq = torch.tensor([-1.0, -0.5, 0.0, 0.0, 1.0, 2.0])
    v = torch.tensor([-2.0, -1.0, 0.0, 0.5, 2.0, 3.0, float("nan")])
    _no_fallbacks(check(f, x, mask, src, seq, v))


def test_layout_ops():
    def f(x, d):
        return (torch.diag_embed(d, 1), torch.rot90(x, 1, (0, 1)), torch.nn.functional.pixel_shuffle(x.view(1, 4, 3, 5), 2),
                torch.block_diag(x[:2, :3], d), torch.trace(x[:4, :4]))

    _no_fallbacks(check(f, torch.randn(4, 15), torch.randn(3)))


def test_max_unpool_and_0dim_scatter():
    # (index_reduce's amax/amin/prod have no exact float atomics in Triton: the C++ tests cover them)
    def f(pooled, ind, x, i, s):
        return (torch.nn.functional.max_unpool2d(pooled * 2, ind, 2, output_size=(4, 4)).relu(),
                torch.scatter(x, 0, i, s), torch.gather(x, 0, i))

    pooled, ind = torch.nn.functional.max_pool2d(torch.randn(1, 2, 4, 4), 2, return_indices=True)
    _no_fallbacks(check(f, pooled, ind, torch.tensor(2.0), torch.tensor(0), torch.tensor(5.0)))


def test_modified_bessel_functions():
    def f(x):
        a = x.abs() + 0.01
        return (torch.special.modified_bessel_i1(x), torch.special.modified_bessel_k0(a),
                torch.special.scaled_modified_bessel_k1(x), torch.special.spherical_bessel_j0(x),
                torch.special.bessel_j1(x * 2))

    _no_fallbacks(check(f, _specials(scale=4.0), atol=1e-4, rtol=1e-4))


def test_ndtri_airy_unfold_and_pool_backward():
    import torch.nn.functional as F

    def f(p, x, img, grad, idx):
        return (torch.special.ndtri(p), torch.special.airy_ai(x), F.unfold(img, 2, padding=1),
                torch.ops.aten.max_pool2d_with_indices_backward(grad, img, [2, 2], [2, 2], [0, 0], [1, 1], False, idx))

    p = torch.rand(40)
    p[:4] = torch.tensor([0.0, 1.0, -0.5, 1e-20])
    img = torch.randn(1, 2, 6, 6)
    out, idx = F.max_pool2d(img, 2, return_indices=True)
    _no_fallbacks(check(f, p, _specials(scale=4.0), img, torch.randn_like(out), idx, atol=1e-4, rtol=1e-4))


def test_bicubic_and_airy():
    import torch.nn.functional as F

    def f(x):
        return F.interpolate(x, scale_factor=2, mode="bicubic").relu(), torch.special.airy_ai(x)

    _no_fallbacks(check(f, torch.randn(1, 2, 4, 5), atol=1e-4, rtol=1e-4))
