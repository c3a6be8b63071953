"""Lowerings that move data between tensors of different shapes: ``cat``, ``constant_pad_nd``, and the
view-scatters functionalization emits for writes through views (``slice_scatter``, ``select_scatter``,
``diagonal_scatter``).

Each is one pointwise body over the output. Reads that would fall outside an input where the output
takes its value elsewhere are wrapped in ``ops.masked``, so generated code never performs them.
"""
from __future__ import annotations

import sympy
import torch

from kiln.loopir.index import InRange
from kiln.loopir.sizes import gt, is_symbolic, known, lt, shape_of, strides_of
from kiln.loopir.sizes import size as size_expr
from kiln.loopir.nodes import Lazy, TensorValue, numel
from kiln.lower.common import constant_value, cost_of
from kiln.lower.graph import fake_val
from kiln.lower.registry import Unlowerable, lowering

aten = torch.ops.aten

# a cat of more inputs than this runs through ATen (one masked read per input in every element)
MAX_CAT_INPUTS = 16


def in_range(expr, n):
    """``expr`` marked as read only where ``0 <= expr < n`` (``loopir.index.InRange``; static ``n``)."""
    return InRange(expr, n) if isinstance(n, int) or getattr(n, "is_Integer", False) else expr


def index_in_range(ops, expr, lo=None, hi=None):
    """The bool value ``lo <= expr < hi`` for an index expression (a bound of None is not checked)."""
    i = ops.index_expr(expr, torch.int64)
    conds = []
    def bound(v):  # a symbolic bound is an index expression over the size symbols
        return ops.index_expr(v, torch.int64) if is_symbolic(v) else ops.constant(int(v), torch.int64)

    if lo is not None:
        conds.append(ops.ge(i, bound(lo)))
    if hi is not None:
        conds.append(ops.lt(i, bound(hi)))
    out = conds[0]
    for c in conds[1:]:
        out = ops.logical_and(out, c)
    return out


def reader(x: TensorValue, dtype: torch.dtype):
    """(ops, index) -> the value of ``x`` at ``index`` as ``dtype``."""
    load = x.loader()

    def read(ops, index):
        v = load(ops, index)
        return v if x.dtype == dtype else ops.to_dtype(v, dtype)

    return read


def _check_real(*xs):
    for x in xs:
        if isinstance(x, TensorValue) and x.dtype.is_complex:
            raise Unlowerable("complex dtype")



def _lazy(node, body, cost):
    val = fake_val(node)
    return Lazy(shape_of(val), val.dtype, val.device, body, cost, (node,))


@lowering(aten.cat.default)
def lower_cat(g, node, tensors, dim=0):
    _check_real(*tensors)
    val = fake_val(node)
    size = shape_of(val)
    if numel(size) == 0:
        return constant_value(node, 0)
    dim = dim % len(size)
    parts, start = [], 0
    for t in tensors:
        if len(t.size) == 1 and t.size[0] == 0 and len(size) != 1:
            continue  # ATen skips legacy empty inputs of shape [0]
        n = t.size[dim]
        if n:
            parts.append((t, start, start + n))
            start += n
    if len(parts) > MAX_CAT_INPUTS:
        raise Unlowerable(f"cat of {len(parts)} inputs (more than {MAX_CAT_INPUTS})")
    dtype = val.dtype
    readers = [reader(t, dtype) for t, _, _ in parts]

    def body(ops, index):
        def part(k):
            lo = parts[k][1]

            def inner():  # (read only where index[dim] is in the part: InRange lends that range to the index)
                idx = list(index)
                idx[dim] = in_range(index[dim] - lo, parts[k][2] - lo) if last else index[dim] - lo
                return readers[k](ops, idx)

            return inner

        last = len(parts) - 1
        if last == 0:
            return part(0)()
        result = ops.masked(index_in_range(ops, index[dim], lo=parts[last][1]), part(last), 0)
        for k in reversed(range(last)):
            _, lo, hi = parts[k]
            value = ops.masked(index_in_range(ops, index[dim], lo=lo if k else None, hi=hi), part(k), 0)
            result = ops.where(index_in_range(ops, index[dim], hi=hi), value, result)
        return result

    return _lazy(node, body, len(parts) + cost_of(*[t for t, _, _ in parts]))


