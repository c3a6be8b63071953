"""Decompositions: the backward ops autograd's formulas call, for the joint (training) graph.

Each is the derivative of the matching forward op, written in core ops so the backward graph
lowers and fuses like the forward. Ops not here (``convolution_backward``, ``native_batch_norm_backward``,
``nll_loss_backward``, ...) stay whole and run through their ATen kernel.
"""
from __future__ import annotations

import math

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import compute_in_float32, round_scalar, scalar_like, to_dtype, upcast

aten = torch.ops.aten


@decomposition(aten.threshold_backward.default)
def threshold_backward(grad, x, threshold):
    # d/dx threshold(x) = 0 where x <= threshold (relu: threshold 0)
    return aten.where.self(aten.le.Scalar(x, threshold), scalar_like(0, grad), grad)


@decomposition(aten.tanh_backward.default)
@compute_in_float32
def tanh_backward(grad, y):
    # d tanh = 1 - tanh^2
    return aten.mul.Tensor(grad, aten.sub.Tensor(scalar_like(1, y), aten.mul.Tensor(y, y)))


@decomposition(aten.sigmoid_backward.default)
@compute_in_float32
def sigmoid_backward(grad, y):
    # d sigmoid = s (1 - s)
    return aten.mul.Tensor(grad, aten.mul.Tensor(y, aten.sub.Tensor(scalar_like(1, y), y)))


@decomposition(aten.silu_backward.default)
@compute_in_float32
def silu_backward(grad, x):
    # d (x s(x)) = s (1 + x (1 - s))
    s = aten.sigmoid.default(x)
    inner = aten.add.Scalar(aten.mul.Tensor(x, aten.sub.Tensor(scalar_like(1, s), s)), 1)
    return aten.mul.Tensor(grad, aten.mul.Tensor(s, inner))


@decomposition(aten.gelu_backward.default)
@compute_in_float32
def gelu_backward(grad, x, *, approximate="none"):
    if approximate == "tanh":
        # gelu = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
        k = math.sqrt(2 / math.pi)
        x2 = aten.mul.Tensor(x, x)
        u = aten.mul.Scalar(aten.add.Tensor(x, aten.mul.Scalar(aten.mul.Tensor(x2, x), 0.044715)), k)
        t = aten.tanh.default(u)
        du = aten.mul.Scalar(aten.add.Scalar(aten.mul.Scalar(x2, 3 * 0.044715), 1), k)
        sech2 = aten.sub.Tensor(scalar_like(1, t), aten.mul.Tensor(t, t))
        left = aten.mul.Scalar(aten.add.Scalar(t, 1), 0.5)
        right = aten.mul.Tensor(aten.mul.Scalar(x, 0.5), aten.mul.Tensor(sech2, du))
        return aten.mul.Tensor(grad, aten.add.Tensor(left, right))
    # gelu = x Phi(x): d = Phi(x) + x phi(x)
    cdf = aten.mul.Scalar(aten.add.Scalar(aten.erf.default(aten.mul.Scalar(x, 1 / math.sqrt(2))), 1), 0.5)
    pdf = aten.mul.Scalar(aten.exp.default(aten.mul.Scalar(aten.mul.Tensor(x, x), -0.5)), 1 / math.sqrt(2 * math.pi))
    return aten.mul.Tensor(grad, aten.add.Tensor(cdf, aten.mul.Tensor(x, pdf)))


@decomposition(aten._softmax_backward_data.default)
def softmax_backward_data(grad, y, dim, input_dtype):
    # dx = y (g - sum(g y))
    g, yf = upcast(grad), upcast(y)
    gy = aten.mul.Tensor(g, yf)
    out = aten.sub.Tensor(gy, aten.mul.Tensor(yf, aten.sum.dim_IntList(gy, [dim], True)))
    return to_dtype(out, input_dtype)


@decomposition(aten._log_softmax_backward_data.default)
def log_softmax_backward_data(grad, y, dim, input_dtype):
    # dx = g - exp(y) sum(g)
    g, yf = upcast(grad), upcast(y)
    out = aten.sub.Tensor(g, aten.mul.Tensor(aten.exp.default(yf), aten.sum.dim_IntList(g, [dim], True)))
    return to_dtype(out, input_dtype)


