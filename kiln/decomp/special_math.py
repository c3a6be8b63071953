"""Decompositions: special functions and pointwise ops outside the core set, written as ATen's CPU
kernels compute them (same branches, same constants rounded to the dtype, loops of fixed length
unrolled under masks), so a generated loop replaces the ATen call and fuses with its neighbours.
"""
from __future__ import annotations

import math

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import compute_in_float32, round_scalar, scalar_like, to_dtype

aten = torch.ops.aten
_INT_OR_BOOL = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def float_result(*values) -> torch.dtype:
    """The dtype of a float op's result (ints and bools promote to the default float dtype)."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    dtype = tensors[0].dtype if len(values) == 1 else torch.result_type(*values)
    return dtype if dtype.is_floating_point or dtype.is_complex else torch.get_default_dtype()


def _as(value, dtype, like) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return to_dtype(value, dtype)
    return aten.scalar_tensor.default(value, dtype=dtype, device=like.device)


def _const(x, value):
    return scalar_like(value, x)


def _real_float(dtype) -> bool:
    return dtype.is_floating_point


# ----------------------------------------------------------------------------- xlogy family, entr, ...

def _in_result_dtype(fn, *tensors):
    """``fn`` on the tensors cast to the op's (real floating) result dtype; NotImplemented otherwise."""
    dtype = float_result(*tensors)
    if not _real_float(dtype):
        return NotImplemented
    return fn(*(to_dtype(t, dtype) for t in tensors))


def _xlog(x, y, log_op):
    """ATen: NaN where ``y`` is NaN, else 0 where ``x == 0``, else ``x * log(y)``."""
    like = x if isinstance(x, torch.Tensor) else y
    dtype = float_result(x, y)
    if not _real_float(dtype):
        return NotImplemented
    return _xlog_in(_as(x, dtype, like), _as(y, dtype, like), log_op, dtype)


@compute_in_float32
def _xlog_in(x, y, log_op, dtype):
    out = aten.mul.Tensor(x, log_op(y))
    out = aten.where.self(aten.eq.Scalar(x, 0), _const(out, 0.0), out)
    return aten.where.self(aten.isnan.default(y), _const(out, float("nan")), out)


@decomposition(aten.xlogy.Tensor, aten.xlogy.Scalar_Self, aten.xlogy.Scalar_Other)
def xlogy(x, y):
    return _xlog(x, y, aten.log.default)


@decomposition(aten.special_xlog1py.default, aten.special_xlog1py.self_scalar, aten.special_xlog1py.other_scalar)
def xlog1py(x, y):
    return _xlog(x, y, aten.log1p.default)


@decomposition(aten.special_entr.default)
def entr(x):
    """NaN stays, ``-x log x`` for x > 0, 0 at 0, -inf below."""
    return _in_result_dtype(_entr, x)


@compute_in_float32
def _entr(x):
    positive = aten.where.self(aten.gt.Scalar(x, 0), x, _const(x, 1.0))  # (no log of x <= 0: libm's slow path)
    out = aten.mul.Tensor(aten.neg.default(x), aten.log.default(positive))
    out = aten.where.self(aten.eq.Scalar(x, 0), _const(x, 0.0), aten.where.self(aten.gt.Scalar(x, 0), out, _const(x, -math.inf)))
    return aten.where.self(aten.isnan.default(x), x, out)


@decomposition(aten.logaddexp2.default)
def logaddexp2(a, b):
    """ATen: ``a`` where both are the same infinity, else ``max + log1p(exp2(-|a - b|)) / ln 2``."""
    return _in_result_dtype(_logaddexp2, a, b)


@compute_in_float32
def _logaddexp2(a, b):
    m = aten.maximum.default(a, b)
    tail = aten.log1p.default(aten.exp2.default(aten.neg.default(aten.abs.default(aten.sub.Tensor(a, b)))))
    out = aten.add.Tensor(m, aten.mul.Scalar(tail, 1.0 / math.log(2.0)))
    same_inf = aten.logical_and.default(aten.isinf.default(a), aten.eq.Tensor(a, b))
    return aten.where.self(same_inf, aten.expand.default(a, list(out.shape)), out)


def _is_inf_of_sign(x, value):
    if x.is_complex():
        return NotImplemented
    if not x.is_floating_point():
        return aten.full.default(list(x.shape), False, dtype=torch.bool, device=x.device)
    return aten.eq.Scalar(x, value)


@decomposition(aten.isposinf.default)
def isposinf(x):
    return _is_inf_of_sign(x, math.inf)


@decomposition(aten.isneginf.default)
def isneginf(x):
    return _is_inf_of_sign(x, -math.inf)


@decomposition(aten.sinc.default)
def sinc(x):
    """ATen: 1 at 0, else ``sin(pi x) / (pi x)`` in the op math type."""
    return _in_result_dtype(_sinc, x)


@compute_in_float32
def _sinc(x):
    product = aten.mul.Scalar(x, math.pi)
    out = aten.div.Tensor(aten.sin.default(product), product)
    return aten.where.self(aten.eq.Scalar(x, 0), _const(x, 1.0), out)


@decomposition(aten.angle.default)
def angle(x):
    """Real inputs: NaN stays, pi below 0, else 0."""
    dtype = float_result(x)
    if not _real_float(dtype) or x.is_complex():
        return NotImplemented
    xf = to_dtype(x, dtype)
    out = aten.where.self(aten.lt.Scalar(xf, 0), _const(xf, math.pi), _const(xf, 0.0))
    return aten.where.self(aten.isnan.default(xf), xf, out) if dtype == x.dtype else out


