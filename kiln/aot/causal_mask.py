"""Causal masks built from positions, handed to attention as ``is_causal=True``.

Transformers (5.17, for one) builds a decoder's causal mask from two position ranges,
``kv_idx <= q_idx``, and passes it to ``F.scaled_dot_product_attention`` as a boolean mask. A mask
rules out the flash kernels: static CUDA graphs then run cuDNN with the mask, and dynamic ones (whose
sizes ATen's backend choice cannot read) the math path, two float32 GEMMs and a softmax, 2x the time
of a dynamic GPT-2. The CPU flash kernel skips the masked blocks only for ``is_causal``.

Where the mask provably equals SDPA's own causal mask (``tril(ones(L, S))``: key position j kept for
query position i when ``j <= i``), the attention is traced with ``attn_mask=None, is_causal=True``.
The proof reads the ATen nodes that computed the mask (traced just before), describing each integer
tensor as ``value[idx] = idx[dim] + offset`` (``Positions``) and each boolean one as
``value[idx] = idx[col] <= idx[row] + offset`` (``Lower``), through ``arange``, ``unsqueeze``,
slices from 0, ``expand`` of dims that are not broadcast, adding an int, and the comparisons. Anything
else (a padding mask and-ed in, a sliding window, a mask that is an input) leaves the call as it is.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.fx as fx

from kiln.fake.unbacked import same_sizes

aten = torch.ops.aten

SDPA_FUNCTIONS = (torch._C._nn.scaled_dot_product_attention,)
_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_INT_DTYPES = (torch.int64, torch.int32)


@dataclass(frozen=True)
class Form:
    """What a tensor's values are, as a function of its index. ``kind``:
    "positions": an integer tensor, ``value[idx] = idx[dims[0]] + offset``;
    "lower": a boolean tensor, ``value[idx] = idx[dims[1]] <= idx[dims[0]] + offset`` (dims = (row, col));
    "lower_bias": 0 where that holds and -inf elsewhere; "true": all true; "constant": all ``offset``."""
    kind: str
    ndim: int
    dims: tuple
    offset: int


def rewrite_causal_mask(target, args, kwargs, node_of, root=None):
    """``(args, kwargs)`` of an SDPA call, with a mask proven causal replaced by ``is_causal=True`` and
    a mask proven to keep everything dropped; unchanged otherwise. ``node_of(fake)``: the traced node
    of a fake tensor; ``root``: the module holding the traced graph's constants."""
    bound = dict(zip(_SDPA_PARAMS, args))
    if len(args) > len(_SDPA_PARAMS) or set(kwargs) - set(_SDPA_PARAMS) or set(kwargs) & set(bound):
        return args, kwargs
    bound.update(kwargs)
    mask, q, k = bound.get("attn_mask"), bound.get("query"), bound.get("key")
    if bound.get("is_causal", False) or not all(isinstance(t, torch.Tensor) for t in (mask, q, k)):
        return args, kwargs
    if mask.dtype != torch.bool and mask.dtype != q.dtype:
        return args, kwargs  # (eager refuses it: the call as it is raises the same error)
    try:
        node = node_of(mask)
    except Exception:  # (a fake this trace did not make: the call as it is, which reports it)
        return args, kwargs
    meaning = mask_meaning(node, q, k, root)
    if meaning is None:
        return args, kwargs
    from kiln.debug.stats import stats

    stats.causal_masks[meaning] += 1
    bound.update(attn_mask=None, is_causal=meaning == "causal")
    return (bound.pop("query"), bound.pop("key"), bound.pop("value")), bound


def mask_meaning(node, q, k, root=None) -> str | None:
    """What the mask computed by ``node`` does to the attention of ``q`` over ``k``: "causal" (it is
    ``tril(ones(L, S))``, as a boolean mask or as 0 / -inf), "none" (it keeps every score unchanged:
    all true, or all 0.0), or None (anything else, or a shape eager would refuse to broadcast)."""
    if not isinstance(node, fx.Node) or not isinstance(node.meta.get("val"), torch.Tensor):
        return None
    form = describe(node, Forms(root))
    shape = node.meta["val"].shape
    m = len(shape)
    if form is None or m > q.dim() or m < 2:
        return None
    target = tuple(q.shape[q.dim() - m:-1]) + (k.shape[-2],)
    if not all(_is_one(a) or _same(a, b) for a, b in zip(shape, target)):
        return None
    bool_mask = node.meta["val"].dtype == torch.bool
    if form.kind == "true" and bool_mask or form.kind == "constant" and not bool_mask and form.offset == 0.0:
        return "none"
    causal = (form.kind == "lower" and bool_mask or form.kind == "lower_bias" and not bool_mask)
    if causal and form.offset == 0 and form.dims == (m - 2, m - 1) and not _is_one(shape[-2]) and not _is_one(shape[-1]):
        return "causal"
    return None


