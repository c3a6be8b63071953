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



@lowering(aten.index.Tensor)
def lower_index(g, node, x, indices):
    if x.dtype.is_complex:
        raise Unlowerable("complex dtype")
    val = fake_val(node)
    out_size = shape_of(val)
    if numel(out_size) == 0:
        return constant_value(node, 0)
    indices = list(indices) + [None] * (len(x.size) - len(indices))
    positions = [d for d, t in enumerate(indices) if t is not None]
    if not positions:
        raise Unlowerable("index without index tensors")
    for d in positions:
        if indices[d].dtype in (torch.bool, torch.uint8):
            raise Unlowerable("boolean mask index (its result shape depends on the data)")
        if indices[d].dtype not in _INDEX_DTYPES:
            raise Unlowerable(f"index tensor of dtype {indices[d].dtype}")
    bshape = broadcast_shapes(*[tuple(indices[d].size) for d in positions])
    nb = len(bshape)
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    first = positions[0] if adjacent else 0
    plain = [d for d in range(len(x.size)) if indices[d] is None]
    expected = [x.size[d] for d in plain]
    expected[first:first] = list(bshape) if adjacent else []
    if not adjacent:
        expected = list(bshape) + expected
    if tuple(expected) != out_size:
        raise Unlowerable(f"index: unexpected result shape {list(out_size)} (expected {expected})")
    read_x = reader(x, val.dtype)
    index_loaders = {d: indices[d].loader() for d in positions}

    def body(ops, index):
        bidx = list(index[first:first + nb])
        rest = list(index[:first]) + list(index[first + nb:])
        x_index, k = [], 0
        for d in range(len(x.size)):
            if indices[d] is None:
                x_index.append(rest[k])
                k += 1
                continue
            t = indices[d]
            v = index_loaders[d](ops, broadcast_index(tuple(t.size), bshape, bidx))
            x_index.append(ops.indirect_indexing(v, x.size[d], True))
        return read_x(ops, x_index)

    return Lazy(out_size, val.dtype, val.device, body, 2 + cost_of(x, *[indices[d] for d in positions]),
                origins_of(node, x, *[indices[d] for d in positions]))


@lowering(aten.gather.default)
def lower_gather(g, node, x, dim, index, sparse_grad=False):
    if x.dtype.is_complex:
        raise Unlowerable("complex dtype")
    val = fake_val(node)
    out_size = shape_of(val)
    if numel(out_size) == 0:
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
