"""Lowerings of view ops. Views never copy.

A view of a ``Stored`` value whose layout is the one ATen's meta gave it is another ``Stored`` over
the same buffer, with the size, stride and offset the meta computed (so every view op, ``as_strided``
included, is exact). A view of a ``Lazy`` value reindexes: its body maps the view's index to the
base's index, one rule per op.
"""
from __future__ import annotations

import sympy
import torch

from kiln.loopir.sizes import lt, shape_of, size, strides_of
from kiln.loopir.index import FloorDiv, ModularIndexing
from kiln.loopir.nodes import Lazy, Stored
from kiln.loopir.nodes import is_dense
from kiln.lower.common import as_lazy, origins_of, stored_matches_meta
from kiln.lower.graph import fake_val
from kiln.lower.registry import Unlowerable, lowering

aten = torch.ops.aten


def _meta_view(x: Stored, base_node, node) -> Stored:
    base, val = fake_val(base_node), fake_val(node)
    offset = x.offset + (size(val.storage_offset()) - size(base.storage_offset()))
    return Stored(x.buffer, shape_of(val), strides_of(val), offset)


def _reindexed(x, node, reindex, args, kwargs) -> Lazy:
    """``x`` seen through a view op as a ``Lazy``: its body maps the view's index to ``x``'s index."""
    val = fake_val(node)
    lazy = as_lazy(x)
    mapping = reindex(node, tuple(x.size), shape_of(val), *args, **kwargs)
    inner = lazy.body

    def body(ops, index):
        return inner(ops, mapping(index))

    return Lazy(shape_of(val), x.dtype, x.device, body, lazy.cost, origins_of(node, x))


def view_lowering(*ops, reindex=None):
    """Register a view op: the meta path for ``Stored``; ``reindex(node, in_size, out_size, *args)``
    (a function from the view's index to the base's index) for ``Lazy``; without one, a ``Lazy`` base
    is realized first."""

    def register(fn_args):
        def lower(g, node, x, *args, **kwargs):
            if x.dtype.is_complex:
                raise Unlowerable("complex dtype")
            base_node = node.args[0]
            if stored_matches_meta(x, base_node):
                return _meta_view(x, base_node, node)
            if reindex is None:
                # realize the base with ATen's layout, then follow the meta
                g.current = base_node
                stored = g.realize(as_lazy(x))
                g.current = node
                if not stored_matches_meta(stored, base_node):
                    raise Unlowerable("view of a value whose layout differs from ATen's")
                return _meta_view(stored, base_node, node)
            out = _reindexed(x, node, reindex, args, kwargs)
            if node.target is aten.expand.default and _numel(out.size) > _numel(x.size) > 0:
                g.realize_as_view(out, lambda: _view_of_realized_base(g, x, base_node, node))
            return out

        lower.__name__ = f"lower_{fn_args}"
        for op in ops:
            lowering(op)(lower)
        return lower

    return register


def _view_of_realized_base(g, x, base_node, node) -> Stored | None:
    """``node``'s value as ATen has it: a view of ``x`` realized in ATen's layout (for a broadcast, a
    buffer of the base's size with stride-0 dims), or None when that layout is not dense (nothing is
    realized then)."""
    base = fake_val(base_node)
    if not (isinstance(base, torch.Tensor) and shape_of(base) == tuple(x.size)
            and is_dense(shape_of(base), strides_of(base))):
        return None
    current, g.current = g.current, base_node
    try:
        stored = g.realize(as_lazy(x))
    finally:
        g.current = current
    return _meta_view(stored, base_node, node) if stored_matches_meta(stored, base_node) else None


def _numel(size) -> int:
    """The element count of a static size; 0 when a dim is symbolic."""
    n = 1
    for s in size:
        if not isinstance(s, int):
            return 0
        n *= s
    return n


def _reshape_index(node, in_size, out_size, *args, **kwargs):
    out_strides = _row_major(out_size)
    in_strides = _row_major(in_size)

    def mapping(index):
        flat = sum((i * s for i, s in zip(index, out_strides)), sympy.Integer(0))
        return [ModularIndexing(flat, st, n) if d > 0 else FloorDiv(flat, st)
                for d, (st, n) in enumerate(zip(in_strides, in_size))]

    return mapping


def _row_major(size):
    out, acc = [], 1
    for n in reversed(size):
        out.append(acc)
        acc *= n
    return list(reversed(out))


def _permute_index(node, in_size, out_size, dims):
    dims = [d % len(in_size) for d in dims]

    def mapping(index):
        full = [None] * len(in_size)
        for i, d in enumerate(dims):
            full[d] = index[i]
        return full

    return mapping


def _expand_index(node, in_size, out_size, sizes, implicit=False):
    lead = len(out_size) - len(in_size)

    def mapping(index):
        return [sympy.Integer(0) if n == 1 and out_size[d + lead] != 1 else index[d + lead] for d, n in enumerate(in_size)]

    return mapping


