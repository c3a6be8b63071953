"""Size-generic C++ for attention-shaped graphs (views over symbolic sizes) is as good as static code
(issue 18: dynamic HF BERT on CPU was 3.6x slower than static).

View chains of symbolic sizes index through FloorDiv/ModularIndexing; these must fold as they do for
static sizes (no division or remainder per element, so the loops vectorize), and softmax must fuse
into one kernel with a row cache (the scheduler splits ``4*s0`` loops by ``s0``)."""
from __future__ import annotations

import operator
import re

import torch

from kiln.backends.kiln import compile_graph
from kiln.options import Options
from tests.codegen.test_dynamic_codegen import GraphBuilder, aten, run_sizes


def _attention(dims):
    """x [b, t, 16] -> heads [4b, t, 4] -> scores [4b, t, t] -> softmax (on [b, 4, t, t]) -> @ heads."""
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(2 + n % 3, n, 16), dims=dims)
    bs, t = b.size(x, 0), b.size(x, 1)
    b4 = b.op(operator.mul, bs, 4)
    heads = b.op(aten.view.default, b.op(aten.add.Tensor, x, 1.0), [bs, t, 4, 4])
    heads = b.op(aten.clone.default, b.op(aten.permute.default, heads, [0, 2, 1, 3]),
                 memory_format=torch.contiguous_format)
    q = b.op(aten.view.default, heads, [b4, t, 4])
    kt = b.op(aten.clone.default, b.op(aten.permute.default, q, [0, 2, 1]), memory_format=torch.contiguous_format)
    scores = b.op(aten.view.default, b.op(aten.bmm.default, q, kt), [bs, 4, t, t])
    mx = b.op(aten.amax.default, scores, [-1], True)
    ex = b.op(aten.exp.default, b.op(aten.sub.Tensor, scores, mx))
    probs = b.op(aten.div.Tensor, ex, b.op(aten.sum.dim_IntList, ex, [-1], True))
    out = b.op(aten.bmm.default, b.op(aten.view.default, probs, [b4, t, t]), q)
    ctx = b.op(aten.permute.default, b.op(aten.view.default, out, [bs, 4, t, 4]), [0, 2, 1, 3])
    ctx = b.op(aten.view.default, b.op(aten.clone.default, ctx, memory_format=torch.contiguous_format), [bs, t, 16])
    return b, b.module(b.op(aten.mul.Tensor, ctx, 2.0))


def _indices(source: str) -> list[str]:
    return re.findall(r"\w+_ptr\d+\[([^\]]*)\]", source)


def test_attention_views_fold_and_softmax_fuses_like_static():
    b, gm = _attention(dims=(0, 1))
    cg = run_sizes(b, gm, sizes=(8, 5, 13, 33))
    sb, sgm = _attention(dims=())
    static = compile_graph(sgm, Options(cpu_codegen="cpp"), "cpp")
    assert len(cg.kernels) == len(static.kernels), (cg.source, static.source)
    # every view index folded: what divides is one loop variable by a constant (as in static code:
    # ``x0 / 4`` of a loop over 4*s0 heads), never a flat index or a size
    divided = [i for k in cg.kernels.values() for i in _indices(k.source)
               if re.search("[/%]", re.sub(r"\(x\d+ [/%] \d+\)", "", i))]
    assert not divided, divided
    softmax = [k for k in cg.kernels.values() if "amax" in k.name]
    assert len(softmax) == 1 and "exp" in softmax[0].name, [k.name for k in cg.kernels.values()]
    assert "row0" in softmax[0].source  # exp(x - max) computed once per element, as in static code
