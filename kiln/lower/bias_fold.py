"""A graph pass before lowering: ``add(bias, mm(a, b))`` becomes ``addmm(bias, a, b)`` again where no
generated kernel would read the sum.

The decompositions split a float32/float64 ``addmm`` into ``mm`` and ``add`` (``decomp/linalg.py``) so
that the bias add fuses into the pointwise kernel that reads the product (a GELU, a residual add).
Where nothing reads the sum but views, library kernels and the graph's outputs -- the query/key/value
projections of attention: ``linear -> view -> permute -> scaled_dot_product_attention`` -- the add would
be a kernel of its own, reading the product and writing it again. The BLAS library adds the bias to
the accumulator for free, and its result is the same (one float32 add in either case), so the pair is
folded back into one ``addmm`` library call, as eager runs it.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from kiln.fake.shapes import sym_sizes
from kiln.lower.extern import LIBRARY_OPS

aten = torch.ops.aten

_LIBRARY = frozenset(op for ops in LIBRARY_OPS.values() for op in ops)
_VIEWS = frozenset({aten._unsafe_view.default, operator.getitem})


def _val(node):
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def _is_view(node: fx.Node) -> bool:
    return node.op == "call_function" and (node.target in _VIEWS or getattr(node.target, "is_view", False))


def _read_only_by_libraries(node: fx.Node) -> bool:
    """Every reader of ``node``, looking through views, is a library kernel or the graph's output."""
    for user in node.users:
        if user.op == "output" or (user.op == "call_function" and user.target in _LIBRARY):
            continue
        if not (_is_view(user) and _read_only_by_libraries(user)):
            return False
    return True


def _bias_and_product(add: fx.Node):
    """(bias, mm node) of ``add(bias, mm)`` or ``add(mm, bias)`` that ``addmm`` computes exactly, or None."""
    if add.op != "call_function" or add.target is not aten.add.Tensor or add.kwargs.get("alpha", 1) != 1 \
            or len(add.args) != 2:
        return None
    for product, bias in (add.args, add.args[::-1]):
        if not (isinstance(product, fx.Node) and product.op == "call_function"
                and product.target is aten.mm.default and len(product.users) == 1):
            continue
        out, b = _val(add), _val(bias)
        if not isinstance(b, torch.Tensor) or not isinstance(out, torch.Tensor) or not 1 <= b.dim() <= 2:
            continue
        if b.dtype != out.dtype or _val(product).dtype != out.dtype or b.device != out.device:
            continue
        if out.dtype not in (torch.float32, torch.float64) or not out.is_contiguous():
            continue  # 16-bit mm + add rounds twice, addmm once; addmm's result is row-major
        if sym_sizes(_val(product)) != sym_sizes(out):
            continue  # (the add broadcast the product: the bias is larger than a row; the add was valid, so
            # with the product's shape kept the bias broadcasts to it, asked without a guard on sizes)
        return bias, product
    return None


def fold_bias_into_matmul(graph: fx.Graph) -> int:
    """Rewrite ``add(bias, mm(a, b))`` read only by library kernels and outputs as ``addmm``; returns
    how many were folded."""
    folded = 0
    for add in list(graph.nodes):
        found = _bias_and_product(add)
        if found is None or not _read_only_by_libraries(add):
            continue
        bias, product = found
        with graph.inserting_before(add):
            addmm = graph.call_function(aten.addmm.default, (bias, *product.args[:2]))
        addmm.meta = dict(add.meta)
        add.replace_all_uses_with(addmm)
        graph.erase_node(add)
        graph.erase_node(product)
        folded += 1
    return folded
