"""Lowerings of the sort family on CPU: sort (argsort and msort decompose to it), topk, kthvalue,
median, mode -> ``RowSort`` buffers (``loopir/sort.py``) that generated C++ computes with ATen's own
CPU algorithms. On other devices (and where a call is outside what the kernels do) the op stays a
library call (``extern.py``'s ``sort (library kernel)``), with the reason.

The input is read through its body (a pointwise producer is inlined); both results of one call share a
``SortSpec`` and become one kernel that sorts each row once.
"""
from __future__ import annotations

import operator

import sympy
import torch

from kiln.loopir.index import FloorDiv, ModularIndexing
from kiln.loopir.nodes import ComputedBuffer, Lazy, Stored
from kiln.loopir.sizes import any_symbolic, is_symbolic, known, shape_of
from kiln.loopir.sort import RowSort, SortSpec
from kiln.lower.common import origins_of, upcast
from kiln.lower.graph import fake_val
from kiln.lower.registry import Unlowerable, lowering
from kiln.lower.scan import eager_strides

aten = torch.ops.aten
LIBRARY = "sort (library kernel)"


def _check(g, x) -> None:
    if x.device.type != "cpu" or g.codegen != "cpp":
        raise Unlowerable(f"{LIBRARY}: generated sort kernels are C++ (CPU) only")
    if x.dtype.is_complex:
        raise Unlowerable(f"{LIBRARY}: complex dtype")
    if any_symbolic(x.size) and g.codegen != "cpp":
        raise Unlowerable(f"{LIBRARY}: symbolic sizes")


def _spec(x, op: str, dim: int, **kw) -> SortSpec:
    ndim = len(x.size)
    d = dim % ndim if ndim else 0
    size = tuple(x.size) if ndim else (1,)
    load = x.loader()
    cdtype = upcast(x.dtype)

    def body(ops, index):
        v = load(ops, index if ndim else [])
        return v if v.dtype == cdtype else ops.to_dtype(v, cdtype)

    return SortSpec(op, size, d, body, cdtype, **kw)


def _used_results(node) -> set[int] | None:
    """Which results of a multi-result node its readers take (None: all, or not only through getitem)."""
    if not node.users or any(u.target is not operator.getitem for u in node.users):
        return None
    return {u.args[1] for u in node.users}


def _scalar_results(node, x, whats):
    """A 0-dim input's results: the value itself, index 0."""
    val = fake_val(node)
    vals = val if isinstance(val, (tuple, list)) else (val,)
    load = x.loader()
    out = []
    for which, v in zip(whats, vals):
        def body(ops, index, which=which, dtype=v.dtype):
            if which == "indices":
                return ops.constant(0, torch.int64)
            value = load(ops, [])
            return value if value.dtype == dtype else ops.to_dtype(value, dtype)

        out.append(Lazy((), v.dtype, v.device, body, 1, origins_of(node, x)))
    return tuple(out) if isinstance(val, (tuple, list)) else out[0]


def _outputs(g, node, spec: SortSpec, x, whats=("values", "indices")):
    """The buffers of ``spec``'s results (shapes and dtypes from the node's fake values); a result no
    one reads (argsort's values, msort's indices) is not computed (None)."""
    if not x.size:
        return _scalar_results(node, x, whats)
    val = fake_val(node)
    vals = val if isinstance(val, (tuple, list)) else (val,)
    used = _used_results(node) if isinstance(val, (tuple, list)) else None
    out = []
    for i, (which, v) in enumerate(zip(whats, vals)):
        if used is not None and i not in used:
            out.append(None)
            continue
        size = shape_of(v)
        stride = eager_strides(v, size)
        ranges = size if size else ()
        buf = ComputedBuffer(g.new_name(), v.dtype, v.device, size, stride, origins_of(node, x),
                             data=RowSort(spec, which, tuple(ranges), v.dtype))
        g.nodes.append(buf)
        out.append(Stored(buf, size, stride, 0))
    return tuple(out) if isinstance(val, (tuple, list)) else out[0]


def _empty_or_trivial(x) -> bool:
    return any(not is_symbolic(n) and int(n) == 0 for n in x.size)  # (a size symbol is >= 2)


