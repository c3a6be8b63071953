"""``kiln::attention``: ``F.scaled_dot_product_attention`` as one graph node whose kernel ATen chooses at
each call, from the call's real sizes, as eager does.

A dynamic graph traced with symbolic sizes cannot ask ATen which fused kernel (cuDNN, flash,
memory-efficient) it would run: the choice reads sizes, and asked of symbolic fakes it answers "math"
(two float32 GEMMs and a softmax). Where no gradient flows through the attention (inference),
``fake/symbolic_composite.attention_chosen_per_call`` traces it as this op instead: its fake result is
laid out like the query (as the fused kernels lay theirs out), and at run time its implementation calls
``F.scaled_dot_product_attention`` on the real tensors. The lowering makes it a library call
(``lower/extern.py``); the warm cache finds it by name (``warm_cache.load_op`` imports this module).
"""
from __future__ import annotations

import torch

_LIB = torch.library.Library("kiln", "DEF")
_LIB.define("attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, bool is_causal=False, "
            "*, float? scale=None, bool enable_gqa=False) -> Tensor")


def _run(query, key, value, attn_mask=None, is_causal=False, *, scale=None, enable_gqa=False):
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask,
                                                            is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


def _meta(query, key, value, attn_mask=None, is_causal=False, *, scale=None, enable_gqa=False):
    if value.shape[-1] == query.shape[-1]:
        return torch.empty_like(query)
    return query.new_empty([*query.shape[:-1], value.shape[-1]])


_LIB.impl("attention", _run, "CompositeExplicitAutograd")
_LIB.impl("attention", _meta, "Meta")

attention = torch.ops.kiln.attention.default
