"""Lowerings of factories (full, arange, scalar_tensor, empty)."""
from __future__ import annotations

import torch

from kiln.loopir.sizes import exact_value, is_symbolic, shape_of, size, strides_of
from kiln.loopir.nodes import Lazy
from kiln.lower.common import constant_value
from kiln.lower.registry import Unlowerable, lowering

aten = torch.ops.aten


@lowering(aten.full.default)
def lower_full(g, node, size, fill_value, **kwargs):
    return constant_value(node, fill_value, checked=True)


@lowering(aten.scalar_tensor.default)
def lower_scalar_tensor(g, node, value, **kwargs):
    return constant_value(node, value)


@lowering(aten.empty_strided.default, aten.empty.memory_format)
def lower_empty(g, node, *args, **kwargs):
    # contents are unspecified; zeros are as good as any and keep the output deterministic
    return constant_value(node, 0)


@lowering(aten.arange.start_step)
def lower_arange(g, node, start, end, step=1, **kwargs):
    val = node.meta["val"]
    dtype = val.dtype
    if dtype.is_complex:
        raise Unlowerable("complex dtype")

    start, step = exact_value(size(start)), exact_value(size(step))  # ints, floats or size expressions
    # (arange checks its bounds in eager: a value beyond int64 is refused, not wrapped)

    def scalar(ops, v, as_float):
        if is_symbolic(v):
            v = ops.index_expr(v, torch.int64)
            return ops.to_dtype(v, torch.float64) if as_float else v
        return ops.constant(float(v), torch.float64) if as_float else ops.constant(int(v), torch.int64)

    def body(ops, index):
        i = ops.index_expr(index[0], torch.int64)
        if dtype.is_floating_point:
            v = ops.add(scalar(ops, start, True), ops.mul(ops.to_dtype(i, torch.float64), scalar(ops, step, True)))
            return ops.to_dtype(v, dtype)
        v = ops.add(scalar(ops, start, False), ops.mul(i, scalar(ops, step, False)))
        return v if dtype == torch.int64 else ops.to_dtype(v, dtype)

    return Lazy(shape_of(val), dtype, val.device, body, 2, (node,))
