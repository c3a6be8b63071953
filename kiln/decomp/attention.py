"""Decompositions: scaled dot-product attention, written as the math pattern

    scores = (q * sqrt(scale)) @ (k * sqrt(scale))^T (+ mask) ; p = softmax(scores) ; out = p @ v

so that later stages can recognise it and fuse it into one attention kernel. The fused ATen kernels
(flash for CPU, flash/efficient/cudnn for CUDA) all come back to this pattern.
"""
from __future__ import annotations

import math

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import to_dtype, upcast

aten = torch.ops.aten


def _attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """(out, logsumexp, probabilities) of attention over the last two dims; logsumexp in float32."""
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    if q.dim() >= 3 and k.shape[-3] != q.shape[-3]:  # grouped-query attention (enable_gqa, or CPU flash's own)
        groups = q.shape[-3] // k.shape[-3]
        k = aten.repeat_interleave.self_int(k, groups, -3)
        v = aten.repeat_interleave.self_int(v, groups, -3)
    qf, kf, vf = upcast(q), upcast(k), upcast(v)
    root = math.sqrt(scale)
    scores = torch.matmul(aten.mul.Scalar(qf, root), aten.transpose.int(aten.mul.Scalar(kf, root), -2, -1))
    if is_causal:
        keep = aten.tril.default(aten.full.default([L, S], True, dtype=torch.bool, device=q.device))
        scores = aten.masked_fill.Scalar(scores, aten.logical_not.default(keep), float("-inf"))
    if attn_mask is not None:
        _check_mask_fits(attn_mask, scores)
        if attn_mask.dtype == torch.bool:
            scores = aten.masked_fill.Scalar(scores, aten.logical_not.default(attn_mask), float("-inf"))
        else:
            scores = aten.add.Tensor(scores, upcast(attn_mask))
    lse = aten.logsumexp.default(scores, [-1], False)
    probs = aten._softmax.default(scores, -1, False)
    if dropout_p > 0:
        probs = aten.native_dropout.default(probs, dropout_p, True)[0]
    out = torch.matmul(probs, vf)
    return to_dtype(out, q.dtype), lse, probs


def mask_grows_scores(mask_shape, scores_shape) -> bool:
    """Whether adding a mask of ``mask_shape`` broadcasts scores of ``scores_shape`` to a larger shape
    (more dims, or a static size-1 dim made larger)."""
    return len(mask_shape) > len(scores_shape) or any(
        type(m) is int and type(n) is int and n == 1 and m != 1
        for m, n in zip(reversed(tuple(mask_shape)), reversed(tuple(scores_shape))))


def _check_mask_fits(mask, scores) -> None:
    """ATen adds the mask to the scores in place: a mask that would broadcast them to a larger shape (more
    dims, or a size-1 dim of the scores made larger) is eager's RuntimeError, not a larger result."""
    shape = list(scores.shape)
    if mask_grows_scores(mask.shape, shape):
        raise RuntimeError(f"output with shape {shape} doesn't match the broadcast shape "
                           f"{list(torch.broadcast_shapes(tuple(mask.shape), tuple(shape)))}")


@decomposition(aten._scaled_dot_product_flash_attention_for_cpu.default)
def sdpa_flash_cpu(q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    if keep_cpu_flash(q, k, v, dropout_p, attn_mask):
        return NotImplemented  # ATen's CPU flash kernel runs it (a library call: lower/extern.py)
    out, lse, _ = _attention(q, k, v, attn_mask, dropout_p, is_causal, scale)
    return out, lse


# On the CPU, ATen's flash kernel (blocked, online softmax, vectorized exp) beats the math pattern in
# inference: nanoGPT's [1, 6, 128, 64] causal attention
# ran 0.3 ms in ATen's kernel, 0.65-0.9 ms decomposed (two BLAS bmm calls and a masked softmax over the
# float32 scores); it won at every size measured (docs/backend.md). Training graphs decompose (kiln
# differentiates the math pattern).
def keep_cpu_flash(q, k, v, dropout_p, attn_mask) -> bool:
    """Whether ``_scaled_dot_product_flash_attention_for_cpu`` stays whole (inference, no dropout)."""
    if dropout_p > 0 or q.device.type != "cpu" or q.dtype not in (torch.float32, torch.float64):
        return False
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, attn_mask)):
        return False
    return True


# On CUDA the fused kernels (flash, memory-efficient) stay whole: until kiln generates its own attention
# kernel they are much faster than the math pattern (float32 scores of size L x S in memory, twice).
FUSED_ATTENTION_DEVICES = ("cuda",)


@decomposition(aten._scaled_dot_product_efficient_attention.default)
def sdpa_efficient(q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *, scale=None):
    if dropout_p > 0 or q.device.type in FUSED_ATTENTION_DEVICES:
        return NotImplemented  # the kernel returns its RNG state; keep it whole
    out, lse, _ = _attention(q, k, v, attn_bias, 0.0, is_causal, scale)
    empty = aten.empty.memory_format([0], dtype=torch.int64, device=q.device)
    if not compute_log_sumexp:
        lse = aten.empty.memory_format([0], dtype=torch.float32, device=q.device)
    return out, lse, empty, empty


@decomposition(aten._scaled_dot_product_flash_attention.default)
def sdpa_flash(q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    if dropout_p > 0 or return_debug_mask or q.device.type in FUSED_ATTENTION_DEVICES:
        return NotImplemented
    return _flash_outputs(q, k, v, is_causal, scale)


def _flash_outputs(q, k, v, is_causal, scale):
    out, lse, _ = _attention(q, k, v, None, 0.0, is_causal, scale)
    int_empty = aten.empty.memory_format([0], dtype=torch.int64, device=q.device)
    seed = aten.empty.memory_format([2], dtype=torch.uint64 if hasattr(torch, "uint64") else torch.int64, device=q.device)
    debug = aten.empty.memory_format([0], dtype=q.dtype, device=q.device)
    return out, lse, int_empty, int_empty, q.shape[-2], k.shape[-2], seed, seed, debug


@decomposition(aten._scaled_dot_product_attention_math.default)
def sdpa_math(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, dropout_mask=None, *, scale=None, enable_gqa=False):
    if dropout_mask is not None:
        return NotImplemented
    out, _, probs = _attention(q, k, v, attn_mask, dropout_p, is_causal, scale)
    return out, to_dtype(probs, q.dtype)
