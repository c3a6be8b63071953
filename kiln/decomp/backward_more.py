"""Decompositions: more backward ops autograd's formulas call -- mish, rrelu, prelu, group norm,
weight norm, masked_scatter -- written in core ops as ATen's CPU kernels compute them (same formulas,
float32 for half/bfloat16), so training graphs with them lower to generated code.
"""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import compute_in_float32, scalar_like, to_dtype, upcast

aten = torch.ops.aten


@decomposition(aten.mish_backward.default)
@compute_in_float32
def mish_backward(grad, x):
    # mish = x tanh(softplus(x)): d = tanh_sp + x sigmoid(x) (1 - tanh_sp^2)
    sigmoid = aten.sigmoid.default(x)
    tanh_sp = aten.tanh.default(aten.log1p.default(aten.exp.default(x)))
    sech2 = aten.rsub.Scalar(aten.mul.Tensor(tanh_sp, tanh_sp), 1)
    return aten.mul.Tensor(grad, aten.add.Tensor(tanh_sp, aten.mul.Tensor(aten.mul.Tensor(x, sigmoid), sech2)))


@decomposition(aten.rrelu_with_noise_backward.default)
def rrelu_with_noise_backward(grad, x, noise, lower, upper, training, self_is_result):
    if training and upper - lower > 1e-6:
        return aten.mul.Tensor(grad, noise)  # the noise holds each element's slope (1 where x > 0)
    return aten.leaky_relu_backward.default(grad, x, (lower + upper) / 2, self_is_result)


@decomposition(aten._prelu_kernel_backward.default)
@compute_in_float32
def prelu_kernel_backward(grad, x, weight):
    # both gradients in the broadcast shape (autograd sums the weight's to its size)
    positive = aten.gt.Scalar(x, 0)
    grad_x = aten.where.self(positive, grad, aten.mul.Tensor(weight, grad))
    grad_w = aten.where.self(positive, scalar_like(0, grad), aten.mul.Tensor(x, grad))
    return grad_x, grad_w


@decomposition(aten.native_group_norm_backward.default)
def native_group_norm_backward(grad, x, mean, rstd, weight, n, c, hxw, group, output_mask):
    """ATen's CPU formula: per (n, c) sums ds = sum(dy x), db = sum(dy) over the plane, then
    dx = rstd gamma dy + c2 x + c3 with per-group c2, c3, and dgamma, dbeta from ds and db."""
    if any(isinstance(v, torch.SymInt) for v in (n, c, hxw)) or n * c * hxw == 0 or c % group:
        return NotImplemented
    d = c // group
    dy = aten.reshape.default(upcast(grad), [n, c, hxw])
    xf = aten.reshape.default(upcast(x), [n, c, hxw])
    mean_f, rstd_f = upcast(mean), upcast(rstd)  # (n, group)
    ds = aten.sum.dim_IntList(aten.mul.Tensor(dy, xf), [2])  # (n, c)
    db = aten.sum.dim_IntList(dy, [2])
    grad_x = grad_w = grad_b = None
    if output_mask[0]:
        gamma = upcast(weight) if weight is not None else None
        ds_g = ds if gamma is None else aten.mul.Tensor(ds, gamma)
        db_g = db if gamma is None else aten.mul.Tensor(db, gamma)
        ds_g = aten.sum.dim_IntList(aten.reshape.default(ds_g, [n, group, d]), [2])  # (n, group)
        db_g = aten.sum.dim_IntList(aten.reshape.default(db_g, [n, group, d]), [2])
        s = 1.0 / (d * hxw)
        rstd3 = aten.mul.Tensor(aten.mul.Tensor(rstd_f, rstd_f), rstd_f)
        c2 = aten.mul.Scalar(aten.mul.Tensor(aten.sub.Tensor(aten.mul.Tensor(db_g, mean_f), ds_g), rstd3), s)
        c3 = aten.sub.Tensor(aten.neg.default(aten.mul.Tensor(c2, mean_f)),
                             aten.mul.Scalar(aten.mul.Tensor(db_g, rstd_f), s))
        c1 = aten.unsqueeze.default(rstd_f, 2)  # (n, group, 1): times gamma per channel below
        if gamma is not None:
            c1 = aten.mul.Tensor(c1, aten.reshape.default(gamma, [1, group, d]))
        dy_g = aten.reshape.default(dy, [n, group, d, hxw])
        x_g = aten.reshape.default(xf, [n, group, d, hxw])
        dx = aten.add.Tensor(aten.add.Tensor(aten.mul.Tensor(aten.unsqueeze.default(c1, 3), dy_g),
                                             aten.mul.Tensor(aten.reshape.default(c2, [n, group, 1, 1]), x_g)),
                             aten.reshape.default(c3, [n, group, 1, 1]))
        grad_x = to_dtype(aten.reshape.default(dx, list(x.shape)), x.dtype)
    if output_mask[1] and weight is not None:
        centered = aten.sub.Tensor(ds, aten.mul.Tensor(db, aten.repeat_interleave.self_int(mean_f, d, 1)))
        dgamma = aten.mul.Tensor(centered, aten.repeat_interleave.self_int(rstd_f, d, 1))
        grad_w = to_dtype(aten.sum.dim_IntList(dgamma, [0]), weight.dtype)
    if output_mask[2]:
        grad_b = to_dtype(aten.sum.dim_IntList(db, [0]), grad.dtype if weight is None else weight.dtype)
    return grad_x, grad_w, grad_b


