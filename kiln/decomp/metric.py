"""Decompositions: pairwise distances (``_cdist_forward``), ``multi_margin_loss`` and ``embedding_renorm``
(``F.embedding(max_norm=...)``), on ATen's own paths and formulas. (``_pdist_forward`` keeps ATen's
kernel: a gather of every pair's rows was 2-25x slower than eager's on CPU.)
"""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import scalar_like

aten = torch.ops.aten


def _norm_last(d, p):
    """ATen's direct distance of difference vectors ``d`` along the last dim."""
    return aten.linalg_vector_norm.default(d, p, [-1], False)


def _euclidean_by_matmul(x1, x2):
    """ATen's ``_euclidean_dist``: ``[-2 x1, |x1|^2, 1] @ [x2, 1, |x2|^2]^T``, clamped at 0, square root."""
    x1_norm = aten.sum.dim_IntList(aten.mul.Tensor(x1, x1), [-1], True)
    x2_norm = aten.sum.dim_IntList(aten.mul.Tensor(x2, x2), [-1], True)
    x1_ = aten.cat.default([aten.mul.Scalar(x1, -2), x1_norm, aten.ones_like.default(x1_norm)], -1)
    x2_ = aten.cat.default([x2, aten.ones_like.default(x2_norm), x2_norm], -1)
    batch = list(torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    a = aten.reshape.default(aten.expand.default(x1_, batch + list(x1_.shape[-2:])), [-1] + list(x1_.shape[-2:]))
    b = aten.reshape.default(aten.expand.default(x2_, batch + list(x2_.shape[-2:])), [-1] + list(x2_.shape[-2:]))
    product = aten.bmm.default(a, aten.transpose.int(b, 1, 2))
    product = aten.reshape.default(product, batch + [x1.shape[-2], x2.shape[-2]])
    return aten.sqrt.default(aten.clamp_min.default(product, 0))


@decomposition(aten._euclidean_dist.default)
def euclidean_dist(x1, x2):
    if not x1.is_floating_point() or x1.dim() < 2 or x2.dim() < 2:
        return NotImplemented
    return _euclidean_by_matmul(x1, x2)


@decomposition(aten._cdist_forward.default)
def cdist(x1, x2, p, compute_mode=None):
    if x1.is_complex() or not x1.is_floating_point() or x1.dim() < 2 or x2.dim() < 2:
        return NotImplemented
    mode = 0 if compute_mode is None else compute_mode
    r1, r2 = x1.shape[-2], x2.shape[-2]
    if isinstance(r1, torch.SymInt) or isinstance(r2, torch.SymInt):
        return NotImplemented
    if p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25))):
        return _euclidean_by_matmul(x1, x2)
    diff = aten.sub.Tensor(aten.unsqueeze.default(x1, -2), aten.unsqueeze.default(x2, -3))  # (..., r1, r2, m)
    if diff.numel() == 0:  # no pairs, or no features (distance 0)
        return aten.full.default(list(diff.shape[:-1]), 0, dtype=x1.dtype, device=x1.device)
    return _norm_last(diff, p)


@decomposition(aten.multi_margin_loss.default)
def multi_margin_loss(x, target, p=1, margin=1, weight=None, reduction=1):
    """ATen's CPU kernel: per row, ``sum over j != y of max(0, margin - x[y] + x[j])^p (* w[y]) / C``;
    then the mean (reduction 1), sum (2) or nothing (0)."""
    if p not in (1, 2) or not x.is_floating_point() or x.dim() > 2:
        return NotImplemented
    rows = aten.reshape.default(x, [-1 if x.dim() == 2 else 1, x.shape[-1] if x.dim() else 1])
    t = aten.reshape.default(target, [-1, 1])
    picked = aten.gather.default(rows, 1, t)
    z = aten.add.Tensor(aten.rsub.Scalar(picked, margin), rows)
    h = z if p == 1 else aten.mul.Tensor(z, z)
    if weight is not None:
        h = aten.mul.Tensor(h, aten.index.Tensor(weight, [t]))
    classes = aten.arange.start_step(0, rows.shape[1], 1, dtype=torch.int64, device=x.device)
    keep = aten.logical_and.default(aten.gt.Scalar(z, 0), aten.ne.Tensor(classes, t))
    h = aten.where.self(keep, h, scalar_like(0.0, h))
    per_row = aten.div.Scalar(aten.sum.dim_IntList(h, [1]), rows.shape[1])
    if reduction == 0:
        return per_row if x.dim() == 2 else aten.view.default(per_row, [])
    total = aten.sum.default(per_row)
    return aten.div.Scalar(total, rows.shape[0]) if reduction == 1 else total


@decomposition(aten.embedding_renorm.default)
def embedding_renorm(weight, indices, max_norm, norm_type):
    """Rows named by ``indices`` (each once) whose ``norm_type``-norm exceeds ``max_norm`` scaled by
    ``max_norm / (norm + 1e-7)``; the others unchanged."""
    if not weight.is_floating_point() or weight.dim() != 2:
        return NotImplemented
    named = aten.index_put.default(aten.full.default([weight.shape[0]], False, dtype=torch.bool, device=weight.device),
                                   [aten.reshape.default(indices, [-1])], scalar_like(True, weight, torch.bool), False)
    norm = aten.linalg_vector_norm.default(weight, norm_type, [1], True)
    scale = aten.div.Tensor(scalar_like(max_norm, norm), aten.add.Scalar(norm, 1e-7))
    rescale = aten.logical_and.default(aten.unsqueeze.default(named, 1), aten.gt.Scalar(norm, max_norm))
    return aten.where.self(rescale, aten.mul.Tensor(weight, scale), weight)
