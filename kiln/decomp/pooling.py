"""Decompositions: max/avg pooling over windows (``unfold`` views + reductions), adaptive average."""
from __future__ import annotations

import itertools
import math

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import to_dtype, upcast
from kiln.fake.symbolic_ops import pool_out_size, pool_tuple

aten = torch.ops.aten


def _windows(x, n, kernel, stride, padding, dilation, ceil_mode, pad_value):
    """x padded and unfolded: shape (*batch, *out_sizes, *kernel) plus the out sizes."""
    pads, outs = [], []
    for i in range(n):
        dim = x.dim() - n + i
        o = pool_out_size(x.shape[dim], kernel[i], stride[i], padding[i], dilation[i], ceil_mode)
        needed = (o - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1
        extra = needed - x.shape[dim] - padding[i]  # how far the last window reads past the end
        if not ceil_mode and padding[i] == 0:
            after = 0  # (o - 1) * s + span <= length: never past the end (no guard on symbolic sizes)
        elif not ceil_mode and isinstance(extra, torch.SymInt):
            after = padding[i]  # extra <= padding, and padding p gives the same o windows: no guard
        else:
            after = max(extra, 0)
        pads.append((padding[i], after))
        outs.append(o)
    flat_pad = [v for before, after in reversed(pads) for v in (before, after)]
    xp = aten.constant_pad_nd.default(x, flat_pad, pad_value) if any(flat_pad) else x
    for i in range(n):
        dim = x.dim() - n + i
        span = dilation[i] * (kernel[i] - 1) + 1
        xp = aten.unfold.default(xp, dim, span, stride[i])
        if dilation[i] > 1:
            xp = aten.slice.Tensor(xp, -1, 0, span, dilation[i])
        xp = aten.slice.Tensor(xp, dim, 0, outs[i])
    return xp, outs


# windows of at most this many elements pool as a pointwise maximum over their taps (no reduction)
MAX_POOL_TAPS = 25
# windows of at most this many elements get ATen's indices as a pointwise chain (3x3x3 and 7x7 included)
MAX_INDEX_TAPS = 64


def _taps(windows, kernel):
    """The taps of each window in order (flat over the window's dims): strided views of the padded input,
    shaped (*batch, *outs)."""
    first_window_dim = windows.dim() - len(kernel)  # (*batch, *outs, *kernel)
    for index in itertools.product(*(range(k) for k in kernel)):
        tap = windows
        for i in index:  # each select drops the first remaining window dim
            tap = aten.select.int(tap, first_window_dim, i)
        yield tap


def _max_over_taps(windows, kernel):
    """The maximum of each window as a chain of ``maximum`` over its taps: a pointwise value that fuses
    with what reads it (instead of a window copy and a reduction). ``maximum`` propagates NaN like
    ATen's pooling kernels."""
    out = None
    for tap in _taps(windows, kernel):
        out = tap if out is None else aten.maximum.default(out, tap)
    return out


def _window_starts(outs, stride, padding, device):
    """Per pooled dim: the input position where each window starts (negative in the padding), shaped to
    broadcast over the output's pooled dims."""
    n = len(outs)
    starts = []
    for i in range(n):
        start = aten.arange.start_step(0, outs[i], 1, dtype=torch.int64, device=device)
        start = aten.sub.Scalar(aten.mul.Scalar(start, stride[i]), padding[i])
        starts.append(aten.view.default(start, [outs[i]] + [1] * (n - 1 - i)))
    return starts


def _first_tap_inside(kernel, starts, padding, dilation, device):
    """Per output position: the flat index (over the window's dims) of its window's first tap inside
    the input (the taps before it read padding)."""
    first_inside = None
    for i, start in enumerate(starts):
        if padding[i] == 0:
            continue
        before = aten.clamp_min.default(aten.neg.default(start), 0)  # taps of this dim left of the input
        skip = aten.div.Tensor_mode(aten.add.Scalar(before, dilation[i] - 1), dilation[i], rounding_mode="floor")
        skip = aten.mul.Scalar(skip, math.prod(kernel[i + 1:]))
        first_inside = skip if first_inside is None else aten.add.Tensor(first_inside, skip)
    if first_inside is None:
        first_inside = aten.scalar_tensor.default(0, dtype=torch.int64, device=device)
    return first_inside


def _argmax_over_taps(windows, kernel, first_inside, device):
    """Which tap of each window (flat over the window's dims) ATen's pooling kernels pick: among the taps
    inside the input, in order, each one greater than the maximum so far, or NaN, takes over (so the
    first maximum, or the last NaN); where none does (every value -inf), the window's first tap inside
    the input. A pointwise chain over the taps, like the values: it fuses with them and is written in
    the result's layout (an ``argmax`` reduction wrote its buffer channels-first under a channels-last
    input: 0.54 ms of a ResNet-18 training step on the H100, its reads strided by the channel count).
    Padding taps are -inf and never take over."""
    best = arg = None
    for k, tap in enumerate(_taps(windows, kernel)):
        if best is None:  # against a maximum of -inf so far: any value but -inf (NaN too) takes over
            take = aten.ne.Scalar(tap, float("-inf"))
            best, arg = tap, aten.where.self(take, aten.scalar_tensor.default(0, dtype=torch.int64, device=device),
                                             first_inside)
            continue
        take = aten.logical_or.default(aten.gt.Tensor(tap, best), aten.isnan.default(tap))
        best = aten.where.self(take, tap, best)
        arg = aten.where.self(take, aten.scalar_tensor.default(k, dtype=torch.int64, device=device), arg)
    return arg


def _pool_memory_format(x):
    """The layout eager's pooling kernels give their results: ATen's ``suggest_memory_format`` of the
    input (channels-last when a 4-D input's strides order its dims N, H, W, C)."""
    if x.dim() != 4 or x.stride()[1] == 0:
        return torch.contiguous_format
    smallest = 0
    for d in (1, 3, 2, 0):
        if x.shape[d] == 0 or x.stride()[d] < smallest or (d == 0 and smallest == x.stride()[1]):
            return torch.contiguous_format
        smallest = x.stride()[d] * x.shape[d]  # sizes are > 0 here: a size-1 dim keeps its stride
    return torch.channels_last


def _max_pool(x, n, kernel_size, stride, padding, dilation, ceil_mode):
    if not x.is_floating_point() or x.numel() == 0:
        return NotImplemented
    kernel = pool_tuple(kernel_size, n)
    stride = pool_tuple(stride, n) if stride else kernel
    padding, dilation = pool_tuple(padding, n), pool_tuple(dilation, n)
    windows, outs = _windows(x, n, kernel, stride, padding, dilation, ceil_mode, float("-inf"))
    batch = list(windows.shape[: windows.dim() - 2 * n])
    flat = aten.reshape.default(windows, batch + outs + [-1])
    taps = math.prod(kernel)
    values = _max_over_taps(windows, kernel) if taps <= MAX_POOL_TAPS else aten.amax.default(flat, [-1])
    starts = _window_starts(outs, stride, padding, x.device)
    first_inside = _first_tap_inside(kernel, starts, padding, dilation, x.device)
    if taps <= MAX_INDEX_TAPS:  # (dropped from the graph when only the values are read)
        arg = _argmax_over_taps(windows, kernel, first_inside, x.device)
    else:  # an argmax reduction: as ATen, except with two NaNs in a window (it takes the first, ATen the last)
        arg = aten.where.self(aten.eq.Scalar(values, float("-inf")), first_inside, aten.argmax.default(flat, -1))
    # the input position of each window's maximum, flattened over the pooled dims
    index = None
    rest = arg
    for i in reversed(range(n)):
        within = aten.remainder.Scalar(rest, kernel[i])
        rest = aten.div.Tensor_mode(rest, kernel[i], rounding_mode="floor")
        pos = aten.add.Tensor(starts[i], aten.mul.Scalar(within, dilation[i]))
        stride_in = 1
        for j in range(i + 1, n):
            stride_in *= x.shape[x.dim() - n + j]
        term = aten.mul.Scalar(pos, stride_in)
        index = term if index is None else aten.add.Tensor(index, term)
    # eager's kernels allocate both results in the input's suggested memory format (a copy-free clone
    # where they have it; without it the tap chain would follow any input layout)
    fmt = _pool_memory_format(x)
    if n == 2 and fmt == torch.channels_last and x.device.type == "cuda":
        # ATen's channels-last CUDA kernel starts every window's index at input position 0, not at its
        # first tap inside the input: a window of only -inf keeps 0 (its other rules are the same)
        index = aten.where.self(aten.eq.Scalar(values, float("-inf")),
                                aten.scalar_tensor.default(0, dtype=torch.int64, device=x.device), index)
    return aten.clone.default(values, memory_format=fmt), aten.clone.default(index, memory_format=fmt)


@decomposition(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, 2, kernel_size, stride, padding, dilation, ceil_mode)


@decomposition(aten.max_pool3d_with_indices.default)
def max_pool3d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, 3, kernel_size, stride, padding, dilation, ceil_mode)


