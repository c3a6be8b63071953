"""Decompositions: dropout and the *_like random makers, on top of core RNG ops.

Random ops draw from the same generator in the same order as eager's kernels (checked in tests), so
seeded runs give eager's numbers.
"""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition

aten = torch.ops.aten


@decomposition(aten.native_dropout.default)
def native_dropout(x, p, train):
    if train is False:
        return aten.clone.default(x), aten.full.default(list(x.shape), True, dtype=torch.bool, device=x.device)
    if p == 1:
        return aten.mul.Scalar(x, 0), aten.full.default(list(x.shape), False, dtype=torch.bool, device=x.device)
    if not x.is_floating_point() or x.device.type != "cpu":
        # CUDA's dropout kernel draws its mask in a pattern of its own (not bernoulli_'s): kept whole,
        # it runs as an ATen call with eager's random numbers
        return NotImplemented
    mask = aten.bernoulli.p(aten.empty_like.default(x), 1 - p)
    out = aten.mul.Scalar(aten.mul.Tensor(x, mask), 1.0 / (1 - p))
    return out, aten.ne.Scalar(mask, 0)


@decomposition(aten.rand_like.default)
def rand_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return aten.rand.default(list(x.shape), dtype=dtype or x.dtype, device=device or x.device)


@decomposition(aten.randn_like.default)
def randn_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return aten.randn.default(list(x.shape), dtype=dtype or x.dtype, device=device or x.device)