class Forms(dict):
    """The forms found so far (node -> Form or None), and ``root``: the module holding the constants
    of the graph being traced (its ``get_attr`` nodes' tensors)."""

    def __init__(self, root=None):
        super().__init__()
        self.root = root


def describe(node, memo: dict, depth: int = 0) -> Form | None:
    """The ``Form`` of the tensor ``node`` computes, or None where it is not one (see the module)."""
    if not isinstance(node, fx.Node) or depth > 64:
        return None
    if node not in memo:
        memo[node] = (_describe(node, memo, depth) if node.op == "call_function" else
                      _constant(node, getattr(memo, "root", None)) if node.op == "get_attr" else None)
    return memo[node]


def _constant(node, root) -> Form | None:
    """A one-element constant baked into the graph (``torch.tensor(0.0)`` in the user's code)."""
    root = root if root is not None else node.graph.owning_module
    value = getattr(root, node.target, None) if root is not None else None
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or value.is_meta:
        return None
    with torch._C._DisableTorchDispatch():  # (read outside the tracer's mode: the constant is real)
        number = value.item()
    return Form("constant", value.dim(), (), number)


def _describe(node, memo, depth) -> Form | None:
    f, args, kw = node.target, node.args, node.kwargs
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    if f in (aten.arange.default, aten.arange.start, aten.arange.start_step):
        bounds = list(args) + ([kw["step"]] if "step" in kw else [])
        start = 0 if f is aten.arange.default else bounds[0]
        step = bounds[2] if len(bounds) > 2 else 1
        if val.dtype not in _INT_DTYPES or type(start) is not int or type(step) is not int or step != 1:
            return None
        return _in_range(Form("positions", 1, (0,), start), val)
    if f is aten.scalar_tensor.default and _is_number(args[0]):
        return Form("constant", 0, (), args[0])
    if f is aten.full.default and _is_number(args[1]):
        return Form("constant", len(args[0]), (), args[1])
    if f in (aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar):
        return _where(node, [describe(a, memo, depth + 1) if isinstance(a, fx.Node) else a for a in args[:3]])
    x = describe(args[0], memo, depth + 1) if args else None
    if x is None:
        return None
    src = args[0].meta["val"]
    if f in (aten.ge.Scalar, aten.gt.Scalar) and x.kind == "positions" and _is_number(args[1]):
        # (positions are idx + offset with idx >= 0: all at least the offset)
        lowest_ok = x.offset >= args[1] if f is aten.ge.Scalar else x.offset > args[1]
        return Form("true", x.ndim, (), 0) if lowest_ok else None
    if f in (aten.detach.default, aten.alias.default, aten.clone.default, aten.lift_fresh_copy.default,
             aten._to_copy.default):
        return x if val.dtype == src.dtype else None
    if f is aten.unsqueeze.default:
        d = args[1] + x.ndim + 1 if args[1] < 0 else args[1]
        return replace(x, ndim=x.ndim + 1, dims=tuple(i + (i >= d) for i in x.dims))
    if f is aten.slice.Tensor:
        d, start, step = _arg(args, kw, 1, "dim", 0), _arg(args, kw, 2, "start"), _arg(args, kw, 4, "step", 1)
        d = d + x.ndim if type(d) is int and d < 0 else d
        return x if d not in x.dims or (start in (None, 0) and step == 1) else None
    if f is aten.expand.default:
        sizes = [_size_value(n) for n in args[1]]
        shift = len(sizes) - x.ndim
        if shift < 0 or not all(_is_minus_one(sizes[i + shift]) or _same(sizes[i + shift], src.shape[i]) for i in x.dims):
            return None
        return replace(x, ndim=len(sizes), dims=tuple(i + shift for i in x.dims))
    if f in (aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar) and x.kind == "positions":
        other = args[1] if len(args) > 1 else None
        if type(other) is not int or kw.get("alpha", 1) != 1 or val.dtype != src.dtype:
            return None
        return _in_range(replace(x, offset=x.offset + (other if f in (aten.add.Tensor, aten.add.Scalar) else -other)), val)
    if f in _COMPARISONS and len(args) == 2:
        return _comparison(node, f, x, describe(args[1], memo, depth + 1))
    return None