def _library_otherwise(fn):
    """``fn``'s kernel, or (where it raises Unlowerable) the library call sort/topk always were."""

    def lower(g, node, *args, **kwargs):
        try:
            return fn(g, node, *args, **kwargs)
        except Unlowerable as exc:
            return g.add_extern(node.target, args, kwargs, exc.reason, node)

    lower.__name__ = fn.__name__
    return lower


@lowering(aten.sort.default)
@_library_otherwise
def lower_sort(g, node, x, dim=-1, descending=False):
    return _sort(g, node, x, dim, descending, False)


@lowering(aten.sort.stable)
@_library_otherwise
def lower_sort_stable(g, node, x, *, stable=None, dim=-1, descending=False):
    return _sort(g, node, x, dim, descending, bool(stable))


def _checked(g, x, k=None, dim=None, low=0) -> None:
    """Refuse (Unlowerable) what the kernels do not do; a ``k`` outside ``[low, n]`` is the user's error,
    which ATen's kernel raises."""
    _check(g, x)
    if is_symbolic(k):
        raise Unlowerable(f"{LIBRARY}: k is a symbolic size")
    if k is not None:
        n = x.size[dim % len(x.size)] if x.size else 1
        if known(sympy.sympify(int(k) >= low)) is not True or known(sympy.sympify(int(k) <= n)) is not True:
            raise Unlowerable(f"{LIBRARY}: k={int(k)} is not known to be in [{low}, {n}] (ATen checks it)")
    if _empty_or_trivial(x) or k == 0:
        raise Unlowerable(f"{LIBRARY}: empty input or k == 0")


def _sort(g, node, x, dim, descending, stable):
    _checked(g, x)
    return _outputs(g, node, _spec(x, "sort", dim, descending=bool(descending), stable=stable), x)


@lowering(aten.topk.default)
@_library_otherwise
def lower_topk(g, node, x, k, dim=-1, largest=True, sorted=True):
    _checked(g, x, k, dim)
    return _outputs(g, node, _spec(x, "topk", dim, descending=bool(largest), k=int(k), sorted=bool(sorted)), x)


@lowering(aten.kthvalue.default)
def lower_kthvalue(g, node, x, k, dim=-1, keepdim=False):
    _checked(g, x, k, dim, low=1)
    return _outputs(g, node, _spec(x, "kthvalue", dim, k=int(k), keepdim=bool(keepdim)), x)


def _along_dim(op: str):
    """The lowering of ``op(x, dim, keepdim)`` (median.dim, nanmedian.dim, mode)."""

    def lower(g, node, x, dim=-1, keepdim=False):
        _checked(g, x)
        return _outputs(g, node, _spec(x, op, dim, keepdim=bool(keepdim)), x)

    lower.__name__ = f"lower_{op}_dim"
    return lower


def _of_all(op: str):
    """The lowering of ``op(x)`` over all elements (median, nanmedian): ``op`` of the flattened input
    along its only dim, the value only."""

    def lower(g, node, x):
        _checked(g, x)
        if any_symbolic(x.size):
            raise Unlowerable(f"{LIBRARY}: {op} of all elements over symbolic sizes")
        return _outputs(g, node, _spec(_flattened(x), op, 0), x, whats=("values",))

    lower.__name__ = f"lower_{op}"
    return lower


lowering(aten.median.dim)(_along_dim("median"))
lowering(aten.nanmedian.dim)(_along_dim("nanmedian"))
lowering(aten.mode.default)(_along_dim("mode"))
lowering(aten.median.default)(_of_all("median"))
lowering(aten.nanmedian.default)(_of_all("nanmedian"))


def _flattened(x) -> Lazy:
    """``x`` as a 1-D value (row-major order)."""
    size = [int(n) for n in x.size]
    total = 1
    for n in size:
        total *= n
    load = x.loader()

    def body(ops, index):
        (i,) = index
        coords, below = [], total
        for n in size:
            below //= n
            if n == 1:
                coords.append(sympy.Integer(0))
            elif below == 1:
                coords.append(ModularIndexing(i, 1, n) if n != total else i)
            else:
                coords.append(ModularIndexing(i, below, n) if below * n != total else FloorDiv(i, below))
        return load(ops, coords)

    return Lazy((total,), x.dtype, x.device, body, 1, getattr(x, "origins", ()))
