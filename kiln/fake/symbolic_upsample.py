"""``F.interpolate`` on symbolic sizes: the output sizes ATen computes, and fake outputs of the upsample ops.

torch 2.11-2.13's ``upsample_*.vec`` overloads (what ``F.interpolate`` calls) are C++ composites that ask
the input for plain ``sizes()``, and the Python meta kernels of the linear/bicubic ``.default`` ops
re-enter dispatch. So, for a call with symbolic sizes:

- ``interpolate`` (a rule of ``symbolic_composite.SymbolicCompositeMode``, in capture and AOT tracing)
  follows ``torch.nn.functional.interpolate`` and the ``.vec`` body (``upsample_*_vec`` in
  aten/src/ATen/native/UpSample.cpp): the output size is ``size`` when given, else
  ``static_cast<int64_t>(double(in) * scale)`` per spatial dim (the same with
  ``recompute_scale_factor=True``, computed in Python as ``floor(float(in) * scale)``); the kernel gets
  ``scale`` as its ``scales_*`` argument unless the size was given or recomputed (then None). It then
  calls the ``.default`` op, which the decompositions take as for static sizes.
- ``floor(in * scale)`` is exact symbolically only where the double product is exact: the scale is a
  dyadic fraction ``p / 2**k`` (every float is) whose numerator ``p`` has at most ``_SCALE_BITS`` bits,
  so ``in * p`` fits the 53-bit mantissa for any size below ``2**(53 - _SCALE_BITS)``. Then the size is
  ``(in * p) // 2**k``. Other scales (``1/3``, ``0.1``) are refused: the frame compiles per size.
- ``RULES``: fake outputs of ``upsample_{linear1d,bilinear2d,trilinear3d,bicubic2d}`` (and backwards),
  row-major like their input.
"""
from __future__ import annotations

import fractions
import math

import torch

from kiln.fake.symbolic_meta import RULES, SymbolicShapeUnsupported, _is_row_major, _new_row_major

aten = torch.ops.aten

_SCALE_BITS = 20  # (sizes below 2**33 then multiply exactly)
_NEAREST = {1: aten.upsample_nearest1d.default, 2: aten.upsample_nearest2d.default,
            3: aten.upsample_nearest3d.default}
_NEAREST_EXACT = {1: aten._upsample_nearest_exact1d.default, 2: aten._upsample_nearest_exact2d.default,
                  3: aten._upsample_nearest_exact3d.default}
_LINEAR = {("linear", 1): aten.upsample_linear1d.default, ("bilinear", 2): aten.upsample_bilinear2d.default,
           ("trilinear", 3): aten.upsample_trilinear3d.default, ("bicubic", 2): aten.upsample_bicubic2d.default}


def scaled_size(size, scale: float):
    """``int64(double(size) * scale)`` for a symbolic (or plain) size, exactly; refuses scales whose
    products would round."""
    if not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise SymbolicShapeUnsupported("interpolate", f"scale factor {scale!r}")
    if isinstance(size, int):
        return int(float(size) * scale)
    ratio = fractions.Fraction(scale)
    if ratio.numerator.bit_length() > _SCALE_BITS:
        raise SymbolicShapeUnsupported("interpolate", f"scale factor {scale!r}: in * scale rounds for some sizes")
    if ratio.denominator == 1:
        return size * ratio.numerator
    return (size * ratio.numerator) // ratio.denominator


def _per_dim(v, n: int, what: str) -> list:
    if isinstance(v, (list, tuple)):
        if len(v) != n:
            raise ValueError(f"Input and {what} must have the same number of spatial dimensions, but got "
                             f"input with spatial dimensions of {n} and {what} of {list(v)}.")
        return list(v)
    return [v] * n


def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """``F.interpolate`` for an input with symbolic sizes (NotImplemented: torch's own function runs)."""
    n = x.dim() - 2
    if n not in (1, 2, 3) or antialias or mode not in ("nearest", "nearest-exact", "linear", "bilinear",
                                                       "trilinear", "bicubic"):
        return NotImplemented  # (area: adaptive pooling; antialias: other kernels)
    if (size is None) == (scale_factor is None):
        return NotImplemented  # (torch raises its own error)
    if mode.startswith("nearest") and align_corners is not None:
        return NotImplemented
    if not mode.startswith("nearest") and (mode, n) not in _LINEAR:
        return NotImplemented
    if size is not None:
        out_size, scales = _per_dim(size, n, "output size"), [None] * n
    else:
        factors = [float(s) for s in _per_dim(scale_factor, n, "scale_factor")]
        out_size = [scaled_size(x.shape[2 + i], f) for i, f in enumerate(factors)]
        scales = [None] * n if recompute_scale_factor else factors
    for i, s in enumerate(out_size):
        if not (s > 0):  # (a guard where symbolic, as the kernel checks)
            raise RuntimeError(f"Input and output sizes should be greater than 0, but got input "
                               f"{tuple(x.shape[2:])} output {tuple(out_size)}")
    if mode == "nearest":
        return _NEAREST[n](x, out_size, *scales)
    if mode == "nearest-exact":
        return _NEAREST_EXACT[n](x, out_size, *scales)
    return _LINEAR[(mode, n)](x, out_size, bool(align_corners), *scales)


_NAMES = ("input", "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias")


def interpolate_args(args, kwargs):
    args = list(args)
    if len(args) > len(_NAMES) or set(kwargs) - set(_NAMES):
        return None
    bound = dict(zip(_NAMES, args))
    for k, v in kwargs.items():
        if k in bound:
            return None
        bound[k] = v
    if not isinstance(bound.get("input"), torch.Tensor):
        return None
    defaults = (None, None, None, "nearest", None, None, False)
    return [bound.get(name, d) for name, d in zip(_NAMES, defaults)]


# ---- fake outputs of the upsample ops whose meta kernels re-enter dispatch ---------------------------

def _upsample_rule(n: int):
    def rule(func, x, output_size, align_corners, *scales):
        if not _is_row_major(x) or len(output_size) != n or x.dim() != n + 2:
            raise SymbolicShapeUnsupported(func, "an input that is not row-major")
        return _new_row_major(list(x.shape[:2]) + list(output_size), x.dtype)
    return rule


def _backward_rule(func, grad, output_size, input_size, align_corners, *scales):
    if not _is_row_major(grad):
        raise SymbolicShapeUnsupported(func, "a gradient that is not row-major")
    return _new_row_major(list(input_size), grad.dtype)


RULES.update({
    aten.upsample_linear1d.default: _upsample_rule(1),
    aten.upsample_bilinear2d.default: _upsample_rule(2),
    aten.upsample_bicubic2d.default: _upsample_rule(2),
    aten.upsample_trilinear3d.default: _upsample_rule(3),
    aten.upsample_linear1d_backward.default: _backward_rule,
    aten.upsample_bilinear2d_backward.default: _backward_rule,
    aten.upsample_bicubic2d_backward.default: _backward_rule,
    aten.upsample_trilinear3d_backward.default: _backward_rule,
})
