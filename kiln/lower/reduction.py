"""Lowerings of reductions: sum, prod, amax/amin, argmax/argmin, any/all over any set of dims."""
from __future__ import annotations

import sympy
import torch

from kiln.loopir.sizes import any_symbolic, shape_of, strides_of
from kiln.loopir.ops import reduction_identity
from kiln.lower.common import constant_value, upcast, value_loader
from kiln.lower.registry import Unlowerable, lowering

aten = torch.ops.aten


def _normalize_dims(dims, ndim: int) -> list[int]:
    if dims is None:
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    dims = list(dims)
    if not dims:
        return list(range(ndim))
    return sorted({d % ndim if ndim else 0 for d in dims})


def reduce(g, node, x, dims, kind: str, src_dtype: torch.dtype):
    """Reduce ``x`` over ``dims`` with ``kind``, accumulating in ``src_dtype``; result dtype from the node."""
    if x.dtype.is_complex:
        raise Unlowerable("complex dtype")
    val = node.meta["val"]
    in_size = tuple(x.size)
    ndim = len(in_size)
    rdims = _normalize_dims(dims, ndim) if ndim else []
    kept = [d for d in range(ndim) if d not in rdims]
    out_size = shape_of(val)
    keepdim = len(out_size) == ndim and ndim > 0 and bool(rdims)
    rsize = [in_size[d] for d in rdims]
    load = value_loader(x, src_dtype, in_size)

    def body(ops, index, rindex):
        full = [None] * ndim
        if keepdim:
            for d in kept:
                full[d] = index[d]
        else:
            for i, d in enumerate(kept):
                full[d] = index[i]
        for i, d in enumerate(rdims):
            full[d] = rindex[i]
        return load(ops, [sympy.Integer(0) if e is None else e for e in full])

    parts = _split_parts(out_size, rsize, kind, val.device, across_batch=0 in rdims)
    inlined = getattr(x, "origins", ())  # (a Lazy's producers, inlined into the body)
    if parts:
        return _split_reduction(g, out_size, rsize, body, kind, src_dtype, val, parts, inlined)
    return g.add_reduction(out_size, rsize, body, kind, src_dtype, val.dtype, val.device, inlined)


# Large reductions on these devices run in two stages: SPLIT programs each reduce one chunk of the
# flattened reduction space into a partial result, then the partials are reduced.
# - Full reductions (to one value) of at least SPLIT_MIN elements: one program looping over everything
#   leaves the GPU idle; up to SPLIT_MAX_PARTS chunks of at least SPLIT_MIN_CHUNK elements.
# - Reductions to few outputs over long rows: training batch norm (one output per channel, each over
#   N*H*W elements, up to 800k for ResNet-18) and the weight gradients of layer norms and biases (one
#   output per feature, each over batch*sequence rows, a column of a row-major tensor). One row per
#   output gives too few programs, each walking a long row; a column's loads are scattered unless the
#   kernel takes many neighbouring columns at once (``codegen/triton/kernel.column_reads``). Split when
#   there are at most SPLIT_ROWS_MAX_OUT outputs, each over at least SPLIT_ROWS_MIN elements and 4x more
#   elements than outputs, SPLIT_ROWS_MIN_WORK elements in all, into enough chunks to make about
#   SPLIT_ROWS_TARGET rows (chunk, out) of at least SPLIT_ROWS_MIN_CHUNK elements; the partials are laid
#   out [chunk, *out], so neighbouring rows are neighbouring outputs (coalesced loads along columns and
#   in channels-last tensors). Only reductions across the first (batch) dimension are split this way:
#   per-sample rows (softmax, layer norm, logsumexp, a loss over a vocabulary) are left whole, fused
#   with their consumers (online softmax: one pass).
# argmax/argmin are not split; neither are symbolic sizes.
SPLIT_DEVICES = ("cuda",)
SPLIT_MIN = 1 << 16
SPLIT_MAX_PARTS = 1024
SPLIT_MIN_CHUNK = 2048
SPLIT_ROWS_MAX_OUT = 1024
SPLIT_ROWS_MIN = 1024
SPLIT_ROWS_MIN_WORK = 1 << 20
SPLIT_ROWS_MIN_CHUNK = 256
SPLIT_ROWS_TARGET = 16384
SPLIT_KINDS = ("sum", "prod", "max", "min", "any", "all")