@decomposition(aten.ldexp.Tensor)
def ldexp(x, other):
    """ATen's composite: ``x * 2 ** other``."""
    if x.is_complex() or other.is_complex():
        return NotImplemented
    return aten.mul.Tensor(x, aten.pow.Scalar(2.0, other))


# ----------------------------------------------------------------------------- digamma, trigamma

_PSI_10 = 2.25175258906672110764
_DIGAMMA_A = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
              -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
              8.33333333333333333333E-2)


def polevl(z, coefficients):
    """Horner's rule as cephes' ``polevl``: ``((c0 z + c1) z + c2) ...``."""
    out = _const(z, coefficients[0])
    for c in coefficients[1:]:
        out = aten.add.Scalar(aten.mul.Tensor(out, z), c)
    return out


def _digamma_positive(x):
    """calc_digamma for x > 0 (or NaN): push x to >= 10 (at most 10 steps from x > 0), then the series."""
    result = aten.zeros_like.default(x)
    for _ in range(10):
        below = aten.lt.Scalar(x, 10)
        result = aten.where.self(below, aten.sub.Tensor(result, aten.reciprocal.default(x)), result)
        x = aten.where.self(below, aten.add.Scalar(x, 1), x)
    z = aten.reciprocal.default(aten.mul.Tensor(x, x))
    y = aten.where.self(aten.lt.Scalar(x, 1.0e17), aten.mul.Tensor(z, polevl(z, _DIGAMMA_A)), _const(x, 0.0))
    series = aten.sub.Tensor(aten.sub.Tensor(aten.add.Tensor(result, aten.log.default(x)),
                                             aten.div.Tensor(_const(x, 0.5), x)), y)
    return aten.where.self(aten.eq.Scalar(x, 10), aten.add.Scalar(result, _PSI_10), series)


def _digamma(x):
    """ATen's calc_digamma (float and double): 0 -> -+inf, negative integers -> NaN, negative x by
    reflection ``digamma(1 - x) - pi / tan(pi * frac(x))`` (the tangent in double)."""
    negative = aten.lt.Scalar(x, 0)
    positive_part = _digamma_positive(aten.where.self(negative, aten.rsub.Scalar(x, 1), x))
    xd = to_dtype(x, torch.float64)
    frac = aten.sub.Tensor(xd, aten.trunc.default(xd))
    reflection = to_dtype(aten.div.Tensor(scalar_like(math.pi, xd), aten.tan.default(aten.mul.Scalar(frac, math.pi))), x.dtype)
    out = aten.where.self(negative, aten.sub.Tensor(positive_part, reflection), positive_part)
    is_integer = aten.eq.Tensor(x, aten.trunc.default(x))
    out = aten.where.self(aten.logical_and.default(negative, is_integer), _const(x, math.nan), out)
    zero = aten.copysign.Tensor(_const(x, math.inf), aten.neg.default(x))
    return aten.where.self(aten.eq.Scalar(x, 0), zero, out)


def _trigamma(x):
    """ATen's trigamma (float and double): reflection below 1/2, six recurrence steps, the series."""
    pi = round_scalar(math.pi, x.dtype)
    reflect = aten.lt.Scalar(x, 0.5)
    sin_pi_x = aten.sin.default(aten.mul.Scalar(x, math.pi))
    result = aten.where.self(reflect, aten.neg.default(aten.div.Tensor(_const(x, round_scalar(pi * pi, x.dtype)),
                                                                       aten.mul.Tensor(sin_pi_x, sin_pi_x))),
                             _const(x, 0.0))
    x = aten.where.self(reflect, aten.rsub.Scalar(x, 1), x)
    for _ in range(6):
        result = aten.add.Tensor(result, aten.reciprocal.default(aten.mul.Tensor(x, x)))
        x = aten.add.Scalar(x, 1)
    ixx = aten.reciprocal.default(aten.mul.Tensor(x, x))
    c6, c30, c42 = (round_scalar(1.0 / d, x.dtype) for d in (6, 30, 42))
    inner = aten.rsub.Scalar(aten.mul.Tensor(ixx, aten.rsub.Scalar(aten.mul.Scalar(ixx, c42), c30)), c6)
    poly = aten.add.Tensor(aten.add.Tensor(_const(x, 1.0), aten.reciprocal.default(aten.mul.Scalar(x, 2))),
                           aten.mul.Tensor(ixx, inner))
    result = aten.add.Tensor(result, aten.div.Tensor(poly, x))
    return aten.where.self(reflect, aten.neg.default(result), result)


@decomposition(aten.digamma.default)
def digamma(x):
    dtype = float_result(x)
    if dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        return NotImplemented
    return _in_float(_digamma, to_dtype(x, dtype))


@decomposition(aten.polygamma.default)
def polygamma(n, x):
    """n = 0 and 1 (digamma, trigamma); higher orders need Hurwitz zeta, whose series runs a
    data-dependent number of steps for negative arguments: they keep ATen's kernel."""
    dtype = float_result(x)
    if n not in (0, 1) or dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        return NotImplemented
    return _in_float(_digamma if n == 0 else _trigamma, to_dtype(x, dtype))


def _in_float(fn, x):
    """``fn`` in float32 for half and bfloat16 (ATen computes those in float), cast back."""
    if x.dtype in (torch.float16, torch.bfloat16):
        return to_dtype(fn(to_dtype(x, torch.float32)), x.dtype)
    return fn(x)

# frexp keeps ATen's kernel: a log2 estimate corrected by exact power-of-two scalings matched std::frexp
# bit for bit but ran about 30x slower than eager on CPU (libm's exp2 and log2 per element).
