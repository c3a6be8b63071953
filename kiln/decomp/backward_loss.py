"""Decompositions: the backward ops of losses, batch norm and view ops, for the joint graph.

Like ``backward.py``: each is the derivative autograd's formula asks for, in core ops, so the
backward graph lowers and fuses instead of calling the ATen kernel. Picking the target class is a
comparison with an ``arange`` over the class dim (a one-hot mask), not a scatter.
"""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import compute_in_float32, mul_by_inverse, scalar_like, to_dtype, upcast

aten = torch.ops.aten
NONE, MEAN, SUM = 0, 1, 2


def _scale(t, x, reduction, scale: float = 1.0):
    """``t * scale``, divided by the number of elements for a mean."""
    if reduction == MEAN and x.numel():
        return mul_by_inverse(t, x.numel(), scale)
    return aten.mul.Scalar(t, scale)


def _per_element(grad, x, reduction):
    """The incoming gradient of a pointwise loss broadcast to ``x``'s elements (mean divides)."""
    return _scale(grad, x, reduction)


@decomposition(aten.mse_loss_backward.default)
@compute_in_float32
def mse_loss_backward(grad, x, target, reduction):
    return aten.mul.Tensor(_scale(aten.sub.Tensor(x, target), x, reduction, 2.0), grad)


@decomposition(aten.huber_loss_backward.default)
@compute_in_float32
def huber_loss_backward(grad, x, target, reduction, delta):
    g = _per_element(grad, x, reduction)
    d = aten.sub.Tensor(x, target)
    inner = aten.where.self(aten.gt.Scalar(d, delta), aten.mul.Scalar(g, delta), aten.mul.Tensor(d, g))
    return aten.where.self(aten.lt.Scalar(d, -delta), aten.mul.Scalar(g, -delta), inner)


@decomposition(aten.smooth_l1_loss_backward.default)
@compute_in_float32
def smooth_l1_loss_backward(grad, x, target, reduction, beta):
    g = aten.expand.default(_per_element(grad, x, reduction), list(x.shape))
    d = aten.sub.Tensor(x, target)
    # beta 0 is l1: the quadratic branch is never taken (its 0/0 is not selected)
    quadratic = aten.div.Scalar(aten.mul.Tensor(d, g), beta) if beta else aten.mul.Scalar(g, 0)
    inner = aten.where.self(aten.ge.Scalar(d, beta), g, quadratic)
    return aten.where.self(aten.le.Scalar(d, -beta), aten.neg.default(g), inner)


@decomposition(aten.soft_margin_loss_backward.default)
@compute_in_float32
def soft_margin_loss_backward(grad, x, target, reduction):
    # loss = log(1 + exp(-y x)): d/dx = -y z / (1 + z), z = exp(-y x)
    z = aten.exp.default(aten.neg.default(aten.mul.Tensor(target, x)))
    d = aten.neg.default(aten.mul.Tensor(target, aten.div.Tensor(z, aten.add.Scalar(z, 1))))
    return aten.mul.Tensor(d, _per_element(grad, x, reduction))


@decomposition(aten.binary_cross_entropy_backward.default)
@compute_in_float32
def binary_cross_entropy_backward(grad, x, target, weight=None, reduction=MEAN):
    # d/dx = (x - y) / max(x (1 - x), 1e-12), as eager's kernel clamps it
    denom = aten.clamp_min.default(aten.mul.Tensor(x, aten.rsub.Scalar(x, 1)), 1e-12)
    d = aten.div.Tensor(aten.sub.Tensor(x, target), denom)
    if weight is not None:
        d = aten.mul.Tensor(d, weight)
    return aten.mul.Tensor(d, _per_element(grad, x, reduction))


def _one_hot(x, target, class_dim):
    """(bool mask of x's shape: the target class of each sample, the target with the class dim kept)."""
    shape = [1] * x.dim()
    shape[class_dim] = x.shape[class_dim]
    classes = aten.view.default(aten.arange.default(x.shape[class_dim], dtype=torch.int64, device=x.device), shape)
    t = aten.unsqueeze.default(target, class_dim)
    return aten.eq.Tensor(classes, t), t


def _nll_backward(grad, x, target, weight, reduction, ignore_index, total_weight, class_dim):
    # d loss / d x[n, c] = -w[c] g_n at c = target[n] (not ignored), 0 elsewhere; mean divides by
    # the total weight
    hit, t = _one_hot(x, target, class_dim)
    hit = aten.logical_and.default(hit, aten.ne.Scalar(t, ignore_index))
    if reduction == NONE:
        g = aten.unsqueeze.default(grad, class_dim) if grad.dim() else grad
    elif reduction == MEAN:
        g = aten.div.Tensor(grad, total_weight)
    else:
        g = grad
    d = aten.neg.default(g)
    if weight is not None:
        shape = [1] * x.dim()
        shape[class_dim] = x.shape[class_dim]
        d = aten.mul.Tensor(d, aten.view.default(weight, shape))
    return aten.where.self(hit, to_dtype(d, x.dtype), scalar_like(0, x))


