"""Ops that run as library kernels by design (BLAS, convolution, sort): extern kernels, not fallbacks.

Their inputs are realized; the wrapper calls the ATen op. ``explain`` lists them as library calls,
and they do not count as ATen fallbacks.
"""
from __future__ import annotations

import torch

from kiln.aot.attention_op import attention
from kiln.lower.registry import lowering

aten = torch.ops.aten

LIBRARY_OPS = {
    "matmul (BLAS)": [aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default,
                      aten.addmv.default, aten.addbmm.default, aten.mv.default, aten.dot.default],
    "convolution (library kernel)": [aten.convolution.default],
    "sort (library kernel)": [aten.sort.default, aten.sort.stable, aten.topk.default],
    "fused attention (library kernel)": [aten._scaled_dot_product_flash_attention.default,
                                         aten._scaled_dot_product_efficient_attention.default,
                                         aten._scaled_dot_product_cudnn_attention.default,
                                         aten._scaled_dot_product_flash_attention_for_cpu.default,
                                         attention],  # (ATen chooses the kernel per call: aot/attention_op.py)
}


def _library(reason):
    def lower(g, node, *args, **kwargs):
        return g.add_extern(node.target, args, kwargs, reason, node)

    lower.__name__ = "lower_library_call"
    return lower


# lower/sort.py lowers these (generated C++ on CPU) and makes them library calls where it does not;
# lower/cpu_attention.py chooses the layouts of the CPU flash kernel's inputs
_LOWERED_ELSEWHERE = {aten.sort.default, aten.sort.stable, aten.topk.default,
                      aten._scaled_dot_product_flash_attention_for_cpu.default}

for _reason, _ops in LIBRARY_OPS.items():
    for _op in _ops:
        if _op not in _LOWERED_ELSEWHERE:
            lowering(_op)(_library(_reason))

from kiln.lower import cpu_attention  # noqa: E402,F401  (registers the CPU flash attention lowering)
