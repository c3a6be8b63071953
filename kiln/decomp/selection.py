"""Decompositions: data-selecting ops as core indexing, scans and comparisons (``put``, ``masked_scatter``,
the masked ``_unsafe`` index ops, ``isin``, ``bucketize``/``searchsorted``), and ``empty_permuted``
and ``_chunk_cat`` as views, pads and cats.
"""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import to_dtype

aten = torch.ops.aten

# Above these sizes ATen's own kernels are faster on CPU (measured against eager, one thread): its
# masked_scatter is one sequential pass (here a scan, a gather and a select) and its isin sorts (here
# every value is compared with every test element). bucketize/searchsorted here take ATen's binary-search
# steps for every value at once, one gather per step; the limit on boundaries bounds those steps.
MASKED_SCATTER_MAX_NUMEL = 4096
ISIN_MAX_TEST_ELEMENTS = 64
SEARCH_MAX_BOUNDARIES = 256


def _small(shape, limit) -> bool:
    n = 1
    for s in shape:
        if isinstance(s, torch.SymInt):
            return False
        n *= s
    return n <= limit


@decomposition(aten.put.default)
def put(x, index, source, accumulate=False):
    """``x`` as a flat tensor, ``index_put`` at the flat indices (negative ones count from the end in
    both), back to ``x``'s shape."""
    flat = aten.reshape.default(x, [-1])
    out = aten.index_put.default(flat, [aten.reshape.default(index, [-1])], aten.reshape.default(source, [-1]),
                                 accumulate)
    return aten.view.default(out, list(x.shape))


@decomposition(aten.masked_scatter.default)
def masked_scatter(x, mask, source):
    """The k-th true element of the (broadcast) mask, in row-major order, takes ``source``'s k-th
    element: an exclusive count of the mask (a cumsum) indexes the flat source. More true elements
    than source elements index past its end: an IndexError, as eager raises."""
    shape = list(torch.broadcast_shapes(x.shape, mask.shape))
    if x.is_complex() or not _small(shape, MASKED_SCATTER_MAX_NUMEL):
        return NotImplemented
    n = source.numel()
    if isinstance(n, int) and n == 0:  # (the false positions would read element 0 of nothing; ATen's is exact)
        return NotImplemented
    m, x = aten.expand.default(mask, shape), aten.expand.default(x, shape)
    flat_mask = aten.reshape.default(m, [-1])
    position = aten.sub.Scalar(aten.cumsum.default(to_dtype(flat_mask, torch.int64), 0), 1)
    position = aten.where.self(flat_mask, position, aten.zeros_like.default(position))
    picked = aten.index.Tensor(aten.reshape.default(source, [-1]), [position])
    return aten.where.self(m, aten.view.default(picked, shape), x)


def _clamped(x, indices):
    return [None if i is None else aten.clamp.default(i, -x.shape[d], x.shape[d] - 1) for d, i in enumerate(indices)]


@decomposition(aten._unsafe_masked_index.default)
def unsafe_masked_index(x, mask, indices, fill):
    """``x[indices]`` where ``mask`` holds, ``fill`` elsewhere (indices clamped in bounds: masked-off
    ones may be anything)."""
    gathered = aten.index.Tensor(x, _clamped(x, indices))
    fill_t = fill if isinstance(fill, torch.Tensor) else aten.scalar_tensor.default(fill, dtype=x.dtype, device=x.device)
    return aten.where.self(mask, gathered, to_dtype(fill_t, x.dtype))


@decomposition(aten._unsafe_masked_index_put_accumulate.default)
def unsafe_masked_index_put_accumulate(x, mask, indices, values):
    masked = aten.where.self(mask, values, aten.scalar_tensor.default(0, dtype=values.dtype, device=values.device))
    return aten.index_put.default(x, _clamped(x, indices), masked, True)