@decomposition(aten.nll_loss_backward.default)
def nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    if x.numel() == 0:
        return NotImplemented
    return _nll_backward(grad, x, target, weight, reduction, ignore_index, total_weight, 1 if x.dim() > 1 else 0)


@decomposition(aten.nll_loss2d_backward.default)
def nll_loss2d_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    if x.numel() == 0:
        return NotImplemented
    return _nll_backward(grad, x, target, weight, reduction, ignore_index, total_weight, 1)


def _per_row(d, grad, reduction, x):
    """``d`` ([N, C]: each row's loss gradient) scaled by the incoming gradient as the reduction took
    the rows (one grad per row, or the mean or sum of them), in ``x``'s shape."""
    if reduction == NONE:
        g = aten.reshape.default(grad, [-1, 1])
    else:
        g = aten.div.Scalar(grad, d.shape[0]) if reduction == MEAN else grad
    return aten.reshape.default(aten.mul.Tensor(d, g), list(x.shape))


@decomposition(aten.multi_margin_loss_backward.default)
@compute_in_float32
def multi_margin_loss_backward(grad, x, target, p, margin, weight=None, reduction=MEAN):
    # loss_n = sum_{i != y} max(0, margin - x[y] + x[i])^p w[y] / C, over rows of x as [N, C]
    if x.numel() == 0 or p not in (1, 2):
        return NotImplemented
    n_classes = x.shape[-1] if x.dim() else 1
    rows = aten.reshape.default(x, [-1, n_classes])
    hit, _ = _one_hot(rows, aten.reshape.default(target, [-1]), 1)
    zero = scalar_like(0, x)
    x_target = aten.sum.dim_IntList(aten.where.self(hit, rows, zero), [1], True)
    z = aten.add.Tensor(aten.rsub.Scalar(x_target, margin), rows)
    active = aten.logical_and.default(aten.gt.Scalar(z, 0), aten.logical_not.default(hit))
    h = aten.mul.Scalar(z, 2) if p == 2 else aten.ones_like.default(z)
    if weight is not None:
        w_rows = aten.expand.default(aten.view.default(weight, [1, n_classes]), list(rows.shape))
        h = aten.mul.Tensor(h, aten.sum.dim_IntList(aten.where.self(hit, w_rows, zero), [1], True))
    others = aten.where.self(active, h, zero)
    at_target = aten.neg.default(aten.sum.dim_IntList(others, [1], True))
    d = aten.div.Scalar(aten.where.self(hit, at_target, others), n_classes)
    return _per_row(d, grad, reduction, x)


@decomposition(aten.multilabel_margin_loss_backward.default)
@compute_in_float32
def multilabel_margin_loss_backward(grad, x, target, reduction, is_target):
    # loss_n = sum over targets j (the prefix of target_n before the first -1) and non-targets i of
    # max(0, 1 - x[y_j] + x[i]) / C: each active pair adds 1/C at i and takes 1/C at y_j
    if x.numel() == 0:
        return NotImplemented
    n_classes = x.shape[-1] if x.dim() else 1
    rows = aten.reshape.default(x, [-1, n_classes])  # [N, C]
    ys = aten.reshape.default(target, [-1, n_classes])  # [N, J], J = C
    valid = aten.eq.Scalar(aten.cumsum.default(to_dtype(aten.lt.Scalar(ys, 0), torch.int64), 1), 0)
    classes = aten.view.default(aten.arange.default(n_classes, dtype=torch.int64, device=x.device), [1, 1, n_classes])
    pick = aten.logical_and.default(aten.eq.Tensor(aten.unsqueeze.default(ys, 2), classes),
                                    aten.unsqueeze.default(valid, 2))  # [N, J, C]: class y_j
    zero = scalar_like(0, x)
    x_target = aten.sum.dim_IntList(aten.where.self(pick, aten.unsqueeze.default(rows, 1), zero), [2], False)  # [N, J]
    z = aten.add.Tensor(aten.rsub.Scalar(aten.unsqueeze.default(x_target, 2), 1), aten.unsqueeze.default(rows, 1))
    non_target = aten.eq.Scalar(aten.reshape.default(is_target, [-1, 1, n_classes]), 0)
    active = aten.logical_and.default(aten.logical_and.default(aten.gt.Scalar(z, 0), non_target),
                                      aten.unsqueeze.default(valid, 2))  # [N, J, C]
    ones = to_dtype(active, x.dtype)
    gained = aten.sum.dim_IntList(ones, [1], False)  # [N, C]: at non-targets i
    lost_per_target = aten.sum.dim_IntList(ones, [2], True)  # [N, J, 1]
    lost = aten.sum.dim_IntList(aten.where.self(pick, lost_per_target, zero), [1], False)  # [N, C]
    d = aten.div.Scalar(aten.sub.Tensor(gained, lost), n_classes)
    return _per_row(d, grad, reduction, x)


