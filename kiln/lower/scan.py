"""Lowerings of scans: cumsum, cumprod, logcumsumexp, cummax, cummin along any dim.

Each becomes a ``Scan`` buffer (``loopir/scan.py``) whose body reads the input: a pointwise producer is
inlined into the scan's load. Dtypes follow ATen: cumsum/cumprod convert the input to the result dtype
first (integers and bool to int64 unless ``dtype`` says otherwise), then accumulate in ATen's
accumulation type; cummax/cummin return the input dtype and int64 indices.
"""
from __future__ import annotations

import torch

from kiln.loopir.nodes import ComputedBuffer, Lazy, Stored, contiguous_strides, is_dense
from kiln.loopir.scan import Scan
from kiln.loopir.sizes import any_symbolic, is_symbolic, shape_of, strides_of
from kiln.lower.common import LOW_PRECISION, origins_of, upcast
from kiln.lower.graph import fake_val
from kiln.lower.registry import Unlowerable, lowering

aten = torch.ops.aten


def acc_dtype(kind: str, dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """ATen's ``acc_type`` for a running sum/product/logsumexp of ``dtype`` on ``device``."""
    if kind in ("max", "min", "argmax", "argmin"):
        return upcast(dtype)
    if dtype in LOW_PRECISION:
        return torch.float32
    if dtype == torch.float32:
        return torch.float64 if device.type == "cpu" else torch.float32
    if dtype.is_floating_point:
        return dtype
    return torch.int64


def _check(g, x, dim):
    if x.dtype.is_complex:
        raise Unlowerable("complex dtype")
    if any_symbolic(x.size) and g.codegen != "cpp":
        raise Unlowerable("scan over symbolic sizes (size-generic Triton scan kernels are not written yet)")
    ndim = len(x.size)
    return dim % ndim if ndim else 0


def _converted(x, out_dtype: torch.dtype):
    """A loader of ``x`` as ATen's scan sees it: converted to ``out_dtype``, then to its compute dtype."""
    load, dtype, cdtype = x.loader(), x.dtype, upcast(out_dtype)

    def read(ops, index):
        v = load(ops, index)
        if v.dtype != out_dtype:
            v = ops.to_dtype(v, out_dtype)
        return v if out_dtype == cdtype else ops.to_dtype(v, cdtype)

    return read


def _trivial(x, node, kind: str, source: torch.dtype, result: torch.dtype):
    """A scan along a dim of size <= 1 (or of an empty or 0-dim tensor): the input itself (indices 0)."""
    read = _converted(x, source)

    def body(ops, index):
        if kind in ("argmax", "argmin"):
            return ops.constant(0, torch.int64)
        v = read(ops, index)
        return v if v.dtype == result else ops.to_dtype(v, result)

    return Lazy(tuple(x.size), result, x.device, body, 2, origins_of(node, x))


def eager_strides(val, size) -> tuple:
    """The strides eager gives a result (``val``: its fake tensor) when dense, else row-major: a result
    read or returned in eager's layout needs no copy."""
    if isinstance(val, torch.Tensor) and shape_of(val) == tuple(size) and is_dense(size, strides_of(val)):
        return strides_of(val)
    return contiguous_strides(size)


def add_scan(g, node, x, dim: int, kind: str, out_dtype: torch.dtype, val=None) -> Stored | Lazy:
    """A buffer holding the scan of ``x`` (a TensorValue) along ``dim`` (already normalized); ``val``:
    the result's fake tensor (its layout is the buffer's when dense)."""
    size = tuple(x.size)
    empty = any(not is_symbolic(n) and int(n) == 0 for n in size)  # (a size symbol is >= 2)
    arg = kind in ("argmax", "argmin")
    result = torch.int64 if arg else out_dtype
    source = x.dtype if arg else out_dtype  # what the input is converted to (ATen: the result dtype)
    if not size or (not is_symbolic(size[dim]) and int(size[dim]) <= 1) or empty:
        return _trivial(x, node, kind, source, result)
    value_dtype = upcast(source)
    data = Scan(size, dim, _converted(x, source), kind, result, acc_dtype(kind, source, x.device), value_dtype)
    stride = eager_strides(val, size)
    buf = ComputedBuffer(g.new_name(), result, x.device, size, stride, origins_of(node, x), data=data)
    g.nodes.append(buf)
    return Stored(buf, size, stride, 0)


def _sum_like(kind):
    def lower(g, node, x, dim, *, dtype=None):
        d = _check(g, x, dim)
        return add_scan(g, node, x, d, kind, fake_val(node).dtype, fake_val(node))

    lower.__name__ = f"lower_cum{kind}"
    return lower


lowering(aten.cumsum.default)(_sum_like("sum"))
lowering(aten.cumprod.default)(_sum_like("prod"))


@lowering(aten.logcumsumexp.default)
def lower_logcumsumexp(g, node, x, dim):
    d = _check(g, x, dim)
    return add_scan(g, node, x, d, "logsumexp", fake_val(node).dtype, fake_val(node))


def _extreme(kind):
    def lower(g, node, x, dim):
        d = _check(g, x, dim)
        vals = fake_val(node)
        values = add_scan(g, node, x, d, kind, x.dtype, vals[0])
        indices = add_scan(g, node, x, d, f"arg{kind}", x.dtype, vals[1])
        return values, indices

    lower.__name__ = f"lower_cum{kind}"
    return lower


lowering(aten.cummax.default)(_extreme("max"))
lowering(aten.cummin.default)(_extreme("min"))
