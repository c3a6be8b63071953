"""Fake results of data-dependent ops: sizes that are *unbacked* symbols (``u0``, ``u1``, ...).

``nonzero``, ``masked_select``, ``x[mask]`` (``index`` with a boolean mask), ``unique`` and ``.item()``
(``_local_scalar_dense``) give results whose size (or value) depends on the input's data. While a
ShapeEnv is active for them (``allow_unbacked(env)``: capture and AOT tracing of a graph whose env
allows them), their fake result has a fresh unbacked symbol for that size, created here with its
value range only (``ShapeEnv.create_unbacked``: ``>= 0`` for a count, the dtype's range for an item).
Later ops work on it like on any symbolic size; a decision its range does not settle raises
``DataDependentSize`` (``kiln/fake/symbolic.py``), and capture traces the frame again with these ops
breaking the graph, as without this module.

Without an active env (``allow_unbacked`` not entered), every rule here answers None and the caller
raises ``UnsupportedFakeOp`` as before: a graph break.
"""
from __future__ import annotations

import contextlib
import threading

import torch

aten = torch.ops.aten
_state = threading.local()


@contextlib.contextmanager
def allow_unbacked(env):
    """Data-dependent ops make unbacked symbols in ``env`` while this is entered (None: they do not)."""
    saved = getattr(_state, "env", None)
    _state.env = env
    try:
        yield
    finally:
        _state.env = saved


def active_env():
    return getattr(_state, "env", None)


def _numel(x):
    total = 1
    for n in x.shape:
        total = total * n
    return total


def _static_upper(x) -> int | None:
    n = _numel(x)
    return n if isinstance(n, int) else None


def _count(env, what: str, x):
    """The unbacked size for ``what`` of ``x``: between 0 and x's element count (where that is static).
    A count of the nonzero elements of a tensor the op reads (``count_source``) is one symbol for every
    op that counts the same tensor at the same version (``pred[m] - target[m]``: both sizes are ``u0``)."""
    source = getattr(_state, "count_source", None)
    version = _version_of(source)
    counts = env.nonzero_counts  # id(tensor) -> (tensor, version, symbol)
    if version is not None:
        known = counts.get(id(source))
        if known is not None and known[0] is source and known[1] == version:
            return env.symint(known[2])
    symbol = env.create_unbacked(what, 0, _static_upper(x))
    if version is not None:
        counts[id(source)] = (source, version, symbol)  # (holding the tensor: its id is not reused)
    return env.symint(symbol)


def _version_of(t):
    """``t``'s version counter (bumped by in-place ops on it and its views), or None (no tensor, or an
    inference tensor, which has none: its counts are never shared)."""
    if t is None:
        return None
    try:
        return t._version
    except RuntimeError:
        return None


def count_source(func, args, kwargs):
    """The tensor (as the caller holds it: the fake) whose number of nonzero elements is the size
    ``func`` makes: ``nonzero(t)``, ``x[mask]`` (one mask), ``masked_select(x, mask)`` with the mask's
    shape exactly x's (no broadcast). None for anything else (``unique``: a fresh symbol)."""
    if func is aten.nonzero.default:
        return args[0] if args and isinstance(args[0], torch.Tensor) else None
    if func is aten.index.Tensor:
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        present = [t for t in indices or () if t is not None]
        if len(present) == 1 and isinstance(present[0], torch.Tensor) and present[0].dtype in (torch.bool, torch.uint8):
            return present[0]
        return None
    if func is aten.masked_select.default and len(args) == 2 and not kwargs:
        x, mask = args
        if isinstance(mask, torch.Tensor) and same_sizes(x.shape, mask.shape):
            return mask
    return None


def same_sizes(a, b) -> bool:
    """Structurally equal shapes (the same ints and the same symbolic expressions; no guard)."""
    if len(a) != len(b):
        return False
    for m, n in zip(a, b):
        if isinstance(m, torch.SymInt) or isinstance(n, torch.SymInt):
            if not (isinstance(m, torch.SymInt) and isinstance(n, torch.SymInt) and m.node.expr == n.node.expr):
                return False
        elif m != n:
            return False
    return True


