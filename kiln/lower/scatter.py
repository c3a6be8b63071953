"""Lowerings of the scatter family: ``scatter`` (src / value / reduce), ``scatter_add``,
``scatter_reduce`` and ``index_put`` (which ``index_add``, ``index_copy``, ``index_fill`` and
embedding's backward decompose to).

Each result is a fresh copy of ``self`` (a pointwise buffer) that a ``ScatterBuffer`` (``loopir/scatter.py``)
then updates over the source's (or index's) iteration space. ``scatter_reduce`` with
``include_self=False`` first stores the reduction's identity at every scattered position (as ATen does);
``mean`` also scatters a count (ones into a buffer of ones or zeros), and divides (floor division for
integers, as ATen), with a count of 0 read as 1.

Indices: ``scatter`` indices must be in ``[0, size)`` (no negative ones); ``index_put`` counts negative
indices from the end. Out-of-range values raise like eager on CPU (the kernel sets the library's error
flag, the wrapper raises IndexError after it); Triton clamps them into the buffer.

On CUDA, scatters combine with atomics, so ``mul`` and floating ``max``/``min`` (no exact atomic with
ATen's NaN rule), atomics of dtypes Triton lacks, and, under ``torch.use_deterministic_algorithms(True)``,
``store`` and floating ``add`` (whose order would vary) stay ATen kernels.
"""
from __future__ import annotations

import torch

from kiln.loopir.nodes import Lazy, Stored, TensorValue, numel
from kiln.loopir.ops import reduction_identity
from kiln.loopir.scatter import Scatter, ScatterBuffer
from kiln.loopir.sizes import broadcast_shapes
from kiln.lower.common import origins_of, value_loader
from kiln.lower.graph import fake_val
from kiln.lower.indexing import advanced_position, index_plan
from kiln.lower.registry import Unlowerable, lowering
from kiln.lower.shape import reader

aten = torch.ops.aten

_INDEX_DTYPES = (torch.int64, torch.int32)
_REDUCE_MODES = {"sum": "add", "add": "add", "prod": "mul", "multiply": "mul", "amax": "max", "amin": "min"}
# dtypes Triton has atomics for, per mode ("store" is a plain store: every dtype)
_CUDA_ATOMIC_DTYPES = {
    "add": (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64),
    "max": (torch.int32, torch.int64), "min": (torch.int32, torch.int64),
}


def _check_target(x, mode: str) -> None:
    if x.dtype.is_complex:
        raise Unlowerable("complex dtype")
    if x.device.type != "cuda":
        return
    if mode != "store" and x.dtype not in _CUDA_ATOMIC_DTYPES.get(mode, ()):
        raise Unlowerable(f"no exact GPU atomic for scatter {mode} on {x.dtype}")
    if torch.are_deterministic_algorithms_enabled() and (mode == "store" or x.dtype.is_floating_point):
        raise Unlowerable("torch.use_deterministic_algorithms(True): ATen's deterministic scatter kernel")


def fresh_copy(g, node, x, dtype) -> Stored:
    """``x`` copied into a new buffer (the layout ATen gives the node's result when dense)."""
    lazy = Lazy(tuple(x.size), dtype, x.device, reader(x, dtype), 1, origins_of(node, x))
    return g.realize(lazy)


def add_scatter(g, node, target: Stored, ranges, body, mode: str, parallel_dims) -> None:
    """Append the update of ``target``'s buffer by ``body`` over ``ranges`` (kiln/loopir/scatter.py)."""
    buf = target.buffer
    data = Scatter(tuple(ranges), body, mode, buf.dtype, tuple(parallel_dims))
    g.nodes.append(ScatterBuffer(buf.name, buf.dtype, buf.device, buf.size, buf.stride, (node,), data=data,
                                 view=buf.view, target_stride=tuple(target.stride), target_offset=target.offset))


# ------------------------------------------------------------------------------------------- scatter


def _scatter_body(x, dim, index, src, dtype):
    """(ops, i) -> (position in ``x``, value): ``x[..., index[i], ...] <- src[i]`` along ``dim``."""
    load_index = index.loader()
    # a source tensor is read at the index's position (it may be larger than the index)
    load_src = reader(src, dtype) if isinstance(src, TensorValue) else value_loader(src, dtype, ())

    def body(ops, i):
        where = ops.indirect_indexing(load_index(ops, i), x.size[dim], False)
        position = list(i)
        position[dim] = where
        return position, load_src(ops, i)

    return body


