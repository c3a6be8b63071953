"""Decompositions: nearest and (bi/tri)linear upsampling as index computations plus gathers."""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import to_dtype, upcast

aten = torch.ops.aten


def _scale(in_size, out_size, scale, align_corners=False):
    """Source-per-destination scale, as eager's area_pixel_compute_scale."""
    if align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else in_size / out_size


def _scale_of(in_size, out_size, scale, align_corners, dtype, device):
    """``_scale``: a Python float for static sizes or a given scale; for symbolic sizes a 0-dim tensor of
    ``dtype`` (ATen's opmath type) divided as ATen divides them (a Python float of symbolic sizes would
    pin them: a graph per size)."""
    from kiln.fake.symbolic import is_symbolic

    if not (is_symbolic(in_size) or is_symbolic(out_size)) or \
            (not align_corners and scale is not None and scale > 0):
        return _scale(in_size, out_size, scale, align_corners)
    if align_corners:
        if not out_size > 1:
            return 0.0
        in_size, out_size = in_size - 1, out_size - 1
    return aten.div.Tensor(aten.scalar_tensor.default(in_size, dtype=dtype, device=device),
                           aten.scalar_tensor.default(out_size, dtype=dtype, device=device))


def _times(t, s):
    return aten.mul.Tensor(t, s) if isinstance(s, torch.Tensor) else aten.mul.Scalar(t, s)


def _nearest_index(in_size, out_size, scale, exact, device):
    s = _scale_of(in_size, out_size, scale, False, torch.float32, device)
    i = aten.arange.start_step(0, out_size, 1, dtype=torch.float32, device=device)
    src = _times(aten.add.Scalar(i, 0.5), s) if exact else _times(i, s)
    idx = aten._to_copy.default(aten.floor.default(src), dtype=torch.int64)
    return aten.clamp.default(idx, None, in_size - 1)


def _upsample_nearest(x, output_size, scales, exact):
    n = len(output_size)
    scales = list(scales) + [None] * (n - len(scales))
    out = x
    for i in range(n):
        dim = x.dim() - n + i
        idx = _nearest_index(x.shape[dim], output_size[i], scales[i], exact, x.device)
        out = aten.index.Tensor(out, [None] * dim + [idx])
    return out


def _register_nearest(n, exact):
    prefix = "_upsample_nearest_exact" if exact else "upsample_nearest"
    op = getattr(aten, f"{prefix}{n}d").default

    @decomposition(op)
    def upsample(x, output_size, *scales):
        return _upsample_nearest(x, output_size, [s for s in scales], exact)

    return upsample


for _n in (1, 2, 3):
    _register_nearest(_n, False)
    _register_nearest(_n, True)


def _linear_weights(in_size, out_size, align_corners, scale, device, dtype):
    s = _scale_of(in_size, out_size, scale, align_corners, dtype, device)
    i = aten.arange.start_step(0, out_size, 1, dtype=dtype, device=device)
    if align_corners:
        src = _times(i, s)
    else:
        src = aten.clamp.default(aten.sub.Scalar(_times(aten.add.Scalar(i, 0.5), s), 0.5), 0, None)
    i0 = aten._to_copy.default(aten.floor.default(src), dtype=torch.int64)
    i0 = aten.clamp.default(i0, None, in_size - 1)
    i1 = aten.clamp.default(aten.add.Scalar(i0, 1), None, in_size - 1)
    lam = aten.clamp.default(aten.sub.Tensor(src, i0), 0, 1)
    return i0, i1, lam


def _upsample_linear(x, output_size, align_corners, scales):
    n = len(output_size)
    scales = list(scales) + [None] * (n - len(scales))
    out = upcast(x)
    for i in range(n):
        dim = x.dim() - n + i
        i0, i1, lam = _linear_weights(x.shape[dim], output_size[i], align_corners, scales[i], x.device, out.dtype)
        lam = aten.view.default(to_dtype(lam, out.dtype), [output_size[i]] + [1] * (n - 1 - i))
        a = aten.index.Tensor(out, [None] * dim + [i0])
        b = aten.index.Tensor(out, [None] * dim + [i1])
        out = aten.add.Tensor(a, aten.mul.Tensor(aten.sub.Tensor(b, a), lam))
    return to_dtype(out, x.dtype)


@decomposition(aten.upsample_linear1d.default)
def upsample_linear1d(x, output_size, align_corners, scales=None):
    return _upsample_linear(x, output_size, align_corners, [scales])


@decomposition(aten.upsample_bilinear2d.default)
def upsample_bilinear2d(x, output_size, align_corners, scales_h=None, scales_w=None):
    return _upsample_linear(x, output_size, align_corners, [scales_h, scales_w])


@decomposition(aten.upsample_trilinear3d.default)
def upsample_trilinear3d(x, output_size, align_corners, scales_d=None, scales_h=None, scales_w=None):
    return _upsample_linear(x, output_size, align_corners, [scales_d, scales_h, scales_w])


@decomposition(aten.cudnn_grid_sampler.default)
def cudnn_grid_sampler(x, grid):
    """cuDNN's sampler, which grid_sample picks on CUDA: bilinear, zero padding, corners aligned."""
    return aten.grid_sampler_2d.default(x, grid, 0, 0, True)
