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
    """A tensor with symbolic sizes, or a symbolic size argument (``expand(static, [s0, 4])``), in ``args``."""
    for a in args:
        if isinstance(a, torch.Tensor):
            if any(is_symbolic(s) for s in a.shape) or any(is_symbolic(s) for s in a.stride()) \
                    or is_symbolic(a.storage_offset()):
                return True
        elif isinstance(a, (list, tuple)) and has_symbolic_tensor(a):
            return True
        elif is_symbolic(a):
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
    if any(isinstance(n, int) and n == 0 for n in list(x.shape) + shape):
        raise SymbolicShapeUnsupported(func, "a view of an empty tensor that is not row-major")
    strides = _view_strides(list(x.shape), list(x.stride()), shape)
    if strides is None:
        raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one dimension "
                           "spans across two contiguous subspaces). Use .reshape(...) instead.")
    return _view(x, shape, strides)


def _view_strides(old_sizes, old_strides, new_sizes):
    """The strides of a view of a strided tensor, or None where the sizes cannot view its memory
    (ATen's ``computeStride``; comparisons of symbolic sizes guard)."""
    new_strides = [0] * len(new_sizes)
    if not old_sizes:
        return [1] * len(new_sizes) if all(not (isinstance(n, int) and n != 1) for n in new_sizes) else None
    view_d = len(new_sizes) - 1
    chunk_base = old_strides[-1]
    tensor_numel, view_numel = 1, 1
    for tensor_d in range(len(old_sizes) - 1, -1, -1):
        tensor_numel = tensor_numel * old_sizes[tensor_d]
        if tensor_d == 0 or (old_sizes[tensor_d - 1] != 1 and old_strides[tensor_d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or new_sizes[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base
                view_numel = view_numel * new_sizes[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base, tensor_numel, view_numel = old_strides[tensor_d - 1], 1, 1
    return new_strides if view_d == -1 else None


def _exact_div(total, known):
    """total / known where it divides (sympy cancels the symbols)."""
    from kiln.fake.shapes import to_expr
    from kiln.loopir.index import FloorDiv, ModularIndexing

    import sympy

    if not isinstance(total, torch.SymInt) and not isinstance(known, torch.SymInt):
        # static sizes of a view with a symbolic offset (x[-10:].view(-1, 2) with s0 > 10)
        if known == 0 or total % known:
            raise RuntimeError(f"shape '[-1, ...]' is invalid for input of size {total}")
        return total // known
    t, k = to_expr(total), to_expr(known)
    q = sympy.cancel(t / k)
    env = next(s.node.env for s in (total, known) if isinstance(s, torch.SymInt))
    # (together: fraction() of a sum of fractions, 16*s0/7 - 16*Min(..)/7, says denominator 1)
    if q.is_integer or q.is_Integer or (q.free_symbols and sympy.fraction(sympy.together(q))[1] == 1):
        return env.symint(q)
    if k.is_Integer and int(k) > 0:  # s0 / 4: a guard that it divides (eager raises where it does not)
        divides = env.evaluate(sympy.Eq(ModularIndexing(t, 1, k), 0), env.size_hint(t) % int(k) == 0)
        if not divides:
            raise RuntimeError(f"shape '[-1, ...]' is invalid for input of size {env.size_hint(t)}")
        return env.symint(FloorDiv(t, k))
    num, den = sympy.fraction(sympy.together(q))
    if den.is_Integer and int(den) > 0 and num.free_symbols:
        # s0*s1 / (2*s0) is s1 / 2 in lowest terms: total divides by known exactly where s1 is even
        divides = env.evaluate(sympy.Eq(ModularIndexing(num, 1, den), 0), env.size_hint(num) % int(den) == 0)
        if not divides:
            raise RuntimeError(f"shape '[-1, ...]' is invalid for input of size {env.size_hint(t)}")
        return env.symint(FloorDiv(num, den))
    floors = [f for f in k.atoms(FloorDiv) if f.args[1].is_Integer and int(f.args[1]) > 0]
    if floors and all(env.size_hint(f.args[0]) % int(f.args[1]) == 0 for f in floors):
        # x.view(x.shape[0] // 2, -1): where s0 is even (guarded), s0 // 2 is s0 / 2 and the ratio cancels
        for f in floors:
            env.evaluate(sympy.Eq(ModularIndexing(f.args[0], 1, f.args[1]), 0), True)
        q = sympy.cancel(t / k.xreplace({f: f.args[0] / f.args[1] for f in floors}))
        if q.is_Integer or q.is_integer or (q.free_symbols and sympy.fraction(sympy.together(q))[1] == 1):
            return env.symint(q)
    raise SymbolicShapeUnsupported("view", f"cannot infer the -1 size: {t} / {k}")


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


def _negative(v) -> bool:
    """``v < 0`` for a slice bound or index: decided statically or guarded (callers refuse unbacked bounds
    first, ``_refuse_unbacked``)."""
    if isinstance(v, int) or not isinstance(v, torch.SymInt):
        return v < 0
    return bool(v < 0)


def _refuse_unbacked(*bounds) -> None:
    """A slice or arange bound from tensor data (``.item()``): its sign and clamping are facts about a
    value nothing bounds, and a guess would give a wrong size: the frame is traced again with the graph
    broken at ``item()``."""
    for v in bounds:
        if _unbacked(v):
            raise v.node.env.unbacked_error(f"a slice or arange bound ({v})")


def _unbacked(v) -> bool:
    env = getattr(getattr(v, "node", None), "env", None)
    return isinstance(v, torch.SymInt) and env is not None and env.is_unbacked(v.node.expr)


def slice_(func, x, dim=0, start=None, end=None, step=1):
    dim = _dim(dim, x.dim())
    n = x.shape[dim]
    start = 0 if start is None else start
    end = n if end is None else end
    if step <= 0:
        raise RuntimeError("slice step must be positive")
    _refuse_unbacked(start, end)
    if _negative(start):  # (a symbolic bound, -n of an int argument n: decided statically or guarded)
        start = start + n
    if _negative(end):
        end = end + n
    if isinstance(end, int) and end >= 2 ** 62:
        end = n
    start = _clamp(start, 0, n)
    end = _clamp(end, start, n)
    length = end - start
    if not (isinstance(step, int) and step == 1) or _unbacked(length):  # (step 1: no floordiv, which
        length = (end - start + step - 1) // step  # specializes a Min/Max length; unbacked: as before)
    sizes, strides = list(x.shape), list(x.stride())
    sizes[dim] = length
    strides[dim] = strides[dim] * step
    return _view(x, sizes, strides, x.storage_offset() + start * x.stride(dim))


def narrow(func, x, dim, start, length):
    return slice_(func, x, dim, start, start + length)


def select(func, x, dim, index):
    dim = _dim(dim, x.dim())
    _refuse_unbacked(index)
    size = x.shape[dim]
    # eager's bounds check, decided statically or guarded (a later call out of range fails the guard, and
    # the frame traced again raises eager's IndexError; unchecked, the kernel read outside the tensor)
    if not (index >= -size if _negative(index) else index < size):
        raise IndexError(f"index {index} is out of bounds for dimension {dim} with size {size}")
    if _negative(index):  # (symbolic: decided statically or guarded)
        index = index + x.shape[dim]
    sizes, strides = list(x.shape), list(x.stride())
    offset = x.storage_offset() + index * strides[dim]
    del sizes[dim], strides[dim]
    return _view(x, sizes, strides, offset)


def unbind(func, x, dim=0):
    """The views ``x.select(dim, i)``; their number must be a Python int (a symbolic size is specialized)."""
    dim = _dim(dim, x.dim())
    return [select(aten.select.int, x, dim, i) for i in range(int(x.shape[dim]))]


def unsqueeze(func, x, dim):
    dim = _dim(dim, x.dim() + 1)
    sizes, strides = list(x.shape), list(x.stride())
    stride = sizes[dim] * strides[dim] if dim < x.dim() else 1
    sizes.insert(dim, 1)
    strides.insert(dim, stride)
    return _view(x, sizes, strides)


def split_with_sizes(func, x, split_sizes, dim=0):
    dim = _dim(dim, x.dim())
    # eager's checks (each a guard where the sizes are symbolic)
    if any(n < 0 for n in split_sizes):
        raise RuntimeError(f"split_with_sizes expects split_sizes have only non-negative entries, but got "
                           f"split_sizes={[_hint(n) for n in split_sizes]}")
    if sum(split_sizes) != x.shape[dim]:
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {_hint(x.shape[dim])} (input "
                           f"tensor's size at dimension {dim}), but got split_sizes={[_hint(n) for n in split_sizes]}")
    out, start = [], 0
    for n in split_sizes:
        out.append(slice_(func, x, dim, start, start + n))
        start = start + n
    return out


def split(func, x, split_size, dim=0):
    dim = _dim(dim, x.dim())
    n = x.shape[dim]
    if split_size < 0:  # eager's checks (guards where the sizes are symbolic)
        raise RuntimeError(f"split expects split_size be non-negative, but got split_size={_hint(split_size)}")
    if split_size == 0 and n != 0:
        raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {_hint(n)}")
    if is_symbolic(split_size) or is_symbolic(n):
        # the number of chunks must be a Python int: it specializes the ratio
        chunks = int((n + split_size - 1) // split_size)
    else:
        chunks = max(1, -(-n // split_size))
    sizes = [split_size] * (chunks - 1) + [n - split_size * (chunks - 1)]
    return split_with_sizes(func, x, sizes, dim)


def _hint(n) -> int:
    if isinstance(n, torch.SymInt) and n.node.hint is None:  # an unbacked size: for the layout only
        return n.node.env.heuristic_hint(n.node.expr)
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
        return None  # in-place and out= ops: their own meta kernel (it returns the tensor written)
    at_hints = func(*map_leaves(_at_hints, list(args)), **map_leaves(_at_hints, kwargs))
    tensors = [x for x in leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    shape = _broadcast_shape([t.shape for t in tensors])
    if len(shape) != at_hints.dim():
        raise SymbolicShapeUnsupported(func, "an elementwise result of unexpected rank")
    return _laid_out_like(shape, at_hints)


def _laid_out_like(shape, at_hints):
    """A new row-major meta tensor of the symbolic ``shape`` whose dims are in the order (by stride) of
    ``at_hints``, the meta kernel's result for the same call at the symbols' hints."""
    order = sorted(range(len(shape)), key=lambda d: (-at_hints.stride(d), d))
    strides = [0] * len(shape)
    running = 1
    for d in reversed(order):
        strides[d] = running
        running = running * shape[d]
    return torch.empty_strided(shape, strides, dtype=at_hints.dtype, device="meta")


def index_tensor(func, x, indices):
    """``x[i0, i1, ...]`` with integer index tensors (advanced indexing; boolean masks have data-dependent
    sizes, fake/unbacked.py): the indices broadcast together (guarded where symbolic) replace the dims
    they index, in place when those dims are adjacent, else in front of the others (NumPy's rule); laid
    out as ATen lays out the result at the hints."""
    from kiln.fake.tree import map_leaves

    present = [(d, t) for d, t in enumerate(indices) if t is not None]
    if not present or any(t.dtype in (torch.bool, torch.uint8) for _, t in present) or len(indices) > x.dim():
        return None
    at_hints = func(_at_hints(x), map_leaves(_at_hints, list(indices)))
    replaced = _broadcast_shape([t.shape for _, t in present])
    dims = [d for d, _ in present]
    kept = [n for d, n in enumerate(x.shape) if d not in dims]
    if dims == list(range(dims[0], dims[-1] + 1)):
        shape = list(x.shape[:dims[0]]) + replaced + list(x.shape[dims[-1] + 1:])
    else:
        shape = replaced + kept
    if len(shape) != at_hints.dim():
        raise SymbolicShapeUnsupported(func, "an indexing result of unexpected rank")
    return _laid_out_like(shape, at_hints)


def stack(func, tensors, dim=0):
    dim = _dim(dim, tensors[0].dim() + 1)
    return torch.cat([unsqueeze(None, t, dim) for t in tensors], dim)


def diagonal(func, x, offset=0, dim1=0, dim2=1):
    d1, d2 = _dim(dim1, x.dim()), _dim(dim2, x.dim())
    if d1 == d2:
        raise RuntimeError("diagonal dimensions cannot be identical")
    n1, n2 = x.shape[d1], x.shape[d2]
    start = x.storage_offset()
    if offset >= 0:
        length = torch.sym_max(torch.sym_min(n1, n2 - offset), 0)
        start = start + offset * x.stride(d2)
    else:
        length = torch.sym_max(torch.sym_min(n1 + offset, n2), 0)
        start = start - offset * x.stride(d1)
    sizes = [n for i, n in enumerate(x.shape) if i not in (d1, d2)] + [length]
    strides = [st for i, st in enumerate(x.stride()) if i not in (d1, d2)] + [x.stride(d1) + x.stride(d2)]
    return x.as_strided(sizes, strides, start)


def unfold(func, x, dim, size, step):
    dim = _dim(dim, x.dim())
    # eager's checks, decided statically or guarded (unchecked, a window longer than the dim gave an empty tensor)
    length = x.shape[dim] if x.dim() else 1
    if not size <= length:
        raise RuntimeError(f"maximum size for tensor at dimension {dim} is {length} but size is {size}")
    if not step > 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if not size >= 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    sizes, strides = list(x.shape), list(x.stride())
    sizes[dim] = (sizes[dim] - size) // step + 1
    strides[dim] = strides[dim] * step
    return _view(x, sizes + [size], strides + [x.stride(dim) if x.dim() else 1])


def arange(func, *args, dtype=None, layout=None, device=None, pin_memory=None):
    start, end, step = (0, args[0], 1) if len(args) == 1 else (tuple(args) + (1,))[:3]
    numbers = (start, end, step)
    if any(isinstance(v, (float, torch.SymFloat)) for v in numbers):
        raise SymbolicShapeUnsupported(func, "arange with float bounds")
    _refuse_unbacked(*numbers)
    if isinstance(step, (int, torch.SymInt)) and step != 0:  # (a symbolic step: its sign is guarded)
        if (end < start) if step > 0 else (end > start):  # eager's check (a guard on the bounds' order)
            raise RuntimeError("upper bound and lower bound inconsistent with step sign")
        if step > 0:
            length = (end - start + step - 1) // step
        else:  # counting down: ceil((start - end) / -step) values
            length = (start - end - step - 1) // -step
    else:
        raise SymbolicShapeUnsupported(func, f"arange with step {step}")
    length = torch.sym_max(length, 0)
    return torch.empty([length], dtype=dtype or torch.int64, device="meta")


RULES = {
    aten.arange.default: arange,
    aten.arange.start: arange,
    aten.arange.start_step: arange,
    aten.stack.default: stack,
    aten.diagonal.default: diagonal,
    aten.unfold.default: unfold,
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
    aten.unbind.int: unbind,
    aten.unsqueeze.default: unsqueeze,
    aten.split.Tensor: split,
    aten.split_with_sizes.default: split_with_sizes,
    aten.index.Tensor: index_tensor,
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


# ---- ops whose C++ composite kernels take only concrete sizes (``at::empty(IntArrayRef)``) ----------

def _new_row_major(sizes, dtype):
    return torch.empty_strided(sizes, _contiguous_strides(list(sizes)), dtype=dtype, device="meta")


def _dense_strides(x):
    """x's strides where it is non-overlapping and dense as a permutation of row-major (structurally),
    else None."""
    order = sorted(range(x.dim()), key=lambda d: str(x.stride(d)))
    try:
        order = sorted(range(x.dim()), key=lambda d: int(x.stride(d)) if not is_symbolic(x.stride(d)) else 10**18)
    except Exception:
        return None
    running = 1
    for d in order:
        if str(x.stride(d)) != str(running) and not (isinstance(x.shape[d], int) and x.shape[d] == 1):
            return None
        running = running * x.shape[d]
    return list(x.stride())


def infer_dense_strides(sizes, strides) -> list:
    """ATen's strides for a copy of a tensor that is not dense (``_to_copy`` with preserve_format): its
    dims ordered by stride, as TensorIterator orders them (a stable insertion sort; a 0 stride compares
    as ambiguous and keeps its place; equal strides put the smaller size first), then row-major in that
    order. On symbolic sizes each comparison is a guard (or decided by what the ShapeEnv knows)."""
    n = len(sizes)
    if n <= 1:
        return [1] * n
    perm = list(range(n - 1, -1, -1))

    def order(d0, d1) -> int:
        s0, s1 = strides[d0], strides[d1]
        if s0 == 0 or s1 == 0:
            return 0
        if s0 < s1:
            return -1
        if s0 > s1:
            return 1
        return 1 if sizes[d0] > sizes[d1] else 0

    for i in range(1, n):
        d1 = i
        for j in range(1, i + 1):
            d0 = i - j
            c = order(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    out = [0] * n
    running = 1
    for idx in perm:
        out[idx] = running
        if sizes[idx] > 1:
            running = running * sizes[idx]
    return out


def pointwise_fallback(func, args, kwargs):
    """The fake result of a pointwise op whose kernel takes only concrete sizes (``logical_and``):
    the broadcast shape, row-major, with the dtype the kernel gives for one-element operands. None
    where ``func`` is not pointwise; raises for operands that are not row-major."""
    if torch.Tag.pointwise not in getattr(func, "tags", ()):
        return None
    tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
    if any(t.dim() and not _is_row_major(t) for t in tensors):
        raise SymbolicShapeUnsupported(func, "a pointwise op on operands that are not row-major")
    ndim = max((t.dim() for t in tensors), default=0)
    shape = []
    for i in range(ndim):
        sizes = [t.shape[t.dim() - ndim + i] for t in tensors if t.dim() - ndim + i >= 0]
        known = [n for n in sizes if not (isinstance(n, int) and n == 1)]
        for n in known[1:]:
            if n != known[0]:  # a guard where symbolic, as eager checks
                raise RuntimeError(f"The size of tensor a ({known[0]}) must match the size of tensor b ({n}) "
                                   f"at non-singleton dimension {i}")
        shape.append(known[0] if known else 1)

    def small(a):
        if isinstance(a, torch.Tensor):
            return torch.empty([1] * a.dim(), dtype=a.dtype, device="meta")
        return a

    out = func(*[small(a) for a in args], **{k: small(v) for k, v in kwargs.items()})
    if not isinstance(out, torch.Tensor):
        raise SymbolicShapeUnsupported(func, "a pointwise op with several results")
    return _new_row_major(shape, out.dtype)


from kiln.fake import symbolic_ops as _ops  # noqa: E402,F401  (its RULES: reductions, losses, pooling, ...)
from kiln.fake import symbolic_upsample as _upsample  # noqa: E402,F401  (its RULES: upsample ops)
