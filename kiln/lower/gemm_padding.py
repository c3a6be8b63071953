"""A graph pass before lowering: matrix products whose dimensions leave the library's operands
misaligned are computed on zero-padded operands, and the result is the unpadded part.

cuBLAS picks its fast Hopper kernels (wgmma, TMA) only when every operand's leading dimension is a
multiple of 16 bytes. GPT-2's tied LM head multiplies by a weight of 50257 rows: in bfloat16 on an H100
`[4096, 768] @ [768, 50257]` ran a `cutlass_75 ... align1` kernel for 3.3 ms; with N padded to 50264
the same product takes 0.43 ms, and padding the weight (0.08 ms) plus copying the result out of the
padded buffer (0.5 ms) still leaves it three times faster. The backward products of the same head
(`grad @ w`, `grad.T @ h`) went from 2.35 and 2.20 ms to 0.40 and 0.41 ms. float32 products (no
tensor cores unless TF32 is on) do not change, so only 16-bit products are padded.

For ``mm(a [M, K], b [K, N])`` (and ``bmm`` with a batch dimension in front):

    N misaligned            b padded with zero columns; the result is ``c[..., :N]``
    K misaligned            a padded with zero columns and b with zero rows (the zeros add nothing)
    a column-major, M misaligned   a padded with zero rows; the result is ``c[..., :M, :]``

The padded operands are new row-major tensors (``constant_pad_nd``, a generated kernel that fuses
with whatever produces the operand), so their leading dimensions are aligned too. A product is
padded only where the time the faster kernel saves is well above the time the padding copies cost
(`worth_padding`). The result is the slice copied to the product's row-major layout: a copy that a
pointwise reader (a softmax, a loss) inlines, so only a result that is returned or viewed is written
out of the padded buffer.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from kiln.fake.symbolic_meta import has_symbolic_tensor
from kiln.fake.tensor import run_on_fakes

aten = torch.ops.aten

ALIGN_BYTES = 16
# node.meta key: the lowering writes this node's value to a buffer of its own (kiln/lower/graph.py)
REALIZE = "kiln_realize"
_PADDED_DTYPES = (torch.bfloat16, torch.float16)
# rough H100 rates: the misaligned kernel, the aligned one, and memory bandwidth for the copies
_SLOW_FLOPS, _FAST_FLOPS, _BYTES_PER_S = 90e12, 600e12, 3e12


def _val(node) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def _round_up(n: int, unit: int) -> int:
    return (n + unit - 1) // unit * unit


def padding_for(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int] | None:
    """(pad_m, pad_k, pad_n) that align every operand of ``a @ b`` (2-D or batched), or None if aligned."""
    unit = max(1, ALIGN_BYTES // a.element_size())
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    pad_k = _round_up(k, unit) - k
    pad_n = _round_up(n, unit) - n
    a_column_major = a.stride(-2) == 1 and a.stride(-1) == m and k > 1
    pad_m = _round_up(m, unit) - m if a_column_major else 0
    if not (pad_m or pad_k or pad_n):
        return None
    return pad_m, pad_k, pad_n


def _hint(n) -> int:
    """A size's value while compiling (a symbolic size's hint): padding is a speed choice, correct for
    every size, so deciding it needs no guard."""
    return int(n.node.hint) if isinstance(n, torch.SymInt) else int(n)


def worth_padding(a: torch.Tensor, b: torch.Tensor, pads: tuple[int, int, int]) -> bool:
    """Whether the faster kernel saves at least twice what the padding copies cost (H100 rates)."""
    a_numel = _hint(a.numel())
    m, k, n = _hint(a.shape[-2]), _hint(a.shape[-1]), _hint(b.shape[-1])
    batch = a_numel // (m * k) if a.dim() == 3 and m * k else 1
    saved = 2 * batch * m * k * n * (1 / _SLOW_FLOPS - 1 / _FAST_FLOPS)
    pad_m, pad_k, pad_n = pads
    copied = 0
    if pad_m or pad_k:
        copied += a_numel * a.element_size()
    if pad_k or pad_n:
        copied += _hint(b.numel()) * b.element_size()
    if pad_m or pad_n:
        copied += batch * m * n * a.element_size()  # the result read out of the padded buffer
    return saved > 2 * (2 * copied / _BYTES_PER_S)


def _call(graph: fx.Graph, target, args: tuple, kwargs: dict | None = None) -> fx.Node:
    node = graph.call_function(target, args, kwargs or {})
    vals = [(_val(a) if isinstance(a, fx.Node) else a) for a in args]
    node.meta["val"] = run_on_fakes(target, tuple(vals), kwargs or {})
    return node


def _pad(graph: fx.Graph, x: fx.Node, rows: int, cols: int, memo: dict) -> fx.Node:
    """``x`` with ``rows`` zero rows and ``cols`` zero columns added (its last two dims), as a row-major
    copy; a transposed view of a row-major tensor (the ``grad.T`` of a weight gradient) is padded as
    that tensor and transposed back, so the copy is written in the tensor's own order, not transposed,
    and one padded copy serves every product that pads the same tensor the same way (GPT-2's LM-head
    gradient, ``grad @ w`` and ``grad.T @ h``). ``memo`` holds the pads made so far."""
    if not (rows or cols):
        return x
    base = _transposed_row_major_base(x)
    if base is not None:
        padded = _pad(graph, base, cols, rows, memo)
        padded.meta[REALIZE] = True  # one buffer, read as it is and transposed (not two copies)
        dims = list(range(_val(base).dim()))
        dims[-2:] = dims[-1], dims[-2]
        return _call(graph, aten.permute.default, (padded, dims))
    key = (x, rows, cols)
    if key not in memo:
        memo[key] = _call(graph, aten.constant_pad_nd.default, (x, [0, cols, 0, rows], 0.0))
    return memo[key]


def _transposed_row_major_base(x: fx.Node) -> fx.Node | None:
    """The tensor ``x`` swaps the last two dims of (``x = t(y)``, ``permute(y, [1, 0])``, ``y.transpose(-2,
    -1)``, ``permute(y, [0, 2, 1])``), when that tensor is row-major; else None."""
    if x.op != "call_function" or not x.args or not isinstance(x.args[0], fx.Node):
        return None
    y, val = x.args[0], _val(x.args[0])
    if val is None or val.dim() not in (2, 3) or not val.is_contiguous():
        return None
    last = val.dim() - 1
    if x.target is aten.t.default:
        swaps = val.dim() == 2
    elif x.target is aten.permute.default:
        swaps = [d % val.dim() for d in x.args[1]] == [*range(last - 1), last, last - 1]
    elif x.target is aten.transpose.int:
        swaps = sorted(d % val.dim() for d in x.args[1:3]) == [last - 1, last]
    else:
        swaps = False
    return y if swaps else None


def pad_misaligned_matmuls(graph: fx.Graph, mode: str = "auto") -> int:
    """Rewrite misaligned 16-bit CUDA ``mm``/``bmm`` as products of padded operands (see the module
    docstring); mode "always" pads every misaligned product on any device (tests), "off" none. Returns
    how many were rewritten."""
    if mode == "off":
        return 0
    rewritten = 0
    memo: dict = {}  # (node, rows, cols) -> its padded copy
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in (aten.mm.default, aten.bmm.default):
            continue
        a_node, b_node = node.args[:2]
        a, b, out = _val(a_node), _val(b_node), _val(node)
        if a is None or b is None or out is None or a.dtype != b.dtype:
            continue
        device = getattr(out, "fake_device", out.device)
        if mode != "always" and not (a.dtype in _PADDED_DTYPES and device.type == "cuda"):
            continue  # (decided first: asking about the alignment of symbolic sizes guards on them)
        if any(isinstance(d, torch.SymInt) for d in (a.shape[-1], b.shape[-1], *b.shape[:-1])):
            continue  # padding a symbolic K or N would guard on its remainder (a symbolic M is fine)
        pads = padding_for(a, b)
        if pads is None:
            continue
        if mode != "always" and not worth_padding(a, b, pads):
            continue
        pad_m, pad_k, pad_n = pads
        with graph.inserting_before(node):
            a_padded = _pad(graph, a_node, pad_m, pad_k, memo)
            b_padded = _pad(graph, b_node, pad_k, pad_n, memo)
            product = _call(graph, node.target, (a_padded, b_padded))
            result = product
            if pad_n:
                result = _call(graph, aten.slice.Tensor, (result, -1, 0, b.shape[-1]))
            if pad_m:
                result = _call(graph, aten.slice.Tensor, (result, -2, 0, a.shape[-2]))
            if result is not product:
                # the product's own (row-major) layout, as a copy that a pointwise reader inlines: only a
                # returned or viewed result is written out of the padded buffer
                result = _call(graph, aten.clone.default, (result,), {"memory_format": torch.contiguous_format})
        node.replace_all_uses_with(result)
        graph.erase_node(node)
        for operand in {a_node, b_node}:  # a transpose read only by this product (its base was padded)
            if not operand.users and operand.op == "call_function" and _transposed_row_major_base(operand):
                graph.erase_node(operand)
        rewritten += 1
    return rewritten
