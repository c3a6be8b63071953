"""Decompositions: activations and softmax."""
from __future__ import annotations

import math

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import compute_in_float32, scalar_like, to_dtype, upcast

aten = torch.ops.aten


def _where_scalar(cond, a, b, like):
    """where(cond, a, b) where a or b may be Python scalars (made tensors of like's dtype)."""
    a = a if isinstance(a, torch.Tensor) else scalar_like(a, like)
    b = b if isinstance(b, torch.Tensor) else scalar_like(b, like)
    return aten.where.self(cond, a, b)


@decomposition(aten.relu.default)
def relu(x):
    if x.dtype == torch.bool:
        return NotImplemented
    return _where_scalar(aten.lt.Scalar(x, 0), 0, x, x)  # NaN stays NaN


@decomposition(aten.gelu.default)
@compute_in_float32
def gelu(x, approximate="none"):
    if approximate == "tanh":
        inner = aten.mul.Tensor(aten.add.Tensor(x, aten.mul.Scalar(aten.pow.Tensor_Scalar(x, 3), 0.044715)),
                                math.sqrt(2 / math.pi))
        return aten.mul.Tensor(aten.mul.Scalar(x, 0.5), aten.add.Scalar(aten.tanh.default(inner), 1))
    cdf = aten.add.Scalar(aten.erf.default(aten.mul.Scalar(x, 1 / math.sqrt(2))), 1)
    return aten.mul.Tensor(aten.mul.Scalar(x, 0.5), cdf)


@decomposition(aten.silu.default)
@compute_in_float32
def silu(x):
    return aten.mul.Tensor(x, aten.sigmoid.default(x))


def _softplus(x, beta=1.0, threshold=20.0):
    scaled = aten.mul.Scalar(x, beta)
    soft = aten.div.Scalar(aten.log1p.default(aten.exp.default(scaled)), beta)
    return aten.where.self(aten.gt.Scalar(scaled, threshold), x, soft)


@decomposition(aten.softplus.default)
@compute_in_float32
def softplus(x, beta=1, threshold=20):
    return _softplus(x, beta, threshold)


@decomposition(aten.mish.default)
@compute_in_float32
def mish(x):
    return aten.mul.Tensor(x, aten.tanh.default(_softplus(x)))


@decomposition(aten.hardsigmoid.default)
@compute_in_float32
def hardsigmoid(x):
    return aten.div.Scalar(aten.clamp.default(aten.add.Scalar(x, 3), 0, 6), 6)


@decomposition(aten.hardswish.default)
@compute_in_float32
def hardswish(x):
    return aten.mul.Tensor(x, aten.div.Scalar(aten.clamp.default(aten.add.Scalar(x, 3), 0, 6), 6))


@decomposition(aten.hardtanh.default)
def hardtanh(x, min_val=-1, max_val=1):
    return aten.clamp.default(x, min_val, max_val)


@decomposition(aten.celu.default)
@compute_in_float32
def celu(x, alpha=1.0):
    negative = aten.mul.Scalar(aten.expm1.default(aten.div.Scalar(x, alpha)), alpha)
    return aten.where.self(aten.gt.Scalar(x, 0), x, negative)


@decomposition(aten.elu.default)
@compute_in_float32
def elu(x, alpha=1, scale=1, input_scale=1):
    negative = aten.mul.Scalar(aten.expm1.default(aten.mul.Scalar(x, input_scale)), alpha * scale)
    return aten.where.self(aten.gt.Scalar(x, 0), aten.mul.Scalar(x, scale), negative)


@decomposition(aten.leaky_relu.default)
def leaky_relu(x, negative_slope=0.01):
    return aten.where.self(aten.gt.Scalar(x, 0), x, aten.mul.Scalar(x, negative_slope))


@decomposition(aten.threshold.default)
def threshold(x, threshold, value):
    return _where_scalar(aten.le.Scalar(x, threshold), value, x, x)


