"""Decompositions: factory ops computed from an index (``linspace``, ``logspace``, ``eye``).

Each is a pointwise function of ``arange(steps)``, so it becomes one generated loop (and fuses with its
consumers) instead of an ATen call. Integer dtypes keep ATen's kernel: its CPU linspace steps in double
and fills 8-lane vector blocks from ``start + step * idx`` rounded to the integer type once per block,
which a per-element formula does not reproduce exactly.
"""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import to_dtype

aten = torch.ops.aten


def _factory_dtype(dtype, *values) -> torch.dtype:
    if dtype is not None:
        return dtype
    if any(isinstance(v, complex) or (isinstance(v, torch.Tensor) and v.is_complex()) for v in values):
        return torch.complex64
    return torch.get_default_dtype()


def _endpoint(value, dtype, device) -> torch.Tensor:
    """``value`` (a Python number or a 0-dim tensor) as a 0-dim tensor of ``dtype``: ATen's ``Scalar.to<T>()``."""
    if isinstance(value, torch.Tensor):
        return to_dtype(aten.view.default(value, []) if value.dim() else value, dtype)
    return aten.scalar_tensor.default(value, dtype=dtype, device=device)


def _device_of(device, *values):
    for v in values:
        if isinstance(v, torch.Tensor):
            return v.device if device is None else device
    return torch.device("cpu") if device is None else device


def _linspace_values(start, end, steps, dtype, device) -> torch.Tensor | None:
    """ATen's linspace in ``dtype`` (a floating dtype): ``start + step * i`` for the first half,
    ``end - step * (steps - 1 - i)`` for the second, with ``step = (end - start) / (steps - 1)``."""
    if steps <= 1:  # ATen fills the one element with ``start``
        s = _endpoint(start, dtype, device)
        return aten.clone.default(aten.expand.default(s, [1])) if steps == 1 else \
            aten.full.default([0], 0, dtype=dtype, device=device)
    s, e = _endpoint(start, dtype, device), _endpoint(end, dtype, device)
    step = aten.div.Scalar(aten.sub.Tensor(e, s), steps - 1)
    idx = aten.arange.start_step(0, steps, 1, dtype=torch.int64, device=device)
    first = aten.add.Tensor(s, aten.mul.Tensor(step, to_dtype(idx, dtype)))
    back = to_dtype(aten.rsub.Scalar(idx, steps - 1), dtype)
    second = aten.sub.Tensor(e, aten.mul.Tensor(step, back))
    return aten.where.self(aten.lt.Scalar(idx, steps // 2), first, second)


def _supported(dtype) -> bool:
    return dtype.is_floating_point


@decomposition(aten.linspace.default, aten.linspace.Tensor_Tensor, aten.linspace.Tensor_Scalar,
               aten.linspace.Scalar_Tensor)
def linspace(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = _factory_dtype(dtype, start, end)
    if not _supported(dtype):
        return NotImplemented
    device = _device_of(device, start, end)
    return _linspace_values(start, end, steps, dtype, device)


@decomposition(aten.logspace.default, aten.logspace.Tensor_Tensor, aten.logspace.Tensor_Scalar,
               aten.logspace.Scalar_Tensor)
def logspace(start, end, steps, base=10.0, *, dtype=None, layout=None, device=None, pin_memory=None):
    """``base ** linspace``: the exponent in ``dtype`` as ATen steps it, the power in double (ATen's
    ``std::pow(double base, exponent)``), rounded to ``dtype`` once."""
    dtype = _factory_dtype(dtype, start, end)
    if not _supported(dtype):
        return NotImplemented
    device = _device_of(device, start, end)
    exponent = _linspace_values(start, end, steps, dtype, device)
    return to_dtype(aten.pow.Scalar(float(base), to_dtype(exponent, torch.float64)), dtype)


@decomposition(aten.eye.default, aten.eye.m)
def eye(n, m=None, *, dtype=None, layout=None, device=None, pin_memory=None):
    m = n if m is None else m
    dtype = dtype or torch.get_default_dtype()
    if dtype.is_complex:
        return NotImplemented
    device = torch.device("cpu") if device is None else device
    rows = aten.unsqueeze.default(aten.arange.start_step(0, n, 1, dtype=torch.int64, device=device), 1)
    cols = aten.arange.start_step(0, m, 1, dtype=torch.int64, device=device)
    return to_dtype(aten.eq.Tensor(rows, cols), dtype)
