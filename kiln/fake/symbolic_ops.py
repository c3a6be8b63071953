"""Fake outputs of single ops on tensors with symbolic sizes whose kernels take only plain sizes (or whose
Python meta kernels re-enter dispatch): copies and pads, cumulative ops, reductions, losses, factories,
diagonal ops, ``im2col``, group norm and pooling. Each rule gives the output's sizes as SymInts and a
row-major (or ATen's preserve-format) layout; a case it does not cover raises ``SymbolicShapeUnsupported``
(the frame is traced again with static sizes). The view rules and the dispatcher are ``symbolic_meta.py``;
this module adds its rules to ``symbolic_meta.RULES`` when that module loads.
"""
from __future__ import annotations

import torch

from kiln.fake.symbolic_meta import (RULES, SymbolicShapeUnsupported, _contiguous_strides, _dense_strides, _dim,
                                     _is_row_major, _new_row_major, diagonal, infer_dense_strides, pointwise)

aten = torch.ops.aten


def to_copy(func, x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    dtype = dtype or x.dtype
    if memory_format in (None, torch.preserve_format):
        strides = _contiguous_strides(list(x.shape)) if _is_row_major(x) else _dense_strides(x)
        if strides is None:  # (ATen: infer_dense_strides for a tensor that is not dense)
            strides = infer_dense_strides(list(x.shape), list(x.stride()))
        return torch.empty_strided(x.shape, strides, dtype=dtype, device="meta")
    if memory_format is torch.contiguous_format:
        return _new_row_major(x.shape, dtype)
    raise SymbolicShapeUnsupported(func, f"a copy to {memory_format}")


def constant_pad_nd(func, x, pad, value=0):
    sizes = list(x.shape)
    if len(pad) % 2 or len(pad) // 2 > len(sizes):
        raise RuntimeError("Length of pad must be even but instead it equals " + str(len(pad)))
    for i in range(len(pad) // 2):
        d = len(sizes) - 1 - i
        sizes[d] = sizes[d] + pad[2 * i] + pad[2 * i + 1]
        if sizes[d] < 0:  # a guard where symbolic
            raise RuntimeError(f"The input size {x.shape[d]}, plus negative padding results in a negative size")
    return _new_row_major(sizes, x.dtype)


def _same_shape(dtype_arg=None, any_layout=False):
    """A rule for ops whose result has the shape of their first argument (row-major inputs only, or
    ``any_layout``: ops whose ATen meta kernel makes a row-major result from any input, e.g. softmax's)."""
    def rule(func, x, *args, **kwargs):
        if not any_layout and not _is_row_major(x):
            raise SymbolicShapeUnsupported(func, "an input that is not row-major")
        dtype = kwargs.get("dtype") if dtype_arg == "dtype" else None
        if dtype_arg is not None and dtype_arg != "dtype":
            dtype = args[dtype_arg - 1] if len(args) >= dtype_arg else None
        return _new_row_major(x.shape, dtype or x.dtype)
    return rule


def cumulative(func, x, dim, dtype=None):
    """cumsum/cumprod: the input's shape; ``dtype``, else int64 for integer and bool inputs (as ATen
    promotes them), else the input's dtype."""
    if not _is_row_major(x):
        raise SymbolicShapeUnsupported(func, "an input that is not row-major")
    if dtype is None:
        dtype = torch.int64 if not (x.is_floating_point() or x.is_complex()) else x.dtype
    return _new_row_major(x.shape, dtype)


def nll_loss_forward(func, x, target, weight, reduction, ignore_index):
    out_sizes = [x.shape[0]] if reduction == 0 and x.dim() == 2 else []
    if x.dim() > 2:
        raise SymbolicShapeUnsupported(func, "nll_loss of a tensor with more than 2 dims")
    return _new_row_major(out_sizes, x.dtype), _new_row_major([], x.dtype)


def logsumexp(func, x, dim, keepdim=False):
    """A reduction over ``dim``: those sizes dropped (or 1 with keepdim); floating result."""
    dims = {_dim(d, x.dim()) for d in (dim if isinstance(dim, (list, tuple)) else [dim])} or set(range(x.dim()))
    sizes = [1 if i in dims else n for i, n in enumerate(x.shape)] if keepdim else \
        [n for i, n in enumerate(x.shape) if i not in dims]
    return _new_row_major(sizes, x.dtype if x.is_floating_point() else torch.get_default_dtype())


def sum_all(func, x, dtype=None):
    """sum() of every element: a 0-dim result (bool and integer sums are int64, as ATen promotes)."""
    promoted = x.dtype if (x.is_floating_point() or x.is_complex()) else torch.int64
    return _new_row_major([], dtype or promoted)


def sum_dims(func, x, dim, keepdim=False, dtype=None):
    """sum over ``dim`` (None or [] is every dim): a row-major result from any input layout (ATen's
    resize_reduction makes the output with default strides)."""
    dims = {_dim(d, x.dim()) for d in (dim or [])} or set(range(x.dim()))
    sizes = [1 if i in dims else n for i, n in enumerate(x.shape)] if keepdim else \
        [n for i, n in enumerate(x.shape) if i not in dims]
    promoted = x.dtype if (x.is_floating_point() or x.is_complex()) else torch.int64
    return _new_row_major(sizes, dtype or promoted)


def mean_dims(func, x, dim=None, keepdim=False, dtype=None):
    """mean over ``dim``: as sum_dims; a floating (or complex) input or ``dtype`` only (else ATen raises)."""
    if dtype is None and not (x.is_floating_point() or x.is_complex()):
        raise SymbolicShapeUnsupported(func, "mean of a non-floating tensor (ATen raises)")
    return sum_dims(func, x, dim, keepdim, dtype)


def bool_reduction(func, x, dim=None, keepdim=False):
    """any/all over ``dim`` (an int, a list, or None/[]: every dim): bool (uint8 for a uint8 input, as
    ATen). (Their C++ kernels ask for plain sizes: torch raised an internal assert on symbolic ones.)"""
    dims = [] if dim is None else (list(dim) if isinstance(dim, (list, tuple)) else [dim])
    dims = {_dim(d, x.dim()) for d in dims} or set(range(x.dim()))
    sizes = [1 if i in dims else n for i, n in enumerate(x.shape)] if keepdim else \
        [n for i, n in enumerate(x.shape) if i not in dims]
    return _new_row_major(sizes, torch.uint8 if x.dtype == torch.uint8 else torch.bool)


def count_nonzero(func, x, dim=None):
    """count_nonzero over ``dim`` (an int, a list, or None: every dim): int64, the dims removed, row-major
    (its C++ kernel trips torch's arg parser on symbolic sizes)."""
    dims = [] if dim is None else (list(dim) if isinstance(dim, (list, tuple)) else [dim])
    dims = [_dim(d, x.dim()) for d in dims]
    if len(set(dims)) != len(dims):
        raise SymbolicShapeUnsupported(func, "a dim given twice (ATen's own error)")
    dims = set(dims) or set(range(x.dim()))  # (None or an empty list: every dim, as ATen)
    return _new_row_major([n for i, n in enumerate(x.shape) if i not in dims], torch.int64)


def diag_embed(func, x, offset=0, dim1=-2, dim2=-1):
    """diag_embed: the last dim becomes a square of side ``n + |offset|`` at ``dim1``/``dim2`` of the
    result, row-major, the input's dtype."""
    ndim = x.dim() + 1
    d1, d2 = _dim(dim1, ndim), _dim(dim2, ndim)
    if d1 == d2:
        raise SymbolicShapeUnsupported(func, "dim1 equal to dim2 (ATen's own error)")
    side = x.shape[-1] + abs(offset)
    sizes = list(x.shape[:-1])
    for d in sorted((d1, d2)):
        sizes.insert(d, side)
    return _new_row_major(sizes, x.dtype)


def diagonal_copy(func, x, offset=0, dim1=0, dim2=1):
    """diagonal_copy (``x.diag()`` of a matrix): the diagonal view's shape, row-major (torch's meta kernel
    reads the storage offset of its symbolic input)."""
    return _new_row_major(diagonal(func, x, offset, dim1, dim2).shape, x.dtype)


def diagonal_scatter(func, x, src, offset=0, dim1=0, dim2=1):
    """diagonal_scatter: ``x``'s shape, row-major (a row-major ``x`` only); ``src`` must have the shape of
    the diagonal, ATen's check (guards where symbolic). Torch 2.11's meta kernel reads the storage offset
    of its symbolic input (the ``diag_embed`` decomposition compiled once per size there)."""
    if not _is_row_major(x):
        raise SymbolicShapeUnsupported(func, "an input that is not row-major")
    d1, d2 = _dim(dim1, x.dim()), _dim(dim2, x.dim())
    if d1 == d2:
        raise SymbolicShapeUnsupported(func, "dim1 equal to dim2 (ATen's own error)")
    a, b = x.shape[d1], x.shape[d2]
    length = max(min(a, b - offset) if offset >= 0 else min(a + offset, b), 0)
    want = [n for i, n in enumerate(x.shape) if i not in (d1, d2)] + [length]
    if list(src.shape) != want:
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = {list(src.shape)}, "
                           f"slice size = {want}")
    return _new_row_major(x.shape, x.dtype)


def im2col(func, x, kernel_size, dilation, padding, stride):
    """im2col (``F.unfold``): (N, C, H, W) -> (N, C * kh * kw, L), or without N, row-major. Where a window
    count is below one (ATen's error) the frame is traced again with static sizes, which raises it."""
    if x.dim() not in (3, 4):
        raise SymbolicShapeUnsupported(func, "an input that is not 3-D or 4-D")
    kernel, dilation, padding, stride = (pool_tuple(v, 2) for v in (kernel_size, dilation, padding, stride))
    if min(*kernel, *dilation, *stride) <= 0 or min(padding) < 0:
        raise SymbolicShapeUnsupported(func, "a kernel, dilation, padding or stride that ATen refuses")
    counts = [(n + 2 * p - d * (k - 1) - 1) // s + 1
              for n, k, d, p, s in zip(x.shape[-2:], kernel, dilation, padding, stride)]
    if counts[0] < 1 or counts[1] < 1 or any(n == 0 for n in x.shape[-3:]):
        raise SymbolicShapeUnsupported(func, "no whole window (ATen's own error)")
    lead = list(x.shape[:-3])
    return _new_row_major(lead + [x.shape[-3] * kernel[0] * kernel[1], counts[0] * counts[1]], x.dtype)


def eye(func, n, m=None, *, dtype=None, layout=None, device=None, pin_memory=None):
    """eye(n[, m]) of symbolic sizes: a row-major (n, m) matrix (its C++ kernel asks for plain sizes)."""
    m = n if m is None else m
    if n < 0 or m < 0:  # (a guard where symbolic; sizes are >= 2)
        raise RuntimeError(f"n must be greater or equal to 0, got {n if n < 0 else m}")
    return _new_row_major([n, m], dtype or torch.get_default_dtype())


def native_group_norm(func, x, weight, bias, n, c, hxw, group, eps):
    """(out, mean, rstd): out of x's shape (row-major inputs), mean and rstd (N, group) (its meta kernel
    asks for plain sizes)."""
    if not _is_row_major(x):
        raise SymbolicShapeUnsupported(func, "an input that is not row-major")
    stats_ = _new_row_major([n, group], x.dtype)
    return _new_row_major(x.shape, x.dtype), stats_, _new_row_major([n, group], x.dtype)


def native_group_norm_backward(func, grad, x, mean, rstd, weight, n, c, hxw, group, output_mask):
    """(grad_input, grad_weight, grad_bias), each None where ``output_mask`` says so."""
    if not _is_row_major(x):
        raise SymbolicShapeUnsupported(func, "an input that is not row-major")
    shapes = (x.shape, [c], [c])
    return tuple(_new_row_major(shape, x.dtype) if want else None for shape, want in zip(shapes, output_mask))


def nll_loss2d_forward(func, x, target, weight, reduction, ignore_index):
    """(N, C, H, W) scores: the loss per (N, H, W) position (reduction none) or a scalar; the total weight."""
    out_sizes = [x.shape[0]] + list(x.shape[2:]) if reduction == 0 else []
    return _new_row_major(out_sizes, x.dtype), _new_row_major([], x.dtype)


def pool_tuple(v, n: int) -> list:
    """A pooling argument (an int, or a list of 1 or n) as n values."""
    if isinstance(v, int):
        return [v] * n
    v = list(v)
    return v * n if len(v) == 1 else v


def pool_out_size(length, k, s, p, d, ceil_mode):
    """One dim's pooling output size, as ATen's pooling_output_shape with floor division (its div_rtn
    asks whether the remainder is nonzero: a parity guard on symbolic sizes; the dividend is >= 0 for
    every valid size, where floor and div_rtn agree). Also used by the pooling decompositions."""
    span = d * (k - 1) + 1
    out = (length + 2 * p - span + ((s - 1) if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= length + p:
        out = out - 1
    return out


def _pool_sizes(x, n, kernel_size, stride, padding, dilation, ceil_mode):
    """The output sizes of an n-d pooling over x's last n dims."""
    kernel = pool_tuple(kernel_size, n)
    stride = pool_tuple(stride, n) if stride else kernel
    padding, dilation = pool_tuple(padding, n), pool_tuple(dilation, n)
    sizes = list(x.shape[:-n])
    for i in range(n):
        out = pool_out_size(x.shape[x.dim() - n + i], kernel[i], stride[i], padding[i], dilation[i], ceil_mode)
        if out < 1:
            raise RuntimeError(f"Given input size {tuple(x.shape)}, calculated output size is too small")
        sizes.append(out)
    return sizes


def _pool_rule(n, with_indices):
    def rule(func, x, kernel_size, stride=(), padding=0, *rest, **kwargs):
        if not _is_row_major(x) or x.dim() not in (n + 1, n + 2):
            return None  # (torch's meta kernel decides: channels-last layouts, wrong ranks)
        dilation, ceil_mode = (rest[0] if rest else 1, rest[1] if len(rest) > 1 else False) if with_indices \
            else (1, rest[0] if rest else False)
        sizes = _pool_sizes(x, n, kernel_size, stride, padding, dilation, ceil_mode)
        out = _new_row_major(sizes, x.dtype)
        return (out, _new_row_major(sizes, torch.int64)) if with_indices else out
    return rule


RULES.update({
    aten.max_pool2d_with_indices.default: _pool_rule(2, True),
    aten.avg_pool2d.default: _pool_rule(2, False),
    aten.nll_loss2d_forward.default: nll_loss2d_forward,
    aten.nll_loss2d_backward.default: lambda func, grad, x, *rest: _new_row_major(x.shape, x.dtype),
    aten.sum.default: sum_all,
    aten.sum.dim_IntList: sum_dims,
    aten.mean.dim: mean_dims,  # (torch 2.11's Python meta of mean asserts on CUDA fakes with symbolic sizes)
    aten.mean.default: lambda func, x, dtype=None: mean_dims(func, x, None, False, dtype),
    aten.logsumexp.default: logsumexp,
    aten.any.default: bool_reduction,
    aten.any.dim: bool_reduction,
    aten.any.dims: bool_reduction,
    aten.all.default: bool_reduction,
    aten.all.dim: bool_reduction,
    aten.all.dims: bool_reduction,
    aten.eye.default: eye,
    aten.eye.m: eye,
    aten.count_nonzero.default: count_nonzero,
    aten.count_nonzero.dim_IntList: count_nonzero,
    aten.diag_embed.default: diag_embed,
    aten.diagonal_scatter.default: diagonal_scatter,
    aten.diagonal_copy.default: diagonal_copy,
    aten.im2col.default: im2col,
    aten.floor_divide.default: pointwise,
    aten.native_group_norm.default: native_group_norm,
    aten.native_group_norm_backward.default: native_group_norm_backward,  # (elementwise, but not tagged pointwise: no rule found it)
    aten._to_copy.default: to_copy,
    aten.constant_pad_nd.default: constant_pad_nd,
    aten.cumsum.default: cumulative,
    aten.cumprod.default: cumulative,
    aten.tril.default: _same_shape(),
    aten.triu.default: _same_shape(),
    aten.masked_fill.Scalar: _same_shape(),
    aten.masked_fill.Tensor: _same_shape(),
    aten._log_softmax.default: _same_shape(any_layout=True),  # (cross_entropy(logits.transpose(1, 2)))
    aten._log_softmax_backward_data.default: _same_shape(3, any_layout=True),
    aten._softmax_backward_data.default: _same_shape(3, any_layout=True),
    # SDPA's math path (BERT training on CPU); its meta kernel trips torch's arg parser on symbolic sizes
    aten._safe_softmax.default: lambda func, x, dim, dtype=None: _new_row_major(x.shape, dtype or x.dtype),
    aten.nll_loss_forward.default: nll_loss_forward,
    aten.nll_loss_backward.default: lambda func, grad, x, *rest: _new_row_major(x.shape, x.dtype),
})