@decomposition(aten._weight_norm_interface.default)
def weight_norm_interface(v, g, dim=0):
    """(w, norms): norms = |v| over every dim but ``dim`` (kept), w = v (g / norms)."""
    if dim < 0 or v.dim() == 0:
        return NotImplemented
    others = [i for i in range(v.dim()) if i != dim]
    vf = upcast(v)
    norms = aten.sqrt.default(aten.sum.dim_IntList(aten.mul.Tensor(vf, vf), others, True)) if others else aten.abs.default(vf)
    w = aten.mul.Tensor(vf, aten.div.Tensor(upcast(g), norms))
    return to_dtype(w, v.dtype), norms  # (norms stay float32 for half/bfloat16, as eager's)


@decomposition(aten._weight_norm_interface_backward.default)
def weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    """w = g v / |v| (norm over every dim but ``dim``): grad_g = sum(gw v) / |v|,
    grad_v = g / |v| (gw - v sum(gw v) / |v|^2)."""
    if dim < 0 or saved_v.dim() == 0:
        return NotImplemented
    others = [i for i in range(saved_v.dim()) if i != dim]
    gw, v, g, norms = upcast(grad_w), upcast(saved_v), upcast(saved_g), upcast(saved_norms)
    dot = aten.sum.dim_IntList(aten.mul.Tensor(gw, v), others, True) if others else aten.mul.Tensor(gw, v)
    grad_g = aten.div.Tensor(dot, norms)
    projected = aten.mul.Tensor(v, aten.div.Tensor(dot, aten.mul.Tensor(norms, norms)))
    grad_v = aten.mul.Tensor(aten.div.Tensor(g, norms), aten.sub.Tensor(gw, projected))
    return to_dtype(grad_v, saved_v.dtype), to_dtype(grad_g, saved_g.dtype)


@decomposition(aten.masked_scatter_backward.default)
def masked_scatter_backward(grad, mask, sizes):
    """The gradient of masked_scatter's source: grad at the mask's true places, in order, then zeros.
    Each selected element's place is the running count of trues before it (a cumsum); the others go
    to one extra slot that is dropped."""
    if any(isinstance(s, torch.SymInt) for s in list(sizes) + list(grad.shape)):
        return NotImplemented
    numel = 1
    for s in sizes:
        numel *= s
    full_mask = aten.reshape.default(aten.expand.default(mask, list(grad.shape)), [-1])
    flat = aten.reshape.default(grad, [-1])
    place = aten.sub.Scalar(aten.cumsum.default(full_mask, 0, dtype=torch.int64), 1)
    place = aten.where.self(full_mask, place, aten.scalar_tensor.default(numel, dtype=torch.int64, device=grad.device))
    zeros = aten.full.default([numel + 1], 0, dtype=grad.dtype, device=grad.device)
    out = aten.scatter_add.default(zeros, 0, place, flat)
    return aten.reshape.default(aten.slice.Tensor(out, 0, 0, numel), list(sizes))


@decomposition(aten._cdist_backward.default)
def cdist_backward(grad, x1, x2, p, cdist):
    """The gradient of ``cdist(x1, x2, p)`` for x1: sum over x2's rows of ATen's per-pair term
    (Distance.cpp: 0 for p=0, sign(diff) for 1, diff/dist for 2, sign(diff) |diff|^(p-1) / dist^(p-1)
    otherwise, sign(diff) where |diff| is the distance for inf; 0 where the distance is 0)."""
    batch = list(grad.shape[:-2])
    if (list(x1.shape[:-2]) != batch or list(x2.shape[:-2]) != batch or not x1.is_floating_point()
            or any(isinstance(s, torch.SymInt) for s in list(x1.shape) + list(x2.shape))):
        return NotImplemented
    diff = aten.sub.Tensor(aten.unsqueeze.default(x1, -2), aten.unsqueeze.default(x2, -3))  # (..., M, N, D)
    g = aten.unsqueeze.default(grad, -1)
    dist = aten.unsqueeze.default(cdist, -1)
    zero = scalar_like(0, diff)
    if p == 0:
        return aten.mul.Scalar(x1, 0)
    if p == 1:
        term = aten.mul.Tensor(aten.sign.default(diff), g)
    elif p == 2:
        term = aten.where.self(aten.eq.Scalar(dist, 0), zero, aten.div.Tensor(aten.mul.Tensor(g, diff), dist))
    elif p == float("inf"):
        hit = aten.rsub.Scalar(aten.clamp_max.default(aten.ceil.default(
            aten.abs.default(aten.sub.Tensor(aten.abs.default(diff), dist))), 1), 1)
        term = aten.mul.Tensor(aten.mul.Tensor(g, aten.sign.default(diff)), hit)
    else:
        power = aten.pow.Tensor_Scalar(aten.abs.default(diff), p - 1 if p < 2 else p - 2)
        scaled = aten.mul.Tensor(aten.sign.default(diff) if p < 2 else diff, power)
        value = aten.div.Tensor(aten.mul.Tensor(scaled, g), aten.pow.Tensor_Scalar(dist, p - 1))
        skip = aten.eq.Scalar(dist, 0)
        if p < 1:
            skip = aten.logical_or.default(skip, aten.eq.Scalar(diff, 0))
        term = aten.where.self(skip, zero, value)
    return aten.sum.dim_IntList(term, [-2])
