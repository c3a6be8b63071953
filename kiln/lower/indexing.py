"""Lowerings of gathers: ``index.Tensor`` (advanced indexing by integer tensors) and ``gather``.

A gather is a pointwise body over the output: it loads the index tensors at the output position,
turns each loaded value into an index with ``ops.indirect_indexing`` (negative values count from the
end where ATen allows it; out-of-bounds values raise IndexError as in eager), and loads the source.

Scatters (``scatter``, ``scatter_add``, ``scatter_reduce``, ``index_put``) are in ``scatter.py``.
"""
from __future__ import annotations

import torch

from kiln.loopir.sizes import broadcast_shapes, shape_of, strides_of
from kiln.loopir.nodes import Lazy, numel
from kiln.lower.common import broadcast_index, constant_value, cost_of, origins_of
from kiln.lower.graph import fake_val
from kiln.lower.registry import Unlowerable, lowering
from kiln.lower.shape import reader

aten = torch.ops.aten

_INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)



def advanced_position(ops, index, x_size, indices, loaders, first: int, bshape) -> list:
    """The position in a tensor of ``x_size`` that advanced indexing by ``indices`` (tensors or None,
    one per dim) reads or writes for ``index`` of the result: the broadcast index dims ``bshape`` sit at
    ``first``; each index tensor's value (``loaders[d]``) counts from the end when negative."""
    nb = len(bshape)
    bidx = list(index[first:first + nb])
    rest = list(index[:first]) + list(index[first + nb:])
    position, k = [], 0
    for d in range(len(x_size)):
        if indices[d] is None:
            position.append(rest[k])
            k += 1
            continue
        v = loaders[d](ops, broadcast_index(tuple(indices[d].size), bshape, bidx))
        position.append(ops.indirect_indexing(v, x_size[d], True))
    return position


def index_plan(x, indices, what: str):
    """(indices with one entry per dim, the dims with index tensors, their broadcast shape, where its dims
    sit in the result, the result's sizes) of advanced indexing ``x[indices]``: the broadcast dims replace
    the indexed ones when these are adjacent, else they come first."""
    indices = list(indices) + [None] * (len(x.size) - len(indices))
    positions = [d for d, t in enumerate(indices) if t is not None]
    if not positions:
        raise Unlowerable(f"{what} without index tensors")
    for d in positions:
        if indices[d].dtype in (torch.bool, torch.uint8):
            raise Unlowerable("boolean mask index (its result shape depends on the data)")
        if indices[d].dtype not in _INDEX_DTYPES:
            raise Unlowerable(f"index tensor of dtype {indices[d].dtype}")
    bshape = broadcast_shapes(*[tuple(indices[d].size) for d in positions])
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    first = positions[0] if adjacent else 0
    plain = [x.size[d] for d in range(len(x.size)) if indices[d] is None]
    return indices, positions, bshape, first, tuple(plain[:first] + list(bshape) + plain[first:])


def _gather_result(node, x):
    """(fake result, its sizes) of a gather of ``x``; (None, sizes) for an empty result (no loads)."""
    if x.dtype.is_complex:
        raise Unlowerable("complex dtype")
    val = fake_val(node)
    out_size = shape_of(val)
    return (None if numel(out_size) == 0 else val), out_size


@lowering(aten.index.Tensor)
def lower_index(g, node, x, indices):
    val, out_size = _gather_result(node, x)
    if val is None:
        return constant_value(node, 0)
    indices, positions, bshape, first, expected = index_plan(x, indices, "index")
    if tuple(expected) != out_size:
        raise Unlowerable(f"index: unexpected result shape {list(out_size)} (expected {expected})")
    read_x = reader(x, val.dtype)
    index_loaders = {d: indices[d].loader() for d in positions}

    def body(ops, index):
        return read_x(ops, advanced_position(ops, index, x.size, indices, index_loaders, first, bshape))

    return Lazy(out_size, val.dtype, val.device, body, 2 + cost_of(x, *[indices[d] for d in positions]),
                origins_of(node, x, *[indices[d] for d in positions]))


@lowering(aten.gather.default)
def lower_gather(g, node, x, dim, index, sparse_grad=False):
    val, out_size = _gather_result(node, x)
    if val is None:
        return constant_value(node, 0)
    ndim = len(x.size)
    if ndim == 0 or len(index.size) != ndim:
        raise Unlowerable("gather of a 0-dim tensor")
    dim = dim % ndim
    read_x = reader(x, val.dtype)
    load_index = index.loader()

    def body(ops, idx):
        where = ops.indirect_indexing(load_index(ops, idx), x.size[dim], False)
        x_index = list(idx)
        x_index[dim] = where
        return read_x(ops, x_index)

    return Lazy(out_size, val.dtype, val.device, body, 2 + cost_of(x, index), origins_of(node, x, index))
