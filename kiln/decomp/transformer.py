"""Decompositions: the fused inference fast paths of nn.TransformerEncoderLayer and nn.MultiheadAttention.

In eval mode without grad those modules call one fused ATen op each (aten/src/ATen/native/transformers/
transformer.cpp and attention.cpp); written with core ops they become one kiln graph:

    _transformer_encoder_layer_fwd(src, ...)            _native_multi_head_attention(x, x, x, ...)
      x = norm1(src) if norm_first else src               qkv = linear(x, qkv_weight, qkv_bias)  (*)
      x = self_attention(x) + src                         q, k, v = split(qkv) as (B, heads, T, head_dim)
      x = x if norm_first else norm1(x)                   ctx = softmax(q k^T / sqrt(head_dim), masked) v
      x = ffn(norm2(x) if norm_first else x) + x          out = linear(ctx as (B, T, E), proj_weight, proj_bias)
      x = x if norm_first else norm2(x)                   weights = softmax probabilities (mean over heads)
    ffn(x) = linear2(relu or gelu(linear1(x)))
    (*) called directly with distinct query/key/value (of one shape), each has its slice of qkv_weight.

Masks. The modules hand over the mask merge_masks made, with its type: 0 = (L, S) for every batch and
head, 1 = key padding (B, S), 2 = (B, heads, L, S). The kernels read it as `mask.to(bool)`: any nonzero
value (the -inf of a float mask included) removes that key. A query row with every key removed is NaN
on CPU and CUDA (checked on an H100, torch 2.11, float32 and float16), as softmax of all -inf is here;
on other devices calls with a mask are left whole (NotImplemented: the ATen kernel runs).
Without a mask, attention is aten.scaled_dot_product_attention, so the device picks the same fused
kernel (flash/efficient on CUDA, decomposed on CPU) as the eager op does.
"""
from __future__ import annotations

import torch

from kiln.decomp.attention import _attention
from kiln.decomp.registry import decomposition
from kiln.decomp.utils import to_dtype

aten = torch.ops.aten

_MASKED_DEVICES = ("cpu", "cuda")  # devices whose masked-softmax semantics the decomposition reproduces


def _keep_mask(mask, mask_type, batch: int, heads: int, length: int, keys: int):
    """The mask as bool `True = attend` broadcastable to (B, heads, L, S), or None if its type/shape is
    not one the kernel's masked softmax takes."""
    if mask_type == 0 and tuple(mask.shape) == (length, keys):
        mask = aten.view.default(mask, [1, 1, length, keys])
    elif mask_type == 1 and tuple(mask.shape) == (batch, keys):
        mask = aten.view.default(mask, [batch, 1, 1, keys])
    elif mask_type == 2 and tuple(mask.shape) == (batch, heads, length, keys):
        pass
    else:
        return None
    removed = mask if mask.dtype == torch.bool else aten._to_copy.default(mask, dtype=torch.bool)
    return aten.logical_not.default(removed)


def _heads(t, batch: int, heads: int, head_dim: int):
    """(B, T, heads * head_dim) -> (B, heads, T, head_dim)."""
    return aten.transpose.int(aten.view.default(t, [batch, -1, heads, head_dim]), 1, 2)


def _project(query, key, value, embed_dim, qkv_weight, qkv_bias) -> list:
    """q, k, v (B, T, E each): one packed projection for self-attention, else one per distinct input
    (the kernel's qkv_projection; it takes inputs of one shape)."""
    if query is key and key is value:
        return list(aten.split.Tensor(aten.linear.default(query, qkv_weight, qkv_bias), embed_dim, -1))
    weights = aten.split.Tensor(qkv_weight, embed_dim, 0)
    biases = aten.split.Tensor(qkv_bias, embed_dim, 0)
    if key is value:
        q = aten.linear.default(query, weights[0], biases[0])
        kv = aten.linear.default(key, aten.cat.default(weights[1:]), aten.cat.default(biases[1:]))
        return [q, *aten.split.Tensor(kv, embed_dim, -1)]
    return [aten.linear.default(t, w, b) for t, w, b in zip((query, key, value), weights, biases)]


def _attention_block(query, key, value, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                     mask, mask_type, need_weights=False, average_weights=True):
    """(out, weights or None) of multi-head attention over inputs of shape (B, T, E); NotImplemented
    where the mask is one the decomposition does not reproduce."""
    x = query
    batch, length = x.shape[0], x.shape[1]
    head_dim = embed_dim // num_heads
    q, k, v = (_heads(part, batch, num_heads, head_dim)
               for part in _project(query, key, value, embed_dim, qkv_weight, qkv_bias))
    weights = None
    if mask is None and not need_weights:
        ctx = aten.scaled_dot_product_attention.default(q, k, v)
    else:
        keep = None
        if mask is not None:
            if x.device.type not in _MASKED_DEVICES:
                return NotImplemented
            keep = _keep_mask(mask, mask_type, batch, num_heads, length, length)
            if keep is None:
                return NotImplemented
        ctx, _, probs = _attention(q, k, v, keep)
        if need_weights:
            weights = to_dtype(aten.mean.dim(probs, [1]) if average_weights else probs, x.dtype)
    merged = aten.reshape.default(aten.transpose.int(ctx, 1, 2), [batch, length, embed_dim])
    return aten.linear.default(merged, proj_weight, proj_bias), weights


def _supported(x, embed_dim, num_heads) -> bool:
    return x.dim() == 3 and not x.is_nested and x.shape[-1] == embed_dim and embed_dim % num_heads == 0


@decomposition(aten._native_multi_head_attention.default)
def native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                                proj_bias, mask=None, need_weights=True, average_attn_weights=True,
                                mask_type=None):
    # nn.MultiheadAttention takes this path only for self-attention (query is key is value); called
    # directly, the op takes distinct inputs of one shape
    same_shape = query.shape == key.shape == value.shape
    if not same_shape or not _supported(query, embed_dim, num_head) or key.is_nested or value.is_nested:
        return NotImplemented
    return _attention_block(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
                            mask, mask_type, need_weights, average_attn_weights)


@decomposition(aten._transformer_encoder_layer_fwd.default)
def transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                  use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                                  norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                                  mask_type=None):
    if not _supported(src, embed_dim, num_heads):
        return NotImplemented
    if src.numel() == 0:
        return aten.clone.default(src)

    def norm(t, weight, bias):
        return aten.layer_norm.default(t, [embed_dim], weight, bias, eps)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    attention = _attention_block(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask,
                                 mask_type)
    if attention is NotImplemented:
        return NotImplemented
    x = aten.add.Tensor(attention[0], src)
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    residual = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    hidden = aten.linear.default(x, ffn_weight_1, ffn_bias_1)
    hidden = aten.gelu.default(hidden) if use_gelu else aten.relu.default(hidden)
    x = aten.add.Tensor(aten.linear.default(hidden, ffn_weight_2, ffn_bias_2), residual)
    return norm(x, norm_weight_2, norm_bias_2) if not norm_first else x
