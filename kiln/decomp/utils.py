"""Helpers shared by decompositions: dtype handling and dims."""
from __future__ import annotations

import functools
import struct

import torch
from torch.utils._pytree import tree_map

aten = torch.ops.aten
LOW_PRECISION = (torch.float16, torch.bfloat16)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype eager kernels compute in: float32 for half and bfloat16."""
    return torch.float32 if dtype in LOW_PRECISION else dtype


def upcast(x: torch.Tensor) -> torch.Tensor:
    return aten._to_copy.default(x, dtype=torch.float32) if x.dtype in LOW_PRECISION else x


def to_dtype(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x if x.dtype == dtype else aten._to_copy.default(x, dtype=dtype)


def compute_in_float32(fn):
    """Run a pointwise-style decomposition in float32 for half/bfloat16 inputs; cast results back
    to the dtype of the first tensor argument (as eager's kernels do with their opmath type)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is None or first.dtype not in LOW_PRECISION:
            return fn(*args, **kwargs)
        out_dtype = first.dtype
        cast = lambda t: upcast(t) if isinstance(t, torch.Tensor) else t  # noqa: E731
        result = fn(*tree_map(cast, args), **tree_map(cast, kwargs))
        return tree_map(lambda t: to_dtype(t, out_dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t, result)

    return wrapper


def canonical_dims(dims, ndim: int) -> list[int]:
    if dims is None:
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    if len(dims) == 0:
        return list(range(ndim))
    return sorted({d % max(ndim, 1) for d in dims})


def numel_of(x: torch.Tensor, dims) -> int:
    n = 1
    for d in dims:
        n *= x.shape[d] if x.dim() else 1
    return n


def mul_by_inverse(t: torch.Tensor, n, scale: float = 1.0) -> torch.Tensor:
    """``t * (scale / n)``; where ``n`` is a symbolic size, ``t * scale / n`` (a float of a size symbol
    would make the size a constant)."""
    if isinstance(n, torch.SymInt):
        scaled = aten.mul.Scalar(t, scale) if scale != 1.0 else t
        return aten.div.Scalar(scaled, n)
    return aten.mul.Scalar(t, scale / n)


def scalar_like(value, x: torch.Tensor, dtype=None) -> torch.Tensor:
    return aten.scalar_tensor.default(value, dtype=dtype or x.dtype, device=x.device)


def round_scalar(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded to ``dtype`` (nearest, ties to even), as an eager kernel's ``scalar_t(value)``."""
    if dtype == torch.float16:
        return struct.unpack("e", struct.pack("e", value))[0]
    if dtype in (torch.float32, torch.bfloat16):
        value = struct.unpack("f", struct.pack("f", value))[0]
    if dtype == torch.bfloat16:
        bits = struct.unpack("I", struct.pack("f", value))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        value = struct.unpack("f", struct.pack("I", bits))[0]
    return value


def dense_permutation(x) -> bool:
    """Whether x's elements fill its storage span exactly, in some order of dims (like a permuted contiguous tensor)."""
    dims = sorted((d for d in range(x.dim()) if x.shape[d] != 1), key=lambda d: x.stride(d))
    expected = 1
    for d in dims:
        if x.stride(d) != expected:
            return False
        expected *= x.shape[d]
    return True


def static_layout(x) -> bool:
    """Whether ``x``'s sizes and strides are ints (no size symbols)."""
    return all(isinstance(v, int) for v in (*x.shape, *x.stride()))


def like_strides(x) -> list[int]:
    """The strides eager gives a tensor made like ``x`` (``empty_like``'s preserve format): ``x``'s own
    where ``x`` is dense, else ATen's ``infer_dense_strides`` (dense strides in ``x``'s order of strides)."""
    if dense_permutation(x):
        return list(x.stride())
    from kiln.fake.symbolic_meta import infer_dense_strides

    return [int(st) for st in infer_dense_strides(list(x.shape), list(x.stride()))]


def in_layout_of(x, make):
    """A new tensor of ``x``'s shape laid out as eager lays out a tensor made like ``x``
    (``like_strides``). ``make(sizes)`` builds it row-major with the dims in memory order; it is permuted
    back (and re-viewed where only the strides of size-1 dims differ). Random makers rely on it too:
    eager's kernels fill the new tensor in memory order."""
    if x.is_contiguous() or x.numel() == 0 or not static_layout(x):
        return make(list(x.shape))
    strides = like_strides(x)
    order = sorted(range(x.dim()), key=lambda d: (-strides[d], d))  # outermost first
    if order == list(range(x.dim())):
        made = make(list(x.shape))
    else:
        made = torch.ops.aten.permute.default(make([x.shape[d] for d in order]), [order.index(d) for d in range(x.dim())])
    if list(made.stride()) != strides:
        made = torch.ops.aten.as_strided.default(made, list(x.shape), strides)
    return made
