"""The closed core op set: what decompositions bottom out in, and what later stages must lower.

Every op here has a reason to stay whole:
  pointwise   elementwise math, comparisons, casts and ``where``: one loop body each, fused freely.
  reduction   sum / prod / amax / amin / argmax / argmin / any / all over dims: one reduction loop.
  scan        cumsum / cumprod / logcumsumexp: a scan loop (not expressible as the two above).
  view        size/stride changes without data movement (views and the ``*_scatter`` inverses that
              functionalization emits for mutations through views).
  index       gather/scatter-style indexing (``index``, ``index_put``, ``gather``, ``scatter*``).
  shape       data movement between buffers: ``cat``, ``clone``, copies, ``constant_pad_nd``.
  factory     tensors made from nothing (``full``, ``arange``, ``empty_strided``, ``iota``).
  random      RNG ops, kept whole so that eager's random stream is reproduced op by op.
  matmul      ``mm``/``bmm``/``convolution``: library kernels (BLAS, cuDNN) or matmul templates.
  sort        ``sort``/``topk``: library kernels; not worth a decomposition.
Everything else is decomposed into these, or (if no decomposition exists) kept as a non-core op that
later stages run through a fallback ATen kernel.
"""
from __future__ import annotations

import collections

import torch
import torch.fx as fx

aten = torch.ops.aten

_CORE_NAMES = {
    "pointwise": """
        abs acos acosh asin asinh atan atanh cos cosh sin sinh tan tanh exp exp2 expm1 log log10 log1p log2
        sqrt rsqrt reciprocal neg sigmoid erf erfc erfinv lgamma digamma floor ceil round.default
        round.decimals trunc frac sign sgn signbit bitwise_not logical_not isnan isinf isfinite nan_to_num
        i0 special_i0e special_i1 special_i1e special_erfcx special_ndtri special_log_ndtr
        add.Tensor add.Scalar sub.Tensor sub.Scalar mul.Tensor mul.Scalar div.Tensor div.Scalar
        div.Tensor_mode div.Scalar_mode remainder.Tensor remainder.Scalar fmod.Tensor fmod.Scalar
        pow.Tensor_Tensor pow.Tensor_Scalar pow.Scalar maximum minimum fmax fmin atan2 hypot copysign.Tensor
        nextafter igamma igammac polygamma xlogy.Tensor
        eq.Tensor eq.Scalar ne.Tensor ne.Scalar lt.Tensor lt.Scalar le.Tensor le.Scalar gt.Tensor
        gt.Scalar ge.Tensor ge.Scalar logical_and logical_or logical_xor
        bitwise_and.Tensor bitwise_and.Scalar bitwise_or.Tensor bitwise_or.Scalar bitwise_xor.Tensor
        bitwise_xor.Scalar bitwise_left_shift.Tensor bitwise_right_shift.Tensor
        __lshift__.Scalar __rshift__.Scalar
        where.self _to_copy.default clone.default
        """,
    "reduction": """
        sum.dim_IntList sum.default prod.dim_int prod.default amax amin argmax argmin any.dims any.dim
        any.default all.dims all.dim all.default
        """,
    "scan": "cumsum cumprod logcumsumexp cummax cummin",
    "view": """
        view.default _unsafe_view.default view.dtype permute expand slice.Tensor select.int squeeze.dims
        squeeze.dim squeeze.default unsqueeze as_strided alias detach unfold diagonal.default
        view_as_real view_as_complex
        slice_scatter select_scatter diagonal_scatter as_strided_scatter
        """,
    "index": """
        index.Tensor index_put.default gather scatter.src scatter.value scatter.reduce scatter.value_reduce
        scatter_add scatter_reduce.two
        """,
    "shape": "cat constant_pad_nd",
    "factory": "full.default empty_strided empty.memory_format arange.start_step scalar_tensor",
    "random": "rand.default randn.default randint.low bernoulli.p bernoulli.default uniform normal_functional",
    "matmul": "mm bmm convolution",
    "sort": "sort.default sort.stable topk",
}


def _resolve(name: str):
    packet_name, _, overload = name.partition(".")
    packet = getattr(aten, packet_name, None)
    if packet is None:
        return []
    if overload:
        return [getattr(packet, overload)] if overload in packet.overloads() else []
    overloads = packet.overloads()
    # a bare name means its ``default`` overload, or every overload when it has none
    return [packet.default] if "default" in overloads else [getattr(packet, o) for o in overloads]


def _build() -> dict:
    table = {}
    for kind, names in _CORE_NAMES.items():
        for name in names.split():
            for op in _resolve(name):
                table[op] = kind
    return table


CORE_OPS: dict = _build()


def op_kind(op) -> str:
    """The kind of a core op, or "non-core" (run by a fallback kernel), or "other" for Python calls."""
    if op in CORE_OPS:
        return CORE_OPS[op]
    if isinstance(op, torch._ops.OpOverload):
        return "non-core"
    return "other"


def is_core(op) -> bool:
    return op in CORE_OPS


def count_by_kind(graph: fx.Graph) -> dict[str, int]:
    """How many ops of each kind a graph calls (getitem excluded)."""
    counts: collections.Counter[str] = collections.Counter()
    for node in graph.nodes:
        if node.op == "call_function" and node.target.__name__ != "getitem":
            counts[op_kind(node.target)] += 1
    return dict(sorted(counts.items()))


def non_core_ops(graph: fx.Graph) -> dict[str, int]:
    counts: collections.Counter[str] = collections.Counter()
    for node in graph.nodes:
        if node.op == "call_function" and op_kind(node.target) == "non-core":
            counts[str(node.target)] += 1
    return dict(counts)
