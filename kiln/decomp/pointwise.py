"""Decompositions: pointwise ops outside the core set (clamp, lerp, addcmul, masked_fill, fills, ...)."""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import compute_in_float32, in_layout_of, scalar_like, to_dtype

aten = torch.ops.aten


def _clamp(x, low, high):
    if x.dtype == torch.bool or (low is None and high is None):
        return NotImplemented
    dtype = x.dtype
    for bound in (low, high):
        if bound is not None:
            dtype = torch.promote_types(dtype, torch.result_type(x, bound))
    out = to_dtype(x, dtype)

    def bound_of(b):
        if isinstance(b, torch.Tensor):
            return to_dtype(b, dtype)
        if not dtype.is_floating_point and not dtype.is_complex:
            # eager converts an integer clamp's bound with a range check ("value cannot be converted to type
            # int without overflow"): full checks a symbolic bound on each call, as eager's full does
            # (a number is checked while tracing: fake/scalar_checks.py); scalar_tensor would wrap it
            return aten.full.default([], b, dtype=dtype, device=out.device)
        return scalar_like(b, out)

    # maximum/minimum propagate NaN from either side, as clamp does
    if low is not None:
        out = aten.maximum.default(out, bound_of(low))
    if high is not None:
        out = aten.minimum.default(out, bound_of(high))
    return out


@decomposition(aten.clamp.default, aten.clamp.Tensor)
def clamp(x, min=None, max=None):
    return _clamp(x, min, max)