@decomposition(aten.isin.Tensor_Tensor)
def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Any equal element of ``test_elements``: a comparison against all of them, reduced with ``any``
    (exact; NaN equals nothing, as in eager)."""
    if elements.is_complex() or test_elements.is_complex() or not _small(test_elements.shape, ISIN_MAX_TEST_ELEMENTS):
        return NotImplemented
    dtype = torch.promote_types(elements.dtype, test_elements.dtype)
    flat_test = to_dtype(aten.reshape.default(test_elements, [-1]), dtype)
    equal = aten.eq.Tensor(aten.unsqueeze.default(to_dtype(elements, dtype), -1), flat_test)
    found = aten.any.dim(equal, -1) if test_elements.numel() else \
        aten.full.default(list(elements.shape), False, dtype=torch.bool, device=elements.device)
    return aten.logical_not.default(found) if invert else found


def _bucket_count(boundaries, values, right, out_int32):
    """ATen's binary search, step by step, for every value at once: while ``start < end``, ``mid =
    start + (end - start) // 2`` moves ``start`` past ``mid`` when ``not (b[mid] >= v)`` (``right``:
    ``not (b[mid] > v)``), else ``end`` to ``mid``. The same steps, not a count of the boundaries below
    each value: where the boundaries are not sorted, NaNs included (``torch.sort`` puts them last), the
    answer is the one the search path finds. ``boundaries`` is 1-D, or (..., n) with ``values`` (..., m)."""
    dtype = torch.result_type(boundaries, values)  # (ATen's rule: a 0-dim operand ranks below a dimensioned one)
    b, v = to_dtype(boundaries, dtype), to_dtype(values, dtype)
    n = boundaries.shape[-1]
    start = aten.full.default(list(values.shape), 0, dtype=torch.int64, device=values.device)
    if n == 0:
        return to_dtype(start, torch.int32) if out_int32 else start
    end = aten.full.default(list(values.shape), n, dtype=torch.int64, device=values.device)
    for _ in range(max(n, 1).bit_length()):  # (the most steps a search of n takes)
        active = aten.lt.Tensor(start, end)
        mid = aten.add.Tensor(start, aten.floor_divide.default(aten.sub.Tensor(end, start), 2))
        at = aten.clamp.default(mid, 0, max(n - 1, 0))
        b_mid = aten.index.Tensor(b, [at]) if boundaries.dim() == 1 else aten.gather.default(b, -1, at)
        below = aten.logical_not.default(aten.gt.Tensor(b_mid, v) if right else aten.ge.Tensor(b_mid, v))
        start = aten.where.self(aten.logical_and.default(active, below), aten.add.Tensor(mid, 1), start)
        end = aten.where.self(aten.logical_and.default(active, aten.logical_not.default(below)), mid, end)
    return to_dtype(start, torch.int32) if out_int32 else start


@decomposition(aten.bucketize.Tensor)
def bucketize(x, boundaries, *, out_int32=False, right=False):
    if boundaries.dim() != 1 or x.is_complex() or boundaries.is_complex() or not _small(boundaries.shape, SEARCH_MAX_BOUNDARIES):
        return NotImplemented
    return _bucket_count(boundaries, x, right, out_int32)


@decomposition(aten.searchsorted.Tensor)
def searchsorted(sorted_sequence, x, *, out_int32=False, right=False, side=None, sorter=None):
    if sorted_sequence.is_complex() or x.is_complex() or not _small(sorted_sequence.shape[-1:], SEARCH_MAX_BOUNDARIES):
        return NotImplemented
    if sorter is not None:  # the search runs over the sequence in ``sorter``'s order
        sorted_sequence = aten.gather.default(sorted_sequence, -1, sorter)
    right = right or side == "right"
    if sorted_sequence.dim() == 1:
        return _bucket_count(sorted_sequence, x, right, out_int32)
    if x.dim() != sorted_sequence.dim() or tuple(x.shape[:-1]) != tuple(sorted_sequence.shape[:-1]):
        return NotImplemented
    return _bucket_count(sorted_sequence, x, right, out_int32)  # (per leading index: that row's sequence)


@decomposition(aten.empty_permuted.default)
def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None, pin_memory=None):
    """An uninitialized tensor laid out in ``physical_layout`` order: a permuted view of a dense one."""
    physical = aten.empty.memory_format([size[d] for d in physical_layout], dtype=dtype, device=device)
    inverse = [0] * len(physical_layout)
    for i, d in enumerate(physical_layout):
        inverse[d] = i
    return aten.permute.default(physical, inverse)


@decomposition(aten._chunk_cat.default)
def chunk_cat(tensors, dim, num_chunks):
    """Each tensor zero-padded along ``dim`` to a multiple of ``num_chunks``, viewed as
    (..., num_chunks, -1), then all concatenated along the flattened chunk dim."""
    if not tensors:
        return NotImplemented
    dim %= tensors[0].dim()
    pieces = []
    for t in tensors:
        length = t.shape[dim]
        padded_length = (length + num_chunks - 1) // num_chunks * num_chunks
        if padded_length != length:
            t = aten.constant_pad_nd.default(t, [0, 0] * (t.dim() - dim - 1) + [0, padded_length - length], 0)
        pieces.append(aten.reshape.default(t, list(t.shape[:dim]) + [num_chunks, -1]))
    return aten.cat.default(pieces, dim + 1)


@decomposition(aten.new_empty_strided.default)
def new_empty_strided(x, size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.empty_strided.default(list(size), list(stride), dtype=dtype if dtype is not None else x.dtype,
                                      device=device if device is not None else x.device)


@decomposition(aten.nonzero_static.default)
def nonzero_static(x, *, size, fill_value=-1):
    """The coordinates of the first ``size`` nonzero elements (row-major), then ``fill_value`` rows: each
    nonzero element's rank among them (a cumsum) is its output row; the others go to a spare row."""
    if x.is_complex() or isinstance(size, torch.SymInt) or any(isinstance(s, torch.SymInt) for s in x.shape):
        return NotImplemented
    ndim = x.dim()
    if ndim == 0 or x.numel() == 0:
        return aten.full.default([size, ndim], fill_value, dtype=torch.int64, device=x.device)
    flat = aten.reshape.default(aten.ne.Scalar(x, 0), [-1])
    rank = aten.sub.Scalar(aten.cumsum.default(to_dtype(flat, torch.int64), 0), 1)
    row = aten.where.self(aten.logical_and.default(flat, aten.lt.Scalar(rank, size)), rank,
                          aten.full_like.default(rank, size))
    linear = aten.arange.start_step(0, x.numel(), 1, dtype=torch.int64, device=x.device)
    coords, stride = [], 1
    for n in reversed(x.shape):
        coords.append(aten.remainder.Scalar(aten.div.Tensor_mode(linear, stride, rounding_mode="floor"), n))
        stride *= n
    coords = aten.stack.default(list(reversed(coords)), 1)  # (numel, ndim)
    out = aten.full.default([size + 1, ndim], fill_value, dtype=torch.int64, device=x.device)
    return aten.slice.Tensor(aten.index_put.default(out, [row], coords, False), 0, 0, size)
