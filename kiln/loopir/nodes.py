"""Loop-IR nodes: values that lowering builds, and the buffers the scheduler orders and fuses.

Two layers:

* ``TensorValue`` -- what a lowering returns for one FX value. ``Lazy`` is an unrealized pointwise
  computation (a body over the value's own index; it is inlined into whatever reads it), ``Stored`` is
  a strided view of a buffer. Views never copy: a view of ``Stored`` is another ``Stored`` over the
  same buffer; a view of ``Lazy`` is a ``Lazy`` whose body reindexes.
* ``Buffer`` -- memory the program needs: ``InputBuffer`` (a graph input), ``ComputedBuffer``
  (written by a ``Pointwise`` or ``Reduction`` loop nest), ``ExternOutput`` (returned by an
  ``ExternKernel``: an ATen call for matmul/conv/attention or any op without a lowering).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import sympy
import torch

from kiln.loopir.index import linear_index
from kiln.loopir.sizes import any_symbolic, hint, is_symbolic

Loader = Callable[[Any, Sequence[sympy.Expr]], Any]  # (ops, index) -> value


def contiguous_strides(size: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides; sizes may be symbolic (kiln.loopir.sizes: a symbol is >= 2)."""
    strides, acc = [], 1
    for s in reversed(size):
        strides.append(acc)
        acc = acc * s if is_symbolic(s) else acc * max(int(s), 1)
        if is_symbolic(acc):
            acc = sympy.expand(acc)
    return tuple(reversed(strides))


def is_dense(size: Sequence[int], stride: Sequence[int]) -> bool:
    """True when ``stride`` is a permutation of a contiguous layout of ``size`` (no gaps, no overlap).
    With symbolic sizes, True only when that holds for every size (strides equal as expressions)."""
    dims = sorted(((st, sz) for sz, st in zip(size, stride) if sz != 1), key=lambda d: (hint(d[0]), hint(d[1])))
    expected = 1
    for st, sz in dims:
        if st != expected and sympy.expand(st - expected) != 0:
            return False
        expected = expected * sz
    return True


def numel(size: Sequence[int]) -> int:
    """The element count: an int, or a sympy expression when a size is symbolic."""
    if any_symbolic(size):
        return sympy.expand(sympy.Mul(*size))
    return math.prod(int(s) for s in size)


# ---------------------------------------------------------------------------------------- buffers