def _split_parts(out_size, rsize, kind, device, across_batch: bool) -> int:
    """How many chunks a reduction is split into (0: not split; see above). ``across_batch``: the
    reduction is over the first dimension too (only those are split into rows)."""
    if any_symbolic(out_size) or any_symbolic(rsize):
        return 0
    if kind not in SPLIT_KINDS or device.type not in SPLIT_DEVICES:
        return 0
    n = 1
    for s in rsize:
        n *= int(s)
    out = 1
    for s in out_size:
        out *= int(s)
    if out == 1:
        return max(2, min(SPLIT_MAX_PARTS, n // SPLIT_MIN_CHUNK)) if n >= SPLIT_MIN else 0
    if not across_batch or out > SPLIT_ROWS_MAX_OUT or n < SPLIT_ROWS_MIN or n < 4 * out or out * n < SPLIT_ROWS_MIN_WORK:
        return 0
    parts = min(n // SPLIT_ROWS_MIN_CHUNK, -(-SPLIT_ROWS_TARGET // out), SPLIT_MAX_PARTS)
    return parts if parts >= 2 else 0


def _split_reduction(g, out_size, rsize, body, kind, src_dtype, val, parts: int, inlined=()):
    """``kind`` over ``rsize`` as partial results per chunk of the flattened reduction space (about
    ``parts`` chunks, from ``_split_parts``; accumulated in ``src_dtype``, laid out [chunk, *out_size]),
    then ``kind`` over the partials."""
    from kiln.loopir.index import FloorDiv, ModularIndexing

    from kiln.lower.shape import index_in_range

    n = 1
    for s in rsize:
        n *= int(s)
    chunk = -(-n // parts)
    parts = -(-n // chunk)

    def unflatten(flat):
        out, inner = [], n
        for d, size in enumerate(rsize):
            inner //= int(size)
            out.append(FloorDiv(flat, inner) if d == 0 else ModularIndexing(flat, inner, int(size)))
        return out

    def partial_body(ops, index, rindex):
        flat = index[0] * chunk + rindex[0]
        read = lambda: body(ops, list(index[1:]), unflatten(flat))  # noqa: E731
        if parts * chunk == n:
            return read()
        return ops.masked(index_in_range(ops, flat, hi=n), read, reduction_identity(kind, src_dtype))

    partial = g.add_reduction((parts, *out_size), (chunk,), partial_body, kind, src_dtype, src_dtype, val.device,
                              inlined)
    load = partial.loader()

    def final_body(ops, index, rindex):
        return load(ops, [rindex[0], *index])

    return g.add_reduction(out_size, (parts,), final_body, kind, src_dtype, val.dtype, val.device)


def _sum_like(kind):
    def lower(g, node, x, dims=None, keepdim=False, *, dtype=None):
        val = node.meta["val"]
        return reduce(g, node, x, dims, kind, upcast(val.dtype))

    return lower


lowering(aten.sum.dim_IntList)(_sum_like("sum"))


@lowering(aten.sum.default)
def lower_sum_all(g, node, x, *, dtype=None):
    return reduce(g, node, x, None, "sum", upcast(node.meta["val"].dtype))


@lowering(aten.prod.dim_int)
def lower_prod_dim(g, node, x, dim, keepdim=False, *, dtype=None):
    return reduce(g, node, x, [dim], "prod", upcast(node.meta["val"].dtype))


@lowering(aten.prod.default)
def lower_prod_all(g, node, x, *, dtype=None):
    return reduce(g, node, x, None, "prod", upcast(node.meta["val"].dtype))


def _minmax(kind):
    def lower(g, node, x, dim=(), keepdim=False):
        if x.dtype == torch.bool:
            return reduce(g, node, x, dim, "any" if kind == "max" else "all", torch.bool)
        return reduce(g, node, x, dim, kind, upcast(x.dtype))

    return lower


lowering(aten.amax.default)(_minmax("max"))
lowering(aten.amin.default)(_minmax("min"))


def _arg(kind):
    def lower(g, node, x, dim=None, keepdim=False):
        if x.dtype == torch.bool:
            raise Unlowerable("argmax of bool")
        if len(x.size) == 0:  # the only index of a scalar
            return constant_value(node, 0)
        return reduce(g, node, x, dim, kind, upcast(x.dtype))

    return lower


lowering(aten.argmax.default)(_arg("argmax"))
lowering(aten.argmin.default)(_arg("argmin"))


def _logical(kind):
    def lower(g, node, x, dim=None, keepdim=False):
        return reduce(g, node, x, dim, kind, torch.bool)

    return lower


lowering(aten.any.dims, aten.any.dim, aten.any.default)(_logical("any"))
lowering(aten.all.dims, aten.all.dim, aten.all.default)(_logical("all"))
