"""Backward decompositions of window/resampling ops (kiln/decomp/backward_windows.py) and of
mish/rrelu/prelu/group norm/weight norm/masked_scatter (kiln/decomp/backward_more.py) against ATen."""
import pytest
import torch

from kiln.decomp import decomposition_table
from kiln.decomp.backward_windows import linear_sources, nearest_source, pad_source

aten = torch.ops.aten
TABLE = decomposition_table()
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


def r(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return (torch.rand(*shape, generator=g, dtype=torch.float64) * 4 - 2).to(dtype)


def pooling_cases(dt):
    x2, x3 = r(2, 3, 7, 6, dtype=dt), r(2, 2, 5, 6, 7, dtype=dt)
    cases = []
    for k, s, p, ceil, cip, div in [(3, 2, 1, False, True, None), (3, 2, 1, True, False, None), (2, 1, 0, False, True, None),
                                    ([3, 2], [2, 3], [1, 0], True, True, None), (2, 2, 1, False, False, 3), (4, 3, 2, True, False, None)]:
        out2 = aten.avg_pool2d.default(x2, k, s, p, ceil, cip, div)
        cases.append((aten.avg_pool2d_backward.default, (r(*out2.shape, dtype=dt), x2, k, s, p, ceil, cip, div)))
        if isinstance(k, list):
            k, s, p = k + [2], s + [1], p + [1]
        if dt != torch.bfloat16:  # (no CPU avg_pool3d for bfloat16)
            out3 = aten.avg_pool3d.default(x3, k, s, p, ceil, cip, div)
            cases.append((aten.avg_pool3d_backward.default, (r(*out3.shape, dtype=dt), x3, k, s, p, ceil, cip, div)))
    for size in ([3, 4], [7, 6], [5, 2], [1, 1]):
        out = aten._adaptive_avg_pool2d.default(x2, size)
        cases.append((aten._adaptive_avg_pool2d_backward.default, (r(*out.shape, dtype=dt), x2)))
        vals, idx = aten.adaptive_max_pool2d.default(x2, size)
        cases.append((aten.adaptive_max_pool2d_backward.default, (r(*vals.shape, dtype=dt), x2, idx)))
    for size in ([2, 4, 3], [5, 6, 7]):
        out = aten._adaptive_avg_pool3d.default(x3, size)
        cases.append((aten._adaptive_avg_pool3d_backward.default, (r(*out.shape, dtype=dt), x3)))
        vals, idx = aten.adaptive_max_pool3d.default(x3, size)
        cases.append((aten.adaptive_max_pool3d_backward.default, (r(*vals.shape, dtype=dt), x3, idx)))
    cases.append((aten._adaptive_avg_pool2d_backward.default, (r(3, 2, 2, dtype=dt), r(3, 5, 4, dtype=dt))))  # no batch
    return cases


def upsample_cases(dt):
    cases = []
    for n, (ins, outs) in {1: ([7], [3]), 2: ([5, 4], [11, 8]), 3: ([3, 4, 5], [6, 3, 7])}.items():
        lead = [2, 3]
        for exact in (False, True):
            name = f"_upsample_nearest_exact{n}d_backward" if exact else f"upsample_nearest{n}d_backward"
            cases.append((getattr(aten, name).default, (r(*lead, *outs, dtype=dt), outs, lead + ins)))
            scales = [1.7] * n  # the scale, not the sizes, picks the sources
            cases.append((getattr(aten, name).default, (r(*lead, *outs, dtype=dt), outs, lead + ins, *scales)))
        linear = {1: "upsample_linear1d_backward", 2: "upsample_bilinear2d_backward", 3: "upsample_trilinear3d_backward"}[n]
        for align in (False, True):
            cases.append((getattr(aten, linear).default, (r(*lead, *outs, dtype=dt), outs, lead + ins, align)))
        cases.append((getattr(aten, linear).default, (r(*lead, *outs, dtype=dt), outs, lead + ins, False, *[0.6] * n)))
    for outs, align, scales in [([11, 8], False, []), ([3, 13], True, []), ([7, 5], False, [1.3, 0.9]), ([1, 1], True, [])]:
        cases.append((aten.upsample_bicubic2d_backward.default, (r(2, 3, *outs, dtype=dt), outs, [2, 3, 5, 4], align, *scales)))
    return cases


def pad_cases(dt):
    cases = []
    for n, shape, pads in [(1, [2, 3, 6], [2, 3]), (1, [3, 5], [4, 0]), (2, [2, 3, 5, 4], [1, 2, 3, 0]),
                           (2, [2, 3, 5, 4], [-1, 2, 1, -2]), (3, [1, 2, 4, 3, 5], [1, 2, 2, 1, 0, 3])]:
        x = r(*shape, dtype=dt)
        for mode in ("reflection", "replication"):
            op = getattr(aten, f"{mode}_pad{n}d")
            out = op.default(x, pads)
            cases.append((getattr(aten, f"{mode}_pad{n}d_backward").default, (r(*out.shape, dtype=dt), x, pads)))
    x = r(4, 9, 3, dtype=dt)
    for dim, size, step in [(1, 3, 2), (1, 2, 3), (0, 2, 1), (-1, 3, 1), (1, 9, 1)]:
        out = x.unfold(dim, size, step)
        cases.append((aten.unfold_backward.default, (r(*out.shape, dtype=dt), list(x.shape), dim, size, step)))
    img = r(2, 3, 7, 6, dtype=dt)
    for k, d, p, s in [([2, 3], [1, 1], [0, 1], [1, 2]), ([3, 2], [2, 1], [1, 0], [2, 1]), ([1, 1], [1, 1], [0, 0], [1, 1])]:
        cols = aten.im2col.default(img, k, d, p, s)
        cases.append((aten.col2im.default, (r(*cols.shape, dtype=dt), [7, 6], k, d, p, s)))
        cases.append((aten.col2im.default, (r(*cols.shape[1:], dtype=dt), [7, 6], k, d, p, s)))  # no batch
    return cases


def more_cases(dt):
    x, g = r(3, 4, 6, dtype=dt), r(3, 4, 6, dtype=dt, seed=1)
    x[0, 0, :3] = torch.tensor([0.0, 20.0, -20.0])
    noise = torch.where(x > 0, 1.0, 0.2).to(dt)
    w = r(1, 4, 1, dtype=dt, seed=2)
    xg, gg = r(2, 6, 5, 3, dtype=dt, seed=3), r(2, 6, 5, 3, dtype=dt, seed=4)
    gamma, beta = r(6, dtype=dt, seed=5), r(6, dtype=dt, seed=6)
    _, mean, rstd = aten.native_group_norm.default(xg, gamma, beta, 2, 6, 15, 3, 1e-5)
    v, gn = r(4, 3, 2, dtype=dt, seed=7), r(4, 1, 1, dtype=dt, seed=8)
    _, norms = aten._weight_norm_interface.default(v, gn, 0)
    v2, g2 = r(3, 5, dtype=dt, seed=9), r(1, 5, dtype=dt, seed=10)
    _, norms2 = aten._weight_norm_interface.default(v2, g2, 1)
    mask = torch.rand(3, 4, 6, generator=torch.Generator().manual_seed(0)) > 0.4
    return [
        (aten.mish_backward.default, (g, x)),
        (aten.rrelu_with_noise_backward.default, (g, x, noise, 0.1, 0.3, True, False)),
        (aten.rrelu_with_noise_backward.default, (g, x, noise, 0.1, 0.3, False, False)),
        (aten._prelu_kernel_backward.default, (g, x, w)),
        (aten.native_group_norm_backward.default, (gg, xg, mean, rstd, gamma, 2, 6, 15, 3, [True, True, True])),
        (aten.native_group_norm_backward.default, (gg, xg, mean, rstd, None, 2, 6, 15, 3, [True, False, False])),
        (aten._weight_norm_interface_backward.default, (r(4, 3, 2, dtype=dt), v, gn, norms, 0)),
        (aten._weight_norm_interface_backward.default, (r(3, 5, dtype=dt), v2, g2, norms2, 1)),
        (aten._weight_norm_interface.default, (v, gn, 0)),
        (aten._weight_norm_interface.default, (v2, g2, 1)),
        (aten.masked_scatter_backward.default, (g, mask, [5, 20])),
        (aten.masked_scatter_backward.default, (g, mask[0, 0], [3, 4, 6])),  # a broadcast mask
    ] + cdist_cases(dt)


def cdist_cases(dt):
    if dt == torch.bfloat16:
        return []  # (no CPU cdist for bfloat16)
    x1, x2 = r(2, 4, 3, dtype=dt, seed=11), r(2, 5, 3, dtype=dt, seed=12)
    x2[0, 0] = x1[0, 0]  # a zero distance
    x2[1, 1, 0] = x1[1, 2, 0]  # a zero difference
    cases = []
    for p in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")):
        dist = aten._cdist_forward.default(x1, x2, p, None)
        cases.append((aten._cdist_backward.default, (r(2, 4, 5, dtype=dt, seed=13), x1, x2, p, dist)))
    return cases


@pytest.mark.parametrize("family", [pooling_cases, upsample_cases, pad_cases, more_cases], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_backward_decompositions_match_aten(dt, family):
    tol = dict(atol=2e-2, rtol=2e-2) if dt == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
    for op, args in family(dt):
        expected = op(*args)
        got = TABLE[op](*args)
        assert got is not NotImplemented, op
        torch.testing.assert_close(got, expected, **tol, equal_nan=True,
                                   msg=lambda m: f"{op}{[a for a in args if not isinstance(a, torch.Tensor)]}: {m}")


def test_source_positions_match_eager_forward():
    """The host-side index rules equal what eager's forward kernels read (a one-hot probe per input)."""
    for ins, outs, scale, exact in [(5, 11, None, False), (7, 3, None, True), (4, 8, None, False), (6, 6, 1.3, False),
                                    (3, 10, 2.9, True)]:
        x = torch.arange(ins, dtype=torch.float32).view(1, 1, ins)
        op = aten._upsample_nearest_exact1d.default if exact else aten.upsample_nearest1d.default
        got = op(x, [outs], scale)[0, 0].long().tolist()
        assert got == [nearest_source(o, ins, outs, scale, exact) for o in range(outs)]
    for ins, outs, align in [(5, 11, False), (7, 3, True), (4, 4, False)]:
        x = torch.arange(ins, dtype=torch.float64).view(1, 1, ins)
        got = aten.upsample_linear1d.default(x, [outs], align)[0, 0]
        want = [(1 - lam) * i0 + lam * i1 for i0, i1, lam in (linear_sources(o, ins, outs, align, None) for o in range(outs))]
        torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), atol=1e-6, rtol=0)
    x = torch.arange(5.0).view(1, 1, 5)
    assert torch.nn.functional.pad(x, [3, 4], mode="reflect")[0, 0].long().tolist() == \
        [pad_source(o, 5, 3, "reflect") for o in range(12)]
    assert torch.nn.functional.pad(x, [3, 4], mode="replicate")[0, 0].long().tolist() == \
        [pad_source(o, 5, 3, "replicate") for o in range(12)]
