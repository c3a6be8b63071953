"""Decompositions: the backward ops of window and resampling ops (average and adaptive pooling,
nearest/linear/bicubic upsampling, reflection/replication padding, ``Tensor.unfold``).

Each of these forward ops reads, along every dim it changes, some input positions for each output
position: a separable gather. Its backward is the transposed gather: every input position adds up
the output gradient at the output positions that read it. Sizes are static here, so the positions
are known while tracing; the backward is written as a *gather* in the input's domain (a table of
the output positions that read each input position, padded to the widest with a mask) and a sum
over the table's columns -- no scatter, deterministic, and a pointwise-plus-reduction kernel that
fuses with what produces the gradient. Dims are done one at a time, like the forward's.

Where a size is symbolic or an argument is outside what ATen accepts, the op stays whole
(``NotImplemented``) and runs through its ATen kernel.
"""
from __future__ import annotations

import math
import struct

import torch

from kiln.decomp.pooling import _divisors
from kiln.decomp.registry import decomposition
from kiln.decomp.utils import to_dtype, upcast
from kiln.fake.symbolic_ops import pool_tuple

aten = torch.ops.aten

# a table wider than this (output positions reading one input position) is left to ATen's kernel
MAX_TAPS = 64


def _static(*sizes) -> bool:
    return not any(isinstance(s, torch.SymInt) for s in sizes)


def transpose_gather(g, dim: int, readers: list, length: int):
    """The gradient along ``dim`` of a gather whose output position ``o`` read input positions with
    weights: ``readers[i]`` lists ``(o, weight)`` for input position ``i`` (weight None: 1), and the
    result (``length`` along ``dim``) is ``sum(g[o] * weight)`` over them, zero where none read."""
    width = max((len(r) for r in readers), default=0)
    shape = list(g.shape)
    shape[dim] = length
    if width == 0 or g.shape[dim] == 0:
        return aten.full.default(shape, 0, dtype=g.dtype, device=g.device)
    index = [[o for o, _ in r] + [0] * (width - len(r)) for r in readers]
    mask = [[True] * len(r) + [False] * (width - len(r)) for r in readers]
    trailing = [1] * (g.dim() - dim - 1)
    index_t = torch.tensor(index, dtype=torch.int64, device=g.device)
    taps = aten.index.Tensor(g, [None] * dim + [index_t])  # (..., length, width, ...)
    if any(w is not None for r in readers for _, w in r):
        weights = [[1.0 if w is None else w for _, w in r] + [0.0] * (width - len(r)) for r in readers]
        weights_t = torch.tensor(weights, dtype=g.dtype, device=g.device)
        taps = aten.mul.Tensor(taps, aten.view.default(weights_t, [length, width] + trailing))
    if not all(all(row) for row in mask):
        mask_t = torch.tensor(mask, dtype=torch.bool, device=g.device)
        zero = aten.scalar_tensor.default(0, dtype=g.dtype, device=g.device)
        taps = aten.where.self(aten.view.default(mask_t, [length, width] + trailing), taps, zero)  # no 0 * inf
    if width == 1:
        return aten.squeeze.dim(taps, dim + 1)
    return aten.sum.dim_IntList(taps, [dim + 1])


def _readers(pairs, length: int) -> list | None:
    """``(output position, input position, weight)`` triples -> ``transpose_gather``'s table (None
    when one input position has more than MAX_TAPS readers)."""
    readers: list = [[] for _ in range(length)]
    for o, i, w in pairs:
        if 0 <= i < length:
            readers[i].append((o, w))
    return None if any(len(r) > MAX_TAPS for r in readers) else readers


def _separable_backward(grad, input_sizes, n: int, pairs_of_dim):
    """Apply ``transpose_gather`` along each of the last ``n`` dims; ``pairs_of_dim(i, in_len, out_len)``
    gives dim i's triples. Computes in float32 for half/bfloat16 gradients."""
    if not grad.is_floating_point() or not _static(*grad.shape, *input_sizes):
        return NotImplemented
    g = upcast(grad)
    for i in range(n):
        dim = grad.dim() - n + i
        readers = _readers(pairs_of_dim(i, input_sizes[dim], grad.shape[dim]), input_sizes[dim])
        if readers is None:
            return NotImplemented
        g = transpose_gather(g, dim, readers, input_sizes[dim])
    return to_dtype(g, grad.dtype)


