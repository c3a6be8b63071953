"""Scatter nodes: loops that write (or combine) values into another node's buffer at computed positions.

A scatter-family op (``scatter``, ``scatter_add``, ``scatter_reduce``, ``index_put``) becomes two loop
nests: a ``Pointwise`` copy of ``self`` into a fresh buffer, then a ``ScatterBuffer`` over the source's
iteration space whose body returns, per element, the position in that buffer and the value. Its store is
``ops.scatter_store(name, index, value, mode)`` with a mode:

* ``store``  overwrite (``scatter``, ``index_put``): with duplicate positions the last write in
  iteration order wins on CPU (ATen's serial order); on GPU any one of them (as ATen's CUDA kernels);
* ``add`` / ``mul`` / ``max`` / ``min``: ``buf[i] = buf[i] (op) value`` (``max``/``min`` propagate NaN
  like ATen's ``scatter_reduce``); on GPU an atomic read-modify-write.

A ``ScatterBuffer`` carries the *same name* as the buffer it updates: the scheduler sees it as that
buffer's next writer, so later readers depend on it, and it reads the buffer (the copy runs first).
It never fuses (``is_update``): its positions are data-dependent, so no reader can take its values from
the same loop iteration, and on GPU a reader in the same kernel could run before all updates landed.

``parallel_dims`` are the loop dims along which different iterations always write different positions
(the non-scatter dims of ``scatter``, the sliced dims of ``index_put``): CPU code splits one of them over
threads and keeps the iteration order of the others, so every position is combined in ATen's order and
the result is deterministic.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch

from kiln.loopir.index import linear_index
from kiln.loopir.nodes import ComputedBuffer

SCATTER_MODES = ("store", "add", "mul", "max", "min")


@dataclasses.dataclass(eq=False)
class Scatter:
    """For each ``index`` in ``ranges``: ``(position, value) = body(ops, index)``; the value goes into the
    target buffer at ``position`` (one index per dim of the target's logical view) with ``mode``."""

    ranges: tuple
    body: Callable[[Any, Sequence], tuple]
    mode: str
    dtype: torch.dtype
    parallel_dims: tuple = ()

    def describe(self) -> str:
        return f"scatter {self.mode} over {list(self.ranges)} (parallel dims {list(self.parallel_dims)})"


@dataclasses.dataclass(eq=False)
class ScatterBuffer(ComputedBuffer):
    """An in-place update of buffer ``name`` (written before by its copy node): ``data`` is a ``Scatter``;
    ``target_stride``/``target_offset`` map the position the body returns (logical dims) to the buffer."""

    target_stride: tuple = ()
    target_offset: Any = 0

    def store_body(self):
        data, name = self.data, self.name
        stride, offset = self.target_stride, self.target_offset

        def body(ops, index):
            position, value = data.body(ops, index)
            ops.scatter_store(name, linear_index(position, stride, offset), value, data.mode)

        return body


def is_update(node) -> bool:
    """A loop-IR node that updates another node's buffer in place (never fused, never allocated)."""
    return isinstance(node, ScatterBuffer)
