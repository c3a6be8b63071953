"""Decompositions: layer_norm, group_norm, batch_norm (training and inference, running stats)."""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import to_dtype, upcast

aten = torch.ops.aten


def _normalize(x, dims, eps):
    """(x - mean) * rstd over ``dims``; returns (normalized, mean, rstd, biased var) with kept dims."""
    mean = aten.mean.dim(x, dims, True)
    centered = aten.sub.Tensor(x, mean)
    var = aten.mean.dim(aten.mul.Tensor(centered, centered), dims, True)
    rstd = aten.rsqrt.default(aten.add.Scalar(var, eps))
    return aten.mul.Tensor(centered, rstd), mean, rstd, var


@decomposition(aten.native_layer_norm.default)
def native_layer_norm(x, normalized_shape, weight, bias, eps):
    axis = x.dim() - len(normalized_shape)
    dims = list(range(axis, x.dim()))
    out, mean, rstd, _ = _normalize(upcast(x), dims, eps)
    if weight is not None:
        out = aten.mul.Tensor(out, weight)
    if bias is not None:
        out = aten.add.Tensor(out, bias)
    # mean/rstd come back in the input's dtype on CPU (float32 for half inputs on GPU)
    stat_dtype = x.dtype if x.device.type == "cpu" else upcast(mean).dtype
    return to_dtype(out, x.dtype), to_dtype(mean, stat_dtype), to_dtype(rstd, stat_dtype)


@decomposition(aten.native_group_norm.default)
def native_group_norm(x, weight, bias, n, c, hw, group, eps):
    grouped = aten.view.default(upcast(x) if x.is_contiguous() else aten.clone.default(upcast(x), memory_format=torch.contiguous_format), [n, group, -1])
    out, mean, rstd, _ = _normalize(grouped, [2], eps)
    out = aten.view.default(out, list(x.shape))
    param_shape = [1, c] + [1] * (x.dim() - 2)
    if weight is not None:
        out = aten.mul.Tensor(out, aten.view.default(weight, param_shape))
    if bias is not None:
        out = aten.add.Tensor(out, aten.view.default(bias, param_shape))
    stat_dtype = x.dtype if x.device.type == "cpu" else torch.float32
    mean = aten.view.default(mean, [n, group])
    rstd = aten.view.default(rstd, [n, group])
    return to_dtype(out, x.dtype), to_dtype(mean, stat_dtype), to_dtype(rstd, stat_dtype)


def _batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    """Returns (out, save_mean, save_invstd, new_running_mean, new_running_var)."""
    reduce_dims = [0] + list(range(2, x.dim()))
    xf = upcast(x)
    shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
    new_rm = new_rv = None
    if training:
        out, mean, rstd, batch_var = _normalize(xf, reduce_dims, eps)
        save_mean = aten.view.default(mean, [x.shape[1]])
        save_invstd = aten.view.default(rstd, [x.shape[1]])
        if running_mean is not None:
            n = x.numel() // x.shape[1]
            # the running statistics are not part of autograd, as in the eager kernel; the variance is
            # the one normalized with, as there (computing it again from a detached input took two more
            # passes over the input per layer: a mean and a variance of its own)
            batch_mean = aten.detach.default(save_mean)
            var = aten.detach.default(aten.view.default(batch_var, [x.shape[1]]))
            if isinstance(n, torch.SymInt):  # n / (n - 1) as a float would make the size a constant
                unbiased = aten.div.Scalar(aten.mul.Scalar(var, n), max(n - 1, 1))
            else:
                unbiased = aten.mul.Scalar(var, n / max(n - 1, 1))
            new_rm = aten.add.Tensor(aten.mul.Scalar(running_mean, 1 - momentum),
                                     to_dtype(aten.mul.Scalar(batch_mean, momentum), running_mean.dtype))
            new_rv = aten.add.Tensor(aten.mul.Scalar(running_var, 1 - momentum),
                                     to_dtype(aten.mul.Scalar(unbiased, momentum), running_var.dtype))
    else:
        mean = aten.view.default(upcast(running_mean), shape)
        rstd = aten.rsqrt.default(aten.add.Scalar(aten.view.default(upcast(running_var), shape), eps))
        out = aten.mul.Tensor(aten.sub.Tensor(xf, mean), rstd)
        if x.device.type == "cpu":
            save_mean = aten.new_zeros.default(xf, [0])
            save_invstd = aten.new_zeros.default(xf, [0])
        else:  # the CUDA kernel returns the statistics it normalized with
            save_mean = aten.clone.default(aten.view.default(mean, [x.shape[1]]))
            save_invstd = aten.view.default(rstd, [x.shape[1]])
    if weight is not None:
        out = aten.mul.Tensor(out, aten.view.default(weight, shape))
    if bias is not None:
        out = aten.add.Tensor(out, aten.view.default(bias, shape))
    # saved statistics: float32 on GPU; on CPU the dtype of the running stats or parameters
    stat_dtype = next((t.dtype for t in (running_mean, weight) if t is not None), x.dtype)
    if x.device.type != "cpu":
        stat_dtype = upcast(save_mean).dtype
    return to_dtype(out, x.dtype), to_dtype(save_mean, stat_dtype), to_dtype(save_invstd, stat_dtype), new_rm, new_rv