_INT64_OFFSET = 2**40  # |offset| allowed on int64 positions: an arange has fewer than 2**60 elements


def _in_range(form: Form, val) -> Form | None:
    """``form`` where every position ``offset + i`` (i below the size) is the integer eager computes,
    with no wrap-around in the tensor's dtype; None where that is not proven. int64: a bounded offset
    (an int64 arange of 2**60 elements would fill 8 EiB). int32: a static size whose last position fits."""
    n = val.shape[form.dims[0]]
    if val.dtype == torch.int64:
        return form if abs(form.offset) <= _INT64_OFFSET else None
    if val.dtype == torch.int32 and type(n) is int:
        return form if -2**31 <= form.offset and form.offset + n - 1 <= 2**31 - 1 else None
    return None


def _where(node, parts) -> Form | None:
    """``where(cond, a, b)``: a constant where cond is all true; a causal bias (0 where kept, -inf
    where not) where cond is a ``lower`` mask."""
    cond, a, b = parts
    a = a.offset if isinstance(a, Form) and a.kind == "constant" else a
    b = b.offset if isinstance(b, Form) and b.kind == "constant" else b
    if not isinstance(cond, Form) or not _is_number(a):
        return None
    out = node.meta["val"].shape
    if cond.kind == "true":
        return Form("constant", len(out), (), a)
    if cond.kind != "lower" or a != 0 or b != float("-inf"):
        return None
    shift = len(out) - cond.ndim
    cond_shape = node.args[0].meta["val"].shape
    if not all(_same(cond_shape[i], out[i + shift]) for i in cond.dims):
        return None
    return Form("lower_bias", len(out), tuple(i + shift for i in cond.dims), cond.offset)


def _comparison(node, f, a: Form, b: Form | None) -> Form | None:
    """``a <= b`` (or <, >=, >) of two position tensors as a ``Lower`` mask over the broadcast shape."""
    if b is None or a.kind != "positions" or b.kind != "positions":
        return None
    out = node.meta["val"].shape
    n = len(out)
    da, db = a.dims[0] + n - a.ndim, b.dims[0] + n - b.ndim
    sizes = (node.args[0].meta["val"].shape[a.dims[0]], node.args[1].meta["val"].shape[b.dims[0]])
    if da == db or not (_same(sizes[0], out[da]) and _same(sizes[1], out[db])):
        return None  # (a position broadcast from a size-1 dim is not its index)
    if _COMPARISONS[f] == "ge" or _COMPARISONS[f] == "gt":
        (a, da), (b, db) = (b, db), (a, da)
    # idx[da] + a.offset <= idx[db] + b.offset  (< : one less)
    offset = b.offset - a.offset - (1 if _COMPARISONS[f] in ("lt", "gt") else 0)
    return Form("lower", n, (db, da), offset)


_COMPARISONS = {aten.le.Tensor: "le", aten.lt.Tensor: "lt", aten.ge.Tensor: "ge", aten.gt.Tensor: "gt"}


def _is_number(x) -> bool:
    return type(x) in (int, float, bool)


def _arg(args, kwargs, i, name, default=None):
    return args[i] if len(args) > i else kwargs.get(name, default)


def _size_value(n):
    """A size argument of a traced node: an int, or the SymInt a size node computed."""
    return n.meta.get("val") if isinstance(n, fx.Node) else n


def _is_one(n) -> bool:
    return type(n) is int and n == 1


def _is_minus_one(n) -> bool:
    return type(n) is int and n == -1


def _same(a, b) -> bool:
    """Equal sizes without a guard: equal ints, or the same symbolic expression."""
    return same_sizes((a,), (b,))
