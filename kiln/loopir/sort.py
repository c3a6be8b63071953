"""Row sorts in the loop IR: sort, topk, kthvalue, median, mode along one dim (``RowSort``).

A ``SortSpec`` is one op on one input: ``body(ops, index)`` reads the input (an index over ``in_size``),
``dim`` is the sorted dim. Each result tensor (values, indices) is a ``ComputedBuffer`` whose ``data``
is a ``RowSort(spec, which)``; the two buffers of one spec are one kernel (``schedule/scan_rules.py``),
which sorts each row once. The code generator (``codegen/cpp/sort.py``) runs ATen's own CPU algorithms
(the same ``std::sort``/``std::stable_sort``/``std::partial_sort``/``std::nth_element`` calls with the same
comparators, and ATen's quickselect), so values *and* the indices of equal elements are eager's:

* ``sort``: NaN after every number (before, descending); ``stable`` keeps equal elements in index order.
* ``topk``: ATen's ``topk_impl_loop`` (partial sort when ``k * 64 <= n``, else nth_element then sort).
* ``kthvalue``: ATen's ``quick_select_template``; ``median(dim)``: the ``(n - 1) // 2``-th element in
  (value, index) order, or the first NaN; ``median()``: that value over all elements; ``nanmedian``:
  ATen's ``nth_element`` with NaN last at the middle of the non-NaN elements.
* ``mode``: ``std::sort`` by value, then the first longest run (its last element's index).

The store body that analysis handlers run reads the row (the sorted dim indexed by the symbol ``r0``)
and stores it: it lists what the node reads; ``describe`` says what it computes; ``evaluate`` is the
reference (torch's op on the evaluated input).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import sympy
import torch

from kiln.loopir.index import var
from kiln.loopir.scan import store_as

SORT_OPS = ("sort", "topk", "kthvalue", "median", "nanmedian", "mode")


@dataclasses.dataclass(eq=False)
class SortSpec:
    op: str
    in_size: tuple[int, ...]
    dim: int  # of ``in_size``
    body: Callable[[Any, Sequence[sympy.Expr]], Any]  # input element at an index over ``in_size``
    value_dtype: torch.dtype  # what ``body`` returns (the input's compute dtype)
    descending: bool = False  # sort; topk: largest
    stable: bool = False
    k: int = 0  # topk: how many; kthvalue: which (1-based)
    keepdim: bool = False  # kthvalue, median, mode
    sorted: bool = True  # topk

    @property
    def n(self):
        """The row length: an int, or a size expression."""
        return self.in_size[self.dim]

    @property
    def keeps_dim(self) -> bool:
        """Whether the results have the sorted dim (sort, topk), else one element per row."""
        return self.op in ("sort", "topk")

    def out_len(self) -> int:
        return self.n if self.op == "sort" else self.k

    def describe(self) -> str:
        flags = [f for f, on in (("descending" if self.op == "sort" else "largest", self.descending),
                                 ("stable", self.stable)) if on]
        if self.op in ("topk", "kthvalue"):
            flags.insert(0, f"k={self.k}")
        return f"{self.op} along dim {self.dim} of {list(self.in_size)}" + (f" ({', '.join(flags)})" if flags else "")


@dataclasses.dataclass(eq=False)
class RowSort:
    """One result (``which``: "values" | "indices") of ``spec`` over the output ``ranges``."""

    spec: SortSpec
    which: str
    ranges: tuple[int, ...]
    dtype: torch.dtype

    def row_index(self, index) -> list:
        """The input index of the row that output ``index`` belongs to, the sorted dim as ``r0``."""
        spec, out = self.spec, list(index)
        full = []
        for d in range(len(spec.in_size)):
            if d == spec.dim:
                full.append(var("r", 0))
                if spec.keeps_dim or spec.keepdim:
                    out.pop(0)
            else:
                full.append(out.pop(0) if spec.in_size[d] != 1 else sympy.Integer(0))
        return full

    def store_body(self, buf):
        def body(ops, index):
            value = self.spec.body(ops, self.row_index(index))
            if self.which == "indices":
                value = ops.index_expr(var("r", 0), torch.int64)
            store_as(ops, buf, index, value)

        return body

    def describe(self) -> str:
        return f"{self.which} of {self.spec.describe()}"

    def evaluate(self, buf, buffers) -> None:
        """The reference result: torch's op on the input evaluated with the loop-IR Evaluator."""
        from kiln.loopir.handlers import Evaluator

        spec = self.spec
        shape = [int(n) for n in spec.in_size]
        syms = [sympy.Symbol(f"e{d}", integer=True, nonnegative=True) for d in range(len(shape))]
        env = {}
        for d, s in enumerate(syms):
            view = [1] * len(shape)
            view[d] = shape[d]
            env[s] = torch.arange(shape[d]).view(view)
        ev = Evaluator(buffers, env)
        ev.env_shape = torch.Size(shape)
        x = torch.as_tensor(spec.body(ev, syms)).expand(shape).to(self.dtype if self.which == "values" else spec.value_dtype)
        result = reference_result(spec, x)[0 if self.which == "values" else 1]
        flat = buffers[buf.name]
        flat.as_strided(result.shape, buf.stride).copy_(result)


def reference_result(spec: SortSpec, x: torch.Tensor):
    if spec.op == "sort":
        return torch.sort(x, dim=spec.dim, descending=spec.descending, stable=spec.stable)
    if spec.op == "topk":
        return torch.topk(x, spec.k, spec.dim, largest=spec.descending, sorted=spec.sorted)
    if spec.op == "kthvalue":
        return torch.kthvalue(x, spec.k, spec.dim, keepdim=spec.keepdim)
    if spec.op == "median":
        return torch.median(x, spec.dim, keepdim=spec.keepdim)
    if spec.op == "nanmedian":
        return torch.nanmedian(x, spec.dim, keepdim=spec.keepdim)
    return torch.mode(x, spec.dim, keepdim=spec.keepdim)


def is_row_sort(node) -> bool:
    buf = getattr(node, "node", node)
    return isinstance(getattr(buf, "data", None), RowSort)