@decomposition(aten.native_batch_norm_backward.default)
def native_batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                               output_mask):
    if x.numel() == 0 or x.dim() < 2:
        return NotImplemented
    channels = x.shape[1]
    shape = [1, channels] + [1] * (x.dim() - 2)
    axes = [0] + list(range(2, x.dim()))
    g, xf = upcast(grad), upcast(x)
    if train:
        mean, invstd = upcast(save_mean), upcast(save_invstd)
    else:
        mean = upcast(running_mean)
        invstd = aten.rsqrt.default(aten.add.Scalar(upcast(running_var), eps))
    mean, invstd = aten.view.default(mean, shape), aten.view.default(invstd, shape)
    x_hat = aten.mul.Tensor(aten.sub.Tensor(xf, mean), invstd)
    scale = invstd if weight is None else aten.mul.Tensor(invstd, aten.view.default(upcast(weight), shape))
    # sum(g) and sum(g x_hat) per channel, each computed once for the input's gradient and the bias's and
    # weight's (kept-dim and dropped-dim sums are different ops: made twice, they were two more reductions
    # per layer, and under split reductions two more kernels each)
    grad_x = grad_w = grad_b = None
    x_train = output_mask[0] and train
    sum_g = aten.sum.dim_IntList(g, axes, False) if x_train or output_mask[2] else None
    sum_gx = aten.sum.dim_IntList(aten.mul.Tensor(g, x_hat), axes, False) if x_train or output_mask[1] else None
    if output_mask[0]:
        if train:
            # (g - mean(g) - x_hat mean(g x_hat)) invstd w
            n = x.numel() // channels
            g_mean = aten.div.Scalar(aten.view.default(sum_g, shape), n)
            proj = aten.div.Scalar(aten.view.default(sum_gx, shape), n)
            centered = aten.sub.Tensor(aten.sub.Tensor(g, g_mean), aten.mul.Tensor(x_hat, proj))
            grad_x = aten.mul.Tensor(centered, scale)
        else:
            grad_x = aten.mul.Tensor(g, scale)
        grad_x = to_dtype(grad_x, x.dtype)
    if output_mask[1]:
        grad_w = to_dtype(sum_gx, weight.dtype if weight is not None else x.dtype)
    if output_mask[2]:
        grad_b = to_dtype(sum_g, weight.dtype if weight is not None else x.dtype)
    return grad_x, grad_w, grad_b


# view ops: the gradient lands in a zero tensor of the input's shape -------------------------------
def _zeros(grad, sizes):
    return aten.full.default(list(sizes), 0, dtype=grad.dtype, device=grad.device)


@decomposition(aten.slice_backward.default)
def slice_backward(grad, input_sizes, dim, start, end, step):
    return aten.slice_scatter.default(_zeros(grad, input_sizes), grad, dim, start, end, step)


@decomposition(aten.select_backward.default)
def select_backward(grad, input_sizes, dim, index):
    return aten.select_scatter.default(_zeros(grad, input_sizes), grad, dim, index)


@decomposition(aten.diagonal_backward.default)
def diagonal_backward(grad, input_sizes, offset, dim1, dim2):
    return aten.diagonal_scatter.default(_zeros(grad, input_sizes), grad, offset, dim1, dim2)


@decomposition(aten.fractional_max_pool3d_backward.default, aten.fractional_max_pool2d_backward.default)
def fractional_max_pool_backward(grad, x, kernel_size, output_size, indices):
    # indices are flat positions in each input plane: the gradient adds up at them
    spatial = len(output_size)
    plane = 1
    for s in x.shape[-spatial:]:
        plane *= s
    lead = list(x.shape[:-spatial])
    flat_grad = aten.reshape.default(grad, lead + [-1])
    flat_idx = aten.reshape.default(indices, lead + [-1])
    zeros = _zeros(grad, lead + [plane])
    return aten.reshape.default(aten.scatter_add.default(zeros, -1, flat_idx, flat_grad), list(x.shape))
