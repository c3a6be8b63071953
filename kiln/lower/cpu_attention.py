"""ATen's CPU flash attention as a library call, its query, key and value realized in their own memory
order (``decomp/attention.py`` keeps the op whole in inference: ``keep_cpu_flash``).

The kernel allocates its output in the memory order of the query, and the graph's meta strides for
the output were computed from the query the model passed: usually a transposed view of the QKV
projection ([B, T, H, D] in memory), often with gaps (a slice of a fused projection, GPT-2's
``c_attn``). Such a view is computed into a buffer of its own (a bias add, a cache ``cat``);
realized row-major ([B, H, T, D]) the output came back in that order and the wrapper copied it to the
meta layout (GPT-2 124M: 12 copies of [1, 12, 128, 64] per call). Realized dense in the view's own
stride order, the output has the meta layout, and the buffers are written in the order the
producer's loops read (no transposing write).
"""
from __future__ import annotations

import torch

from kiln.loopir.nodes import Lazy
from kiln.lower.registry import lowering

aten = torch.ops.aten
REASON = "fused attention (library kernel)"


def dense_in_order(size, stride) -> tuple[int, ...] | None:
    """Strides of a dense layout of ``size`` whose dims are in the memory order of ``stride`` (None for
    symbolic sizes or strides: the default layout is used)."""
    if not all(isinstance(v, int) for v in (*size, *stride)):
        return None
    inner_first = sorted(range(len(size)), key=lambda d: (stride[d], -d))
    out, acc = [0] * len(size), 1
    for d in inner_first:
        out[d] = acc
        acc *= max(size[d], 1)
    return tuple(out)


def _realized_in_order(g, value, node):
    val = node.meta.get("val") if hasattr(node, "meta") else None
    if not isinstance(value, Lazy) or not isinstance(val, torch.Tensor) or tuple(val.shape) != tuple(value.size):
        return value
    size, stride = tuple(val.shape), tuple(val.stride())
    if not all(type(v) is int for v in (*size, *stride)):
        return value  # symbolic sizes: the default layout
    if any(st == 0 for sz, st in zip(size, stride) if sz != 1):
        return value  # a broadcast: realized as a view of its base (GraphLowering.realize_as_view)
    dense = dense_in_order(size, stride)
    return g.realize(value, dense) if dense is not None else value  # (a dense view keeps its strides)


@lowering(aten._scaled_dot_product_flash_attention_for_cpu.default)
def lower_cpu_flash_attention(g, node, q, k, v, *args, **kwargs):
    q, k, v = (_realized_in_order(g, value, arg) for value, arg in zip((q, k, v), node.args[:3]))
    return g.add_extern(node.target, (q, k, v, *args), kwargs, REASON, node)
