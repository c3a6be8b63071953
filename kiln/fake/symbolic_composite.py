"""Python bodies of ATen composite ops whose C++ bodies cannot take symbolic sizes on some torch versions.

``matmul`` (and ``linear``, which calls it) are CompositeImplicitAutograd: ATen runs their C++ body
before any dispatch mode sees the call, and torch 2.11's body asks a tensor with symbolic sizes for
``numel()``, which raises. kiln runs these rules instead wherever a call has symbolic sizes: capture
(for the example value) and AOT tracing (for the ATen ops recorded). Each rule follows the ATen body it
replaces step for step (aten/src/ATen/native/LinearAlgebra.cpp, Linear.cpp), so the ops recorded, the
output strides and the numerics are the ones the C++ body gives on torch versions where it works.
"""
from __future__ import annotations

import operator

import torch
from torch.overrides import TorchFunctionMode

from kiln.fake import symbolic_upsample
from kiln.fake.symbolic import aliasing_decisions
from kiln.fake.symbolic_meta import _broadcast_shape, has_symbolic_tensor

aten = torch.ops.aten


def _product(sizes):
    out = 1
    for s in sizes:
        out = out * s
    return out


def _broadcast(a, b) -> list:
    out = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        out.append(y if x == 1 else x)
    return out[::-1]


def _should_fold(t1: torch.Tensor, t2: torch.Tensor) -> bool:
    """Whether the batch dims of the larger operand fold into mm rows (ATen's ``should_fold``)."""
    larger_first = t1.dim() >= t2.dim()
    big = t1 if larger_first else t2.mT
    small_dim = t2.dim() if larger_first else t1.dim()
    if not (big.dim() >= 3 and small_dim <= 2):
        return False
    if (t2 if larger_first else t1).requires_grad:
        return True
    if t1.dim() == 2:
        return False
    if big.numel() == 0:
        return True
    sizes, strides = big.shape, big.stride()
    return all(strides[i] == strides[i + 1] * sizes[i + 1] for i in range(big.dim() - 2))


def matmul(t1: torch.Tensor, t2: torch.Tensor) -> torch.Tensor:
    """``torch.matmul`` as ATen's ``_matmul_impl`` computes it (no ``out=``)."""
    d1, d2 = t1.dim(), t2.dim()
    if d1 == 0 or d2 == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {d1}D and {d2}D")
    if d1 == 1 and d2 == 1:
        return aten.dot(t1, t2)
    if d1 == 2 and d2 == 1:
        return aten.mv(t1, t2)
    if d1 == 1 and d2 == 2:
        return aten.squeeze.dim(aten.mm(aten.unsqueeze(t1, 0), t2), 0)
    if d1 == 2 and d2 == 2:
        return aten.mm(t1, t2)
    if _should_fold(t1, t2):
        return _folded(t1, t2)
    return _batched(t1, t2)


def _folded(t1, t2):
    transpose = t2.dim() > t1.dim()
    big = t2.mT if transpose else t1
    small = (t1.t() if t1.dim() == 2 else t1) if transpose else t2
    sizes = list(big.shape)
    out_shape = sizes[:-1]
    folded = aten.reshape(big, [_product(out_shape), sizes[-1]])
    if small.dim() == 2:
        out = aten._unsafe_view(aten.mm(folded, small), out_shape + [small.shape[1]])
        return aten.contiguous(out.mT) if transpose else out
    return aten._unsafe_view(aten.mv(folded, small), out_shape)