def nonzero(env, x):
    n = _count(env, "nonzero", x)
    return torch.empty_strided((n, x.dim()), (1, n), dtype=torch.long, device="meta")


def masked_select(env, x, mask):
    if mask.dtype != torch.bool:
        return None
    shape = torch.broadcast_shapes(x.shape, mask.shape) if not _symbolic(x, mask) else None
    if shape is None and tuple(x.shape) != tuple(mask.shape):
        return None  # (a broadcast of symbolic sizes: refused, the graph breaks)
    n = _count(env, "masked_select", mask)
    return torch.empty((n,), dtype=x.dtype, device="meta")


def index_with_mask(env, x, indices):
    """``x[mask]`` (``index(x, [None, ..., mask])``): one boolean mask, every other index None. The mask's
    dims replace the indexed dims of x with one dim of unbacked size."""
    indices = list(indices)
    masks = [i for i, t in enumerate(indices) if t is not None]
    if len(masks) != 1:
        return None
    k = masks[0]
    mask = indices[k]
    if mask.dtype not in (torch.bool, torch.uint8) or k + mask.dim() > x.dim():
        return None
    for d in range(mask.dim()):
        if mask.shape[d] != x.shape[k + d]:  # (decided statically or guarded on backed sizes)
            raise IndexError(f"The shape of the mask {tuple(mask.shape)} at index {d} does not match the shape "
                             f"of the indexed tensor {tuple(x.shape)} at index {k + d}")
    n = _count(env, "index by a mask", mask)
    shape = list(x.shape[:k]) + [n] + list(x.shape[k + mask.dim():])
    return torch.empty(shape, dtype=x.dtype, device="meta")


def unique2(env, x, sorted=True, return_inverse=False, return_counts=False):
    n = env.symint(env.create_unbacked("unique", 0, _static_upper(x)))
    values = torch.empty((n,), dtype=x.dtype, device="meta")
    inverse = torch.empty(x.shape if return_inverse else (0,), dtype=torch.long, device="meta")
    counts = torch.empty((n,) if return_counts else (0,), dtype=torch.long, device="meta")
    return values, inverse, counts


# the value range of an item of each integer dtype (floats are refused: a SymFloat has no use as a size)
_ITEM_RANGES = {torch.bool: (0, 1), torch.uint8: (0, 255), torch.int8: (-128, 127), torch.int16: (None, None),
                torch.int32: (None, None), torch.int64: (None, None)}


def item(env, x):
    if x.numel() != 1 or x.dtype not in _ITEM_RANGES:
        return None
    if x.dtype is torch.bool:
        return None  # (a bool of data: its truth is control flow, which breaks the graph)
    lower, upper = _ITEM_RANGES[x.dtype]
    return env.symint(env.create_unbacked("item", lower, upper))


def _symbolic(*tensors) -> bool:
    return any(isinstance(n, torch.SymInt) for t in tensors for n in t.shape)


RULES = {
    aten.nonzero.default: nonzero,
    aten.masked_select.default: masked_select,
    aten._unique2.default: unique2,
    aten._local_scalar_dense.default: item,
    aten.item.default: item,
}


def unbacked_meta(func, args, kwargs, source=None):
    """The fake result of a data-dependent op with unbacked sizes, or None (no env is active, or the
    op or its arguments are not covered: the caller breaks the graph as before). ``source``: the
    caller's ``count_source`` of the op (its meta arguments here are fresh aliases)."""
    env = active_env()
    if env is None:
        return None
    saved = getattr(_state, "count_source", None)
    _state.count_source = source
    try:
        return _unbacked_rule(env, func, args, kwargs)
    finally:
        _state.count_source = saved


def _unbacked_rule(env, func, args, kwargs):
    if func is aten.index.Tensor:
        x, indices = args[0], args[1] if len(args) > 1 else kwargs.get("indices")
        if not any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8) for t in indices):
            return None
        return index_with_mask(env, x, indices)
    rule = RULES.get(func)
    if rule is None:
        return None
    return rule(env, *args, **kwargs)


def is_mask_index(func, args, kwargs) -> bool:
    """``index`` with a boolean mask among its indices (its result size depends on the mask's data)."""
    if func is not aten.index.Tensor:
        return False
    indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
    return any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8) for t in indices or ())