def _update_running(running_mean, running_var, new_rm, new_rv):
    if new_rm is not None:
        aten.copy_.default(running_mean, new_rm)
        aten.copy_.default(running_var, new_rv)


@decomposition(aten._native_batch_norm_legit.default, aten.native_batch_norm.default)
def native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    out, save_mean, save_invstd, new_rm, new_rv = _batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)
    _update_running(running_mean, running_var, new_rm, new_rv)
    return out, save_mean, save_invstd


@decomposition(aten._native_batch_norm_legit.no_stats)
def native_batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    out, save_mean, save_invstd, _, _ = _batch_norm(x, weight, bias, None, None, True, momentum, eps)
    return out, save_mean, save_invstd


@decomposition(aten._native_batch_norm_legit_no_training.default)
def native_batch_norm_no_training(x, weight, bias, running_mean, running_var, momentum, eps):
    out, save_mean, save_invstd, _, _ = _batch_norm(x, weight, bias, running_mean, running_var, False, momentum, eps)
    return out, save_mean, save_invstd


@decomposition(aten._native_batch_norm_legit_functional.default)
def native_batch_norm_functional(x, weight, bias, running_mean, running_var, training, momentum, eps):
    out, save_mean, save_invstd, new_rm, new_rv = _batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)
    if new_rm is None:
        new_rm, new_rv = aten.clone.default(running_mean), aten.clone.default(running_var)
    return out, save_mean, save_invstd, new_rm, new_rv


def _reserve(x):
    return aten.empty.memory_format([0], dtype=torch.uint8, device=x.device)


@decomposition(aten._batch_norm_with_update.default)
def batch_norm_with_update(x, weight, bias, running_mean, running_var, momentum, eps):
    out, save_mean, save_invstd, new_rm, new_rv = _batch_norm(x, weight, bias, running_mean, running_var, True, momentum, eps)
    _update_running(running_mean, running_var, new_rm, new_rv)
    return out, save_mean, save_invstd, _reserve(x)


@decomposition(aten._batch_norm_no_update.default)
def batch_norm_no_update(x, weight, bias, running_mean, running_var, momentum, eps):
    training = running_mean is None
    out, save_mean, save_invstd, _, _ = _batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)
    return out, save_mean, save_invstd, _reserve(x)


@decomposition(aten.cudnn_batch_norm.default)
def cudnn_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    """cuDNN's batch norm updates the running statistics in place although its schema does not say
    so; as native_batch_norm the update becomes a visible copy_ that functionalization keeps."""
    out, save_mean, save_invstd = native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)
    if not training:  # cuDNN's inference kernel saves nothing
        save_mean = aten.new_zeros.default(weight, [0])
        save_invstd = aten.new_zeros.default(weight, [0])
    return out, save_mean, save_invstd, _reserve(x)


@decomposition(aten.cudnn_batch_norm_backward.default)
def cudnn_batch_norm_backward(x, grad, weight, running_mean, running_var, save_mean, save_invstd, eps, reserve):
    return aten.native_batch_norm_backward.default(grad, x, weight, running_mean, running_var, save_mean,
                                                   save_invstd, True, eps, [True, True, True])
