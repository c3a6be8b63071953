"""Lowerings of elementwise ops: math, comparisons, logic, casts, ``where``."""
from __future__ import annotations

import torch

from kiln.loopir.sizes import shape_of, strides_of
from kiln.lower.common import make_pointwise, origins_of, out_val, promoted, upcast
from kiln.lower.registry import Unlowerable, lowering

aten = torch.ops.aten

# aten op -> loop-IR op, for ops whose result dtype is the node's dtype and that compute in it
_UNARY_SAME = {
    "abs": "abs", "neg": "neg", "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2",
    "log10": "log10", "log1p": "log1p", "sqrt": "sqrt", "rsqrt": "rsqrt", "reciprocal": "reciprocal",
    "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan",
    "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
    "sigmoid": "sigmoid", "erf": "erf", "erfc": "erfc", "erfinv": "erfinv", "lgamma": "lgamma",
    "floor": "floor", "ceil": "ceil", "trunc": "trunc", "frac": "frac", "sign": "sign", "sgn": "sign",
    "bitwise_not": "bitwise_not", "relu": "relu",
}
for _aten_name, _op in _UNARY_SAME.items():
    def _make(op_name):
        def lower_unary(g, node, x):
            if torch.is_complex(torch.empty((), dtype=x.dtype)):
                raise Unlowerable("complex dtype")
            return make_pointwise(node, lambda ops, a: getattr(ops, op_name)(a), [x])

        lower_unary.__name__ = f"lower_{op_name}"
        return lower_unary

    lowering(getattr(aten, _aten_name).default)(_make(_op))


@lowering(aten.round.default)
def lower_round(g, node, x):
    return make_pointwise(node, lambda ops, a: ops.round(a), [x])


@lowering(aten.round.decimals)
def lower_round_decimals(g, node, x, *, decimals=0):
    """ATen's rule: round(x * 10^d) / 10^d, or round(x / 10^-d) * 10^-d for negative d (in the op math type)."""
    if not x.dtype.is_floating_point:
        raise Unlowerable("round with decimals of a non-float tensor")
    if decimals == 0:
        return make_pointwise(node, lambda ops, a: ops.round(a), [x])
    scale = float(10 ** abs(decimals))

    def fn(ops, a):
        ten = ops.constant(scale, a.dtype)
        if decimals > 0:
            return ops.truediv(ops.round(ops.mul(a, ten)), ten)
        return ops.mul(ops.round(ops.truediv(a, ten)), ten)

    return make_pointwise(node, fn, [x])


# unary predicates: compute in the input's dtype, result bool
for _aten_name in ("isnan", "isinf", "isfinite", "signbit", "logical_not"):
    def _make_pred(op_name):
        def lower_pred(g, node, x):
            cdtype = torch.bool if op_name == "logical_not" else upcast(x.dtype)
            return make_pointwise(node, lambda ops, a: getattr(ops, op_name)(a), [x], cdtype=cdtype)

        lower_pred.__name__ = f"lower_{op_name}"
        return lower_pred

    lowering(getattr(aten, _aten_name).default)(_make_pred(_aten_name))


def _check_real(*xs):
    for x in xs:
        dtype = getattr(x, "dtype", None)
        if dtype is not None and dtype.is_complex:
            raise Unlowerable("complex dtype")
        if isinstance(x, complex):
            raise Unlowerable("complex scalar")


def _arith(op_name):
    def lower(g, node, a, b, alpha=1):
        _check_real(a, b)
        if alpha != 1:
            def fn(ops, x, y):
                return getattr(ops, op_name)(x, ops.mul(y, ops.constant(alpha, y.dtype)))
        else:
            def fn(ops, x, y):
                return getattr(ops, op_name)(x, y)
        return make_pointwise(node, fn, [a, b])

    return lower


lowering(aten.add.Tensor, aten.add.Scalar)(_arith("add"))
lowering(aten.sub.Tensor, aten.sub.Scalar)(_arith("sub"))


def _binary(op_name, *, cdtype_from_inputs=False, bool_inputs=False):
    def lower(g, node, a, b):
        _check_real(a, b)
        cdtype = None
        if bool_inputs:
            cdtype = torch.bool
        elif cdtype_from_inputs:
            cdtype = upcast(promoted(a, b))
        return make_pointwise(node, lambda ops, x, y: getattr(ops, op_name)(x, y), [a, b], cdtype=cdtype)

    lower.__name__ = f"lower_{op_name}"
    return lower