def _batched(t1, t2):
    d1, d2 = t1.dim(), t2.dim()
    n = t1.shape[-2] if d1 > 1 else 1
    m1 = t1.shape[-1]
    m2 = t2.shape[-2] if d2 > 1 else t2.shape[0]
    p = t2.shape[-1] if d2 > 1 else 1
    batch = _broadcast(list(t1.shape[:max(d1 - 2, 0)]), list(t2.shape[:max(d2 - 2, 0)]))
    batch_numel = _product(batch)
    left = aten.reshape(aten.expand(t1, batch + [n, m1]), [batch_numel, n, m1])
    vector_rhs = d2 == 1
    if vector_rhs:
        right = aten.unsqueeze(aten.reshape(aten.expand(t2, batch + [m2]), [batch_numel, m2]), 2)
    else:
        right = aten.reshape(aten.expand(t2, batch + [m2, p]), [batch_numel, m2, p])
    out_shape = batch + ([n] if d1 > 1 else []) + ([p] if d2 > 1 else [])
    product = aten.bmm(left, right)
    if vector_rhs:
        product = aten.squeeze.dim(product, -1)
    return aten._unsafe_view(product, out_shape)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.nn.functional.linear`` as ATen's ``linear`` computes it."""
    if x.dim() == 2 and bias is not None:
        return aten.addmm(bias, x, weight.t())
    if bias is not None and x.is_contiguous() and (x.dim() == 3 or bias.dim() == 1):
        sizes = list(x.shape)
        flat = aten.reshape(x, [_product(sizes[:-1]), sizes[-1]])
        out = aten.addmm(bias, flat, weight.t())
        return aten.view(out, sizes[:-1] + [out.shape[1]])
    out = matmul(x, weight.t())
    return aten.add(out, bias) if bias is not None else out


