"""Decompositions: sliding-window data movement -- ``im2col`` (``F.unfold``) as pad + unfold views +
one copy, and max pooling's backward as a scatter-add of the output gradient to the saved indices
(2-D pooling with static sizes is left whole: ``lower/pool_backward.py`` lowers it as a gather).
"""
from __future__ import annotations

import torch

from kiln.decomp.pooling import _windows
from kiln.decomp.registry import decomposition
from kiln.fake.symbolic_ops import pool_tuple

aten = torch.ops.aten


@decomposition(aten.im2col.default)
def im2col(x, kernel_size, dilation, padding, stride):
    """(N, C, H, W) -> (N, C * kh * kw, L): every window's taps, channel-major, windows row-major."""
    if x.dim() not in (3, 4):
        return NotImplemented
    kernel, dilation, padding, stride = (pool_tuple(v, 2) for v in (kernel_size, dilation, padding, stride))
    windows, outs = _windows(x, 2, kernel, stride, padding, dilation, False, 0.0)  # (*lead, C, oh, ow, kh, kw)
    lead = x.dim() - 3
    order = list(range(lead)) + [lead, lead + 3, lead + 4, lead + 1, lead + 2]
    moved = aten.permute.default(windows, order)  # (*lead, C, kh, kw, oh, ow)
    shape = list(x.shape[:lead]) + [x.shape[lead] * kernel[0] * kernel[1], outs[0] * outs[1]]
    return aten.reshape.default(aten.clone.default(moved, memory_format=torch.contiguous_format), shape)


def _max_pool_backward(grad, x, indices, n):
    """The gradient of each output added at its input position (``indices``, flat per plane), as ATen's
    CPU kernel does; overlapping windows that picked one position add up."""
    if grad.is_complex() or x.dim() < n + 1:
        return NotImplemented
    lead = list(x.shape[:x.dim() - n])
    flat_grad = aten.reshape.default(grad, lead + [-1])
    flat_idx = aten.reshape.default(indices, lead + [-1])
    plane = 1
    for s in x.shape[x.dim() - n:]:
        plane *= s
    zeros = aten.full.default(lead + [plane], 0, dtype=grad.dtype, device=grad.device)
    return aten.view.default(aten.scatter_add.default(zeros, len(lead), flat_idx, flat_grad), list(x.shape))


MAX_GATHER_TAPS = 16  # windows overlapping one position, above which the scatter form reads less


def max_pool2d_gather_taps(x_size, grad_size, kernel_size, stride, padding, dilation, dtype):
    """(taps per dim, stride, padding) when 2-D max pooling's backward is lowered as a gather
    (``lower/pool_backward.py``): static sizes, a real dtype, dilation 1 and at most MAX_GATHER_TAPS
    windows over one position; else None (the scatter-add decomposition below)."""
    if dtype.is_complex or len(x_size) not in (3, 4) or len(grad_size) != len(x_size):
        return None
    if not all(isinstance(v, int) for v in tuple(x_size[-2:]) + tuple(grad_size[-2:])):
        return None
    kernel = pool_tuple(kernel_size, 2)
    stride = pool_tuple(stride, 2) if stride else kernel
    padding, dilation = pool_tuple(padding, 2), pool_tuple(dilation, 2)
    if tuple(dilation) != (1, 1):
        return None
    taps = [-(-kernel[i] // stride[i]) for i in range(2)]
    if taps[0] * taps[1] > MAX_GATHER_TAPS:
        return None
    return taps, list(stride), list(padding)


@decomposition(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    if max_pool2d_gather_taps(tuple(x.shape), tuple(grad.shape), kernel_size, stride, padding, dilation,
                              grad.dtype) is not None:
        return NotImplemented  # lowered as a gather (lower/pool_backward.py)
    return _max_pool_backward(grad, x, indices, 2)


@decomposition(aten.max_pool3d_with_indices_backward.default)
def max_pool3d_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _max_pool_backward(grad, x, indices, 3)