@dataclasses.dataclass(eq=False)
class Buffer:
    name: str
    dtype: torch.dtype
    device: torch.device
    size: tuple[int, ...]
    stride: tuple[int, ...]
    origins: tuple = ()  # FX nodes this buffer computes

    @property
    def numel(self) -> int:
        return numel(self.size)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def describe(self) -> str:
        return f"{self.name}: {str(self.dtype).replace('torch.', '')}{list(self.size)} stride={list(self.stride)}"

    def allocation(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The size and strides the wrapper allocates (and holds) this buffer's tensor with."""
        return tuple(self.size), tuple(self.stride)


@dataclasses.dataclass(eq=False)
class InputBuffer(Buffer):
    position: int = 0


@dataclasses.dataclass(eq=False)
class ConstantBuffer(Buffer):
    """A tensor constant of the graph (a ``get_attr`` node); the wrapper holds ``value``."""

    value: Any = None


@dataclasses.dataclass(eq=False)
class Pointwise:
    """out[index] = body(ops, index) over ``ranges``."""

    ranges: tuple[int, ...]
    body: Loader
    dtype: torch.dtype


@dataclasses.dataclass(eq=False)
class Reduction:
    """out[index] = reduce(kind, body(ops, index, rindex) for rindex in reduction_ranges)."""

    ranges: tuple[int, ...]
    reduction_ranges: tuple[int, ...]
    body: Callable[[Any, Sequence[sympy.Expr], Sequence[sympy.Expr]], Any]
    kind: str
    src_dtype: torch.dtype  # dtype the values are accumulated in
    dtype: torch.dtype  # dtype of the stored result


@dataclasses.dataclass(eq=False)
class ComputedBuffer(Buffer):
    data: Pointwise | Reduction | None = None  # (or loopir.scan.Scan, which builds its own store body)
    # (size, stride) of the value when its loops run in another order than its dims: a dense layout
    # computed in memory order (``size``/``stride`` are then the loops' row-major ones). The tensor is
    # allocated with this view, so readers of the value get it without an ``as_strided``.
    view: tuple | None = None
    # FX nodes of producers inlined into a reduction's body, beyond ``origins`` (which name the kernel):
    # an out-of-range index message names the indexing op among them (codegen/common.py)
    inlined: tuple = ()

    def allocation(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return self.view if self.view is not None else super().allocation()

    def store_body(self):
        """The full loop body: (ops, index[, rindex]) -> None, storing into this buffer."""
        data, name, stride = self.data, self.name, self.stride
        if hasattr(data, "store_body"):  # a node kind defined in its own module (loopir/scan.py)
            return data.store_body(self)
        # iteration dims of size 1 are dropped by the scheduler; here index has one entry per dim
        if isinstance(data, Pointwise):

            def body(ops, index):
                ops.store(name, linear_index(index, stride), data.body(ops, index))

            return body

        def rbody(ops, index, rindex):
            value = ops.reduction(data.kind, data.body(ops, index, rindex), data.src_dtype)
            if data.kind not in ("argmax", "argmin") and data.src_dtype != data.dtype:
                value = ops.to_dtype(value, data.dtype)
            ops.store_reduction(name, linear_index(index, stride), value)

        return rbody


@dataclasses.dataclass(eq=False)
class ExternKernel:
    """A call to an ATen op on realized tensors: ``result = op(*args, **kwargs)``.

    ``args``/``kwargs`` hold Python values with ``Stored`` values where the op takes tensors; the
    wrapper passes those buffers (as strided views). ``outputs`` are the tensors of the result, in
    pytree order; ``reason`` says why the op was not lowered to a loop nest.
    """

    name: str
    op: Any
    args: tuple
    kwargs: dict
    outputs: list["ExternOutput"]
    reason: str
    origins: tuple = ()


def unbacked_sizes(size) -> list:
    """(dim, symbol) of each size that is a data-dependent size of its own (``u0``): what an extern
    kernel's result defines, read from it by the wrapper (``u0 = buf3.size(0)``)."""
    return [(d, n) for d, n in enumerate(size) if isinstance(n, sympy.Symbol) and n.name.startswith("u")]


@dataclasses.dataclass(eq=False)
class ExternOutput(Buffer):
    kernel: ExternKernel | None = None
    path: tuple = ()  # where in the op's (possibly nested) result this tensor is


# ----------------------------------------------------------------------------------- tensor values


class TensorValue:
    size: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    def loader(self) -> Loader:
        raise NotImplementedError


@dataclasses.dataclass(eq=False)
class Lazy(TensorValue):
    """An unrealized pointwise value; ``cost`` counts the ops its body inlines (to bound recomputation)."""

    size: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    body: Loader
    cost: int = 1
    origins: tuple = ()

    def loader(self) -> Loader:
        return self.body


@dataclasses.dataclass(eq=False)
class Stored(TensorValue):
    """A strided view of ``buffer``: element ``index`` lives at ``offset + sum(index * stride)``."""

    buffer: Buffer
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int = 0

    @property
    def dtype(self) -> torch.dtype:
        return self.buffer.dtype

    @property
    def device(self) -> torch.device:
        return self.buffer.device

    def is_whole_buffer(self) -> bool:
        size, stride = self.buffer.allocation()
        return self.offset == 0 and tuple(self.size) == size and tuple(self.stride) == stride

    def loader(self) -> Loader:
        name, stride, offset = self.buffer.name, self.stride, self.offset

        def load(ops, index):
            return ops.load(name, linear_index(index, stride, offset))

        return load
