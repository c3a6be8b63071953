"""Decomposition: ``histc`` as ATen's CPU kernel computes it (histogramdd with linear bins): each
element in [lo, hi] goes to bin ``trunc((x - lo) * bins / (hi - lo))`` (the last bin keeps its right
edge), counted with a scatter-add of ones into ``bins + 1`` slots whose last collects what falls
outside (NaN included) and is dropped.

With ``min == max`` the range is the data's, and eager raises where that range is not finite (a NaN or
an infinity in the data); the graph has no way to raise on a value yet, so that case stays ATen's
kernel (``data_range`` below computes it, for when it can).
"""
from __future__ import annotations

import math
import struct

import torch

from kiln.decomp.registry import decomposition

aten = torch.ops.aten


def _round_to(value: float, dtype) -> float:
    if dtype == torch.float32:
        return struct.unpack("f", struct.pack("f", value))[0]
    return value


def data_range(x):
    """(lo, hi) as 0-dim tensors: the data's min and max, each moved by 1 where they are equal."""
    flat = aten.reshape.default(x, [-1])
    lo, hi = aten.amin.default(flat, [0]), aten.amax.default(flat, [0])
    same = aten.eq.Tensor(lo, hi)
    return (aten.where.self(same, aten.sub.Scalar(lo, 1), lo), aten.where.self(same, aten.add.Scalar(hi, 1), hi))


@decomposition(aten.histc.default)
def histc(x, bins=100, min=0, max=0):
    if x.dtype not in (torch.float32, torch.float64) or bins <= 0 or x.numel() == 0 \
            or any(isinstance(s, torch.SymInt) for s in x.shape):
        return NotImplemented
    flat = aten.reshape.default(x, [-1])
    if min == max or min > max or not math.isfinite(min) or not math.isfinite(max):
        return NotImplemented  # the data's range (eager raises where it is not finite), or ATen rejects it
    lo, hi = _round_to(float(min), x.dtype), _round_to(float(max), x.dtype)
    width = _round_to(hi - lo, x.dtype)
    scaled = aten.div.Scalar(aten.mul.Scalar(aten.sub.Scalar(flat, lo), bins), width)
    inside = aten.logical_and.default(aten.ge.Scalar(flat, lo), aten.le.Scalar(flat, hi))
    position = aten._to_copy.default(aten.trunc.default(scaled), dtype=torch.int64)
    position = aten.clamp.default(position, 0, bins - 1)  # x == hi: the last bin (trunc gives bins)
    slot = aten.where.self(inside, position, aten.scalar_tensor.default(bins, dtype=torch.int64, device=x.device))
    ones = aten.full.default([flat.shape[0]], 1, dtype=x.dtype, device=x.device)
    counts = aten.scatter_add.default(aten.full.default([bins + 1], 0, dtype=x.dtype, device=x.device), 0, slot, ones)
    return aten.slice.Tensor(counts, 0, 0, bins)
