"""Fake outputs of view ops on tensors with symbolic sizes.

ATen's C++ meta kernels of ``view``, ``expand`` and friends take only concrete sizes, and torch's Python
meta kernels of others re-enter Python dispatch. For a tensor with symbolic sizes these rules compute
the output's sizes, strides and offset as SymInts here, and make it with ``as_strided`` on the input's
meta storage (so the output aliases the input, as the real view would).

A case a rule does not cover (a view of a non-contiguous tensor that would need stride arithmetic on
symbols) raises ``SymbolicShapeUnsupported``: capture then traces the frame again with static sizes.
"""
from __future__ import annotations

import torch

from kiln.fake.symbolic import is_symbolic

aten = torch.ops.aten


class SymbolicShapeUnsupported(Exception):
    """An op kiln cannot run on symbolic sizes; the caller compiles with static sizes instead."""

    def __init__(self, func, why: str):
        self.func, self.why = func, why
        super().__init__(f"{func} on symbolic sizes: {why}")


def has_symbolic_tensor(args) -> bool:
    for a in args:
        if isinstance(a, torch.Tensor):
            if any(is_symbolic(s) for s in a.shape):
                return True
        elif isinstance(a, (list, tuple)) and has_symbolic_tensor(a):
            return True
    return False


def _dim(d: int, n: int) -> int:
    n = max(n, 1)
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
    return d % n


def _view(x, sizes, strides, offset=None):
    return x.as_strided(sizes, strides, x.storage_offset() if offset is None else offset)


def _contiguous_strides(sizes) -> list:
    out, running = [], 1
    for n in reversed(sizes):
        out.append(running)
        running = running * n if not (isinstance(n, int) and n == 0) else running
    return list(reversed(out))


def _is_row_major(x) -> bool:
    """Structurally row-major (the expressions equal, no guard): the case the view rules handle."""
    expected = _contiguous_strides(list(x.shape))
    for n, st, e in zip(x.shape, x.stride(), expected):
        if isinstance(n, int) and n == 1:
            continue
        if str(st) != str(e):
            return False
    return True


def _numel(sizes):
    total = 1
    for n in sizes:
        total = total * n
    return total


def view(func, x, shape):
    shape = list(shape)
    inferred = [j for j, s in enumerate(shape) if isinstance(s, int) and s == -1]
    if len(inferred) > 1:
        raise RuntimeError("only one dimension can be inferred")
    total = _numel(list(x.shape))
    if inferred:
        i = inferred[0]
        shape[i] = _exact_div(total, _numel([s for j, s in enumerate(shape) if j != i]))
    elif total != _numel(shape):  # (a guard that the element counts agree, where they are symbolic)
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {total}")
    if _is_row_major(x):
        return _view(x, shape, _contiguous_strides(shape))
    strides = _view_strides(list(x.shape), list(x.stride()), shape)
    if strides is None:
        raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one dimension "
                           "spans across two contiguous subspaces). Use .reshape(...) instead.")
    return _view(x, shape, strides)


