"""Decompositions: addmm, baddbmm, mv, dot, outer products; mm/bmm/convolution stay whole."""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition

aten = torch.ops.aten


LOW_PRECISION = (torch.float16, torch.bfloat16)


def _keeps_rounding(m1) -> bool:
    """Leave a fused multiply-add whole for float16/bfloat16: the library kernel adds the bias to the
    float32 accumulator and rounds once; ``mm`` then ``add`` would round the product first."""
    return m1.is_complex() or m1.dtype in LOW_PRECISION


def _scaled_add(bias, product, beta, alpha):
    if alpha != 1:
        product = aten.mul.Scalar(product, alpha)
    if beta == 0:
        return product  # bias is ignored, NaNs included, as in eager
    if beta != 1:
        bias = aten.mul.Scalar(bias, beta)
    return aten.add.Tensor(bias, product)


@decomposition(aten.addmm.default)
def addmm(bias, m1, m2, *, beta=1, alpha=1):
    if _keeps_rounding(m1):
        return NotImplemented
    return _scaled_add(bias, aten.mm.default(m1, m2), beta, alpha)


@decomposition(aten.baddbmm.default)
def baddbmm(bias, b1, b2, *, beta=1, alpha=1):
    if _keeps_rounding(b1):
        return NotImplemented
    return _scaled_add(bias, aten.bmm.default(b1, b2), beta, alpha)


@decomposition(aten.addbmm.default)
def addbmm(bias, b1, b2, *, beta=1, alpha=1):
    if _keeps_rounding(b1):
        return NotImplemented
    return _scaled_add(bias, aten.sum.dim_IntList(aten.bmm.default(b1, b2), [0]), beta, alpha)


@decomposition(aten.mv.default)
def mv(mat, vec):
    return aten.squeeze.dim(aten.mm.default(mat, aten.unsqueeze.default(vec, 1)), 1)


@decomposition(aten.addmv.default)
def addmv(bias, mat, vec, *, beta=1, alpha=1):
    if _keeps_rounding(mat):
        return NotImplemented
    return _scaled_add(bias, mv(mat, vec), beta, alpha)


@decomposition(aten.dot.default)
def dot(a, b):
    if a.is_complex():
        return NotImplemented
    return aten.squeeze.dims(aten.mm.default(aten.unsqueeze.default(a, 0), aten.unsqueeze.default(b, 1)), [0, 1])


@decomposition(aten.addr.default)
def addr(bias, v1, v2, *, beta=1, alpha=1):
    if v1.is_complex() or v1.dtype == torch.bool:
        return NotImplemented
    outer = aten.mul.Tensor(aten.unsqueeze.default(v1, 1), aten.unsqueeze.default(v2, 0))
    return _scaled_add(bias, outer, beta, alpha)


@decomposition(aten._convolution.default)
def legacy_convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups, *flags):
    return aten.convolution.default(x, w, b, stride, padding, dilation, transposed, output_padding, groups)