@decomposition(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(x, min):
    return _clamp(x, min, None)


@decomposition(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(x, max):
    return _clamp(x, None, max)


@decomposition(aten.add.Tensor)
def add_alpha(x, other, alpha=1):
    if alpha == 1 or not isinstance(other, torch.Tensor) or other.dtype == torch.bool:
        return NotImplemented
    return aten.add.Tensor(x, aten.mul.Scalar(other, alpha))


@decomposition(aten.sub.Tensor)
def sub_alpha(x, other, alpha=1):
    if alpha == 1 or not isinstance(other, torch.Tensor) or other.dtype == torch.bool:
        return NotImplemented
    return aten.sub.Tensor(x, aten.mul.Scalar(other, alpha))


@decomposition(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(x, other, alpha=1):
    scaled = x if alpha == 1 else aten.mul.Scalar(x, alpha)
    if not isinstance(other, torch.Tensor):
        other = aten.scalar_tensor.default(other, dtype=torch.result_type(x, other), device=x.device)
    return aten.sub.Tensor(other, scaled)


@decomposition(aten.addcmul.default)
@compute_in_float32
def addcmul(x, t1, t2, value=1):
    prod = aten.mul.Tensor(t1, t2)
    return aten.add.Tensor(x, prod if value == 1 else aten.mul.Scalar(prod, value))


@decomposition(aten.addcdiv.default)
@compute_in_float32
def addcdiv(x, t1, t2, value=1):
    quot = aten.div.Tensor(t1, t2)
    return aten.add.Tensor(x, quot if value == 1 else aten.mul.Scalar(quot, value))


@decomposition(aten.lerp.Scalar, aten.lerp.Tensor)
@compute_in_float32
def lerp(start, end, weight):
    diff = aten.sub.Tensor(end, start)
    w = weight if isinstance(weight, torch.Tensor) else scalar_like(weight, start)
    # eager uses start + w * diff for |w| < 0.5, end - (1 - w) * diff otherwise (more accurate)
    low = aten.add.Tensor(start, aten.mul.Tensor(w, diff))
    high = aten.sub.Tensor(end, aten.mul.Tensor(aten.rsub.Scalar(w, 1), diff))
    return aten.where.self(aten.lt.Scalar(aten.abs.default(w), 0.5), low, high)


@decomposition(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(x, mask, value):
    if isinstance(value, torch.Tensor):
        value = to_dtype(value, x.dtype)
    else:
        value = scalar_like(value, x)
    return aten.where.self(mask, value, x)


# the functional fill/zero make a new tensor laid out as ``x`` (eager's empty_like), as in-place ones keep it
@decomposition(aten.fill.Scalar)
def fill_scalar(x, value):
    return in_layout_of(x, lambda sizes: aten.full.default(sizes, value, dtype=x.dtype, device=x.device))


@decomposition(aten.fill.Tensor)
def fill_tensor(x, value):
    return in_layout_of(x, lambda sizes: aten.clone.default(aten.expand.default(to_dtype(value, x.dtype), sizes)))


@decomposition(aten.zero.default)
def zero(x):
    return in_layout_of(x, lambda sizes: aten.full.default(sizes, 0, dtype=x.dtype, device=x.device))


@decomposition(aten.copy.default)
def copy(x, src, non_blocking=False):
    value = aten._to_copy.default(src, dtype=x.dtype, device=x.device)
    if tuple(value.shape) != tuple(x.shape):
        value = aten.clone.default(aten.expand.default(value, list(x.shape)))
    return value


@decomposition(aten.lift_fresh_copy.default)
def lift_fresh_copy(x):
    return aten.clone.default(x)


@decomposition(aten.square.default)
def square(x):
    return aten.mul.Tensor(x, x)


@decomposition(aten.frac.default)
def frac(x):
    return aten.sub.Tensor(x, aten.trunc.default(x))


@decomposition(aten.deg2rad.default)
def deg2rad(x):
    return aten.mul.Scalar(x, torch.pi / 180) if x.is_floating_point() else NotImplemented


@decomposition(aten.rad2deg.default)
def rad2deg(x):
    return aten.mul.Scalar(x, 180 / torch.pi) if x.is_floating_point() else NotImplemented


@decomposition(aten.floor_divide.default)
def floor_divide(x, other):
    return aten.div.Tensor_mode(x, other, rounding_mode="floor")


@decomposition(aten.logaddexp.default)
@compute_in_float32
def logaddexp(a, b):
    if a.is_complex() or b.is_complex():
        return NotImplemented
    hi = aten.maximum.default(a, b)
    lo = aten.minimum.default(a, b)
    out = aten.add.Tensor(hi, aten.log1p.default(aten.exp.default(aten.sub.Tensor(lo, hi))))
    # both -inf (or both +inf): the difference is NaN; the answer is that infinity
    same_inf = aten.logical_and.default(aten.isinf.default(a), aten.eq.Tensor(a, b))
    return aten.where.self(same_inf, a, out)


@decomposition(aten.heaviside.default)
def heaviside(x, values):
    zero = aten.eq.Scalar(x, 0)
    pos = to_dtype(aten.gt.Scalar(x, 0), torch.result_type(x, values))
    return aten.where.self(zero, to_dtype(values, pos.dtype), pos)


_REDUCED_FLOATS = (torch.bfloat16, torch.float16)


@decomposition(aten.div.Tensor_mode)
def div_rounding_reduced_float(a, b, *, rounding_mode=None):
    """Rounding division of bfloat16/float16 tensors as eager's kernels compute it: every step rounded
    to the dtype (trunc of the rounded quotient; on the CPU, floor through fmod and a correction step). The float32
    quotient rounded once gives other integers near ties (2.999 -> 2, where eager's 3.0 -> 3).
    A divisor that is one number (a Python scalar, or on the CPU a one-element tensor) takes eager's
    float32 path instead, which the lowering computes."""
    if rounding_mode is None or not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return NotImplemented
    dtype = torch.promote_types(a.dtype, b.dtype)
    if dtype not in _REDUCED_FLOATS or (b.numel() <= 1 and b.device.type == "cpu"):
        return NotImplemented
    a, b = to_dtype(a, dtype), to_dtype(b, dtype)
    quotient = aten.div.Tensor(a, b)
    if rounding_mode == "trunc":
        return aten.trunc.default(quotient)
    if a.device.type != "cpu":  # CUDA's floor division computes in float32 (the lowering's path)
        return NotImplemented
    mod = aten.fmod.Tensor(a, b)
    div = aten.div.Tensor(aten.sub.Tensor(a, mod), b)
    wrong_sign = aten.logical_and.default(aten.ne.Scalar(mod, 0), aten.ne.Tensor(aten.lt.Scalar(b, 0), aten.lt.Scalar(mod, 0)))
    div = aten.where.self(wrong_sign, aten.sub.Scalar(div, 1), div)
    floor = aten.floor.default(div)
    floor = aten.where.self(aten.gt.Scalar(aten.sub.Tensor(div, floor), 0.5), aten.add.Scalar(floor, 1), floor)
    zero = aten.copysign.Tensor(aten.mul.Scalar(div, 0), quotient)
    result = aten.where.self(aten.ne.Scalar(div, 0), floor, zero)
    return aten.where.self(aten.eq.Scalar(b, 0), quotient, result)
