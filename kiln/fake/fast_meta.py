"""Fake outputs of the most common ops, computed here instead of by their meta kernels.

torch registers Python meta kernels for elementwise ops (its references), matmuls, layer norm and
batch norm: tens of microseconds to a millisecond of Python per call (the norms' run a dozen ops), paid for
every op kiln captures and traces, and the first call imports torch._dynamo (torch wraps those
kernels in ``torch._disable_dynamo``).

Each rule covers the plain cases only: contiguous operands (the result is contiguous), one floating
dtype for matmuls and norms, no complex dtypes, no bool arithmetic, default keyword arguments. It
returns None for anything else, and the op's own meta kernel decides (and raises where eager would).
``tests/fake/test_fast_meta.py`` checks every rule against the meta kernels.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

DEFAULT, INT_TO_FLOAT, ALWAYS_BOOL = "default", "int_to_float", "always_bool"
_NUMBER = (bool, int, float)


def _overloads(kind: str, names: str) -> dict:
    found = {}
    for name in names.split():
        packet, _, overload = name.partition(".")
        packet_obj = getattr(aten, packet, None)
        if packet_obj is not None and overload in packet_obj.overloads():
            found[getattr(packet_obj, overload)] = kind
    return found


# op -> promotion kind of its result; ops taking (self) or (self, other) positionally
PROMOTION = {
    **_overloads(DEFAULT, "add.Tensor add.Scalar sub.Tensor sub.Scalar mul.Tensor mul.Scalar "
                          "maximum.default minimum.default neg.default relu.default remainder.Tensor "
                          "remainder.Scalar gelu.default div.Tensor_mode"),
    **_overloads(INT_TO_FLOAT, "div.Tensor div.Scalar exp.default log.default sqrt.default rsqrt.default "
                               "sin.default cos.default tanh.default sigmoid.default erf.default "
                               "reciprocal.default"),
    **_overloads(ALWAYS_BOOL, "eq.Tensor eq.Scalar ne.Tensor ne.Scalar lt.Tensor lt.Scalar le.Tensor le.Scalar "
                              "gt.Tensor gt.Scalar ge.Tensor ge.Scalar isinf.default isnan.default "
                              "logical_not.default"),
}
# keyword arguments a rule accepts, and the values it accepts them with
_KWARGS = {**{op: {"alpha": (1,)} for op in (aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar)},
           aten.gelu.default: {"approximate": ("none", "tanh")},
           aten.div.Tensor_mode: {"rounding_mode": ("trunc", "floor")}}
_FLOAT_ONLY = {aten.gelu.default}
# op -> for each required positional argument, whether it is a Tensor (else a number)
_TENSOR_AT = {op: tuple(str(a.type) == "Tensor" for a in op._schema.arguments
                        if not a.kwarg_only and not a.has_default_value()) for op in PROMOTION}
_WHERE = aten.where.self
# Tensor-Tensor ops whose meta kernels also take a Python number as ``other`` (``_number_other``)
_NUMBER_OTHER = {aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.div.Tensor_mode}


def _row_major(t: torch.Tensor) -> bool:
    """Strides exactly those of a new tensor of t's shape (``is_contiguous`` ignores the strides of
    size-1 dims; meta kernels pass them on)."""
    expected = 1
    for n, st in zip(reversed(t.shape), reversed(t.stride())):
        if not _known_equal(st, expected):
            return False
        expected *= n
    return True


def _known_equal(a, b) -> bool:
    """``a == b`` where it holds for every size (no guard: a symbolic stride that only equals the row-major
    one for some sizes, ``512`` against ``Min(512, s0)`` of a sliced buffer, takes the meta kernel instead of
    splitting the sizes into two graphs)."""
    same = a == b
    return same if type(same) is bool else same.node.statically_known_true()


def _plain(x) -> bool:
    if isinstance(x, torch.Tensor):
        return not x.is_complex() and _row_major(x)
    return type(x) in _NUMBER


def _broadcast(shapes) -> list[int] | None:
    out: list[int] = []
    for shape in shapes:
        shape = list(shape)
        if len(shape) > len(out):
            out = [1] * (len(shape) - len(out)) + out
        for i, n in enumerate(shape, len(out) - len(shape)):
            # (a literal 1 is checked first: an unbacked size has no answer to ``u0 != 1``)
            if type(out[i]) is int and out[i] == 1:
                out[i] = n
            elif not (type(n) is int and n == 1) and n != out[i]:
                return None  # the meta kernel raises the error eager would
    return out


def fast_meta(func, args, kwargs):
    """The meta output(s) of ``func(*args, **kwargs)`` when a rule covers the call, else None."""
    rule = RULES.get(func)
    return None if rule is None else rule(func, args, kwargs)


def _number_other(func, args) -> bool:
    """``x * 0.125``: a Python number (not a bool) as the ``other`` of an arithmetic Tensor-Tensor op on a
    tensor that is not bool, of static sizes (a symbolic one would be guarded on; the meta kernel decides),
    as capture passes it (the result's dtype is ``torch.result_type(x, number)``).
    Without this rule the first such call imports torch._dynamo and sympy (torch's reference kernels)."""
    x = args[0] if args else None
    return (func in _NUMBER_OTHER and len(args) == 2 and isinstance(x, torch.Tensor) and x.dtype is not torch.bool
            and type(args[1]) in (int, float) and all(type(n) is int for n in (*x.shape, *x.stride())))


def _elementwise(func, args, kwargs) -> torch.Tensor | None:
    if func is _WHERE:
        if kwargs or len(args) != 3 or not all(map(_plain, args)):
            return None
        cond, a, b = args
        if not isinstance(cond, torch.Tensor) or cond.dtype is not torch.bool:
            return None
        if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
            return None
        dtype = torch.result_type(a, b)
        operands = args
    else:
        kind = PROMOTION[func]
        if [isinstance(x, torch.Tensor) for x in args] != list(_TENSOR_AT[func]) and not _number_other(func, args):
            return None
        if not all(map(_plain, args)):
            return None
        allowed = _KWARGS.get(func, {})
        for key, value in kwargs.items():
            if key not in allowed or type(value) not in (int, str) or value not in allowed[key]:
                return None
        if func is aten.div.Tensor_mode and "rounding_mode" not in kwargs:
            return None  # a positional rounding mode, or true division: the meta kernel decides
        dtype = torch.result_type(*args) if len(args) == 2 else args[0].dtype
        if kind == ALWAYS_BOOL:
            dtype = torch.bool
        elif dtype is torch.bool:
            return None  # bool arithmetic: some ops reject it, some promote: the meta kernel knows
        elif kind == INT_TO_FLOAT and not dtype.is_floating_point:
            dtype = torch.get_default_dtype()
        elif func in _FLOAT_ONLY and not dtype.is_floating_point:
            return None
        operands = args
    shape = _broadcast(x.shape for x in operands if isinstance(x, torch.Tensor))
    if shape is None:
        return None
    return torch.empty(shape, dtype=dtype, device="meta")


_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _matrix_operands(tensors, dims: int) -> torch.dtype | None:
    """The common dtype when every operand is a meta tensor of ``dims`` dims and one floating dtype,
    else None (matmul results are new row-major tensors whatever the operands' strides)."""
    if not isinstance(tensors[0], torch.Tensor) or tensors[0].dtype not in _FLOATS:
        return None
    dtype = tensors[0].dtype
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.dim() != dims or t.dtype is not dtype:
            return None
    return dtype


def _mm(func, args, kwargs):
    if kwargs or len(args) != 2 or _matrix_operands(args, 2) is None or args[0].shape[1] != args[1].shape[0]:
        return None
    return torch.empty((args[0].shape[0], args[1].shape[1]), dtype=args[0].dtype, device="meta")


def _bmm(func, args, kwargs):
    if kwargs or len(args) != 2 or _matrix_operands(args, 3) is None:
        return None
    (b, n, k), (b2, k2, m) = args[0].shape, args[1].shape
    if b != b2 or k != k2:
        return None
    return torch.empty((b, n, m), dtype=args[0].dtype, device="meta")


def _addmm(func, args, kwargs):
    if kwargs or len(args) != 3:
        return None
    bias, a, b = args
    if not isinstance(bias, torch.Tensor) or bias.dtype is not a.dtype:
        return None
    out = _mm(func, (a, b), {})
    if out is None or bias.dim() > 2 or _broadcast([bias.shape, out.shape]) != list(out.shape):
        return None
    return out


def _native_layer_norm(func, args, kwargs):
    if kwargs or len(args) != 5:
        return None
    x, shape, weight, bias, _eps = args
    if not isinstance(x, torch.Tensor) or x.dtype not in _FLOATS or not _row_major(x):
        return None
    k = len(shape)
    if k == 0 or x.dim() < k or list(x.shape[x.dim() - k:]) != list(shape):
        return None
    for t in (weight, bias):
        if t is not None and (not isinstance(t, torch.Tensor) or list(t.shape) != list(shape)
                              or t.dtype is not x.dtype):
            return None
    stats_shape = list(x.shape[:x.dim() - k]) + [1] * k
    stats_dtype = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    return (torch.empty(x.shape, dtype=x.dtype, device="meta"),
            torch.empty(stats_shape, dtype=stats_dtype, device="meta"),
            torch.empty(stats_shape, dtype=stats_dtype, device="meta"))


def _channels_last_strides(shape) -> tuple[int, ...] | None:
    if len(shape) != 4:
        return None
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)


def _batch_norm(func, args, kwargs):
    """native_batch_norm / _native_batch_norm_legit(_no_training): the result in the input's layout
    (row-major, or unambiguously channels-last), per-channel statistics (float32 for 16-bit inputs)."""
    if kwargs:
        return None
    if func is aten._native_batch_norm_legit_no_training.default:
        if len(args) != 7:
            return None
        x, weight, bias, running_mean, running_var = args[:5]
        training = False
    else:
        if len(args) != 8:
            return None
        x, weight, bias, running_mean, running_var, training = args[:6]
    if not isinstance(x, torch.Tensor) or x.dtype not in _FLOATS or x.dim() < 2 or x.shape[1] == 0:
        return None
    c = x.shape[1]
    for t in (weight, bias, running_mean, running_var):
        if t is not None and (not isinstance(t, torch.Tensor) or list(t.shape) != [c] or t.dtype is not x.dtype):
            return None
    needs_stats = not training or func is not aten.native_batch_norm.default  # the others' are not optional
    if needs_stats and (running_mean is None or running_var is None):
        return None  # the meta kernel raises, as eager does
    if training and x.numel() // c <= 1:
        return None  # one value per channel: eager raises
    stride = tuple(x.stride())
    row_major = tuple(torch.empty(x.shape, device="meta").stride())
    channels_last = _channels_last_strides(tuple(x.shape))
    if channels_last == row_major or stride not in (row_major, channels_last):
        return None  # a layout other than these two, or one that reads as both (size-1 dims)
    out = torch.empty_strided(x.shape, stride, dtype=x.dtype, device="meta")
    stats_dtype = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    return out, torch.empty((c,), dtype=stats_dtype, device="meta"), torch.empty((c,), dtype=stats_dtype, device="meta")


def _softmax(func, args, kwargs):
    """``_softmax`` / ``_log_softmax`` of a floating tensor without half_to_float: a new row-major tensor
    of its shape and dtype (torch's meta kernel also computes the promotion, importing sympy)."""
    if kwargs or len(args) != 3 or not isinstance(args[0], torch.Tensor) or args[0].dtype not in _FLOATS:
        return None
    x, dim, half_to_float = args
    rank = max(x.dim(), 1)
    if type(dim) is int and not -rank <= dim < rank:  # (the meta kernel lets it pass; eager's kernel raises)
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    if type(dim) is not int or half_to_float is not False:
        return None
    if not all(type(n) is int for n in x.shape):
        return None  # symbolic sizes: the meta kernel decides
    return torch.empty(x.shape, dtype=x.dtype, device="meta")


RULES = {op: _elementwise for op in [*PROMOTION, _WHERE]}
RULES.update({aten._softmax.default: _softmax, aten._log_softmax.default: _softmax})
RULES.update({aten.mm.default: _mm, aten.bmm.default: _bmm, aten.addmm.default: _addmm,
              aten.native_layer_norm.default: _native_layer_norm,
              aten.native_batch_norm.default: _batch_norm, aten._native_batch_norm_legit.default: _batch_norm,
              aten._native_batch_norm_legit_no_training.default: _batch_norm})
