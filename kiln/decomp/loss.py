"""Decompositions: nll_loss (with cross_entropy on top of log_softmax), mse, l1, smooth_l1, huber, bce."""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import compute_in_float32, scalar_like, to_dtype

aten = torch.ops.aten
NONE, MEAN, SUM = 0, 1, 2


def _reduce(loss, reduction):
    if reduction == MEAN:
        return aten.mean.default(loss)
    if reduction == SUM:
        return aten.sum.default(loss)
    return loss


def _nll(x, target, weight, reduction, ignore_index, class_dim):
    if x.numel() == 0 or target.numel() == 0:
        return NotImplemented
    valid = aten.ne.Scalar(target, ignore_index)
    safe = aten.where.self(valid, target, aten.zeros_like.default(target))
    picked = aten.squeeze.dim(aten.gather.default(x, class_dim, aten.unsqueeze.default(safe, class_dim)), class_dim)
    zero = scalar_like(0, x)
    if weight is not None:
        w = aten.index.Tensor(weight, [safe])
        w = aten.where.self(valid, w, zero)
    else:
        w = to_dtype(valid, x.dtype)
    losses = aten.where.self(valid, aten.neg.default(aten.mul.Tensor(picked, w) if weight is not None else picked), zero)
    if reduction == NONE:
        return losses, aten.new_zeros.default(x, [])
    total_weight = aten.sum.default(w)
    summed = aten.sum.default(losses)
    if reduction == SUM:
        return summed, total_weight
    return aten.div.Tensor(summed, total_weight), total_weight


@decomposition(aten.nll_loss_forward.default)
def nll_loss_forward(x, target, weight, reduction, ignore_index):
    return _nll(x, target, weight, reduction, ignore_index, 1 if x.dim() > 1 else 0)


@decomposition(aten.nll_loss2d_forward.default)
def nll_loss2d_forward(x, target, weight, reduction, ignore_index):
    return _nll(x, target, weight, reduction, ignore_index, 1)


@decomposition(aten.mse_loss.default)
def mse_loss(x, target, reduction=MEAN):
    diff = aten.sub.Tensor(x, target)
    return _reduce(aten.mul.Tensor(diff, diff), reduction)


@decomposition(aten.l1_loss.default)
def l1_loss(x, target, reduction=MEAN):
    return _reduce(aten.abs.default(aten.sub.Tensor(x, target)), reduction)


@decomposition(aten.smooth_l1_loss.default)
def smooth_l1_loss(x, target, reduction=MEAN, beta=1.0):
    if beta == 0:
        return l1_loss(x, target, reduction)
    d = aten.abs.default(aten.sub.Tensor(x, target))
    quad = aten.div.Scalar(aten.mul.Scalar(aten.mul.Tensor(d, d), 0.5), beta)
    return _reduce(aten.where.self(aten.lt.Scalar(d, beta), quad, aten.sub.Scalar(d, 0.5 * beta)), reduction)


@decomposition(aten.huber_loss.default)
def huber_loss(x, target, reduction=MEAN, delta=1.0):
    d = aten.abs.default(aten.sub.Tensor(x, target))
    quad = aten.mul.Scalar(aten.mul.Tensor(d, d), 0.5)
    lin = aten.mul.Scalar(aten.sub.Scalar(d, 0.5 * delta), delta)
    return _reduce(aten.where.self(aten.lt.Scalar(d, delta), quad, lin), reduction)


@decomposition(aten.binary_cross_entropy.default)
@compute_in_float32
def binary_cross_entropy(x, target, weight=None, reduction=MEAN):
    # eager clamps the logs at -100
    log_x = aten.clamp_min.default(aten.log.default(x), -100)
    log_1mx = aten.clamp_min.default(aten.log1p.default(aten.neg.default(x)), -100)
    loss = aten.neg.default(aten.add.Tensor(aten.mul.Tensor(target, log_x),
                                            aten.mul.Tensor(aten.rsub.Scalar(target, 1), log_1mx)))
    if weight is not None:
        loss = aten.mul.Tensor(loss, weight)
    return _reduce(loss, reduction)


@decomposition(aten.binary_cross_entropy_with_logits.default)
@compute_in_float32
def binary_cross_entropy_with_logits(x, target, weight=None, pos_weight=None, reduction=MEAN):
    # (1 - t) * x + (1 + (pw - 1) * t) * softplus(-x), with softplus(-x) = log1p(exp(-|x|)) + max(-x, 0)
    softplus_neg = aten.add.Tensor(aten.log1p.default(aten.exp.default(aten.neg.default(aten.abs.default(x)))),
                                   aten.clamp_min.default(aten.neg.default(x), 0))
    if pos_weight is not None:
        coef = aten.add.Scalar(aten.mul.Tensor(aten.sub.Scalar(pos_weight, 1), target), 1)
        loss = aten.add.Tensor(aten.mul.Tensor(aten.rsub.Scalar(target, 1), x), aten.mul.Tensor(coef, softplus_neg))
    else:
        loss = aten.add.Tensor(aten.mul.Tensor(aten.rsub.Scalar(target, 1), x), softplus_neg)
    if weight is not None:
        loss = aten.mul.Tensor(loss, weight)
    return _reduce(loss, reduction)


@decomposition(aten.soft_margin_loss.default)
@compute_in_float32
def soft_margin_loss(x, target, reduction=MEAN):
    return _reduce(aten.log1p.default(aten.exp.default(aten.neg.default(aten.mul.Tensor(x, target)))), reduction)


@decomposition(aten._use_cudnn_ctc_loss.default, aten._use_cudnn_ctc_loss.Tensor)
def use_cudnn_ctc_loss(*args):
    """ctc_loss asks whether cuDNN could run it (a question without a meta kernel): kiln answers no,
    so the traced graph holds ATen's own CTC kernel, which computes the same loss."""
    return False
