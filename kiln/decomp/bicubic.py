"""Decomposition: bicubic upsampling (``upsample_bicubic2d``) as ATen's CPU kernel computes it: per
output coordinate the source ``scale * (i + 1/2) - 1/2`` (``scale * i`` with aligned corners, no clamp),
Keys' cubic weights with A = -0.75 from its fraction, four taps clamped to the edge; the width pass
inside the height pass, each a 4-tap weighted sum of gathers.
"""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.sampling import _scale
from kiln.decomp.utils import to_dtype, upcast

aten = torch.ops.aten
_A = -0.75


def _cubic_taps(in_size, out_size, align_corners, scale, device, dtype):
    """(tap indices (out, 4), weights (out, 4)) along one dim."""
    s = _scale(in_size, out_size, scale, align_corners)
    i = aten.arange.start_step(0, out_size, 1, dtype=dtype, device=device)
    real = aten.mul.Scalar(i, s) if align_corners else aten.sub.Scalar(aten.mul.Scalar(aten.add.Scalar(i, 0.5), s), 0.5)
    base = aten.floor.default(real)
    t = aten.sub.Tensor(real, base)

    def near(x):  # ((A + 2) x - (A + 3)) x x + 1
        return aten.add.Scalar(aten.mul.Tensor(aten.mul.Tensor(aten.sub.Scalar(aten.mul.Scalar(x, _A + 2), _A + 3), x), x), 1.0)

    def far(x):  # ((A x - 5 A) x + 8 A) x - 4 A
        return aten.sub.Scalar(aten.mul.Tensor(aten.add.Scalar(aten.mul.Tensor(aten.sub.Scalar(aten.mul.Scalar(x, _A), 5 * _A), x), 8 * _A), x), 4 * _A)

    u = aten.rsub.Scalar(t, 1.0)
    weights = aten.stack.default([far(aten.add.Scalar(t, 1.0)), near(t), near(u), far(aten.add.Scalar(u, 1.0))], 1)
    start = to_dtype(base, torch.int64)
    offsets = aten.arange.start_step(-1, 3, 1, dtype=torch.int64, device=device)
    taps = aten.clamp.default(aten.add.Tensor(aten.unsqueeze.default(start, 1), offsets), 0, in_size - 1)
    return taps, weights


@decomposition(aten.upsample_bicubic2d.default)
def upsample_bicubic2d(x, output_size, align_corners, scales_h=None, scales_w=None):
    if not x.is_floating_point() or x.dim() != 4 or any(isinstance(s, torch.SymInt) for s in list(x.shape) + list(output_size)):
        return NotImplemented
    out = upcast(x)
    (oh, ow), (h, w) = output_size, x.shape[2:]
    ty, wy = _cubic_taps(h, oh, align_corners, scales_h, x.device, out.dtype)
    tx, wx = _cubic_taps(w, ow, align_corners, scales_w, x.device, out.dtype)
    rows = aten.sum.dim_IntList(aten.mul.Tensor(aten.index.Tensor(out, [None, None, None, tx]), wx), [-1])  # (n, c, h, ow)
    taps = aten.index.Tensor(rows, [None, None, ty])  # (n, c, oh, 4, ow)
    result = aten.sum.dim_IntList(aten.mul.Tensor(taps, aten.unsqueeze.default(wy, -1)), [3])
    return to_dtype(result, x.dtype)