def gru_cell(x, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """``torch.gru_cell`` (``nn.GRUCell``) on the CPU as ATen's ``GRUCell`` computes it (RNN.cpp: its
    checks read plain sizes); NotImplemented on other devices (a fused kernel there)."""
    if x.device.type != "cpu" or x.dim() != 2 or hx.dim() != 2:
        return NotImplemented
    if x.shape[1] != w_ih.shape[1]:
        raise RuntimeError(f"input has inconsistent input_size: got {x.shape[1]} expected {w_ih.shape[1]}")
    if x.shape[0] != hx.shape[0]:
        raise RuntimeError(f"Input batch size {x.shape[0]} doesn't match hidden batch size {hx.shape[0]}")
    if hx.shape[1] != w_hh.shape[1]:
        raise RuntimeError(f"hidden has inconsistent hidden_size: got {hx.shape[1]}, expected {w_hh.shape[1]}")
    hidden = w_hh.shape[1]  # (unsafe_chunk's C++ body reads plain sizes: the same split by the gate size)
    i_r, i_z, i_n = aten.split.Tensor(linear(x, w_ih, b_ih), hidden, 1)
    h_r, h_z, h_n = aten.split.Tensor(linear(hx, w_hh, b_hh), hidden, 1)
    reset = aten.sigmoid(aten.add(h_r, i_r))
    update = aten.sigmoid(aten.add(h_z, i_z))
    new = aten.tanh(aten.add(i_n, aten.mul(h_n, reset)))
    return aten.add(aten.mul(aten.sub(hx, new), update), new)


def _gru_cell_args(args, kwargs):
    bound = _bind(args, kwargs, ("input", "hx", "w_ih", "w_hh", "b_ih", "b_hh"))
    if bound is None or not all(isinstance(bound.get(n), torch.Tensor) for n in ("input", "hx", "w_ih", "w_hh")):
        return None
    return [bound["input"], bound["hx"], bound["w_ih"], bound["w_hh"], bound.get("b_ih"), bound.get("b_hh")]


def _index_items(x, index):
    """The items of a basic index (ints, SymInts, slices, None, Ellipsis) with the Ellipsis expanded, or
    None for any other index (tensors, lists, bools: torch's own indexing)."""
    items = list(index) if isinstance(index, tuple) else [index]
    for i in items:
        if isinstance(i, bool) or not (i is None or i is Ellipsis or isinstance(i, (int, torch.SymInt, slice))):
            return None
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if items.count(Ellipsis) > 1 or used > x.dim():
        return None  # (torch raises its own error)
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (x.dim() - used)
    return items


def tensor_getitem(x, index):
    """``x[index]`` where an integer index is a SymInt (``x[x.shape[0] - 2]``, ``cache[:, pos]``): the
    select/slice/unsqueeze steps ATen's basic indexing takes. (torch's C++ ``__getitem__`` reads such an
    index through ``__index__``: a plain int, so every size compiled again.) NotImplemented elsewhere."""
    items = _index_items(x, index)
    if items is None or not any(isinstance(i, torch.SymInt) for i in items):
        return NotImplemented
    out, dim = x, 0
    for i in items:
        if i is None:
            out = aten.unsqueeze(out, dim)
            dim += 1
        elif isinstance(i, slice):
            if i.step is not None and not (isinstance(i.step, int) and i.step > 0):
                return NotImplemented  # (torch raises for a step <= 0; a symbolic step: its own path)
            if i != slice(None):
                out = aten.slice.Tensor(out, dim, i.start, i.stop, 1 if i.step is None else i.step)
            dim += 1
        else:
            out = aten.select.int(out, dim, i)
    return out


def tensor_setitem(x, index, value):
    """``x[index] = value`` for the indices of ``tensor_getitem``: a copy into the view (``copy_``
    broadcasts and converts the dtype as ``__setitem__`` does; a number fills)."""
    view = tensor_getitem(x, index)
    if view is NotImplemented:
        return NotImplemented
    if isinstance(value, torch.Tensor):
        aten.copy_(view, value)
    elif isinstance(value, (int, float, bool)):
        aten.fill_.Scalar(view, value)
    else:
        return NotImplemented
    return None


def _getitem_args(args, kwargs):
    return None if kwargs or len(args) != 2 else list(args)


def _setitem_args(args, kwargs):
    return None if kwargs or len(args) != 3 else list(args)


_MATH, _FLASH, _EFFICIENT, _CUDNN = 0, 1, 2, 3  # torch.nn.attention.SDPBackend values of _fused_sdp_choice


def scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """``F.scaled_dot_product_attention`` on CUDA as ATen's composite runs it for the flash, cuDNN,
    memory-efficient and math paths (torch 2.11's body reads plain sizes when it pads the mask, and its
    math body calls its own matmul); NotImplemented for what it does not cover (the op then runs as it is)."""
    if attention_chosen_per_call(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa):
        from kiln.aot.attention_op import attention

        return attention(q, k, v, attn_mask, is_causal, scale=scale, enable_gqa=enable_gqa)
    if q.device.type != "cuda" or enable_gqa or q.shape[-1] % 8 or v.shape[-1] % 8:
        return NotImplemented
    choice = aten._fused_sdp_choice(q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if choice == _MATH and _flash_for_every_size(q, k, v, attn_mask, dropout_p, is_causal, grad):
        choice = _FLASH
    if choice == _FLASH and attn_mask is None:
        return aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False, scale=scale)[0]
    if choice == _CUDNN and attn_mask is None:
        return aten._scaled_dot_product_cudnn_attention(q, k, v, None, grad, dropout_p, is_causal, False,
                                                         scale=scale)[0]
    if choice == _MATH and dropout_p == 0.0:
        # ATen's math body is kiln's own decomposition of it (the one the AOT stage applies to the op)
        from kiln.decomp.attention import sdpa_math

        return sdpa_math(q, k, v, attn_mask, 0.0, is_causal, scale=scale)[0]
    if choice != _EFFICIENT:
        return NotImplemented
    bias = efficient_bias(attn_mask, q, k) if attn_mask is not None else None
    return aten._scaled_dot_product_efficient_attention(q, k, v, bias, grad, dropout_p, is_causal, scale=scale)[0]


PER_CALL_ATTENTION_DEVICES = {"cuda"}  # (the CPU runs its flash kernel, lower/cpu_attention.py)


def attention_chosen_per_call(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                              enable_gqa=False) -> bool:
    """Whether a CUDA ``scaled_dot_product_attention`` with symbolic sizes stays one graph node, the
    op ``kiln::attention`` (``aot/attention_op.py``), which runs ATen's composite per call: its kernel choice (cuDNN, flash, memory-efficient,
    math) is then eager's, made at each call's real sizes. A choice made once for every size can only
    be the one whose conditions hold for all of them (flash, ``_flash_for_every_size``), and on an
    H200 cuDNN's kernel took 251 us where flash took 445 us (BERT, seq 500). Only where no gradient
    flows through the attention: a training graph needs the chosen kernel's saved outputs for its
    backward, and keeps the rule above. Dropout draws random numbers: it keeps the rule above too."""
    if q.device.type not in PER_CALL_ATTENTION_DEVICES or dropout_p != 0.0:
        return False
    tensors = [t for t in (q, k, v, attn_mask) if isinstance(t, torch.Tensor)]
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def _flash_for_every_size(q, k, v, attn_mask, dropout_p, is_causal, grad) -> bool:
    """Whether the flash kernel runs this attention at every size its symbolic sizes may take (with the
    guards made here). ATen's choice asked of symbolic fakes comes back "math" (its checks read plain
    sizes), and the math path runs two float32 GEMMs and a softmax: 2-3x the fused kernel's time in a
    dynamic GPT-2. Flash's size rules: head dims within its limits (their values decide: a symbolic head
    dim is pinned to its value by a guard, or, marked dynamic by the user, keeps math), equal batch and
    head counts and unit last-dim strides (guarded), and for a causal mask equal sequence lengths
    (guarded). The rest (the device, dtypes, the user's enabled backends, requires-grad support, the head
    dim limits) are asked of ``torch.backends.cuda.can_use_flash_attention`` with tiny tensors of the same
    dtypes, head dims and grad flags."""
    from kiln.fake.symbolic import is_symbolic

    if attn_mask is not None or dropout_p != 0.0 or q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return False
    if not any(is_symbolic(n) for t in (q, k, v) for n in t.shape):
        return False  # (static sizes: ATen's own answer stands)
    if q.dtype not in (torch.float16, torch.bfloat16) or not (q.dtype == k.dtype == v.dtype):
        return False
    dims = [_pinned(t.shape[-1]) for t in (q, k, v)]
    if None in dims:
        return False
    same = [q.shape[0] == k.shape[0], k.shape[0] == v.shape[0], q.shape[1] == k.shape[1],
            k.shape[1] == v.shape[1]] + [t.stride(-1) == 1 for t in (q, k, v)]
    if is_causal:
        same.append(q.shape[-2] == k.shape[-2])  # (ATen's causal rule for two lengths depends on them)
    if not all(bool(c) for c in same):  # (each a guard on the sizes' expressions)
        return False
    try:
        with torch._C._DisableTorchDispatch():
            tiny = [torch.empty((1, 2, 64, d), dtype=q.dtype, device=q.device).requires_grad_(
                grad and t.requires_grad) for t, d in zip((q, k, v), dims)]
            params = torch.backends.cuda.SDPAParams(*tiny, None, 0.0, is_causal, False)
            return bool(torch.backends.cuda.can_use_flash_attention(params))
    except (RuntimeError, TypeError, AttributeError):  # (another torch: keep ATen's answer)
        return False


def _pinned(n) -> int | None:
    """A head dim as an int: a symbolic one pinned to its value by a guard (flash's limits are on the
    value); None for one the user marked dynamic (pinning it would be a specialization error)."""
    from kiln.fake.symbolic import is_symbolic

    if not is_symbolic(n):
        return int(n)
    node = n.node
    if node.expr.free_symbols & node.env.marked:
        return None
    return int(n)


def efficient_bias(mask, q, k):
    """ATen's mask preparation for the memory-efficient kernel: a boolean mask as 0 / -inf in q's dtype;
    the last dim padded to a multiple of 16 elements and sliced back (always: ATen pads only an unaligned
    mask, a fact about the sizes that would be a guard; the values are the same); expanded to
    (batch, heads, queries, keys)."""
    if mask.dtype == torch.bool:
        zero = aten.scalar_tensor(0.0, dtype=q.dtype, device=q.device)
        mask = aten.where.ScalarSelf(aten.logical_not(mask), float("-inf"), zero)
    n = mask.shape[-1]
    padded = aten.constant_pad_nd(mask, [0, 16 - n % 16])
    sliced = aten.slice.Tensor(padded, -1, 0, n)
    return aten.expand(sliced, [q.shape[0], q.shape[1], q.shape[2], k.shape[2]])


def _bind(args, kwargs, names) -> dict | None:
    """Positional and keyword arguments by parameter name; None for a call Python would refuse (too
    many arguments, an unknown keyword, a parameter given twice)."""
    bound = dict(zip(names, args))
    if len(args) > len(names) or set(kwargs) - set(names) or set(kwargs) & set(bound):
        return None
    bound.update(kwargs)
    return bound


def sdpa_args(args, kwargs):
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    bound = _bind(args, kwargs, names)
    if bound is None:
        return None
    defaults = (None, None, None, None, 0.0, False, None, False)
    return [bound.get(name, d) for name, d in zip(names, defaults)]


def _matmul_args(args, kwargs):
    if kwargs or len(args) != 2 or not all(isinstance(a, torch.Tensor) for a in args):
        return None
    return args


def max_pool1d(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """``torch.max_pool1d`` as ATen's ``max_pool1d_with_indices`` computes it: a 2-D pooling over a
    height-1 view (its C++ composite takes int sizes: every length compiled again)."""
    def one(v):
        return v if isinstance(v, int) else v[0]
    k = one(kernel_size)
    s = one(stride) if stride else k  # (an empty or None stride is the kernel size)
    out = torch.max_pool2d(x.unsqueeze(-2), [1, k], [1, s], [0, one(padding)], [1, one(dilation)], ceil_mode)
    return out.squeeze(-2)


def _max_pool1d_args(args, kwargs, names=("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode")):
    bound = _bind(args, kwargs, names)
    if bound is None or "kernel_size" not in bound or bound.pop("return_indices", False):
        return None
    if not isinstance(bound.get("input"), torch.Tensor) or bound["input"].dim() not in (2, 3):
        return None
    defaults = (None, None, (), 0, 1, False)
    return [bound.get(name, d) for name, d in zip(names[:6], defaults)]


def _functional_max_pool1d_args(args, kwargs):
    """``F.max_pool1d`` (a boolean dispatch on return_indices: the mode sees it, not the torch.max_pool1d
    its body calls with the mode off)."""
    return _max_pool1d_args(args, kwargs, ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode",
                                           "return_indices"))


def _linear_args(args, kwargs):
    args = list(args)
    names = ("input", "weight", "bias")
    for i, name in enumerate(names):
        if name in kwargs:
            if i != len(args):
                return None
            args.append(kwargs[name])
    if len(args) < 2 or len(args) > 3 or set(kwargs) - set(names) or not isinstance(args[1], torch.Tensor):
        return None
    return args


def one_hot(tensor: torch.Tensor, num_classes: int = -1) -> torch.Tensor:
    """``F.one_hot`` with a given number of classes as ATen's body computes it: zeros, then a scatter of
    ones (its C++ body asks for concrete sizes). ATen first checks that the class values lie in
    [0, num_classes); the scatter's own index check raises for the same values (IndexOutOfBoundsError,
    a RuntimeError as eager's)."""
    shape = list(tensor.shape) + [num_classes]
    out = torch.zeros(shape, dtype=torch.int64, device=tensor.device)
    return out.scatter(-1, tensor.unsqueeze(-1), 1)


def _one_hot_args(args, kwargs):
    bound = _bind(args, kwargs, ("tensor", "num_classes"))
    if bound is None or not isinstance(bound.get("tensor"), torch.Tensor) or bound["tensor"].dtype != torch.int64:
        return None  # (eager's own error for other dtypes)
    n = bound.get("num_classes", -1)
    if (isinstance(n, int) and n < 0) or bound["tensor"].numel() == 0:
        return None  # (-1 counts classes from the values: data-dependent; an empty input: eager's own checks)
    return [bound["tensor"], n]


def take_along_dim(x: torch.Tensor, indices: torch.Tensor, dim=None) -> torch.Tensor:
    """``torch.take_along_dim`` as ATen's body computes it (TensorAdvancedIndexing.cpp): without ``dim``,
    the flattened input gathered at the flattened indices; with it, each operand broadcast to the other's
    sizes except along ``dim`` (its C++ helper asks for plain sizes), then a gather."""
    if dim is None:
        return x.view(-1).gather(0, indices.view(-1))
    d = dim % x.dim() if x.dim() else 0
    x_sizes, i_sizes = list(x.shape), list(indices.shape)
    shape_i = _broadcast_shape([[indices.shape[d] if i == d else n for i, n in enumerate(x_sizes)], i_sizes])
    shape_x = _broadcast_shape([[x.shape[d] if i == d else n for i, n in enumerate(i_sizes)], x_sizes])
    return x.expand(shape_x).gather(d, indices.expand(shape_i))


def _take_along_dim_args(args, kwargs):
    bound = _bind(args, kwargs, ("input", "indices", "dim"))
    if bound is None or not all(isinstance(bound.get(k), torch.Tensor) for k in ("input", "indices")):
        return None
    x, idx, dim = bound["input"], bound["indices"], bound.get("dim")
    if idx.dtype != torch.int64 or x.device != idx.device:
        return None  # (eager's own errors)
    if dim is not None and (not isinstance(dim, int) or x.dim() != idx.dim() or not -x.dim() <= dim < max(x.dim(), 1)):
        return None
    return [x, idx, dim]


def kron(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.kron`` as ATen's body computes it (LinearAlgebra.cpp, KronImpl; its C++ asks for plain
    sizes): both operands padded to one rank, ``a`` viewed as (a0, 1, a1, 1, ...) and ``b`` as
    (1, b0, 1, b1, ...), multiplied, and the product seen as (a0 * b0, a1 * b1, ...)."""
    rank = max(a.dim(), b.dim())
    pad_a, pad_b = rank - a.dim(), rank - b.dim()
    a_shape, b_shape, out_shape = [], [], []
    for i in range(rank):
        sa = a.shape[i - pad_a] if i >= pad_a else 1
        sb = b.shape[i - pad_b] if i >= pad_b else 1
        a_shape += [sa, 1]
        b_shape += [1, sb]
        out_shape.append(sa * sb)
    return (a.reshape(a_shape) * b.reshape(b_shape)).reshape(out_shape)


def _kron_args(args, kwargs):
    bound = _bind(args, kwargs, ("input", "other"))
    if bound is None or not all(isinstance(bound.get(k), torch.Tensor) for k in ("input", "other")):
        return None
    return [bound["input"], bound["other"]]


def linspace(start, end, steps, dtype, device):
    """``torch.linspace`` with a symbolic number of steps (its ATen schema takes a plain int: the call
    pinned the size): kiln's decomposition of it (``decomp/factory.py``: ATen's two half-ranges from
    ``arange(steps)``), the step count a kernel argument. Floating dtypes only."""
    from kiln.decomp.factory import _device_of, _factory_dtype, _linspace_values

    dtype = _factory_dtype(dtype, start, end)
    if not dtype.is_floating_point or steps < 0:  # (a guard; ATen's own error for a negative count)
        return NotImplemented
    return _linspace_values(start, end, steps, dtype, _device_of(device, start, end))


def _linspace_args(args, kwargs):
    from kiln.fake.symbolic import is_symbolic

    bound = _bind(args, kwargs, ("start", "end", "steps", "dtype", "layout", "device", "requires_grad"))
    if bound is None or len(args) > 3 or not is_symbolic(bound.get("steps")):
        return None
    if bound.get("layout") not in (None, torch.strided) or bound.get("requires_grad", False) is not False:
        return None
    if not all(type(bound.get(k)) in (int, float) for k in ("start", "end")):
        return None  # (tensors, complex numbers, bools: the call as it is)
    return [bound["start"], bound["end"], bound["steps"], bound.get("dtype"), bound.get("device")]


# torch-level callables (call_function targets) -> (argument binder, rule)
FUNCTION_RULES = {
    torch.matmul: (_matmul_args, matmul),
    operator.matmul: (_matmul_args, matmul),
    torch.Tensor.matmul: (_matmul_args, matmul),
    torch.Tensor.__matmul__: (_matmul_args, matmul),
    torch._C._nn.linear: (_linear_args, linear),
    torch._C._nn.scaled_dot_product_attention: (sdpa_args, scaled_dot_product_attention),
    torch.max_pool1d: (_max_pool1d_args, max_pool1d),
    torch.nn.functional.max_pool1d: (_functional_max_pool1d_args, max_pool1d),
    torch.nn.functional.interpolate: (symbolic_upsample.interpolate_args, symbolic_upsample.interpolate),
    torch.gru_cell: (_gru_cell_args, gru_cell),
    torch.take_along_dim: (_take_along_dim_args, take_along_dim),
    torch.Tensor.take_along_dim: (_take_along_dim_args, take_along_dim),
    torch.kron: (_kron_args, kron),
    torch.linspace: (_linspace_args, linspace),
    torch.Tensor.kron: (_kron_args, kron),
    torch.Tensor.__getitem__: (_getitem_args, tensor_getitem),
    torch.Tensor.__setitem__: (_setitem_args, tensor_setitem),
}
FACTORIES = frozenset({torch.linspace})  # rules whose bound arguments start with no tensor
# rules that run for static sizes too: ATen's body on fake tensors is another computation than on real
# ones (one_hot: eq with an arange, without the range check the real body makes before its scatter)
ALWAYS_RULES = {
    torch.nn.functional.one_hot: (_one_hot_args, one_hot),
}
# the same ops where they reach a dispatch mode (AOT tracing) as ATen ops
# (sdpa: ATen's C++ composite asks ``_fused_sdp_choice`` of symbolic fakes and gets "math": the AOT
# trace of a dynamic graph would run attention as float32 GEMMs where the captured one chose flash)
ATEN_RULES = {aten.matmul.default: matmul, aten.linear.default: linear, aten.max_pool1d.default: max_pool1d,
              aten.gru_cell.default: gru_cell, aten.take_along_dim.default: take_along_dim, aten.scaled_dot_product_attention.default: scaled_dot_product_attention,
              aten.kron.default: kron}


class SymbolicCompositeMode(TorchFunctionMode):
    """Runs the rules above in place of ``torch.matmul``, ``Tensor.__matmul__``, ``F.linear``, ... for
    calls with symbolic sizes made by captured code. (Not for calls inside a Python torch function that
    runs whole on fakes, such as ``F.multi_head_attention_forward``: torch runs a function's body with
    the mode off. On torch 2.11 such a graph is compiled static, per size.) ``ALWAYS_RULES`` run for
    static sizes too (in AOT tracing, where the mode is always on)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        entry = None
        if _hashable(func):
            entry = FUNCTION_RULES.get(func)
            if entry is None or not has_symbolic_tensor((*args, *kwargs.values())):
                entry = ALWAYS_RULES.get(func)
        if entry is not None:
            bound = entry[0](tuple(args), dict(kwargs))
            if bound is not None and (isinstance(bound[0], torch.Tensor) or func in FACTORIES):
                with self:  # (a rule's own torch calls come here too: sdpa's math body calls matmul)
                    out = entry[1](*bound)
                if out is not NotImplemented:
                    return out
        if _hashable(func) and func in ALIASING_DECISIONS:
            with aliasing_decisions((*args, *kwargs.values())):
                return func(*args, **kwargs)
        return func(*args, **kwargs)


# a view or a copy depending on the sizes and strides (decided as eager decides it: aliasing_decisions)
ALIASING_DECISIONS = frozenset({torch.reshape, torch.Tensor.reshape, torch.Tensor.reshape_as, torch.flatten,
                                torch.Tensor.flatten})


def _hashable(x) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True
