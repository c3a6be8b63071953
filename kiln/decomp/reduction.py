"""Decompositions: mean, var, std, logsumexp, norms, max/min with indices."""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import canonical_dims, numel_of, to_dtype, upcast

aten = torch.ops.aten


def _sum(x, dims, keepdim, dtype=None):
    return aten.sum.dim_IntList(x, dims, keepdim, dtype=dtype)


@decomposition(aten.mean.dim)
def mean_dim(x, dim=None, keepdim=False, dtype=None):
    if x.is_complex() or not (x.is_floating_point() or dtype is not None):
        return NotImplemented
    dims = canonical_dims(dim, x.dim())
    out_dtype = dtype or x.dtype
    total = _sum(upcast(to_dtype(x, out_dtype)), dims, keepdim)
    return to_dtype(aten.div.Scalar(total, numel_of(x, dims)), out_dtype)


@decomposition(aten.mean.default)
def mean(x, dtype=None):
    return mean_dim(x, None, False, dtype)


def _var(x, dims, correction, keepdim):
    """(var, mean) in x's compute dtype; mean has kept dims."""
    xf = upcast(x)
    n = numel_of(x, dims)
    mean = aten.div.Scalar(_sum(xf, dims, True), n)
    centered = aten.sub.Tensor(xf, mean)
    sq = aten.mul.Tensor(centered, centered)
    var = aten.div.Scalar(_sum(sq, dims, keepdim), max(n - correction, 0))
    return var, mean


def _correction(correction, unbiased=None):
    if correction is None:
        return 1 if unbiased is None or unbiased else 0
    return correction


@decomposition(aten.var.correction)
def var(x, dim=None, *, correction=None, keepdim=False):
    if x.is_complex() or not x.is_floating_point():
        return NotImplemented
    v, _ = _var(x, canonical_dims(dim, x.dim()), _correction(correction), keepdim)
    return to_dtype(v, x.dtype)


@decomposition(aten.std.correction)
def std(x, dim=None, *, correction=None, keepdim=False):
    if x.is_complex() or not x.is_floating_point():
        return NotImplemented
    v, _ = _var(x, canonical_dims(dim, x.dim()), _correction(correction), keepdim)
    return to_dtype(aten.sqrt.default(v), x.dtype)


@decomposition(aten.var_mean.correction)
def var_mean(x, dim=None, *, correction=None, keepdim=False):
    if x.is_complex() or not x.is_floating_point():
        return NotImplemented
    dims = canonical_dims(dim, x.dim())
    v, m = _var(x, dims, _correction(correction), keepdim)
    if not keepdim:
        m = aten.squeeze.dims(m, dims) if x.dim() else m
    return to_dtype(v, x.dtype), to_dtype(m, x.dtype)


@decomposition(aten.std_mean.correction)
def std_mean(x, dim=None, *, correction=None, keepdim=False):
    out = var_mean(x, dim, correction=correction, keepdim=keepdim)
    if out is NotImplemented:
        return out
    v, m = out
    return to_dtype(aten.sqrt.default(upcast(v)), x.dtype), m


@decomposition(aten.logsumexp.default)
def logsumexp(x, dim, keepdim=False):
    if not x.is_floating_point() or x.numel() == 0:
        return NotImplemented
    dims = canonical_dims(dim, x.dim())
    xf = upcast(x)
    m = aten.amax.default(xf, dims, True)
    # an all -inf (or +inf) slice: shift by 0 instead of by inf
    m = aten.where.self(aten.isinf.default(m), aten.zeros_like.default(m), m)
    out = aten.add.Tensor(aten.log.default(_sum(aten.exp.default(aten.sub.Tensor(xf, m)), dims, True)), m)
    if not keepdim:
        out = aten.squeeze.dims(out, dims) if x.dim() else out
    return to_dtype(out, x.dtype)


@decomposition(aten.linalg_vector_norm.default)
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    if x.is_complex() or not x.is_floating_point() or x.numel() == 0:
        return NotImplemented
    out_dtype = dtype or x.dtype
    dims = canonical_dims(dim, x.dim())
    xf = upcast(to_dtype(x, out_dtype))
    a = aten.abs.default(xf)
    if ord == float("inf"):
        out = aten.amax.default(a, dims, keepdim)
    elif ord == float("-inf"):
        out = aten.amin.default(a, dims, keepdim)
    elif ord == 0:
        out = _sum(to_dtype(aten.ne.Scalar(a, 0), a.dtype), dims, keepdim)
    elif ord == 1:
        out = _sum(a, dims, keepdim)
    elif ord == 2:
        out = aten.sqrt.default(_sum(aten.mul.Tensor(a, a), dims, keepdim))
    else:
        out = aten.pow.Tensor_Scalar(_sum(aten.pow.Tensor_Scalar(a, ord), dims, keepdim), 1.0 / ord)
    return to_dtype(out, out_dtype)


def _with_index(x, dim, keepdim, value_op, index_op):
    if x.dim() == 0:  # the value itself, at index 0
        return aten.clone.default(x), aten.full.default([], 0, dtype=torch.int64, device=x.device)
    return value_op(x, [dim], keepdim), index_op(x, dim, keepdim)


@decomposition(aten.max.dim)
def max_dim(x, dim, keepdim=False):
    if x.numel() == 0 or x.dtype == torch.bool:
        return NotImplemented
    return _with_index(x, dim, keepdim, aten.amax.default, aten.argmax.default)


@decomposition(aten.min.dim)
def min_dim(x, dim, keepdim=False):
    if x.numel() == 0 or x.dtype == torch.bool:
        return NotImplemented
    return _with_index(x, dim, keepdim, aten.amin.default, aten.argmin.default)


@decomposition(aten.max.default)
def max_all(x):
    if x.numel() == 0 or x.dtype == torch.bool:
        return NotImplemented
    return aten.amax.default(x, list(range(x.dim())))


@decomposition(aten.min.default)
def min_all(x):
    if x.numel() == 0 or x.dtype == torch.bool:
        return NotImplemented
    return aten.amin.default(x, list(range(x.dim())))


@decomposition(aten.aminmax.default)
def aminmax(x, *, dim=None, keepdim=False):
    dims = canonical_dims(dim, x.dim())
    if x.dtype == torch.bool or any(x.shape[d] == 0 for d in dims if x.dim()) or x.dim() == 0 and x.numel() == 0:
        return NotImplemented
    return aten.amin.default(x, dims, keepdim), aten.amax.default(x, dims, keepdim)


@decomposition(aten.nansum.default)
def nansum(x, dim=None, keepdim=False, *, dtype=None):
    if not x.is_floating_point():
        return NotImplemented
    cleaned = aten.where.self(aten.isnan.default(x), aten.zeros_like.default(x), x)
    dims = canonical_dims(dim, x.dim())
    return _sum(cleaned, dims, keepdim, dtype)


@decomposition(aten.count_nonzero.dim_IntList)
def count_nonzero(x, dim):
    return _sum(aten.ne.Scalar(x, 0), canonical_dims(dim, x.dim()), False, torch.int64)


@decomposition(aten.count_nonzero.default)
def count_nonzero_all(x, dim=None):
    return _sum(aten.ne.Scalar(x, 0), canonical_dims(dim, x.dim()), False, torch.int64)


@decomposition(aten.sum.default)
def sum_all(x, *, dtype=None):
    return aten.sum.dim_IntList(x, [], False, dtype=dtype)