# average pooling -----------------------------------------------------------------------------------
def _avg_pool_backward(grad, x, n, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    if x.dim() < n + 1 or not _static(*x.shape) or any(s == 0 for s in x.shape[-n:]):
        return NotImplemented
    kernel = pool_tuple(kernel_size, n)
    stride = pool_tuple(stride, n) if stride else kernel
    padding = pool_tuple(padding, n)
    g = upcast(grad)
    if divisor_override:
        g = aten.div.Scalar(g, divisor_override)
    else:
        divisor = None
        for i in range(n):
            values = _divisors(x.shape[x.dim() - n + i], kernel[i], stride[i], padding[i], grad.shape[grad.dim() - n + i],
                               count_include_pad)
            d = aten.view.default(torch.tensor(values, dtype=g.dtype, device=g.device),
                                  [len(values)] + [1] * (n - 1 - i))
            divisor = d if divisor is None else aten.mul.Tensor(divisor, d)
        g = aten.div.Tensor(g, divisor)

    def pairs(i, length, out):
        return [(o, o * stride[i] - padding[i] + k, None) for o in range(out) for k in range(kernel[i])]

    out = _separable_backward(g, list(x.shape), n, pairs)
    return out if out is NotImplemented else to_dtype(out, grad.dtype)


@decomposition(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return _avg_pool_backward(grad, x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@decomposition(aten.avg_pool3d_backward.default)
def avg_pool3d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return _avg_pool_backward(grad, x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def _adaptive_avg_backward(grad, x, n):
    if x.dim() < n + 1 or not _static(*x.shape):
        return NotImplemented

    def pairs(i, length, out):
        triples = []
        for o in range(out):
            start, end = (o * length) // out, -((-(o + 1) * length) // out)
            triples += [(o, j, 1.0 / (end - start)) for j in range(start, end)]
        return triples

    return _separable_backward(grad, list(x.shape), n, pairs)


@decomposition(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(grad, x):
    return _adaptive_avg_backward(grad, x, 2)


@decomposition(aten._adaptive_avg_pool3d_backward.default)
def adaptive_avg_pool3d_backward(grad, x):
    return _adaptive_avg_backward(grad, x, 3)


@decomposition(aten.adaptive_max_pool2d_backward.default)
def adaptive_max_pool2d_backward(grad, x, indices):
    from kiln.decomp.windows import _max_pool_backward

    return _max_pool_backward(grad, x, indices, 2)


@decomposition(aten.adaptive_max_pool3d_backward.default)
def adaptive_max_pool3d_backward(grad, x, indices):
    from kiln.decomp.windows import _max_pool_backward

    return _max_pool_backward(grad, x, indices, 3)


# upsampling ------------------------------------------------------------------------------------------
def _f32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def nearest_source(o: int, in_size: int, out_size: int, scale, exact: bool) -> int:
    """The input position output ``o`` reads, as ATen's CPU ``nearest_idx`` / ``nearest_exact_idx``
    computes it: in float32, ``floor(o * s)`` (``(o + 0.5) * s`` for exact), s = 1/scale or in/out."""
    if not exact and scale is None and out_size == in_size:
        return o
    if not exact and scale is None and out_size == 2 * in_size:
        return o >> 1
    s = _f32(1.0 / scale) if scale is not None and scale > 0 else _f32(_f32(in_size) / out_size)
    src = _f32((o + 0.5) * s) if exact else _f32(o * s)
    return min(int(math.floor(src)), in_size - 1)


def _upsample_nearest_backward(grad, output_size, input_size, scales, exact):
    n = len(output_size)
    scales = list(scales) + [None] * (n - len(scales))

    def pairs(i, length, out):
        return [(o, nearest_source(o, length, out, scales[i], exact), None) for o in range(out)]

    return _separable_backward(grad, list(input_size), n, pairs)


def _register_nearest_backward(n, exact):
    prefix = "_upsample_nearest_exact" if exact else "upsample_nearest"

    @decomposition(getattr(aten, f"{prefix}{n}d_backward").default)
    def upsample_nearest_backward(grad, output_size, input_size, *scales):
        return _upsample_nearest_backward(grad, output_size, input_size, scales, exact)

    return upsample_nearest_backward


for _n in (1, 2, 3):
    _register_nearest_backward(_n, False)
    _register_nearest_backward(_n, True)


def linear_sources(o: int, in_size: int, out_size: int, align_corners: bool, scale):
    """(i0, i1, lambda) of output ``o`` of linear upsampling, as ATen's area_pixel_compute_source_index
    (float32 arithmetic, as the CPU kernel's opmath for float32)."""
    if align_corners:
        s = _f32((in_size - 1) / (out_size - 1)) if out_size > 1 else 0.0
        src = _f32(o * s)
    else:
        s = _f32(1.0 / scale) if scale is not None and scale > 0 else _f32(_f32(in_size) / out_size)
        src = max(_f32(_f32(_f32(o + 0.5) * s) - 0.5), 0.0)
    i0 = min(int(math.floor(src)), in_size - 1)
    i1 = min(i0 + 1, in_size - 1)
    lam = min(max(_f32(src - i0), 0.0), 1.0)
    return i0, i1, lam


def _upsample_linear_backward(grad, output_size, input_size, align_corners, scales):
    n = len(output_size)
    scales = list(scales) + [None] * (n - len(scales))

    def pairs(i, length, out):
        triples = []
        for o in range(out):
            i0, i1, lam = linear_sources(o, length, out, align_corners, scales[i])
            triples += [(o, i0, _f32(1.0 - lam)), (o, i1, lam)]
        return triples

    return _separable_backward(grad, list(input_size), n, pairs)


@decomposition(aten.upsample_linear1d_backward.default)
def upsample_linear1d_backward(grad, output_size, input_size, align_corners, scales=None):
    return _upsample_linear_backward(grad, output_size, input_size, align_corners, [scales])


@decomposition(aten.upsample_bilinear2d_backward.default)
def upsample_bilinear2d_backward(grad, output_size, input_size, align_corners, scales_h=None, scales_w=None):
    return _upsample_linear_backward(grad, output_size, input_size, align_corners, [scales_h, scales_w])


@decomposition(aten.upsample_trilinear3d_backward.default)
def upsample_trilinear3d_backward(grad, output_size, input_size, align_corners, scales_d=None, scales_h=None,
                                  scales_w=None):
    return _upsample_linear_backward(grad, output_size, input_size, align_corners, [scales_d, scales_h, scales_w])


_A = -0.75  # Keys' cubic, as ATen's


def cubic_sources(o: int, in_size: int, out_size: int, align_corners: bool, scale):
    """[(input position, weight)] of the four taps of bicubic output ``o`` (ATen's
    get_cubic_upsample_coefficients on the unclamped source coordinate, taps clamped to the edge)."""
    if align_corners:
        s = _f32((in_size - 1) / (out_size - 1)) if out_size > 1 else 0.0
        real = _f32(o * s)
    else:
        s = _f32(1.0 / scale) if scale is not None and scale > 0 else _f32(_f32(in_size) / out_size)
        real = _f32(_f32(_f32(o + 0.5) * s) - 0.5)
    base = math.floor(real)
    t = _f32(real - base)

    def near(x):
        return _f32(_f32(_f32(_f32(_f32((_A + 2) * x) - (_A + 3)) * x) * x) + 1.0)

    def far(x):
        return _f32(_f32(_f32(_f32(_f32(_f32(_A * x) - 5 * _A) * x) + 8 * _A) * x) - 4 * _A)

    u = _f32(1.0 - t)
    weights = (far(_f32(t + 1.0)), near(t), near(u), far(_f32(u + 1.0)))
    return [(min(max(base - 1 + k, 0), in_size - 1), w) for k, w in enumerate(weights)]


@decomposition(aten.upsample_bicubic2d_backward.default)
def upsample_bicubic2d_backward(grad, output_size, input_size, align_corners, scales_h=None, scales_w=None):
    if len(input_size) != 4:
        return NotImplemented
    scales = [scales_h, scales_w]

    def pairs(i, length, out):
        return [(o, src, w) for o in range(out) for src, w in cubic_sources(o, length, out, align_corners, scales[i])]

    return _separable_backward(grad, list(input_size), 2, pairs)


# padding and unfold ---------------------------------------------------------------------------------
def pad_source(o: int, length: int, before: int, mode: str) -> int:
    """The input position padded output ``o`` reads (reflect: mirrored without the edge; replicate: clamped)."""
    p = o - before
    if mode == "replicate":
        return min(max(p, 0), length - 1)
    period = 2 * (length - 1)
    folded = abs(p) % period if period else 0
    return period - folded if folded >= length else folded


def _pad_backward(grad, x, padding, mode):
    n = len(padding) // 2
    if x.dim() < n or not _static(*x.shape):
        return NotImplemented
    for i in range(n):
        length, before, after = x.shape[x.dim() - 1 - i], padding[2 * i], padding[2 * i + 1]
        if length + before + after <= 0 or (mode == "reflect" and (before >= length or after >= length)):
            return NotImplemented  # (ATen rejects these)

    def pairs(i, length, out):
        before = padding[2 * (n - 1 - i)]  # padding lists the last dim first
        return [(o, pad_source(o, length, before, mode), None) for o in range(out)]

    return _separable_backward(grad, list(x.shape), n, pairs)


for _n in (1, 2, 3):
    decomposition(getattr(aten, f"reflection_pad{_n}d_backward").default)(
        lambda grad, x, padding: _pad_backward(grad, x, padding, "reflect"))
    decomposition(getattr(aten, f"replication_pad{_n}d_backward").default)(
        lambda grad, x, padding: _pad_backward(grad, x, padding, "replicate"))


@decomposition(aten.unfold_backward.default)
def unfold_backward(grad, input_sizes, dim, size, step):
    """``x.unfold(dim, size, step)`` has window w's tap k at ``w * step + k`` along ``dim``, the taps
    in a last dim of their own: move it beside the windows, flatten both, and gather back."""
    if not grad.is_floating_point() or not _static(*grad.shape, *input_sizes):
        return NotImplemented
    rank = len(input_sizes)
    dim = dim % rank if rank else 0
    if rank == 0:
        return aten.sum.dim_IntList(grad, [-1]) if grad.dim() else grad
    windows = grad.shape[dim]
    moved = aten.movedim.int(upcast(grad), -1, dim + 1)  # (..., windows, size, ...)
    flat_shape = list(moved.shape[:dim]) + [windows * size] + list(moved.shape[dim + 2:])
    flat = aten.reshape.default(moved, flat_shape)
    readers = _readers([(w * size + k, w * step + k, None) for w in range(windows) for k in range(size)],
                       input_sizes[dim])
    if readers is None:
        return NotImplemented
    return to_dtype(transpose_gather(flat, dim, readers, input_sizes[dim]), grad.dtype)


@decomposition(aten.col2im.default)
def col2im(x, output_size, kernel_size, dilation, padding, stride):
    """``F.fold`` (and ``F.unfold``'s backward): (N, C*kh*kw, L) -> (N, C, H, W), every window's taps
    added at their positions -- the transposed gather of ``im2col``, one spatial dim at a time."""
    if x.dim() not in (2, 3) or not x.is_floating_point() or not _static(*x.shape):
        return NotImplemented
    kernel, dilation, padding, stride = (pool_tuple(v, 2) for v in (kernel_size, dilation, padding, stride))
    height, width = output_size
    outs = [(size + 2 * p - d * (k - 1) - 1) // s + 1
            for size, k, d, p, s in zip((height, width), kernel, dilation, padding, stride)]
    lead = list(x.shape[:-2])
    channels = x.shape[-2] // (kernel[0] * kernel[1])
    if channels * kernel[0] * kernel[1] != x.shape[-2] or outs[0] * outs[1] != x.shape[-1] or min(outs) <= 0:
        return NotImplemented  # (ATen rejects these)
    taps = aten.reshape.default(upcast(x), lead + [channels, kernel[0], kernel[1], outs[0], outs[1]])
    b = len(lead)
    order = list(range(b + 1)) + [b + 1, b + 3, b + 2, b + 4]  # (..., C, kh, oh, kw, ow)
    grid = aten.reshape.default(aten.permute.default(taps, order),
                                lead + [channels, kernel[0] * outs[0], kernel[1] * outs[1]])
    out = grid
    for i, length in enumerate((height, width)):
        pairs = [(k * outs[i] + o, o * stride[i] - padding[i] + k * dilation[i], None)
                 for k in range(kernel[i]) for o in range(outs[i])]
        readers = _readers(pairs, length)
        if readers is None:
            return NotImplemented
        out = transpose_gather(out, b + 1 + i, readers, length)
    return to_dtype(out, x.dtype)