@lowering(aten.constant_pad_nd.default)
def lower_constant_pad_nd(g, node, x, pad, value=0):
    _check_real(x)
    if isinstance(value, complex):
        raise Unlowerable("complex fill value")
    val = fake_val(node)
    out_size, in_size = shape_of(val), tuple(x.size)
    if numel(out_size) == 0 or numel(in_size) == 0:
        return constant_value(node, value)
    ndim = len(in_size)
    lo, hi = [0] * ndim, [0] * ndim
    for k in range(len(pad) // 2):  # (symbolic pads: F.pad(x, (0, (-n) % 8)))
        lo[ndim - 1 - k], hi[ndim - 1 - k] = size_expr(pad[2 * k]), size_expr(pad[2 * k + 1])
    # a bound not known to need no check is checked (a check that always holds costs nothing wrong)
    check_lo = [not known(sympy.sympify(p) <= 0) for p in lo]
    check_hi = [not known(sympy.sympify(p) <= 0) for p in hi]
    read = reader(x, val.dtype)

    def body(ops, index):
        idx = [index[d] - lo[d] for d in range(ndim)]
        conds = [index_in_range(ops, idx[d], lo=0 if check_lo[d] else None, hi=in_size[d] if check_hi[d] else None)
                 for d in range(ndim) if check_lo[d] or check_hi[d]]
        if not conds:
            return read(ops, idx)
        mask = conds[0]
        for c in conds[1:]:
            mask = ops.logical_and(mask, c)
        # (read only where every index is inside the input: InRange lends that range to the read's index)
        inside = [in_range(idx[d], in_size[d]) if check_lo[d] or check_hi[d] else idx[d] for d in range(ndim)]
        return ops.masked(mask, lambda: read(ops, inside), value)

    return _lazy(node, body, 2 + cost_of(x))


def _normalize(i, n):
    """A non-negative position for index ``i`` of a dim of size ``n`` (a size expression where either
    is symbolic: the sign of a symbolic index is guarded)."""
    return i + n if lt(i, 0) else i


@lowering(aten.slice_scatter.default)
def lower_slice_scatter(g, node, x, src, dim=0, start=None, end=None, step=1):
    _check_real(x, src)
    val = fake_val(node)
    size = shape_of(val)
    dim = dim % len(size)
    n = size[dim]
    start = _clamped_start(start, n)
    count = src.size[dim]
    read_x, read_src = reader(x, val.dtype), reader(src, val.dtype)
    if known(sympy.Eq(sympy.sympify(count), 0)) or numel(size) == 0:
        return _lazy(node, read_x, 1 + cost_of(x))
    last = start + (count - 1) * step
    # a bound not known to be the whole dim is checked (a check that always holds costs nothing wrong)
    lo = None if known(sympy.sympify(start) <= 0) else start
    hi = None if known(sympy.sympify(last) >= n - 1) else last + 1

    def body(ops, index):
        i = index[dim]
        conds = []
        if lo is not None or hi is not None:
            conds.append(index_in_range(ops, i, lo=lo, hi=hi))
        if step > 1:
            offset = ops.sub(ops.index_expr(i, torch.int64), ops.index_expr(sympy.sympify(start), torch.int64))
            conds.append(ops.eq(ops.mod(offset, ops.constant(step, torch.int64)), ops.constant(0, torch.int64)))
        src_index = list(index)
        src_index[dim] = (i - start) if step == 1 else _floordiv(i - start, step)
        if not conds:
            return read_src(ops, src_index)
        mask = conds[0]
        for c in conds[1:]:
            mask = ops.logical_and(mask, c)
        picked = ops.masked(mask, lambda: read_src(ops, src_index), 0)
        return ops.where(mask, picked, read_x(ops, index))

    return _lazy(node, body, 3 + cost_of(x, src))


def _clamped_start(start, n):
    """slice_scatter's start in [0, n] (negative counts from the end); guarded where sizes decide."""
    start = 0 if start is None else start
    if lt(start, 0):
        start = start + n
    if lt(start, 0):
        return 0
    return n if gt(start, n) else start


def _floordiv(a, b):
    from kiln.loopir.index import FloorDiv

    return FloorDiv(a, sympy.Integer(b))


@lowering(aten.select_scatter.default)
def lower_select_scatter(g, node, x, src, dim, index):
    _check_real(x, src)
    val = fake_val(node)
    size = shape_of(val)
    dim = dim % len(size)
    at = _normalize(index, size[dim])
    read_x, read_src = reader(x, val.dtype), reader(src, val.dtype)

    def body(ops, idx):
        place = ops.index_expr(at, torch.int64) if is_symbolic(at) else ops.constant(at, torch.int64)
        hit = ops.eq(ops.index_expr(idx[dim], torch.int64), place)
        return ops.where(hit, read_src(ops, list(idx[:dim]) + list(idx[dim + 1:])), read_x(ops, idx))

    return _lazy(node, body, 2 + cost_of(x, src))


@lowering(aten.diagonal_scatter.default)
def lower_diagonal_scatter(g, node, x, src, offset=0, dim1=0, dim2=1):
    _check_real(x, src)
    val = fake_val(node)
    size = shape_of(val)
    ndim = len(size)
    dim1, dim2 = dim1 % ndim, dim2 % ndim
    if dim1 == dim2:
        raise Unlowerable("diagonal_scatter with dim1 == dim2")
    read_x, read_src = reader(x, val.dtype), reader(src, val.dtype)
    if numel(src.size) == 0:
        return _lazy(node, read_x, 1 + cost_of(x))

    def body(ops, idx):
        on_diag = ops.eq(ops.index_expr(idx[dim2] - idx[dim1], torch.int64), ops.constant(offset, torch.int64))
        k = idx[dim1] if offset >= 0 else idx[dim2]
        src_index = [idx[d] for d in range(ndim) if d not in (dim1, dim2)] + [k]
        picked = ops.masked(on_diag, lambda: read_src(ops, src_index), 0)
        return ops.where(on_diag, picked, read_x(ops, idx))

    return _lazy(node, body, 3 + cost_of(x, src))


@lowering(aten.as_strided_scatter.default)
def lower_as_strided_scatter(g, node, *args, **kwargs):
    # Which source element lands on an output element has no closed form for general strides
    # (overlapping views write one element several times, in ATen's order).
    raise Unlowerable("as_strided_scatter: no closed-form inverse of a general strided view")
