"""Decompositions: views in terms of core views, joins, tensor makers, padding, indexing ops."""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import dense_permutation, in_layout_of, like_strides, static_layout, to_dtype

aten = torch.ops.aten


# views --------------------------------------------------------------------------------------------
@decomposition(aten.t.default)
def t(x):
    return aten.permute.default(x, list(range(x.dim()))[::-1]) if x.dim() == 2 else aten.alias.default(x)


@decomposition(aten.transpose.int)
def transpose(x, dim0, dim1):
    if x.dim() == 0:
        return aten.alias.default(x)
    dims = list(range(x.dim()))
    dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
    return aten.permute.default(x, dims)


@decomposition(aten.split.Tensor)
def split(x, split_size, dim=0):
    length = x.shape[dim]
    if split_size == 0:
        return NotImplemented
    n = max((length + split_size - 1) // split_size, 1)
    return [aten.slice.Tensor(x, dim, i * split_size, min((i + 1) * split_size, length)) for i in range(n)]


@decomposition(aten.split_with_sizes.default)
def split_with_sizes(x, split_sizes, dim=0):
    if sum(split_sizes) != x.shape[dim]:
        return NotImplemented  # let the op raise its error
    out, start = [], 0
    for size in split_sizes:
        out.append(aten.slice.Tensor(x, dim, start, start + size))
        start += size
    return out


@decomposition(aten.unbind.int)
def unbind(x, dim=0):
    return [aten.select.int(x, dim, i) for i in range(x.shape[dim])]


@decomposition(aten._reshape_alias.default)
def reshape_alias(x, size, stride):
    return aten.as_strided.default(x, size, stride, x.storage_offset())


@decomposition(aten.lift_fresh.default)
def lift_fresh(x):
    return aten.alias.default(x)


@decomposition(aten.expand_as.default)
def expand_as(x, other):
    return aten.expand.default(x, list(other.shape))


# joins ------------------------------------------------------------------------------------------
@decomposition(aten.stack.default)
def stack(tensors, dim=0):
    if not tensors:
        return NotImplemented
    dim = dim % (tensors[0].dim() + 1)
    return aten.cat.default([aten.unsqueeze.default(t, dim) for t in tensors], dim)


@decomposition(aten.repeat.default)
def repeat(x, repeats):
    if len(repeats) < x.dim():
        return NotImplemented
    lead = len(repeats) - x.dim()
    x = aten.view.default(x, [1] * lead + list(x.shape)) if lead else x
    interleaved, expanded, final = [], [], []
    for r, s in zip(repeats, x.shape):
        interleaved += [1, s]
        expanded += [r, s]
        final.append(r * s)
    y = aten.expand.default(aten.view.default(x, interleaved) if x.is_contiguous() else aten.reshape.default(x, interleaved), expanded)
    return aten.view.default(aten.clone.default(y, memory_format=torch.contiguous_format), final)


@decomposition(aten.roll.default)
def roll(x, shifts, dims=()):
    if not dims:
        flat = aten.view.default(aten.clone.default(x, memory_format=torch.contiguous_format), [-1])
        return aten.view.default(roll(flat, shifts, [0]), list(x.shape))
    out = x
    for shift, dim in zip(shifts, dims):
        length = x.shape[dim]
        if length == 0:
            continue
        shift %= length
        if shift:
            out = aten.cat.default([aten.slice.Tensor(out, dim, length - shift, length),
                                    aten.slice.Tensor(out, dim, 0, length - shift)], dim)
    return out if out is not x else aten.clone.default(x)


@decomposition(aten.flip.default)
def flip(x, dims):
    out = x
    for dim in dims:
        n = x.shape[dim]
        if isinstance(n, torch.SymInt):  # n - 1 - arange(n): the length of a descending range would guard
            up = aten.arange.default(n, dtype=torch.int64, device=x.device)
            index = aten.add.Scalar(aten.neg.default(up), n - 1)
        else:
            index = aten.arange.start_step(n - 1, -1, -1, dtype=torch.int64, device=x.device)
        out = aten.index_select.default(out, dim, index)
    return out if out is not x else aten.clone.default(x)


def _tri_mask(x, diagonal, lower):
    rows, cols = x.shape[-2], x.shape[-1]
    r = aten.unsqueeze.default(aten.arange.default(rows, dtype=torch.int64, device=x.device), 1)
    c = aten.arange.default(cols, dtype=torch.int64, device=x.device)
    diff = aten.sub.Tensor(c, r)
    return aten.le.Scalar(diff, diagonal) if lower else aten.ge.Scalar(diff, diagonal)


@decomposition(aten.tril.default)
def tril(x, diagonal=0):
    return aten.where.self(_tri_mask(x, diagonal, True), x, aten.zeros_like.default(x))


@decomposition(aten.triu.default)
def triu(x, diagonal=0):
    return aten.where.self(_tri_mask(x, diagonal, False), x, aten.zeros_like.default(x))


# tensor makers ----------------------------------------------------------------------------------
def _opts(x, dtype, device):
    return {"dtype": dtype if dtype is not None else x.dtype, "device": device if device is not None else x.device}


@decomposition(aten.new_zeros.default)
def new_zeros(x, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.full.default(list(size), 0, **_opts(x, dtype, device))


@decomposition(aten.new_ones.default)
def new_ones(x, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.full.default(list(size), 1, **_opts(x, dtype, device))


@decomposition(aten.new_full.default)
def new_full(x, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.full.default(list(size), fill_value, **_opts(x, dtype, device))


@decomposition(aten.new_empty.default)
def new_empty(x, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.empty.memory_format(list(size), **_opts(x, dtype, device))


def _like(x, fill, dtype, device, memory_format):
    if memory_format not in (None, torch.preserve_format, torch.contiguous_format):
        return NotImplemented
    opts = _opts(x, dtype, device)
    if memory_format is torch.preserve_format or memory_format is None:
        if not x.is_contiguous() and static_layout(x):
            if fill is None:
                return aten.empty_strided.default(list(x.shape), like_strides(x), **opts)
            return in_layout_of(x, lambda sizes: aten.full.default(sizes, fill, **opts))
        if not x.is_contiguous() and dense_permutation(x):  # (symbolic sizes)
            out = aten.empty_strided.default(list(x.shape), list(x.stride()), **opts)
            return out if fill is None else aten.fill.Scalar(out, fill)
    if fill is None:
        return aten.empty.memory_format(list(x.shape), **opts)
    return aten.full.default(list(x.shape), fill, **opts)


@decomposition(aten.zeros_like.default)
def zeros_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _like(x, 0, dtype, device, memory_format)


@decomposition(aten.ones_like.default)
def ones_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _like(x, 1, dtype, device, memory_format)


@decomposition(aten.full_like.default)
def full_like(x, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _like(x, fill_value, dtype, device, memory_format)


@decomposition(aten.empty_like.default)
def empty_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _like(x, None, dtype, device, memory_format)


# full() with no dtype takes the fill value's (1 -> int64); zeros/ones take the default dtype
@decomposition(aten.zeros.default)
def zeros(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.full.default(list(size), 0, dtype=dtype or torch.get_default_dtype(), device=device)


@decomposition(aten.ones.default)
def ones(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.full.default(list(size), 1, dtype=dtype or torch.get_default_dtype(), device=device)


@decomposition(aten.arange.default)
def arange(end, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.arange.start_step(0, end, 1, dtype=dtype, device=device)


@decomposition(aten.arange.start)
def arange_start(start, end, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.arange.start_step(start, end, 1, dtype=dtype, device=device)


# padding ----------------------------------------------------------------------------------------
def _pad_indices(length, before, after, mode, device):
    """Source index for each padded position along one dim: reflect or replicate."""
    positions = aten.arange.start_step(-before, length + after, 1, dtype=torch.int64, device=device)
    if mode == "replicate":
        return aten.clamp.default(positions, 0, length - 1)
    # reflect: mirror about 0 and length-1 without repeating the edge
    period = 2 * (length - 1)
    folded = aten.remainder.Scalar(aten.abs.default(positions), period) if period else aten.mul.Scalar(positions, 0)
    return aten.where.self(aten.ge.Scalar(folded, length), aten.rsub.Scalar(folded, period), folded)


def _pad(x, padding, mode):
    out = x
    n = len(padding) // 2
    for i in range(n):
        dim = x.dim() - 1 - i
        before, after = padding[2 * i], padding[2 * i + 1]
        if before == 0 and after == 0:
            continue
        if x.shape[dim] + before + after <= 0 or (mode == "reflect" and (before >= x.shape[dim] or after >= x.shape[dim])):
            return NotImplemented  # (ATen rejects these)
        index = _pad_indices(x.shape[dim], before, after, mode, x.device)
        out = aten.index_select.default(out, dim, index)
    return out if out is not x else aten.clone.default(x)


for _n in (1, 2, 3):
    decomposition(getattr(aten, f"reflection_pad{_n}d").default)(lambda x, padding: _pad(x, padding, "reflect"))
    decomposition(getattr(aten, f"replication_pad{_n}d").default)(lambda x, padding: _pad(x, padding, "replicate"))


# indexing ---------------------------------------------------------------------------------------
def _index_at(x, dim, index):
    return aten.index.Tensor(x, [None] * (dim % max(x.dim(), 1)) + [index])


def _no_negative(index, size):
    """For ops that reject negative indices (index_select, embedding, index_add, index_copy) decomposed to
    ``index``/``index_put``, which count them from the end: a negative index becomes ``size``, out of
    bounds, so it raises as in eager instead of reading or writing from the end."""
    big = aten.scalar_tensor.default(size, dtype=index.dtype, device=index.device)
    return aten.where.self(aten.lt.Scalar(index, 0), big, index)


def _one(t):
    """A 0-dim tensor as a 1-element one (ATen's rule for the 0-dim cases of the index ops)."""
    return aten.view.default(t, [1]) if isinstance(t, torch.Tensor) and t.dim() == 0 else t


@decomposition(aten.index_select.default)
def index_select(x, dim, index):
    if x.dim() == 0:  # as a 1-element tensor; the result is 0-dim
        return aten.view.default(index_select(aten.view.default(x, [1]), 0, index), [])
    index = _no_negative(index, x.shape[dim])
    return _index_at(x, dim, aten.view.default(index, [-1]) if index.dim() == 0 else index)


@decomposition(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if weight.dim() != 2:
        return NotImplemented
    return aten.index.Tensor(weight, [_no_negative(indices, weight.shape[0])])


@decomposition(aten.index_add.default)
def index_add(x, dim, index, source, *, alpha=1):
    if x.dim() == 0:
        return aten.view.default(index_add(aten.view.default(x, [1]), 0, index, _one(source), alpha=alpha), [])
    if alpha != 1:
        source = aten.mul.Scalar(source, alpha)
    dim = dim % x.dim()
    source = aten.movedim.int(source, dim, 0) if source.dim() else source
    target = aten.movedim.int(x, dim, 0)
    out = aten.index_put.default(target, [_no_negative(index, x.shape[dim])], source, True)
    return aten.movedim.int(out, 0, dim)


@decomposition(aten.index_copy.default)
def index_copy(x, dim, index, source):
    if x.dim() == 0:
        return aten.view.default(index_copy(aten.view.default(x, [1]), 0, index, _one(source)), [])
    dim = dim % x.dim()
    source = aten.movedim.int(source, dim, 0) if source.dim() else source
    out = aten.index_put.default(aten.movedim.int(x, dim, 0), [_no_negative(index, x.shape[dim])], source, False)
    return aten.movedim.int(out, 0, dim)


@decomposition(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(x, dim, index, value):
    if x.dim() == 0:
        return aten.view.default(index_fill(aten.view.default(x, [1]), 0, index, value), [])
    dim = dim % x.dim()
    value = to_dtype(value, x.dtype) if isinstance(value, torch.Tensor) else aten.scalar_tensor.default(value, dtype=x.dtype, device=x.device)
    out = aten.index_put.default(aten.movedim.int(x, dim, 0), [index], value, False)
    return aten.movedim.int(out, 0, dim)


@decomposition(aten._unsafe_index.Tensor)
def unsafe_index(x, indices):
    return aten.index.Tensor(x, indices)


@decomposition(aten.take.default)
def take(x, index):
    return aten.index.Tensor(aten.reshape.default(x, [-1]), [index])
