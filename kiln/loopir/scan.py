"""Scans in the loop IR: ``out[..., j, ...] = combine(in[..., 0, ...], ..., in[..., j, ...])`` along one dim.

A ``Scan`` is the ``data`` of a ``ComputedBuffer`` (like ``Pointwise``/``Reduction``): ``body(ops, index)``
gives the input element at ``index`` (already converted to ``dtype``, the result dtype), ``kind`` says how
elements combine, and the buffer holds the running result at every index. cummax/cummin are two scans
of the same input: the values (kind ``max``/``min``) and the indices (kind ``argmax``/``argmin``); the
scheduler fuses them into one kernel (``schedule/scan_rules.py``).

Semantics, exactly ATen's CPU kernels (``ReduceOpsKernel.cpp``):

* ``sum``/``prod``: accumulated in ``acc_dtype`` (ATen's ``acc_type``: float32 -> float64 on CPU,
  float16/bfloat16 -> float32, integers -> int64), each prefix rounded to ``dtype`` when stored.
* ``logsumexp``: ``acc = log_add_exp(x, acc)`` from ``-inf``; equal infinities give that infinity, NaN
  propagates.
* ``max``/``argmax`` (``min``/``argmin`` alike with ``<=``): the running element is replaced by ``x``
  when ``isnan(x) or (not isnan(acc) and x >= acc)``: ties take the *last* index, a NaN sticks and each
  later NaN moves the index to itself.

In the store body the scanned value is ``ops.scan(kind, value, dim)``: analysis handlers print or record
it; the ``Evaluator`` computes it with torch over the whole grid; the code generators do not run the
store body of a scan but generate the loop themselves (``codegen/cpp/scan.py``, ``codegen/triton/scan.py``).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import sympy
import torch

from kiln.loopir.index import linear_index

SCAN_KINDS = ("sum", "prod", "logsumexp", "max", "min", "argmax", "argmin")


@dataclasses.dataclass(eq=False)
class Scan:
    """out[index] = scan(kind) of body(ops, index') over index' equal to index but for dim ``dim`` <= it."""

    ranges: tuple[int, ...]
    dim: int  # the scanned dim of ``ranges`` (never of size 1: such a scan is a pointwise copy)
    body: Callable[[Any, Sequence[sympy.Expr]], Any]
    kind: str
    dtype: torch.dtype  # dtype of the stored result (int64 for argmax/argmin)
    acc_dtype: torch.dtype  # dtype the running value is kept in
    value_dtype: torch.dtype  # dtype ``body`` returns

    def __post_init__(self):
        if self.kind not in SCAN_KINDS:
            raise ValueError(f"unknown scan kind {self.kind!r}")

    def store_body(self, buf):
        def body(ops, index):
            store_as(ops, buf, index, ops.scan(self.kind, self.body(ops, index), self.dim))

        return body

    def describe(self) -> str:
        return f"scan {self.kind} along dim {self.dim} of {list(self.ranges)}"


def store_as(ops, buf, index, value) -> None:
    """Store ``value`` (converted to the buffer's dtype) at ``index`` of ``buf``."""
    if value.dtype != buf.dtype:
        value = ops.to_dtype(value, buf.dtype)
    ops.store(buf.name, linear_index(index, buf.stride), value)


def is_scan(node) -> bool:
    """A scheduler node (or computed buffer) whose data is a Scan."""
    buf = getattr(node, "node", node)
    return isinstance(getattr(buf, "data", None), Scan)


def scan_loop(data: Scan) -> int:
    """The position of the scanned dim among the loops (the ranges without size-1 dims)."""
    return sum(1 for n in data.ranges[: data.dim] if n != 1)


def scan_group_shape(group) -> tuple[tuple, list[int], list, int]:
    """(source ops, loop sizes (ints or size expressions), scan members, scanned loop) of a fused group
    holding scans."""
    origins = tuple(o for m in group.members for o in m.node.origins if o is not None)
    scans = [m for m in group.members if is_scan(m)]
    return origins, list(group.members[0].ranges), scans, scan_loop(scans[0].node.data)


def scan_result_dtype(kind: str, value_dtype: torch.dtype) -> torch.dtype:
    return torch.int64 if kind in ("argmax", "argmin") else value_dtype


def evaluate_scan(kind: str, value: torch.Tensor, dim: int) -> torch.Tensor:
    """The reference (torch) result of a scan of ``value`` along ``dim``."""
    if kind == "sum":
        return torch.cumsum(value, dim, dtype=value.dtype)
    if kind == "prod":
        return torch.cumprod(value, dim, dtype=value.dtype)
    if kind == "logsumexp":
        return torch.logcumsumexp(value, dim)
    if kind in ("max", "argmax"):
        v, i = torch.cummax(value, dim)
        return v if kind == "max" else i
    v, i = torch.cummin(value, dim)
    return v if kind == "min" else i