@decomposition(aten.max_pool2d.default)
def max_pool2d(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    out = _max_pool(x, 2, kernel_size, stride, padding, dilation, ceil_mode)
    return out if out is NotImplemented else out[0]


def _divisors(length, k, s, p, out, count_include_pad):
    values = []
    for o in range(out):
        start = o * s - p
        end = min(start + k, length + p)
        if count_include_pad:
            values.append(end - start)
        else:
            values.append(min(end, length) - max(start, 0))
    return values


def _symbolic_divisors(length, k, s, p, out, count_include_pad, ceil_mode, dtype, device):
    """``_divisors`` for a symbolic length as a tensor computed from ``arange(out)`` (a list needs the
    number of windows as an int: every size compiled again)."""
    if count_include_pad and not ceil_mode:
        # the last window ends at (out - 1) * s - p + k <= length + p: every window counts k taps
        return torch.tensor(float(k), dtype=dtype, device=device)
    start = aten.sub.Scalar(aten.mul.Scalar(aten.arange.start_step(0, out, 1, dtype=torch.int64, device=device), s), p)
    end = aten.minimum.default(aten.add.Scalar(start, k), aten.add.Scalar(aten.scalar_tensor.default(
        length, dtype=torch.int64, device=device), p))
    if count_include_pad:
        count = aten.sub.Tensor(end, start)
    else:
        inside_end = aten.minimum.default(end, aten.scalar_tensor.default(length, dtype=torch.int64, device=device))
        count = aten.sub.Tensor(inside_end, aten.clamp_min.default(start, 0))
    return to_dtype(count, dtype)


def _empty_windows(x, n) -> bool:
    """A pooled dim of length 0 (an empty batch pools as usual: it computes nothing)."""
    return any(x.shape[d] == 0 for d in range(x.dim() - n, x.dim()))


def _avg_pool(x, n, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    if not x.is_floating_point() or _empty_windows(x, n):
        return NotImplemented
    kernel = pool_tuple(kernel_size, n)
    stride = pool_tuple(stride, n) if stride else kernel
    padding = pool_tuple(padding, n)
    windows, outs = _windows(upcast(x), n, kernel, stride, padding, [1] * n, ceil_mode, 0.0)
    total = aten.sum.dim_IntList(windows, list(range(-n, 0)))
    if divisor_override:
        return to_dtype(aten.div.Scalar(total, divisor_override), x.dtype)
    divisor = None
    for i in range(n):
        length = x.shape[x.dim() - n + i]
        if isinstance(length, torch.SymInt) or isinstance(outs[i], torch.SymInt):
            d = _symbolic_divisors(length, kernel[i], stride[i], padding[i], outs[i], count_include_pad, ceil_mode,
                                   total.dtype, x.device)
        else:
            values = _divisors(length, kernel[i], stride[i], padding[i], outs[i], count_include_pad)
            d = torch.tensor(values, dtype=total.dtype, device=x.device)
        d = aten.view.default(d, [outs[i]] + [1] * (n - 1 - i)) if d.dim() else d
        divisor = d if divisor is None else aten.mul.Tensor(divisor, d)
    return to_dtype(aten.div.Tensor(total, divisor), x.dtype)


@decomposition(aten.avg_pool2d.default)
def avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    return _avg_pool(x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@decomposition(aten.avg_pool3d.default)
def avg_pool3d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    return _avg_pool(x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def _adaptive_avg_1d(x, dim, out):
    """Adaptive average along one dim: window i is [floor(i*L/out), ceil((i+1)*L/out))."""
    length = x.shape[dim]
    if length % out == 0:
        k = length // out
        shape = list(x.shape[:dim]) + [out, k] + list(x.shape[dim + 1:])
        return aten.mean.dim(aten.reshape.default(x, shape), [dim + 1])
    if isinstance(length, torch.SymInt):
        index_t, mask_t, counts = _symbolic_adaptive_windows(length, out, x.dtype, x.device)
        moved = aten.movedim.int(x, dim, -1)
        gathered = aten.index.Tensor(moved, [None] * (moved.dim() - 1) + [index_t])  # (..., out, width)
        summed = aten.sum.dim_IntList(aten.mul.Tensor(gathered, mask_t), [-1])
        return aten.movedim.int(aten.div.Tensor(summed, counts), -1, dim)
    starts = [(i * length) // out for i in range(out)]
    ends = [-((-(i + 1) * length) // out) for i in range(out)]
    width = max(e - s for s, e in zip(starts, ends))
    index = [[min(s + j, length - 1) for j in range(width)] for s in starts]
    mask = [[1.0 if s + j < e else 0.0 for j in range(width)] for s, e in zip(starts, ends)]
    index_t = torch.tensor(index, dtype=torch.int64, device=x.device)
    mask_t = torch.tensor(mask, dtype=x.dtype, device=x.device)
    counts = torch.tensor([e - s for s, e in zip(starts, ends)], dtype=x.dtype, device=x.device)
    moved = aten.movedim.int(x, dim, -1)
    gathered = aten.index.Tensor(moved, [None] * (moved.dim() - 1) + [index_t])  # (..., out, width)
    summed = aten.sum.dim_IntList(aten.mul.Tensor(gathered, mask_t), [-1])
    return aten.movedim.int(aten.div.Tensor(summed, counts), -1, dim)


def _symbolic_adaptive_windows(length, out, dtype, device):
    """The windows of ``_adaptive_avg_1d`` for a symbolic length, as tensors computed from aranges
    (their lists need the length as an int: every size compiled again). Windows are padded to
    ``ceil(length / out) + 1`` taps, at least the widest one; the mask drops the padding."""
    i = aten.arange.start_step(0, out, 1, dtype=torch.int64, device=device)
    starts = aten.floor_divide.default(aten.mul.Scalar(i, length), out)
    ends = aten.floor_divide.default(aten.add.Scalar(aten.mul.Scalar(aten.add.Scalar(i, 1), length), out - 1), out)
    width = (length + out - 1) // out + 1
    taps = aten.add.Tensor(aten.unsqueeze.default(starts, 1),
                           aten.arange.start_step(0, width, 1, dtype=torch.int64, device=device))  # (out, width)
    index = aten.clamp_max.default(taps, length - 1)
    mask = to_dtype(aten.lt.Tensor(taps, aten.unsqueeze.default(ends, 1)), dtype)
    return index, mask, to_dtype(aten.sub.Tensor(ends, starts), dtype)


def _adaptive_avg(x, output_size, n):
    if not x.is_floating_point() or _empty_windows(x, n):
        return NotImplemented
    out = upcast(x)
    for i, size in enumerate(pool_tuple(output_size, n)):
        out = _adaptive_avg_1d(out, x.dim() - n + i, size)
    return to_dtype(out, x.dtype)


@decomposition(aten._adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(x, output_size):
    return _adaptive_avg(x, output_size, 2)


@decomposition(aten._adaptive_avg_pool3d.default)
def adaptive_avg_pool3d(x, output_size):
    return _adaptive_avg(x, output_size, 3)