@decomposition(aten.softshrink.default)
def softshrink(x, lambd=0.5):
    shrunk = aten.sub.Tensor(x, aten.mul.Scalar(aten.sign.default(x), lambd))
    return _where_scalar(aten.le.Scalar(aten.abs.default(x), lambd), 0, shrunk, x)


@decomposition(aten.hardshrink.default)
def hardshrink(x, lambd=0.5):
    return _where_scalar(aten.le.Scalar(aten.abs.default(x), lambd), 0, x, x)


@decomposition(aten.glu.default)
def glu(x, dim=-1):
    a, b = aten.split.Tensor(x, x.shape[dim] // 2, dim)
    return aten.mul.Tensor(a, aten.sigmoid.default(b))


@decomposition(aten.log_sigmoid_forward.default)
@compute_in_float32
def log_sigmoid_forward(x):
    # log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))
    min_x = aten.minimum.default(x, aten.zeros_like.default(x))
    z = aten.exp.default(aten.neg.default(aten.abs.default(x)))
    out = aten.sub.Tensor(min_x, aten.log1p.default(z))
    # the CPU kernel keeps exp(-|x|) for the backward; the CUDA kernel keeps nothing
    return out, z if x.device.type == "cpu" else aten.new_zeros.default(x, [0])


@decomposition(aten._prelu_kernel.default)
def prelu_kernel(x, weight):
    return aten.where.self(aten.gt.Scalar(x, 0), x, aten.mul.Tensor(x, weight))


@decomposition(aten.logit.default)
@compute_in_float32
def logit(x, eps=None):
    if eps is not None:
        x = aten.clamp.default(x, eps, 1 - eps)
    return aten.log.default(aten.div.Tensor(x, aten.rsub.Scalar(x, 1)))


def _softmax_parts(x, dim):
    if x.numel() == 0:
        return NotImplemented
    shifted = aten.sub.Tensor(x, aten.amax.default(x, [dim], True)) if x.dim() else aten.sub.Tensor(x, x)
    return shifted


@decomposition(aten._softmax.default)
def softmax(x, dim, half_to_float):
    out_dtype = torch.float32 if half_to_float else x.dtype
    xf = upcast(x)
    shifted = _softmax_parts(xf, dim)
    if shifted is NotImplemented:  # no elements: nothing to compute
        return to_dtype(aten.clone.default(x), out_dtype)
    e = aten.exp.default(shifted)
    total = aten.sum.dim_IntList(e, [dim], True)
    if x.device.type == "cpu":  # as ATen's CPU kernels: times the reciprocal (one division per row)
        out = aten.mul.Tensor(e, aten.reciprocal.default(total))
    else:  # as ATen's CUDA kernels: a division per element
        out = aten.div.Tensor(e, total)
    return to_dtype(out, out_dtype)


@decomposition(aten._safe_softmax.default)
def safe_softmax(x, dim, dtype=None):
    """softmax, but rows that are all -inf give 0 instead of NaN."""
    if dtype is not None and dtype != x.dtype:
        x = to_dtype(x, dtype)
    out = softmax(x, dim, False)
    if out is NotImplemented:
        return out
    all_masked = aten.all.dim(aten.eq.Scalar(x, float("-inf")), dim, True)
    return aten.where.self(all_masked, aten.zeros_like.default(out), out)


@decomposition(aten._log_softmax.default)
def log_softmax(x, dim, half_to_float):
    out_dtype = torch.float32 if half_to_float else x.dtype
    xf = upcast(x)
    shifted = _softmax_parts(xf, dim)
    if shifted is NotImplemented:  # no elements: nothing to compute
        return to_dtype(aten.clone.default(x), out_dtype)
    lse = aten.log.default(aten.sum.dim_IntList(aten.exp.default(shifted), [dim], True))
    return to_dtype(aten.sub.Tensor(shifted, lse), out_dtype)
