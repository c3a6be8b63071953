"""Decompositions: adaptive max pooling with indices (1d through ``adaptive_max_pool2d``, 2d, 3d).

Window i of a dim of length L covers [floor(i L / out), ceil((i + 1) L / out)). Each output gathers its
window's taps (padded to the widest window, masked), in ATen's scan order. ATen's CPU kernel keeps
``val > max || isnan(val)`` while scanning: the value is NaN if a tap is NaN (the index of the last
NaN), else the maximum (the index of its first tap); a window of -inf gives its first tap. The same
rule here with reductions over the taps: exact values and indices, ties and NaN included.
"""
from __future__ import annotations

import itertools
import math

import torch

from kiln.decomp.registry import decomposition

aten = torch.ops.aten


def _windows_1d(length: int, out: int) -> list[range]:
    return [range((i * length) // out, -((-(i + 1) * length) // out)) for i in range(out)]


def _tap_table(spatial: list[int], outs: list[int]):
    """(flat input index of each output's taps, valid mask): lists of shape (*outs, taps)."""
    windows = [_windows_1d(n, o) for n, o in zip(spatial, outs)]
    width = max(len(list(itertools.product(*[w[i] for w, i in zip(windows, pos)])))
                for pos in itertools.product(*[range(o) for o in outs]))
    strides = [math.prod(spatial[d + 1:]) for d in range(len(spatial))]
    index, valid = [], []
    for pos in itertools.product(*[range(o) for o in outs]):
        taps = [sum(c * s for c, s in zip(coords, strides))
                for coords in itertools.product(*[w[i] for w, i in zip(windows, pos)])]
        index.append(taps + [taps[0]] * (width - len(taps)))
        valid.append([True] * len(taps) + [False] * (width - len(taps)))
    return index, valid, width


def _adaptive_max(x, output_size, n):
    spatial = list(x.shape[x.dim() - n:])
    outs = [spatial[i] if o is None else o for i, o in enumerate(output_size)]
    if (not x.is_floating_point() or any(isinstance(s, torch.SymInt) for s in spatial + outs)
            or 0 in spatial or 0 in outs):
        return NotImplemented
    index, valid, width = _tap_table(spatial, outs)
    lead = list(x.shape[:x.dim() - n])
    index_t = torch.tensor(index, dtype=torch.int64, device=x.device)  # (prod(outs), taps)
    valid_t = torch.tensor(valid, dtype=torch.bool, device=x.device)
    flat = aten.reshape.default(x, lead + [-1])
    taps = aten.index.Tensor(flat, [None] * len(lead) + [index_t])  # (*lead, prod(outs), taps)
    taps = aten.where.self(valid_t, taps, aten.scalar_tensor.default(-math.inf, dtype=x.dtype, device=x.device))
    tap_ids = aten.arange.start_step(0, width, 1, dtype=torch.int64, device=x.device)
    value = aten.amax.default(taps, [-1], True)  # NaN if any tap is NaN
    is_nan = aten.isnan.default(taps)
    last_nan = aten.amax.default(aten.where.self(is_nan, tap_ids, aten.full_like.default(tap_ids, -1)), [-1], True)
    first_max = aten.amin.default(aten.where.self(aten.eq.Tensor(taps, value), tap_ids,
                                                  aten.full_like.default(tap_ids, width)), [-1], True)
    first_max = aten.where.self(aten.lt.Scalar(first_max, width), first_max, aten.zeros_like.default(first_max))
    chosen = aten.where.self(aten.ge.Scalar(last_nan, 0), last_nan, first_max)
    expanded = aten.expand.default(index_t, list(taps.shape))
    indices = aten.gather.default(expanded, -1, chosen)
    shape = lead + outs
    return aten.view.default(value, shape), aten.view.default(indices, shape)


@decomposition(aten.adaptive_max_pool2d.default)
def adaptive_max_pool2d(x, output_size):
    return _adaptive_max(x, list(output_size), 2)


@decomposition(aten.adaptive_max_pool3d.default)
def adaptive_max_pool3d(x, output_size):
    return _adaptive_max(x, list(output_size), 3)
