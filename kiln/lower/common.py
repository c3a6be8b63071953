"""Helpers shared by the lowering families: broadcasting, dtypes, building ``Lazy`` values."""
from __future__ import annotations

from typing import Callable, Sequence

import sympy
import torch

from kiln.loopir.sizes import checked_value, exact_value, is_symbolic, shape_of, size, strides_of
from kiln.loopir.nodes import Lazy, Stored, TensorValue
from kiln.lower.graph import fake_val
from kiln.lower.registry import Unlowerable

LOW_PRECISION = (torch.float16, torch.bfloat16)


def upcast(dtype: torch.dtype) -> torch.dtype:
    """The dtype math on ``dtype`` is done in: low-precision floats compute in float32, as ATen does."""
    return torch.float32 if dtype in LOW_PRECISION else dtype


def out_val(node) -> torch.Tensor:
    return fake_val(node)


def promoted(*args) -> torch.dtype:
    """ATen's result dtype of combining ``args`` (TensorValues or Python scalars), with its priority of
    dimensioned tensors over zero-dim tensors over Python scalars."""

    def meta(a):
        if isinstance(a, TensorValue):
            return torch.empty([1] * min(len(a.size), 1), dtype=a.dtype, device="meta")
        if isinstance(a, torch.SymInt):
            return 1
        if isinstance(a, torch.SymFloat):
            return 1.0
        if isinstance(a, sympy.Basic):  # a number computed from the size symbols: promotes as its Python kind
            return 1 if a.is_integer else 1.0
        return a

    items = [meta(a) for a in args]
    result = next((m for m in items if isinstance(m, torch.Tensor)), None)
    if result is None:
        return torch.result_type(torch.tensor(items[0]), items[1]) if len(items) > 1 else torch.tensor(items[0]).dtype
    for m in items:
        if m is result:
            continue
        dims = max(result.dim(), m.dim() if isinstance(m, torch.Tensor) else 0)
        result = torch.empty([1] * dims, dtype=torch.result_type(result, m), device="meta")
    return result.dtype


def broadcast_index(value_size: Sequence[int], out_size: Sequence[int], index: Sequence[sympy.Expr]) -> list:
    """The index into a value of ``value_size`` that broadcasting reads for output ``index``."""
    lead = len(out_size) - len(value_size)
    out = []
    for d, n in enumerate(value_size):
        out.append(sympy.Integer(0) if n == 1 and out_size[d + lead] != 1 else index[d + lead])
    return out


def value_loader(x, cdtype: torch.dtype, out_size) -> Callable:
    """A function (ops, index) -> value of ``x`` (TensorValue or scalar) as ``cdtype`` at output index."""
    if isinstance(x, TensorValue):
        load, size, dtype = x.loader(), tuple(x.size), x.dtype
        same = size == tuple(out_size)

        def read(ops, index):
            v = load(ops, index if same else broadcast_index(size, out_size, index))
            return v if dtype == cdtype else ops.to_dtype(v, cdtype)

        return read
    if isinstance(x, torch.Tensor):
        raise TypeError("real tensors do not reach lowerings")

    if isinstance(x, torch.SymInt):
        x = size(x)
    if is_symbolic(x):  # a number computed from the size symbols: computed by the wrapper (exact_value)
        x = exact_value(x, wrap=not cdtype.is_floating_point)

        def symbolic(ops, index):
            return ops.index_expr(x, cdtype)

        return symbolic

    def const(ops, index):
        return ops.constant(x, cdtype)

    return const


def cost_of(*args) -> int:
    return sum(a.cost if isinstance(a, Lazy) else 1 for a in args if isinstance(a, TensorValue))


def origins_of(node, *args) -> tuple:
    """The ops a ``Lazy`` built by ``node`` from ``args`` computes: those its ``Lazy`` inputs inline,
    then ``node``. Kernel names and headers list them (a realized view is the ops behind it)."""
    out = {}
    for a in args:
        if isinstance(a, Lazy):
            out.update(dict.fromkeys(a.origins))
    out[node] = None
    return tuple(out)


def make_pointwise(node, fn: Callable, inputs: Sequence, cdtype: torch.dtype | None = None,
                   out_dtype: torch.dtype | None = None) -> Lazy:
    """The ``Lazy`` value of ``fn(ops, *input values)``, inputs read as ``cdtype``, result as the node's dtype."""
    val = out_val(node)
    size = shape_of(val)
    out_dtype = out_dtype or val.dtype
    cdtype = cdtype or upcast(out_dtype)
    readers = [value_loader(x, cdtype, size) for x in inputs]

    def body(ops, index):
        result = fn(ops, *[r(ops, index) for r in readers])
        return result if result.dtype == out_dtype else ops.to_dtype(result, out_dtype)

    return Lazy(size, out_dtype, val.device, body, 1 + cost_of(*inputs), origins_of(node, *inputs))


def constant_value(node, value, checked: bool = False) -> Lazy:
    """The node's value filled with the Python scalar ``value`` (full, zeros of an empty result, ...).
    ``checked``: a symbolic value is checked to fit the dtype on each call, as eager's ``full`` (and the
    ``fill_`` it decomposes to) checks it; ``scalar_tensor``, which kiln's decompositions also make for
    ``n - x`` and ``where``, wraps as those ops do in eager."""
    val = fake_val(node)
    dtype = val.dtype
    if dtype.is_complex or isinstance(value, complex):
        raise Unlowerable("complex dtype")

    if isinstance(value, torch.SymInt):
        value = size(value)
    if is_symbolic(value):  # full(size, n) with n computed from the size symbols (checked_value)
        value = checked_value(value, dtype) if checked else exact_value(value, wrap=not dtype.is_floating_point)

        def body(ops, index):
            return ops.index_expr(value, dtype)
    else:
        def body(ops, index):
            return ops.constant(value, dtype)

    return Lazy(shape_of(val), dtype, val.device, body, 1, (node,))


def as_lazy(x: TensorValue) -> Lazy:
    if isinstance(x, Lazy):
        return x
    return Lazy(tuple(x.size), x.dtype, x.device, x.loader(), 1, ())


def stored_matches_meta(x, node_arg) -> bool:
    """True when a ``Stored`` value's layout is the one ATen's meta gave the FX value (views can follow meta)."""
    if not isinstance(x, Stored):
        return False
    val = fake_val(node_arg)
    return isinstance(val, torch.Tensor) and tuple(x.size) == shape_of(val) and tuple(x.stride) == strides_of(val)