def _slice_index(node, in_size, out_size, dim=0, start=None, end=None, step=1):
    dim = dim % len(in_size)
    n = in_size[dim]
    start = 0 if start is None else start
    start = start + n if lt(start, 0) else start  # (sizes.lt: static, or a guard for symbolic bounds)
    start = 0 if lt(start, 0) else (n if lt(n, start) else start)

    def mapping(index):
        out = list(index)
        out[dim] = start + index[dim] * step
        return out

    return mapping


def _select_index(node, in_size, out_size, dim, idx):
    dim = dim % len(in_size)
    idx = idx + in_size[dim] if lt(idx, 0) else idx

    def mapping(index):
        return list(index[:dim]) + [sympy.sympify(idx)] + list(index[dim:])

    return mapping


def _unsqueeze_index(node, in_size, out_size, dim):
    dim = dim % len(out_size)

    def mapping(index):
        return list(index[:dim]) + list(index[dim + 1:])

    return mapping


def _squeeze_index(node, in_size, out_size, *args):
    # squeezed dims are the size-1 input dims missing from the output; match greedily from the left
    keep, j = [], 0
    for d, n in enumerate(in_size):
        if j < len(out_size) and out_size[j] == n and not (n == 1 and _squeezed(node, d, len(in_size))):
            keep.append(j)
            j += 1
        else:
            keep.append(None)

    def mapping(index):
        return [sympy.Integer(0) if k is None else index[k] for k in keep]

    return mapping


def _squeezed(node, d, ndim) -> bool:
    if node.target is aten.squeeze.default:
        return True
    dims = node.args[1] if len(node.args) > 1 else ()
    dims = [dims] if isinstance(dims, int) else list(dims)
    return d in [x % ndim for x in dims]


def _identity_index(node, in_size, out_size, *args, **kwargs):
    return lambda index: list(index)


def _transpose_index(node, in_size, out_size, dim0, dim1):
    n = len(in_size)
    dims = list(range(n))
    if n:
        dims[dim0 % n], dims[dim1 % n] = dims[dim1 % n], dims[dim0 % n]
    return _permute_index(node, in_size, out_size, dims)


def _diagonal_index(node, in_size, out_size, offset=0, dim1=0, dim2=1):
    n = len(in_size)
    dim1, dim2 = dim1 % n, dim2 % n
    rest = [d for d in range(n) if d not in (dim1, dim2)]

    def mapping(index):
        full = [None] * n
        for i, d in enumerate(rest):
            full[d] = index[i]
        k = index[-1]
        full[dim1] = k + max(-offset, 0)
        full[dim2] = k + max(offset, 0)
        return full

    return mapping


def copy_lowering(*ops, reindex):
    """Register a ``*_copy`` op (the view op's result in a fresh dense tensor): a ``Lazy`` that reindexes."""

    def lower(g, node, x, *args, **kwargs):
        if x.dtype.is_complex:
            raise Unlowerable("complex dtype")
        return _reindexed(x, node, reindex, args, kwargs)

    for op in ops:
        lowering(op)(lower)
    return lower


view_lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default, reindex=_reshape_index)("view")
view_lowering(aten.permute.default, reindex=_permute_index)("permute")
view_lowering(aten.expand.default, reindex=_expand_index)("expand")
view_lowering(aten.slice.Tensor, reindex=_slice_index)("slice")
view_lowering(aten.select.int, reindex=_select_index)("select")
view_lowering(aten.unsqueeze.default, reindex=_unsqueeze_index)("unsqueeze")
view_lowering(aten.squeeze.dims, aten.squeeze.dim, aten.squeeze.default, reindex=_squeeze_index)("squeeze")
view_lowering(aten.alias.default, aten.detach.default, reindex=_identity_index)("alias")
view_lowering(aten.transpose.int, reindex=_transpose_index)("transpose")
view_lowering(aten.diagonal.default, reindex=_diagonal_index)("diagonal")
view_lowering(aten.as_strided.default, aten.unfold.default)("strided_view")

copy_lowering(aten.alias_copy.default, aten.detach_copy.default, reindex=_identity_index)
copy_lowering(aten.permute_copy.default, reindex=_permute_index)
copy_lowering(aten.transpose_copy.int, reindex=_transpose_index)
copy_lowering(aten.expand_copy.default, reindex=_expand_index)
copy_lowering(aten.diagonal_copy.default, reindex=_diagonal_index)
copy_lowering(aten.unsqueeze_copy.default, reindex=_unsqueeze_index)
copy_lowering(aten.view_copy.default, reindex=_reshape_index)
copy_lowering(aten.slice_copy.Tensor, reindex=_slice_index)
copy_lowering(aten.select_copy.int, reindex=_select_index)
