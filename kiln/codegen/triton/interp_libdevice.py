"""The libdevice functions kiln's Triton kernels call, for Triton's interpreter (CPU tensors).

The interpreter runs kernels in Python on numpy arrays and has no libdevice; each function here
computes the same math with torch on the numpy data of its (interpreter) tensor arguments.
"""
from __future__ import annotations

import numpy as np
import torch
import triton.language as tl
from triton.runtime.interpreter import TensorHandle


def _data(x):
    return x.handle.data if isinstance(x, tl.core.tensor) else np.asarray(x)


def _wrap(result: np.ndarray, like):
    if not isinstance(like, tl.core.tensor):
        raise TypeError("interp_libdevice expects interpreter tensors")
    handle = TensorHandle(result, like.handle.dtype.scalar if hasattr(like.handle.dtype, "scalar") else like.handle.dtype)
    return tl.core.tensor(handle, like.type)


def _unary(fn):
    def apply(x):
        data = _data(x)
        out = fn(torch.from_numpy(np.ascontiguousarray(data))).numpy().astype(data.dtype)
        return _wrap(out, x)

    apply.__name__ = getattr(fn, "__name__", "unary")
    return apply


def _binary(fn):
    def apply(a, b):
        da, db = np.broadcast_arrays(_data(a), _data(b))
        out = fn(torch.from_numpy(np.ascontiguousarray(da)), torch.from_numpy(np.ascontiguousarray(db)))
        like = a if isinstance(a, tl.core.tensor) and a.handle.data.shape == out.shape else b
        return _wrap(out.numpy().astype(da.dtype), like)

    return apply


tanh = _unary(torch.tanh)
expm1 = _unary(torch.expm1)
log1p = _unary(torch.log1p)
log10 = _unary(torch.log10)
sqrt = _unary(torch.sqrt)
rsqrt = _unary(torch.rsqrt)
sin = _unary(torch.sin)
cos = _unary(torch.cos)
tan = _unary(torch.tan)
asin = _unary(torch.asin)
acos = _unary(torch.acos)
atan = _unary(torch.atan)
sinh = _unary(torch.sinh)
cosh = _unary(torch.cosh)
asinh = _unary(torch.asinh)
acosh = _unary(torch.acosh)
atanh = _unary(torch.atanh)
erfc = _unary(torch.erfc)
erfinv = _unary(torch.erfinv)
lgamma = _unary(torch.lgamma)
trunc = _unary(torch.trunc)
nearbyint = _unary(torch.round)  # round half to even, as nearbyint in the default rounding mode
pow = _binary(torch.pow)
atan2 = _binary(torch.atan2)
hypot = _binary(torch.hypot)
copysign = _binary(torch.copysign)
nextafter = _binary(torch.nextafter)
fmod = _binary(torch.fmod)


def signbit(x):
    data = _data(x)
    out = np.signbit(data).astype(np.int32)
    handle = TensorHandle(out, tl.int32)
    ty = tl.block_type(tl.int32, list(x.type.shape)) if x.type.is_block() else tl.int32
    return tl.core.tensor(handle, ty)


def dot_operand(x):
    """A ``tl.dot`` operand the interpreter multiplies right: its dot multiplies bfloat16 blocks as
    their integer bit patterns, so they go in as float32 (exact)."""
    return x.to(tl.float32) if x.dtype == tl.bfloat16 else x


def to_bfloat16(x):
    """float32 -> bfloat16 rounding to nearest even, as the GPU does (the interpreter truncates)."""
    data = np.ascontiguousarray(_data(x)).astype(np.float32)
    bits = torch.from_numpy(data).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    ty = tl.block_type(tl.bfloat16, list(x.type.shape)) if x.type.is_block() else tl.bfloat16
    return tl.core.tensor(TensorHandle(bits, tl.bfloat16), ty)


# An interpreted kernel that met an out-of-bounds index (``check_index``); the graph's wrapper reads and
# clears it after the launch (``take_index_error``) and raises IndexOutOfBoundsError, as for C++ kernels.
_index_error = [False]


def check_index(ok):
    """``kh.check_index`` under the interpreter: flags where ``ok`` (a loaded index is in bounds, or
    its lane is masked off) is false. The kernel goes on with the clamped index, as in C++."""
    if not np.all(_data(ok)):
        _index_error[0] = True


def take_index_error() -> bool:
    error, _index_error[0] = _index_error[0], False
    return error
