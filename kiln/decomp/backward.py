"""Decompositions: the backward ops autograd's formulas call, for the joint (training) graph.

Each is the derivative of the matching forward op, written in core ops so the backward graph
lowers and fuses like the forward. Ops not here (``convolution_backward``, ``native_batch_norm_backward``,
``nll_loss_backward``, ...) stay whole and run through their ATen kernel.
"""
from __future__ import annotations

import math

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import compute_in_float32, scalar_like, to_dtype, upcast

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