def _view_strides(old_sizes, old_strides, new_sizes):
    """The strides of a view of (old_sizes, old_strides) as new_sizes, or None where no view exists: the
    new dims are laid over runs of old dims that are contiguous among themselves. Comparisons of
    symbolic sizes here are guards."""
    new_strides = [0] * len(new_sizes)
    if not old_sizes:
        return [1] * len(new_sizes)
    view_d = len(new_sizes) - 1
    base = old_strides[-1]
    tensor_numel, view_numel = 1, 1
    for d in range(len(old_sizes) - 1, -1, -1):
        tensor_numel = tensor_numel * old_sizes[d]
        if d == 0 or (old_sizes[d - 1] != 1 and old_strides[d - 1] != tensor_numel * base):
            while view_d >= 0 and (view_numel < tensor_numel or new_sizes[view_d] == 1):
                new_strides[view_d] = view_numel * base
                view_numel = view_numel * new_sizes[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                base = old_strides[d - 1]
                tensor_numel, view_numel = 1, 1
    return new_strides if view_d == -1 else None


def _exact_div(total, known):
    """total / known where it divides (sympy cancels the symbols)."""
    from kiln.fake.shapes import to_expr

    import sympy

    t, k = to_expr(total), to_expr(known)
    q = sympy.cancel(t / k)
    if not q.is_integer and not (q.is_Integer or (q.free_symbols and sympy.fraction(q)[1] == 1)):
        raise SymbolicShapeUnsupported("view", f"cannot infer the -1 size: {t} / {k}")
    env = next(s.node.env for s in (total, known) if isinstance(s, torch.SymInt))
    return env.symint(q)


def reshape(func, x, shape):
    try:
        return view(func, x, shape)
    except RuntimeError:  # no view of x has this shape: a copy, as ATen's reshape makes
        return view(func, x.clone(memory_format=torch.contiguous_format), shape)


def expand(func, x, sizes, implicit=False):
    sizes = list(sizes)
    lead = len(sizes) - x.dim()
    if lead < 0:
        raise RuntimeError("the number of sizes provided must be greater or equal to the number of dimensions")
    out_sizes, out_strides = [], []
    for i, want in enumerate(sizes):
        if i < lead:
            out_sizes.append(want)
            out_strides.append(0)
            continue
        have, stride = x.shape[i - lead], x.stride(i - lead)
        if isinstance(want, int) and want == -1:
            out_sizes.append(have)
            out_strides.append(stride)
        elif isinstance(have, int) and have == 1:
            out_sizes.append(want)
            out_strides.append(0 if not (isinstance(want, int) and want == 1) else stride)
        else:
            if want != have:  # a guard where symbolic (they must be equal, as eager checks)
                raise RuntimeError(f"The expanded size of the tensor ({want}) must match the existing size "
                                   f"({have}) at non-singleton dimension {i}")
            out_sizes.append(have)
            out_strides.append(stride)
    return _view(x, out_sizes, out_strides)


def permute(func, x, dims):
    dims = [_dim(d, x.dim()) for d in dims]
    return _view(x, [x.shape[d] for d in dims], [x.stride(d) for d in dims])


def transpose(func, x, d0, d1):
    dims = list(range(x.dim()))
    if x.dim():
        a, b = _dim(d0, x.dim()), _dim(d1, x.dim())
        dims[a], dims[b] = dims[b], dims[a]
    return permute(func, x, dims)


def t(func, x):
    return transpose(func, x, 0, 1) if x.dim() == 2 else x.as_strided(x.shape, x.stride(), x.storage_offset())


def _clamp(v, lo, hi):
    return torch.sym_min(torch.sym_max(v, lo), hi)


def slice_(func, x, dim=0, start=None, end=None, step=1):
    dim = _dim(dim, x.dim())
    n = x.shape[dim]
    start = 0 if start is None else start
    end = n if end is None else end
    if step <= 0:
        raise RuntimeError("slice step must be positive")
    if isinstance(start, int) and start < 0:
        start = start + n
    if isinstance(end, int) and end < 0:
        end = end + n
    if isinstance(end, int) and end >= 2 ** 62:
        end = n
    start = _clamp(start, 0, n)
    end = _clamp(end, start, n)
    length = (end - start + step - 1) // step
    sizes, strides = list(x.shape), list(x.stride())
    sizes[dim] = length
    strides[dim] = strides[dim] * step
    return _view(x, sizes, strides, x.storage_offset() + start * x.stride(dim))


def narrow(func, x, dim, start, length):
    return slice_(func, x, dim, start, start + length)


def select(func, x, dim, index):
    dim = _dim(dim, x.dim())
    if isinstance(index, int) and index < 0:
        index = index + x.shape[dim]
    sizes, strides = list(x.shape), list(x.stride())
    offset = x.storage_offset() + index * strides[dim]
    del sizes[dim], strides[dim]
    return _view(x, sizes, strides, offset)


def unsqueeze(func, x, dim):
    dim = _dim(dim, x.dim() + 1)
    sizes, strides = list(x.shape), list(x.stride())
    stride = sizes[dim] * strides[dim] if dim < x.dim() else 1
    sizes.insert(dim, 1)
    strides.insert(dim, stride)
    return _view(x, sizes, strides)


def split_with_sizes(func, x, split_sizes, dim=0):
    dim = _dim(dim, x.dim())
    out, start = [], 0
    for n in split_sizes:
        out.append(slice_(func, x, dim, start, start + n))
        start = start + n
    return out


def split(func, x, split_size, dim=0):
    dim = _dim(dim, x.dim())
    n = x.shape[dim]
    if is_symbolic(split_size) or is_symbolic(n):
        # the number of chunks must be a Python int: it specializes the ratio
        chunks = int((n + split_size - 1) // split_size)
    else:
        chunks = max(1, -(-n // split_size))
    sizes = [split_size] * (chunks - 1) + [n - split_size * (chunks - 1)]
    return split_with_sizes(func, x, sizes, dim)


def to_copy(func, x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
            memory_format=None):
    """A copy with another dtype (or device): the same sizes; strides kept where x is dense (preserve)."""
    dtype = dtype or x.dtype
    if memory_format in (None, torch.preserve_format) and _is_row_major(x) is False and not _dense(x):
        memory_format = torch.contiguous_format
    if memory_format in (None, torch.preserve_format):
        return torch.empty_strided(x.shape, x.stride(), dtype=dtype, device="meta")
    if memory_format is torch.contiguous_format:
        return torch.empty(x.shape, dtype=dtype, device="meta")
    raise SymbolicShapeUnsupported(func, f"memory_format={memory_format}")


def _dense(x) -> bool:
    """Non-overlapping and dense: the strides are those of a row-major tensor with its dims permuted."""
    dims = sorted(range(x.dim()), key=lambda d: _hint(x.stride(d)))
    expected = 1
    for d in dims:
        if isinstance(x.shape[d], int) and x.shape[d] == 1:
            continue
        if str(x.stride(d)) != str(expected):
            return False
        expected = expected * x.shape[d]
    return True


def _hint(n) -> int:
    return n.node.hint if isinstance(n, torch.SymInt) else int(n)


def _at_hints(x):
    """A plain meta tensor (or number) with the sizes and strides x has at the symbols' hints."""
    if isinstance(x, torch.Tensor):
        return torch.empty_strided([_hint(n) for n in x.shape], [_hint(n) for n in x.stride()], dtype=x.dtype,
                                   device="meta")
    if isinstance(x, torch.SymInt):
        return _hint(x)
    return x


def _broadcast_shape(shapes):
    out: list = []
    for shape in shapes:
        shape = list(shape)
        if len(shape) > len(out):
            out = [1] * (len(shape) - len(out)) + out
        for i, n in enumerate(shape, len(out) - len(shape)):
            if isinstance(out[i], int) and out[i] == 1:
                out[i] = n
            elif not (isinstance(n, int) and n == 1) and n != out[i]:  # (a guard where symbolic)
                raise RuntimeError(f"The size of tensor a ({out[i]}) must match the size of tensor b ({n}) "
                                   f"at non-singleton dimension {i}")
    return out


def pointwise(func, *args, **kwargs):
    """An elementwise op: the broadcast shape (symbolic), and the dtype and dim order the meta kernel
    gives for the same call at the hints (the layout of an elementwise result follows its inputs' dim
    order, which the hints show)."""
    from kiln.fake.tree import leaves, map_leaves

    if "out" in kwargs or func._schema.name.endswith("_") or len(func._schema.returns) != 1:
        raise SymbolicShapeUnsupported(func, "an in-place or out= elementwise op")
    at_hints = func(*map_leaves(_at_hints, list(args)), **map_leaves(_at_hints, kwargs))
    tensors = [x for x in leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    shape = _broadcast_shape([t.shape for t in tensors])
    if len(shape) != at_hints.dim():
        raise SymbolicShapeUnsupported(func, "an elementwise result of unexpected rank")
    order = sorted(range(len(shape)), key=lambda d: (-at_hints.stride(d), d))
    strides = [0] * len(shape)
    running = 1
    for d in reversed(order):
        strides[d] = running
        running = running * shape[d]
    return torch.empty_strided(shape, strides, dtype=at_hints.dtype, device="meta")


RULES = {
    aten._to_copy.default: to_copy,
    aten.view.default: view,
    aten._unsafe_view.default: view,
    aten._reshape_alias.default: lambda func, x, sizes, strides: _view(x, sizes, strides),
    aten.reshape.default: reshape,
    aten.expand.default: expand,
    aten.permute.default: permute,
    aten.transpose.int: transpose,
    aten.t.default: t,
    aten.slice.Tensor: slice_,
    aten.narrow.default: narrow,
    aten.select.int: select,
    aten.unsqueeze.default: unsqueeze,
    aten.split.Tensor: split,
    aten.split_with_sizes.default: split_with_sizes,
}


def symbolic_getitem(x, index):
    """``x[index]`` for basic indexing (ints, slices, None, Ellipsis) where a bound is symbolic, as
    select/slice/unsqueeze steps; anything else (tensor indices) is refused (static sizes then)."""
    items = list(index) if isinstance(index, tuple) else [index]
    if any(isinstance(i, (torch.Tensor, list, bool)) for i in items):
        raise SymbolicShapeUnsupported("getitem", "advanced indexing with symbolic bounds")
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (x.dim() - used)
    out, dim = x, 0
    for i in items:
        if i is None:
            out = unsqueeze(None, out, dim)
            dim += 1
        elif isinstance(i, slice):
            if i.start is None and i.stop is None and i.step is None:
                dim += 1
                continue
            out = slice_(aten.slice.Tensor, out, dim, i.start, i.stop, 1 if i.step is None else i.step)
            dim += 1
        else:
            out = select(aten.select.int, out, dim, i)
    return out


def symbolic_meta(func, args, kwargs):
    """The fake output of a view op on symbolic sizes (plain meta tensors in, meta views out), or None
    where no rule applies."""
    rule = RULES.get(func)
    if rule is None:
        if torch.Tag.pointwise in func.tags:
            return pointwise(func, *args, **kwargs)
        return None
    return rule(func, *args, **kwargs)
