"""Decompositions: composite ops that ATen runs as kernels of their own but that are exactly core ops
(norms, trace, cross products, index_reduce as scatter_reduce, max_unpool as a scatter).
"""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import scalar_like

aten = torch.ops.aten


@decomposition(aten.trace.default)
def trace(x):
    if x.dim() != 2 or x.dtype == torch.bool or x.is_complex():
        return NotImplemented
    return aten.sum.default(aten.diagonal.default(x))


@decomposition(aten.vdot.default)
def vdot(x, y):
    """Real vectors: the BLAS dot eager calls too (complex ones conjugate ``x``: left whole)."""
    if x.is_complex() or y.is_complex() or x.dtype != y.dtype:
        return NotImplemented
    return aten.dot.default(x, y)


def _vector_norm(x, p, dim=None, keepdim=False, dtype=None):
    if x.is_complex() or not (x.is_floating_point() or dtype is not None and dtype.is_floating_point):
        return NotImplemented
    p = 2 if p is None else p
    return aten.linalg_vector_norm.default(x, p, dim, keepdim, dtype=dtype)


@decomposition(aten.norm.Scalar)
def norm_scalar(x, p=2):
    return _vector_norm(x, p)


@decomposition(aten.norm.ScalarOpt_dim)
def norm_dim(x, p, dim, keepdim=False):
    return _vector_norm(x, p, dim, keepdim)


@decomposition(aten.norm.ScalarOpt_dim_dtype)
def norm_dim_dtype(x, p, dim, keepdim, *, dtype):
    return _vector_norm(x, p, dim, keepdim, dtype)


@decomposition(aten.norm.ScalarOpt_dtype)
def norm_dtype(x, p, *, dtype):
    return _vector_norm(x, p, None, False, dtype)


@decomposition(aten.dist.default)
def dist(x, y, p=2):
    """ATen's: ``norm(x - y, p)``."""
    return _vector_norm(aten.sub.Tensor(x, y), p)


@decomposition(aten.renorm.default)
def renorm(x, p, dim, maxnorm):
    """ATen's: sub-tensors along ``dim`` whose p-norm exceeds ``maxnorm`` scaled by ``maxnorm / (norm + 1e-7)``."""
    if not x.is_floating_point() or x.dim() == 0:
        return NotImplemented
    dim %= x.dim()
    dims = [d for d in range(x.dim()) if d != dim]
    norm = aten.linalg_vector_norm.default(x, p, dims, True)
    scaled = aten.div.Tensor(scalar_like(maxnorm, norm), aten.add.Scalar(norm, 1e-7))
    factor = aten.where.self(aten.gt.Scalar(norm, maxnorm), scaled, scalar_like(1.0, norm))
    return aten.mul.Tensor(x, factor)


@decomposition(aten.linalg_cross.default)
def linalg_cross(a, b, dim=-1):
    """``a[i+1] * b[i+2] - a[i+2] * b[i+1]`` along ``dim`` (ATen's CPU kernel's formula)."""
    if a.is_complex() or b.is_complex() or a.dtype != b.dtype:
        return NotImplemented
    ndim = max(a.dim(), b.dim())
    dim %= ndim
    if a.dim() != b.dim():
        return NotImplemented

    def rolled(t, shift):
        index = aten.remainder.Scalar(aten.add.Scalar(aten.arange.start_step(0, 3, 1, dtype=torch.int64, device=t.device),
                                                      shift), 3)
        return aten.index_select.default(t, dim, index)

    return aten.sub.Tensor(aten.mul.Tensor(rolled(a, 1), rolled(b, 2)), aten.mul.Tensor(rolled(a, 2), rolled(b, 1)))


_INDEX_REDUCE = {"prod": "prod", "mean": "mean", "amax": "amax", "amin": "amin"}


@decomposition(aten.index_reduce.default)
def index_reduce(x, dim, index, source, reduce, include_self=True):
    """``scatter_reduce`` with ``index`` spread over ``source``'s other dims: the same reductions
    (eager's index_reduce and scatter_reduce share their NaN and integer-mean rules)."""
    if reduce not in _INDEX_REDUCE or x.is_complex():
        return NotImplemented
    if source.dim() == 0:
        idx = aten.view.default(index, [])
    else:
        dim %= source.dim()
        shape = [1] * source.dim()
        shape[dim] = index.shape[0] if index.dim() else 1
        idx = aten.expand.default(aten.view.default(index, shape), list(source.shape))
    return aten.scatter_reduce.two(x, dim if x.dim() else 0, idx, source, _INDEX_REDUCE[reduce], include_self=include_self)


def _max_unpool(x, indices, spatial):
    """Zeros of the output size with ``x`` scattered to the flat spatial ``indices`` (per batch and channel)."""
    lead = list(x.shape[:-len(spatial)])
    flat_in = aten.reshape.default(x, lead + [-1])
    flat_idx = aten.reshape.default(indices, lead + [-1])
    n = 1
    for s in spatial:
        n *= s
    zeros = aten.full.default(lead + [n], 0, dtype=x.dtype, device=x.device)
    out = aten.scatter.src(zeros, len(lead), flat_idx, flat_in)
    return aten.view.default(out, lead + list(spatial))


@decomposition(aten.max_unpool2d.default)
def max_unpool2d(x, indices, output_size):
    if x.dim() not in (3, 4) or tuple(x.shape) != tuple(indices.shape) or x.is_complex():
        return NotImplemented
    return _max_unpool(x, indices, list(output_size))


@decomposition(aten.max_unpool3d.default)
def max_unpool3d(x, indices, output_size, stride, padding):
    if x.dim() not in (4, 5) or tuple(x.shape) != tuple(indices.shape) or x.is_complex():
        return NotImplemented
    return _max_unpool(x, indices, list(output_size))


# ----------------------------------------------------------------------------- 0-dim gathers and scatters
# ATen treats a 0-dim operand of gather/scatter as one of size 1: the same op on 1-element views.

def _one(t):
    return aten.view.default(t, [1]) if isinstance(t, torch.Tensor) and t.dim() == 0 else t


def _zero_dim(x, index, src=None) -> bool:
    tensors = [t for t in (x, index, src) if isinstance(t, torch.Tensor)]
    return any(t.dim() == 0 for t in tensors) and all(t.dim() <= 1 for t in tensors)


@decomposition(aten.gather.default)
def gather_0d(x, dim, index, *, sparse_grad=False):
    if not _zero_dim(x, index):
        return NotImplemented
    return aten.view.default(aten.gather.default(_one(x), 0, _one(index)), list(index.shape))


def _scatter_0d(op):
    def decompose(x, dim, index, src, *args, **kwargs):
        if not _zero_dim(x, index, src):
            return NotImplemented
        return aten.view.default(op(_one(x), 0, _one(index), _one(src), *args, **kwargs), list(x.shape))

    decompose.__name__ = f"{op.__name__.replace('.', '_')}_0d"
    return decompose


for _op in (aten.scatter.src, aten.scatter.value, aten.scatter.reduce, aten.scatter.value_reduce,
            aten.scatter_add.default, aten.scatter_reduce.two):
    decomposition(_op)(_scatter_0d(_op))