@decomposition(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(grad, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    n_norm = len(normalized_shape)
    inner = list(range(x.dim() - n_norm, x.dim()))
    outer = list(range(x.dim() - n_norm))
    n = 1
    for s in normalized_shape:
        n *= s
    g, xf = upcast(grad), upcast(x)
    x_hat = aten.mul.Tensor(aten.sub.Tensor(xf, mean), rstd)
    g_hat = aten.mul.Tensor(g, upcast(weight)) if weight is not None else g
    grad_x = grad_w = grad_b = None
    if output_mask[0]:
        if n == 0:
            grad_x = aten.mul.Scalar(g_hat, 0)
        else:
            # dx = rstd / N (N g_hat - sum(g_hat) - x_hat sum(g_hat x_hat))
            a = aten.mul.Scalar(g_hat, n)
            b = aten.sum.dim_IntList(g_hat, inner, True)
            c = aten.mul.Tensor(x_hat, aten.sum.dim_IntList(aten.mul.Tensor(g_hat, x_hat), inner, True))
            grad_x = aten.mul.Tensor(aten.div.Scalar(rstd, n), aten.sub.Tensor(aten.sub.Tensor(a, b), c))
        grad_x = to_dtype(grad_x, x.dtype)
    if output_mask[1] and weight is not None:
        gw = aten.mul.Tensor(g, x_hat)
        grad_w = to_dtype(aten.sum.dim_IntList(gw, outer, False) if outer else gw, weight.dtype)
    if output_mask[2] and bias is not None:
        grad_b = to_dtype(aten.sum.dim_IntList(g, outer, False) if outer else aten.clone.default(g), bias.dtype)
    return grad_x, grad_w, grad_b


@decomposition(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    if scale_grad_by_freq:
        return NotImplemented
    dim = grad.shape[-1]
    flat_grad = aten.view.default(aten.clone.default(grad, memory_format=torch.contiguous_format), [-1, dim])
    flat_idx = aten.view.default(aten.clone.default(indices, memory_format=torch.contiguous_format), [-1])
    if padding_idx is not None and padding_idx >= 0:
        keep = aten.unsqueeze.default(aten.ne.Scalar(flat_idx, padding_idx), 1)
        flat_grad = aten.where.self(keep, flat_grad, scalar_like(0, flat_grad))
    gf = upcast(flat_grad)
    zeros = aten.full.default([num_weights, dim], 0, dtype=gf.dtype, device=grad.device)
    out = aten.index_put.default(zeros, [flat_idx], gf, True)
    return to_dtype(out, grad.dtype)


# activations: where eager's CPU kernels take a branch, so does the decomposition -------------------
@decomposition(aten.elu_backward.default)
@compute_in_float32
def elu_backward(grad, alpha, scale, input_scale, is_result, x_or_y):
    # elu = scale * (x > 0 ? x : alpha (exp(input_scale x) - 1))
    neg_coef, pos_coef = alpha * scale, scale
    if is_result:  # from the output y: d = input_scale (y + neg_coef) where y <= 0
        negative = aten.mul.Scalar(aten.mul.Tensor(grad, aten.add.Scalar(x_or_y, neg_coef)), input_scale)
    else:
        e = aten.exp.default(aten.mul.Scalar(x_or_y, input_scale))
        negative = aten.mul.Tensor(grad, aten.mul.Scalar(e, input_scale * neg_coef))
    return aten.where.self(aten.le.Scalar(x_or_y, 0), negative, aten.mul.Scalar(grad, pos_coef))


@decomposition(aten.log_sigmoid_backward.default)
@compute_in_float32
def log_sigmoid_backward(grad, x, buffer):
    # d log(sigmoid(x)) = 1 - sigmoid(x), written with z = exp(-|x|) so it never overflows
    z = aten.exp.default(aten.neg.default(aten.abs.default(x)))
    frac = aten.div.Tensor(z, aten.add.Scalar(z, 1))
    negative = aten.lt.Scalar(x, 0)
    d = aten.where.self(negative, aten.rsub.Scalar(frac, 1), frac)
    return aten.mul.Tensor(grad, d)


@decomposition(aten.hardtanh_backward.default)
def hardtanh_backward(grad, x, min_val, max_val):
    outside = aten.logical_or.default(aten.le.Scalar(x, min_val), aten.ge.Scalar(x, max_val))
    return aten.where.self(outside, scalar_like(0, grad), grad)


@decomposition(aten.hardswish_backward.default)
@compute_in_float32
def hardswish_backward(grad, x):
    # hardswish = x relu6(x + 3) / 6: 0 up to -3, x/3 + 1/2 below 3, 1 from 3 on
    middle = aten.mul.Tensor(grad, aten.add.Scalar(aten.div.Scalar(x, 3), 0.5))
    inner = aten.where.self(aten.lt.Scalar(x, 3), middle, grad)
    return aten.where.self(aten.le.Scalar(x, -3), scalar_like(0, grad), inner)


@decomposition(aten.hardsigmoid_backward.default)
@compute_in_float32
def hardsigmoid_backward(grad, x):
    inside = aten.logical_and.default(aten.gt.Scalar(x, -3), aten.lt.Scalar(x, 3))
    return aten.where.self(inside, aten.div.Scalar(grad, 6), scalar_like(0, grad))


@decomposition(aten.leaky_relu_backward.default)
@compute_in_float32
def leaky_relu_backward(grad, x, negative_slope, self_is_result):
    return aten.where.self(aten.gt.Scalar(x, 0), grad, aten.mul.Scalar(grad, negative_slope))


@decomposition(aten.softshrink_backward.default, aten.hardshrink_backward.default)
def shrink_backward(grad, x, lambd):
    inside = aten.logical_and.default(aten.ge.Scalar(x, -lambd), aten.le.Scalar(x, lambd))
    return aten.where.self(inside, scalar_like(0, grad), grad)


@decomposition(aten.softplus_backward.default)
@compute_in_float32
def softplus_backward(grad, x, beta, threshold):
    # softplus = log(1 + exp(beta x)) / beta, linear above the threshold: d = z / (z + 1), z = exp(beta x)
    bx = aten.mul.Scalar(x, beta)
    z = aten.exp.default(bx)
    smooth = aten.mul.Tensor(grad, aten.div.Tensor(z, aten.add.Scalar(z, 1)))
    return aten.where.self(aten.gt.Scalar(bx, threshold), grad, smooth)


@decomposition(aten.logit_backward.default)
def logit_backward(grad, x, eps=None):
    # d logit = 1 / (x (1 - x)); outside [eps, 1 - eps] 0 (clamped), outside [0, 1] NaN (no eps);
    # the bounds in x's dtype, as the kernel's scalar_t(eps) and scalar_t(1) - eps
    if eps is None:
        low, high, fill = 0.0, 1.0, math.nan
    else:
        low = round_scalar(eps, x.dtype)
        high, fill = round_scalar(1.0 - low, x.dtype), 0.0
    return _logit_backward(grad, x, low, high, fill)


@compute_in_float32
def _logit_backward(grad, x, low, high, fill):
    d = aten.div.Tensor(grad, aten.mul.Tensor(x, aten.rsub.Scalar(x, 1)))
    outside = aten.logical_or.default(aten.lt.Scalar(x, low), aten.gt.Scalar(x, high))
    return aten.where.self(outside, scalar_like(fill, d), d)


@decomposition(aten.glu_backward.default)
@compute_in_float32
def glu_backward(grad, x, dim):
    # glu = a sigmoid(b), (a, b) the halves of x along dim
    a, b = aten.split.Tensor(x, x.shape[dim] // 2, dim)
    s = aten.sigmoid.default(b)
    grad_a = aten.mul.Tensor(grad, s)
    grad_b = aten.mul.Tensor(aten.mul.Tensor(grad_a, a), aten.rsub.Scalar(s, 1))
    return aten.cat.default([grad_a, grad_b], dim)


@decomposition(aten.native_dropout_backward.default)
def native_dropout_backward(grad, mask, scale):
    return aten.mul.Scalar(aten.mul.Tensor(grad, to_dtype(mask, grad.dtype)), scale)
