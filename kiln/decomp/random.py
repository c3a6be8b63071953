"""Decompositions: dropout and the *_like random makers, on top of core RNG ops.

Random ops draw from the same generator in the same order as eager's kernels (checked in tests), so
seeded runs give eager's numbers.
"""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import in_layout_of

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


def _random_like(make, x, dtype, device, memory_format):
    """``make(sizes, dtype, device)`` shaped and laid out as eager's ``*_like``: its kernel fills the new
    tensor in memory order, so a transposed ``x`` gets the numbers of the memory-order shape permuted."""
    if memory_format not in (None, torch.preserve_format, torch.contiguous_format):
        return NotImplemented
    dtype, device = dtype or x.dtype, device or x.device
    if memory_format is torch.contiguous_format:
        return make(list(x.shape), dtype=dtype, device=device)
    return in_layout_of(x, lambda sizes: make(sizes, dtype=dtype, device=device))


@decomposition(aten.rand_like.default)
def rand_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _random_like(aten.rand.default, x, dtype, device, memory_format)


@decomposition(aten.randn_like.default)
def randn_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    if memory_format is not torch.contiguous_format and not x.is_contiguous():
        # eager's normal_ takes another path into a non-contiguous tensor (on the CPU: one number at a
        # time instead of 16 at once, which pairs them differently): the op stays ATen's
        return NotImplemented
    return _random_like(aten.randn.default, x, dtype, device, memory_format)