lowering(aten.mul.Tensor, aten.mul.Scalar)(_binary("mul"))
lowering(aten.div.Tensor, aten.div.Scalar)(_binary("truediv"))
lowering(aten.remainder.Tensor, aten.remainder.Scalar)(_binary("mod"))
lowering(aten.fmod.Tensor, aten.fmod.Scalar)(_binary("fmod"))
lowering(aten.maximum.default)(_binary("maximum"))
lowering(aten.minimum.default)(_binary("minimum"))
lowering(aten.fmax.default)(_binary("fmax"))
lowering(aten.fmin.default)(_binary("fmin"))
lowering(aten.atan2.default)(_binary("atan2"))
lowering(aten.hypot.default)(_binary("hypot"))
lowering(aten.copysign.Tensor)(_binary("copysign"))
lowering(aten.nextafter.default)(_binary("nextafter"))
lowering(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar)(_binary("bitwise_and"))
lowering(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar)(_binary("bitwise_or"))
lowering(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar)(_binary("bitwise_xor"))
lowering(aten.bitwise_left_shift.Tensor, aten.__lshift__.Scalar)(_binary("lshift"))
lowering(aten.bitwise_right_shift.Tensor, aten.__rshift__.Scalar)(_binary("rshift"))
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    lowering(getattr(aten, _name).Tensor, getattr(aten, _name).Scalar)(_binary(_name, cdtype_from_inputs=True))
for _name in ("logical_and", "logical_or", "logical_xor"):
    lowering(getattr(aten, _name).default)(_binary(_name, bool_inputs=True))


@lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def lower_div_mode(g, node, a, b, rounding_mode=None):
    _check_real(a, b)
    op_name = {None: "truediv", "floor": "floordiv", "trunc": "truncdiv"}[rounding_mode]
    return make_pointwise(node, lambda ops, x, y: getattr(ops, op_name)(x, y), [a, b])


@lowering(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def lower_pow(g, node, a, b):
    _check_real(a, b)
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        special = _POW_BY_EXPONENT.get(b)
        if special is not None and (b in (1, 2, 3) or out_val(node).dtype.is_floating_point):
            return make_pointwise(node, special, [a])
    return make_pointwise(node, lambda ops, x, y: ops.pow(x, y), [a, b])


# ATen's pow kernels (CPU and CUDA) compute these exponents this way, not with pow(): as exact as eager,
# and several times cheaper (GPT-2's tanh-GELU cubes its input)
_POW_BY_EXPONENT = {
    1: lambda ops, x: x,
    2: lambda ops, x: ops.mul(x, x),
    3: lambda ops, x: ops.mul(ops.mul(x, x), x),
    0.5: lambda ops, x: ops.sqrt(x),
    -0.5: lambda ops, x: ops.rsqrt(x),
    -1: lambda ops, x: ops.reciprocal(x),
    -2: lambda ops, x: ops.reciprocal(ops.mul(x, x)),
}


@lowering(aten.where.self)
def lower_where(g, node, cond, a, b):
    _check_real(a, b)
    val = node.meta["val"]
    cdtype = upcast(val.dtype)
    from kiln.lower.common import value_loader

    size = shape_of(val)
    rc, ra, rb = value_loader(cond, torch.bool, size), value_loader(a, cdtype, size), value_loader(b, cdtype, size)

    def body(ops, index):
        r = ops.where(rc(ops, index), ra(ops, index), rb(ops, index))
        return r if cdtype == val.dtype else ops.to_dtype(r, val.dtype)

    from kiln.loopir.nodes import Lazy
    from kiln.lower.common import cost_of

    return Lazy(size, val.dtype, val.device, body, 1 + cost_of(cond, a, b), origins_of(node, cond, a, b))


@lowering(aten._to_copy.default)
def lower_to_copy(g, node, x, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
                  memory_format=None):
    val = node.meta["val"]
    if device is not None and torch.device(device) != x.device or val.device != x.device:
        raise Unlowerable("copy to another device")
    if x.dtype.is_complex or val.dtype.is_complex:
        raise Unlowerable("complex dtype")
    return make_pointwise(node, lambda ops, v: v if val.dtype == x.dtype else ops.to_dtype(v, val.dtype), [x],
                          cdtype=x.dtype)


@lowering(aten.clone.default)
def lower_clone(g, node, x, *, memory_format=None):
    if x.dtype.is_complex:
        raise Unlowerable("complex dtype")
    return make_pointwise(node, lambda ops, v: v, [x], cdtype=x.dtype)


@lowering(aten.nan_to_num.default)
def lower_nan_to_num(g, node, x, nan=None, posinf=None, neginf=None):
    if not x.dtype.is_floating_point:
        return make_pointwise(node, lambda ops, v: v, [x], cdtype=x.dtype)
    info = torch.finfo(x.dtype)
    nan = 0.0 if nan is None else nan
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf

    def fn(ops, v):
        c = lambda s: ops.constant(s, v.dtype)  # noqa: E731
        v = ops.where(ops.isnan(v), c(nan), v)
        v = ops.where(ops.eq(v, c(float("inf"))), c(posinf), v)
        return ops.where(ops.eq(v, c(float("-inf"))), c(neginf), v)

    return make_pointwise(node, fn, [x])