def _lower_scatter(g, node, x, dim, index, src, mode, include_self=True):
    if len(x.size) == 0 or len(index.size) != len(x.size):
        raise Unlowerable("scatter of a 0-dim tensor")
    if index.dtype not in _INDEX_DTYPES:
        raise Unlowerable(f"index of dtype {index.dtype}")
    _check_target(x, mode)
    dtype = fake_val(node).dtype
    dim = dim % len(x.size)
    out = fresh_copy(g, node, x, dtype)
    if numel(index.size) == 0:
        return out
    parallel = [d for d in range(len(x.size)) if d != dim]
    if not include_self:
        ident = reduction_identity({"add": "sum", "mul": "prod", "max": "max", "min": "min"}[mode], dtype)
        add_scatter(g, node, out, index.size, _scatter_body(x, dim, index, ident, dtype), "store", parallel)
    add_scatter(g, node, out, index.size, _scatter_body(x, dim, index, src, dtype), mode, parallel)
    return out


@lowering(aten.scatter.src, aten.scatter.value)
def lower_scatter(g, node, x, dim, index, src):
    return _lower_scatter(g, node, x, dim, index, src, "store")


@lowering(aten.scatter.reduce, aten.scatter.value_reduce)
def lower_scatter_reduce_legacy(g, node, x, dim, index, src, *, reduce):
    if reduce not in ("add", "multiply"):
        raise Unlowerable(f"scatter reduce={reduce!r}")
    return _lower_scatter(g, node, x, dim, index, src, _REDUCE_MODES[reduce])


@lowering(aten.scatter_add.default)
def lower_scatter_add(g, node, x, dim, index, src):
    return _lower_scatter(g, node, x, dim, index, src, "add")


@lowering(aten.scatter_reduce.two)
def lower_scatter_reduce(g, node, x, dim, index, src, reduce, *, include_self=True):
    if reduce == "mean":
        return _scatter_mean(g, node, x, dim, index, src, include_self)
    if reduce not in _REDUCE_MODES:
        raise Unlowerable(f"scatter_reduce reduce={reduce!r}")
    return _lower_scatter(g, node, x, dim, index, src, _REDUCE_MODES[reduce], include_self)


def _scatter_mean(g, node, x, dim, index, src, include_self):
    """ATen's mean: the sum, divided by 1 + the number of values (without ``self``: the number, or 1
    where none), by floor division for integers."""
    total = _lower_scatter(g, node, x, dim, index, src, "add", include_self)
    dtype = total.dtype
    ones = Lazy(tuple(x.size), dtype, x.device, lambda ops, i: ops.constant(1 if include_self else 0, dtype), 1, ())
    count = g.realize(Lazy(ones.size, dtype, x.device, ones.body, 1, (node,)))
    if numel(index.size) != 0:
        add_scatter(g, node, count, index.size, _scatter_body(x, dim % len(x.size), index, 1, dtype), "add",
                    [d for d in range(len(x.size)) if d != dim % len(x.size)])
    load_total, load_count = total.loader(), count.loader()
    floating = dtype.is_floating_point
    cdtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype

    def body(ops, i):
        n = load_count(ops, i)
        n = ops.where(ops.eq(n, ops.constant(0, dtype)), ops.constant(1, dtype), n)
        s = load_total(ops, i)
        if cdtype != dtype:
            s, n = ops.to_dtype(s, cdtype), ops.to_dtype(n, cdtype)
        q = ops.truediv(s, n) if floating else ops.floordiv(s, n)
        return q if cdtype == dtype else ops.to_dtype(q, dtype)

    return Lazy(tuple(x.size), dtype, x.device, body, 4, (node,))


# ----------------------------------------------------------------------------------------- index_put


@lowering(aten.index_put.default)
def lower_index_put(g, node, x, indices, values, accumulate=False):
    mode = "add" if accumulate else "store"
    if len(x.size) == 0:
        raise Unlowerable("index_put into a 0-dim tensor")
    _check_target(x, mode)
    dtype = fake_val(node).dtype
    indices, _, bshape, first, sizes = index_plan(x, indices, "index_put")
    nb = len(bshape)
    if len(values.size) > len(sizes) or tuple(broadcast_shapes(tuple(values.size), sizes)) != sizes:
        raise Unlowerable(f"index_put: values of size {list(values.size)} do not broadcast to {list(sizes)}")
    out = fresh_copy(g, node, x, dtype)
    if numel(sizes) == 0:
        return out
    loaders = {d: t.loader() for d, t in enumerate(indices) if t is not None}
    load_values = value_loader(values, dtype, sizes)

    def body(ops, i):
        return advanced_position(ops, i, x.size, indices, loaders, first, bshape), load_values(ops, i)

    plain_loops = [d for d in range(len(sizes)) if not first <= d < first + nb]
    add_scatter(g, node, out, sizes, body, mode, plain_loops)
    return out
