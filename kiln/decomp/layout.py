"""Decompositions: ops that only move elements (diagonal embedding, block diagonals, rotations, pixel and
channel shuffles, the ``*_copy`` variants of views, unsafe splits) as views, pads, cats and clones.
"""
from __future__ import annotations

import torch

from kiln.decomp import shape as shape_ops
from kiln.decomp.registry import decomposition
from kiln.decomp.utils import to_dtype

aten = torch.ops.aten


@decomposition(aten.diag_embed.default)
def diag_embed(x, offset=0, dim1=-2, dim2=-1):
    """Zeros with ``x``'s last dim written onto the (offset) diagonal of dims ``dim1``, ``dim2``."""
    ndim = x.dim() + 1
    dim1, dim2 = dim1 % ndim, dim2 % ndim
    if dim1 == dim2:
        return NotImplemented
    n = x.shape[-1] + abs(offset)
    rest = iter(x.shape[:-1])
    shape = [n if d in (dim1, dim2) else next(rest) for d in range(ndim)]
    zeros = aten.full.default(shape, 0, dtype=x.dtype, device=x.device)
    return aten.diagonal_scatter.default(zeros, x, offset, dim1, dim2)


@decomposition(aten.block_diag.default)
def block_diag(tensors):
    """Each block (0-dim as 1x1, 1-dim as one row) padded with zeros to the full width, then stacked."""
    if not tensors:
        return NotImplemented
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    if dtype.is_complex:
        return NotImplemented
    blocks = []
    for t in tensors:
        if t.dim() == 0:
            t = aten.view.default(t, [1, 1])
        elif t.dim() == 1:
            t = aten.view.default(t, [1, t.shape[0]])
        elif t.dim() != 2:
            return NotImplemented
        blocks.append(to_dtype(t, dtype))
    width = sum(b.shape[1] for b in blocks)
    rows, left = [], 0
    for b in blocks:
        rows.append(aten.constant_pad_nd.default(b, [left, width - left - b.shape[1]], 0))
        left += b.shape[1]
    return aten.cat.default(rows, 0)


@decomposition(aten.rot90.default)
def rot90(x, k=1, dims=(0, 1)):
    """ATen's: flips and a transpose (a view of the flipped copy, as eager returns it)."""
    if len(dims) != 2 or x.dim() < 2:
        return NotImplemented
    d0, d1 = dims[0] % x.dim(), dims[1] % x.dim()
    if d0 == d1:
        return NotImplemented
    k %= 4
    if k == 1:
        return aten.transpose.int(aten.flip.default(x, [d1]), d0, d1)
    if k == 2:
        return aten.flip.default(x, [d0, d1])
    if k == 3:
        return aten.transpose.int(aten.flip.default(x, [d0]), d0, d1)
    return aten.clone.default(x, memory_format=torch.contiguous_format)


def _shuffle(x, split_shape, order, final_shape):
    y = aten.permute.default(aten.reshape.default(x, split_shape), order)
    return aten.view.default(aten.clone.default(y, memory_format=torch.contiguous_format), final_shape)


@decomposition(aten.pixel_shuffle.default)
def pixel_shuffle(x, upscale_factor):
    r = upscale_factor
    *lead, c, h, w = x.shape
    n = len(lead)
    order = list(range(n)) + [n, n + 3, n + 1, n + 4, n + 2]
    return _shuffle(x, lead + [c // (r * r), r, r, h, w], order, lead + [c // (r * r), h * r, w * r])


@decomposition(aten.pixel_unshuffle.default)
def pixel_unshuffle(x, downscale_factor):
    r = downscale_factor
    *lead, c, h, w = x.shape
    n = len(lead)
    order = list(range(n)) + [n, n + 2, n + 4, n + 1, n + 3]
    return _shuffle(x, lead + [c, h // r, r, w // r, r], order, lead + [c * r * r, h // r, w // r])


@decomposition(aten.channel_shuffle.default, aten.native_channel_shuffle.default)
def channel_shuffle(x, groups):
    if x.dim() < 3:
        return NotImplemented
    n, c, *rest = x.shape
    order = [0, 2, 1] + list(range(3, x.dim() + 1))
    return _shuffle(x, [n, groups, c // groups] + rest, order, list(x.shape))


def _copy_of(view):
    return aten.clone.default(view, memory_format=torch.contiguous_format)


@decomposition(aten.squeeze_copy.default, aten.squeeze_copy.dim, aten.squeeze_copy.dims)
def squeeze_copy(x, dim=None):
    if dim is None:
        return _copy_of(aten.squeeze.default(x))
    return _copy_of(aten.squeeze.dims(x, [dim] if isinstance(dim, int) else list(dim)))


@decomposition(aten.t_copy.default)
def t_copy(x):
    return _copy_of(aten.transpose.int(x, 0, 1) if x.dim() == 2 else x)


@decomposition(aten.unfold_copy.default)
def unfold_copy(x, dimension, size, step):
    return _copy_of(aten.unfold.default(x, dimension, size, step))


@decomposition(aten.narrow_copy.default)
def narrow_copy(x, dim, start, length):
    dim %= max(x.dim(), 1)
    start = start + x.shape[dim] if start < 0 else start
    return _copy_of(aten.slice.Tensor(x, dim, start, start + length))


@decomposition(aten.as_strided_copy.default)
def as_strided_copy(x, size, stride, storage_offset=None):
    return _copy_of(aten.as_strided.default(x, size, stride, storage_offset))


@decomposition(aten.unbind_copy.int)
def unbind_copy(x, dim=0):
    return [_copy_of(aten.select.int(x, dim, i)) for i in range(x.shape[dim])]


@decomposition(aten.split_with_sizes_copy.default)
def split_with_sizes_copy(x, split_sizes, dim=0):
    parts = shape_ops.split_with_sizes(x, split_sizes, dim)
    return parts if parts is NotImplemented else [_copy_of(part) for part in parts]


# the unsafe variants only skip autograd's view checks: the same values as the safe ones
@decomposition(aten.unsafe_split.Tensor)
def unsafe_split(x, split_size, dim=0):
    return shape_ops.split(x, split_size, dim)


@decomposition(aten.unsafe_split_with_sizes.default)
def unsafe_split_with_sizes(x, split_sizes, dim=0):
    return shape_ops.split_with_sizes(x, split_sizes, dim)
