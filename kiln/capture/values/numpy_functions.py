"""The NumPy functions and ndarray methods kiln traces, one handler each (numpy_namespace.py maps
numpy's functions and ndarray's method names to them).

Each handler takes (tx, *args, **kwargs) as Values and emits torch ops with NumPy's semantics (dtype
rules from numpy_promotion, scalars where NumPy gives them, views where NumPy gives views). Keyword
arguments a handler does not name (out=, where=, order=, casting=, ...) raise TypeError in the handler
call, which is turned into a graph break naming the function. Anything not in the registry breaks the
graph naming the function (`numpy.<name> is not in kiln's NumPy mapping`), np.random included (its
generator is not torch's).
"""
from __future__ import annotations

import operator

import torch

from kiln.capture.values.base import ConstantValue, Value, unsupported
from kiln.capture.values.containers import SequenceValue
from kiln.capture.values.tensors import TensorValue
from kiln.capture.values.numpy_promotion import (
    BOOL, FLOAT64, INT64, NUMPY_TO_TORCH, as_dtype, mean_dtype, promote, result_type, sum_dtype,
)
from kiln.capture.values.numpy_values import (
    NDArrayValue, all_c_order, as_array, builder, cast, is_python_number, known_numpy_result, new_array,
    numpy_module, ufunc, view_array,
)


def _call(tx, fn, args, kwargs=None) -> Value:
    return tx.output.call("call_function", fn, args, kwargs or {})


def _method(tx, name, args, kwargs=None) -> Value:
    return tx.output.call("call_method", name, args, kwargs or {})


def _const(v: Value | None, what: str, default=None):
    if v is None:
        return default
    if not v.is_constant():
        unsupported(f"{what} must be known while tracing, got {v}")
    return v.as_constant()


def _shape_arg(args: list[Value], what: str) -> tuple:
    """A shape given as one int, one tuple/list, or several ints (a.reshape(2, 3))."""
    if len(args) == 1:
        value = _const(args[0], what)
        return (value,) if isinstance(value, int) else tuple(value)
    return tuple(_const(a, what) for a in args)


def _axes(axis, ndim: int, what: str):
    """An axis argument normalized to a sorted tuple of non-negative axes (None: every axis)."""
    if axis is None:
        return None
    items = axis if isinstance(axis, tuple) else (axis,)
    out = []
    for ax in items:
        if type(ax) is not int or not -ndim <= ax < max(ndim, 1):
            unsupported(f"axis {axis!r} of {what} for a {ndim}-d array (NumPy raises AxisError)")
        out.append(ax % max(ndim, 1))
    if len(set(out)) != len(out):
        unsupported(f"repeated axis in {axis!r} of {what}")
    return tuple(sorted(out))


# ---- ufuncs -----------------------------------------------------------------------------------------

@builder
def _int_floor_divide(tx, a, b):
    """Integer a // b with NumPy's answer for b == 0 (0, with a warning) where torch would raise."""
    zero = _call(tx, torch.eq, [b, ConstantValue(0)])
    safe = _call(tx, torch.where, [zero, ConstantValue(1), b])
    q = _call(tx, torch.div, [a, safe], {"rounding_mode": ConstantValue("floor")})
    return _call(tx, torch.where, [zero, ConstantValue(0), q])


@builder
def _int_remainder(tx, a, b):
    zero = _call(tx, torch.eq, [b, ConstantValue(0)])
    safe = _call(tx, torch.where, [zero, ConstantValue(1), b])
    r = _call(tx, torch.remainder, [a, safe])
    return _call(tx, torch.where, [zero, ConstantValue(0), r])


@builder
def _copy(tx, a, *rest):
    return _method(tx, "clone", [a])


@builder
def _float_floor_divide(tx, a, b):
    return _call(tx, torch.div, [a, b], {"rounding_mode": ConstantValue("floor")})


# name -> (torch function, function for integer/bool inputs or None)
UFUNCS = {
    "add": (torch.add, None), "subtract": (torch.sub, None), "multiply": (torch.mul, None),
    "true_divide": (torch.true_divide, None), "floor_divide": (_float_floor_divide, _int_floor_divide),
    "remainder": (torch.remainder, _int_remainder), "power": (torch.pow, None),
    "maximum": (torch.maximum, None), "minimum": (torch.minimum, None),
    "equal": (torch.eq, None), "not_equal": (torch.ne, None), "less": (torch.lt, None),
    "less_equal": (torch.le, None), "greater": (torch.gt, None), "greater_equal": (torch.ge, None),
    "logical_and": (torch.logical_and, None), "logical_or": (torch.logical_or, None),
    "logical_xor": (torch.logical_xor, None),
    "bitwise_and": (torch.bitwise_and, None), "bitwise_or": (torch.bitwise_or, None),
    "bitwise_xor": (torch.bitwise_xor, None), "invert": (torch.bitwise_not, None),
    "positive": (_copy, None), "negative": (torch.neg, None), "absolute": (torch.abs, None), "sign": (torch.sign, None),
    "floor": (torch.floor, _copy), "ceil": (torch.ceil, _copy), "rint": (torch.round, None),
    "sqrt": (torch.sqrt, None), "exp": (torch.exp, None), "log": (torch.log, None), "sin": (torch.sin, None),
    "cos": (torch.cos, None), "tan": (torch.tan, None), "tanh": (torch.tanh, None),
    "arctan": (torch.arctan, None), "square": (torch.square, None), "log1p": (torch.log1p, None), "expm1": (torch.expm1, None),
    "log2": (torch.log2, None), "log10": (torch.log10, None), "exp2": (torch.exp2, None),
}
OPERATOR_UFUNCS = {
    operator.add: "add", operator.sub: "subtract", operator.mul: "multiply", operator.truediv: "true_divide",
    operator.floordiv: "floor_divide", operator.mod: "remainder", operator.pow: "power",
    operator.eq: "equal", operator.ne: "not_equal", operator.lt: "less", operator.le: "less_equal",
    operator.gt: "greater", operator.ge: "greater_equal",
    operator.and_: "bitwise_and", operator.or_: "bitwise_or", operator.xor: "bitwise_xor",
}


def call_ufunc(tx, name: str, operands: list[Value]) -> NDArrayValue:
    from kiln.capture.values.numpy_promotion import UFUNC_RULES

    if name not in UFUNC_RULES or name not in UFUNCS:
        unsupported(f"numpy.{name} is not in kiln's NumPy mapping")
    if name == "absolute" and all(isinstance(o, NDArrayValue) and o.dtype == BOOL for o in operands):
        return ufunc(tx, name, _copy, operands)
    if name == "power":
        _check_power(tx, operands)
    torch_fn, int_fn = UFUNCS[name]
    result = ufunc(tx, name, torch_fn, operands, int_safe=int_fn)
    known_numpy_result(getattr(numpy_module(), name), operands, result)
    return result


def _check_power(tx, operands: list[Value]) -> None:
    """Integer powers: NumPy raises ValueError for a negative integer exponent (a data-dependent check
    for exponent arrays): only a non-negative Python int exponent is traced for integer bases."""
    base, exp = operands
    if isinstance(exp, NDArrayValue) and exp.dtype.kind in "biu" and \
            (not isinstance(base, NDArrayValue) or base.dtype.kind in "biu"):
        if exp.dtype.kind != "b":
            unsupported("integer ** integer array: NumPy raises for negative exponents, which depends on the data")
    if is_python_number(exp) and type(exp.as_constant()) is int and exp.as_constant() < 0 and \
            isinstance(base, NDArrayValue) and base.dtype.kind in "biu":
        unsupported("integer array ** negative int (NumPy raises ValueError)")


def _ufunc_handler(name: str, arity: int):
    def handler(tx, *args, **kwargs):
        if kwargs:
            unsupported(f"numpy.{name} with keyword arguments {sorted(kwargs)}")
        if len(args) != arity:
            unsupported(f"numpy.{name} with {len(args)} arguments (out= and positional extras are not traced)")
        return call_ufunc(tx, name, list(args))
    return handler


def _round(tx, a, decimals=None):
    arr = as_array(tx, a, "numpy.round")
    d = _const(decimals, "decimals of numpy.round", 0)
    if arr.dtype.kind == "b":
        unsupported("numpy.round of a bool array (NumPy gives float16)")
    if arr.dtype.kind in "iu":
        if d < 0:
            unsupported("numpy.round of integers with negative decimals")
        return _result_like_ufunc(tx, _method(tx, "clone", [arr.tensor]), arr.dtype, arr)
    out = _call(tx, torch.round, [arr.tensor], {"decimals": ConstantValue(d)} if d else {})
    return _result_like_ufunc(tx, out, arr.dtype, arr)


def _result_like_ufunc(tx, tensor, dtype, arr):
    """np.round and np.clip give arrays for arrays and NumPy scalars for scalars (they are not
    ufunc-unwrapped for 0-d arrays)."""
    return NDArrayValue(cast(tx, tensor, dtype), dtype, scalar=arr.scalar, c_order=arr.c_order)


def _clip(tx, a, a_min=None, a_max=None, **kwargs):
    if kwargs:
        unsupported(f"numpy.clip with {sorted(kwargs)}")
    arr = as_array(tx, a, "numpy.clip")
    lo, hi = (None if v is None or v.is_constant() and v.as_constant() is None else v for v in (a_min, a_max))
    if lo is None and hi is None:
        unsupported("numpy.clip without bounds (NumPy raises ValueError)")
    out = arr
    if lo is not None:
        out = call_ufunc(tx, "maximum", [out, lo])
    if hi is not None:
        out = call_ufunc(tx, "minimum", [out, hi])
    if not arr.scalar and out.scalar:
        out = NDArrayValue(out.tensor, out.dtype, c_order=out.c_order)
    return out


def _where(tx, condition, x=None, y=None):
    if x is None or y is None:
        unsupported("numpy.where(condition) gives the indices of nonzero items: their number depends on the data")
    cond = as_array(tx, condition, "numpy.where")
    cond_t = cond.tensor if cond.dtype == BOOL else _call(tx, torch.ne, [cond.tensor, ConstantValue(0)])
    parts = []
    for v in (x, y):
        parts.append((v.as_constant(), v.as_constant()) if is_python_number(v) else (as_array(tx, v, "numpy.where").dtype, None))
    dtype = result_type([p[0] for p in parts])
    args = []
    for v, (_, const) in zip((x, y), parts):
        if const is not None:
            args.append(_call(tx, torch.scalar_tensor, [ConstantValue(const)],
                              {"dtype": ConstantValue(NUMPY_TO_TORCH[dtype])}))
        else:
            args.append(cast(tx, as_array(tx, v, "numpy.where").tensor, dtype))
    return new_array(tx, _call(tx, torch.where, [cond_t, *args]), dtype, c_order=all_c_order(cond, x, y))


# ---- reductions -------------------------------------------------------------------------------------

def _reduce(tx, kind: str, a, axis=None, dtype=None, keepdims=None, ddof=None, **kwargs):
    if kwargs:
        unsupported(f"numpy.{kind} with {sorted(kwargs)} (out=, where=, initial= are not traced)")
    arr = as_array(tx, a, f"numpy.{kind}")
    keep = bool(_const(keepdims, "keepdims", False))
    axes = _axes(_const(axis, "axis"), arr.ndim, f"numpy.{kind}")
    dims = tuple(range(arr.ndim)) if axes is None else axes
    given = as_dtype(_const(dtype, "dtype"), f"numpy.{kind}") if dtype is not None and _const(dtype, "dtype") is not None else None
    if any(arr.shape[d] == 0 for d in dims) and kind in ("max", "min", "argmax", "argmin"):
        unsupported(f"numpy.{kind} of an empty array (NumPy raises ValueError)")
    if kind in ("sum", "prod"):
        out_dtype = given or sum_dtype(arr.dtype)
    elif kind in ("mean", "std", "var"):
        out_dtype = given or mean_dtype(arr.dtype)
    elif kind in ("all", "any"):
        out_dtype = BOOL
    elif kind in ("argmax", "argmin"):
        out_dtype = INT64
    else:
        out_dtype = arr.dtype
    t = arr.tensor
    if arr.ndim == 0 or dims == ():
        if kind in ("argmax", "argmin"):
            out = _call(tx, torch.zeros, [ConstantValue(())], {"dtype": ConstantValue(torch.int64)})
        elif kind in ("std", "var"):
            out = _reduce_tensor(tx, kind, cast(tx, t, out_dtype), None, keep, ddof)
        else:
            out = _method(tx, "clone", [cast(tx, t, out_dtype)])
        return new_array(tx, out, out_dtype, scalar_if_0d=not keep, c_order=True)
    compute = out_dtype if kind in ("sum", "prod", "mean", "std", "var") else arr.dtype
    if kind in ("argmax", "argmin") and compute == BOOL:
        compute = numpy_module().dtype(numpy_module().uint8)  # torch's argmax takes no bool
    out = _reduce_tensor(tx, kind, cast(tx, t, compute), dims if axes is not None else None, keep, ddof,
                         ndim=arr.ndim)
    return new_array(tx, out, out_dtype, scalar_if_0d=True, c_order=arr.c_order)


def _reduce_tensor(tx, kind, t, dims, keep, ddof, ndim=0):
    k = {"keepdim": ConstantValue(keep)}
    all_dims = ConstantValue(tuple(range(ndim))) if dims is None else ConstantValue(dims)
    if kind in ("sum", "mean"):
        return _call(tx, getattr(torch, kind), [t, all_dims], k)
    if kind == "prod":
        if dims is None or len(dims) == ndim:
            out = _call(tx, torch.prod, [t])
            if keep:
                out = _method(tx, "reshape", [out, ConstantValue((1,) * ndim)])
            return out
        if len(dims) != 1:
            unsupported("numpy.prod over several (not all) axes")
        return _call(tx, torch.prod, [t, ConstantValue(dims[0])], k)
    if kind in ("max", "min"):
        return _call(tx, torch.amax if kind == "max" else torch.amin, [t, all_dims], k)
    if kind in ("all", "any"):
        return _call(tx, getattr(torch, kind), [t, all_dims], k)
    if kind in ("std", "var"):
        correction = _const(ddof, "ddof", 0)
        args = [t] if dims is None and ndim == 0 else [t, all_dims]
        return _call(tx, getattr(torch, kind), args, {**k, "correction": ConstantValue(correction)})
    if kind in ("argmax", "argmin"):
        fn = torch.argmax if kind == "argmax" else torch.argmin
        if dims is None:
            out = _call(tx, fn, [t])
            return _method(tx, "reshape", [out, ConstantValue((1,) * ndim)]) if keep else out
        if len(dims) != 1:
            unsupported(f"numpy.{kind} takes one axis")
        return _call(tx, fn, [t, ConstantValue(dims[0])], k)
    raise AssertionError(kind)


def _reduction(kind: str):
    def handler(tx, a, axis=None, *rest, **kwargs):
        if rest:
            if kind in ("sum", "prod", "mean") and len(rest) == 1:
                kwargs["dtype"] = rest[0]
            else:
                unsupported(f"numpy.{kind} with positional arguments after axis")
        if kind in ("argmax", "argmin") and "dtype" in kwargs:
            unsupported(f"numpy.{kind} has no dtype argument")
        return _reduce(tx, kind, a, axis, **kwargs)
    return handler


# ---- linear algebra ---------------------------------------------------------------------------------

def matmul(tx, a, b) -> NDArrayValue:
    x, y = as_array(tx, a, "numpy.matmul"), as_array(tx, b, "numpy.matmul")
    if x.ndim == 0 or y.ndim == 0:
        unsupported("numpy.matmul of a 0-d operand (NumPy raises ValueError)")
    dtype = promote(x.dtype, y.dtype)
    if dtype.kind not in "if" or dtype.itemsize < 4:
        unsupported(f"numpy.matmul of {dtype} arrays (not traced)")
    out = _call(tx, torch.matmul, [cast(tx, x.tensor, dtype), cast(tx, y.tensor, dtype)])
    return new_array(tx, out, dtype, scalar_if_0d=True, c_order=True)


def _dot(tx, a, b):
    x, y = as_array(tx, a, "numpy.dot"), as_array(tx, b, "numpy.dot")
    if x.ndim == 0 or y.ndim == 0:
        return call_ufunc(tx, "multiply", [x, y])
    if x.ndim > 2 or y.ndim > 2:
        unsupported("numpy.dot of arrays with more than 2 dimensions")
    return matmul(tx, x, y)


# ---- shapes and views -------------------------------------------------------------------------------

def transpose(tx, a, axes=None, *more):
    np = numpy_module()
    arr = as_array(tx, a, "numpy.transpose")
    if arr.scalar:
        unsupported("transposing a NumPy scalar (NumPy gives the scalar back)")
    order = _const(axes, "axes")
    if more:
        order = (order,) + tuple(_const(m, "axes") for m in more)
    if order is None:
        order = tuple(reversed(range(arr.ndim)))
    order = tuple(order)
    if sorted(_axes(order, arr.ndim, "numpy.transpose") or ()) != list(range(arr.ndim)) or len(order) != arr.ndim:
        unsupported(f"axes {order} of numpy.transpose")
    order = tuple(o % arr.ndim for o in order)
    t = _method(tx, "permute", [arr.tensor, ConstantValue(order)])
    return view_array(tx, arr, t, np.transpose, (order,))


def reshape(tx, a, *shape, **kwargs):
    np = numpy_module()
    for key in ("order", "copy"):
        if key in kwargs and _const(kwargs.pop(key), key) not in ("C", None):
            unsupported(f"reshape with {key}= other than the default")
    if "newshape" in kwargs or "shape" in kwargs:
        shape = (kwargs.pop("newshape", None) or kwargs.pop("shape"),)
    if kwargs:
        unsupported(f"reshape with {sorted(kwargs)}")
    arr = as_array(tx, a, "numpy.reshape")
    new = _shape_arg(list(shape), "the shape of reshape")
    if not arr.c_order:
        unsupported("reshape of an array not known to be C-contiguous (NumPy copies some such reshapes "
                    "and views others; kiln does not model which)")
    t = _method(tx, "reshape", [arr.tensor, ConstantValue(new)])
    return view_array(tx, arr, t, np.reshape, (new,))


def _ravel(tx, a):
    return reshape(tx, a, ConstantValue(-1))


def _flatten(tx, a):
    arr = as_array(tx, a, "ndarray.flatten")
    flat = _method(tx, "reshape", [arr.tensor, ConstantValue(-1)])
    return NDArrayValue(_method(tx, "clone", [flat]), arr.dtype, c_order=True)


def _expand_dims(tx, a, axis):
    np = numpy_module()
    arr = as_array(tx, a, "numpy.expand_dims")
    ax = _const(axis, "axis")
    axes = ax if isinstance(ax, tuple) else (ax,)
    out_ndim = arr.ndim + len(axes)
    norm = sorted(_axes(tuple(axes), out_ndim, "numpy.expand_dims"))
    t = arr.tensor
    for d in norm:
        t = _method(tx, "unsqueeze", [t, ConstantValue(d)])
    return view_array(tx, arr, t, np.expand_dims, (ax,))


def _squeeze(tx, a, axis=None):
    np = numpy_module()
    arr = as_array(tx, a, "numpy.squeeze")
    ax = _const(axis, "axis")
    dims = _axes(ax, arr.ndim, "numpy.squeeze") if ax is not None else \
        tuple(i for i, s in enumerate(arr.shape) if s == 1)
    if any(arr.shape[d] != 1 for d in dims):
        unsupported("numpy.squeeze of an axis whose size is not 1 (NumPy raises ValueError)")
    t = _method(tx, "squeeze", [arr.tensor, ConstantValue(dims)]) if dims else _method(tx, "view", [arr.tensor, ConstantValue(arr.shape)])
    return view_array(tx, arr, t, np.squeeze, (ax,) if ax is not None else ())


def _broadcast_to(tx, a, shape):
    np = numpy_module()
    arr = as_array(tx, a, "numpy.broadcast_to")
    new = _shape_arg([shape], "shape of numpy.broadcast_to")
    t = _method(tx, "expand", [arr.tensor, ConstantValue(new)])
    return view_array(tx, arr, t, np.broadcast_to, (new,), readonly=True)


def _swapaxes(tx, a, axis1, axis2):
    np = numpy_module()
    arr = as_array(tx, a, "numpy.swapaxes")
    i, j = _axes(_const(axis1, "axis1"), arr.ndim, "swapaxes")[0], _axes(_const(axis2, "axis2"), arr.ndim, "swapaxes")[0]
    t = _method(tx, "transpose", [arr.tensor, ConstantValue(i), ConstantValue(j)])
    return view_array(tx, arr, t, np.swapaxes, (i, j))


def _sequence(v: Value, where: str) -> list[Value]:
    if not isinstance(v, SequenceValue):
        unsupported(f"{where} of {v} (a list or tuple of arrays is traced)")
    return list(v.elements)


def stack_arrays(tx, arrays: list[NDArrayValue], axis: int, where: str) -> NDArrayValue:
    if not arrays:
        unsupported(f"{where} of an empty sequence (NumPy raises ValueError)")
    dtype = result_type([a.dtype for a in arrays])
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        unsupported(f"{where} of arrays of different shapes (NumPy raises ValueError)")
    out = _call(tx, torch.stack, [_tensor_list(tx, arrays, dtype), ConstantValue(axis % (arrays[0].ndim + 1))])
    return new_array(tx, out, dtype, c_order=True)


def _tensor_list(tx, arrays, dtype):
    from kiln.capture.values.containers import ListValue

    return ListValue([cast(tx, a.tensor, dtype) for a in arrays])


def _concatenate(tx, seq, axis=None, **kwargs):
    if kwargs:
        unsupported(f"numpy.concatenate with {sorted(kwargs)}")
    ax = 0 if axis is None else _const(axis, "axis")
    arrays = [as_array(tx, e, "numpy.concatenate") for e in _sequence(seq, "numpy.concatenate")]
    if ax is None:
        arrays = [_flatten(tx, a) for a in arrays]
        ax = 0
    if not arrays or any(a.ndim == 0 for a in arrays):
        unsupported("numpy.concatenate of 0-d arrays or of nothing (NumPy raises ValueError)")
    dtype = result_type([a.dtype for a in arrays])
    _axes(ax, arrays[0].ndim, "numpy.concatenate")
    out = _call(tx, torch.cat, [_tensor_list(tx, arrays, dtype), ConstantValue(ax % arrays[0].ndim)])
    return new_array(tx, out, dtype, c_order=True)


def _stack(tx, seq, axis=None):
    arrays = [as_array(tx, e, "numpy.stack") for e in _sequence(seq, "numpy.stack")]
    return stack_arrays(tx, arrays, _const(axis, "axis", 0), "numpy.stack")


def _vstack(tx, seq):
    arrays = [as_array(tx, e, "numpy.vstack") for e in _sequence(seq, "numpy.vstack")]
    arrays = [_expand_dims(tx, a, ConstantValue(0)) if a.ndim == 1 else a for a in arrays]
    if any(a.ndim == 0 for a in arrays):
        unsupported("numpy.vstack of 0-d arrays")
    return _concatenate(tx, _as_list(arrays), ConstantValue(0))


def _hstack(tx, seq):
    arrays = [as_array(tx, e, "numpy.hstack") for e in _sequence(seq, "numpy.hstack")]
    if any(a.ndim == 0 for a in arrays):
        unsupported("numpy.hstack of 0-d arrays")
    return _concatenate(tx, _as_list(arrays), ConstantValue(0 if arrays and arrays[0].ndim == 1 else 1))


def _as_list(values):
    from kiln.capture.values.containers import ListValue

    return ListValue(list(values))


def _cumulative(kind: str):
    """np.cumsum / np.cumprod: the running sum in sum's dtype (int64 for bool and small ints)."""
    def handler(tx, a, axis=None, dtype=None, **kwargs):
        if kwargs:
            unsupported(f"numpy.{kind} with {sorted(kwargs)}")
        arr = as_array(tx, a, f"numpy.{kind}")
        ax = _const(axis, "axis")
        if ax is None:
            arr, ax = _flatten(tx, arr), 0
        if arr.ndim == 0:
            unsupported(f"numpy.{kind} of a 0-d array with an axis")
        d = _const(dtype, "dtype")
        out_dtype = as_dtype(d, f"numpy.{kind}") if d is not None else sum_dtype(arr.dtype)
        fn = torch.cumsum if kind == "cumsum" else torch.cumprod
        out = _call(tx, fn, [cast(tx, arr.tensor, out_dtype), ConstantValue(_axes(ax, arr.ndim, kind)[0])])
        return new_array(tx, out, out_dtype, c_order=arr.c_order)
    return handler


def _outer(tx, a, b):
    """np.outer: a.ravel()[:, None] * b.ravel()[None, :] (NumPy's own definition)."""
    x, y = _flatten(tx, as_array(tx, a, "numpy.outer")), _flatten(tx, as_array(tx, b, "numpy.outer"))
    col = _expand_dims(tx, x, ConstantValue(1))
    row = _expand_dims(tx, y, ConstantValue(0))
    return call_ufunc(tx, "multiply", [col, row])


def _norm(tx, x, ord=None, axis=None, keepdims=None):
    """np.linalg.norm(x) (no ord/axis): NumPy's sqrt(dot(x, x)) of the flattened array, in float64 for
    ints and bool."""
    if any(v is not None and _const(v, "norm argument") not in (None, False) for v in (ord, axis, keepdims)):
        unsupported("numpy.linalg.norm with ord=, axis= or keepdims=")
    arr = as_array(tx, x, "numpy.linalg.norm")
    if arr.dtype.kind != "f":
        arr = NDArrayValue(cast(tx, arr.tensor, FLOAT64), FLOAT64, c_order=arr.c_order)
    flat = _flatten(tx, arr)
    sq = _call(tx, torch.dot, [flat.tensor, flat.tensor])
    return new_array(tx, _call(tx, torch.sqrt, [sq]), arr.dtype, scalar_if_0d=True)


def _shape_query(kind: str):
    def handler(tx, a):
        arr = as_array(tx, a, f"numpy.{kind}")
        return ConstantValue({"shape": arr.shape, "ndim": arr.ndim, "size": int(arr.tensor.example.numel())}[kind])
    return handler


# ---- sorting ----------------------------------------------------------------------------------------

def _sort_args(tx, a, axis, kind, where):
    arr = as_array(tx, a, where)
    ax = _const(axis, "axis", -1)
    if ax is None:
        arr, ax = _flatten(tx, arr), 0
    if arr.ndim == 0:
        unsupported(f"{where} of a 0-d array")
    if arr.dtype.kind == "b" or arr.dtype.itemsize < 2 and arr.dtype.kind == "u":
        pass
    return arr, _axes(ax, arr.ndim, where)[0], _const(kind, "kind")


def _sort(tx, a, axis=ConstantValue(-1), kind=None):
    arr, ax, _ = _sort_args(tx, a, axis, kind, "numpy.sort")
    out = _call(tx, torch.sort, [arr.tensor], {"dim": ConstantValue(ax), "stable": ConstantValue(True)})
    return NDArrayValue(out.elements[0], arr.dtype, c_order=arr.c_order)


def _argsort(tx, a, axis=ConstantValue(-1), kind=None):
    arr, ax, k = _sort_args(tx, a, axis, kind, "numpy.argsort")
    if k not in ("stable", "mergesort"):
        unsupported("numpy.argsort without kind='stable': the order of equal items is NumPy's own",
                    hint="pass kind='stable' to keep one graph")
    out = _call(tx, torch.argsort, [arr.tensor], {"dim": ConstantValue(ax), "stable": ConstantValue(True)})
    return new_array(tx, out, INT64, c_order=arr.c_order)


def _sort_in_place(tx, a, axis=ConstantValue(-1), kind=None):
    sorted_ = _sort(tx, a, axis, kind)
    from kiln.capture.values.numpy_values import write_in_place

    write_in_place(tx, a, sorted_)
    return ConstantValue(None)


# ---- comparisons of closeness -----------------------------------------------------------------------

def _isclose(tx, a, b, rtol=None, atol=None, equal_nan=None):
    """NumPy's own formula, in NumPy's ufuncs: |a - b| <= atol + rtol * |b|, or a == b (infinities)."""
    rt = _const(rtol, "rtol", 1e-05)
    at = _const(atol, "atol", 1e-08)
    if _const(equal_nan, "equal_nan", False):
        unsupported("numpy.isclose with equal_nan=True")
    x, y = (v if is_python_number(v) else as_array(tx, v, "numpy.isclose") for v in (a, b))
    if is_python_number(x) and is_python_number(y):
        unsupported("numpy.isclose of two Python scalars")
    ax, ay = (v if is_python_number(v) else v for v in (x, y))
    diff = call_ufunc(tx, "absolute", [call_ufunc(tx, "subtract", [ax, ay])])
    bound = call_ufunc(tx, "add", [ConstantValue(at), call_ufunc(tx, "multiply",
                                                               [ConstantValue(rt), call_ufunc(tx, "absolute", [ay])])])
    close = call_ufunc(tx, "less_equal", [diff, bound])
    finite = _isfinite(tx, ay)
    same = call_ufunc(tx, "equal", [ax, ay])
    return call_ufunc(tx, "logical_or", [call_ufunc(tx, "logical_and", [close, finite]), same])


def _isfinite(tx, v):
    arr = v if isinstance(v, NDArrayValue) else as_array(tx, v, "numpy.isfinite")
    return new_array(tx, _call(tx, torch.isfinite, [arr.tensor]), BOOL, scalar_if_0d=True, c_order=arr.c_order)


def _isnan(tx, v):
    arr = as_array(tx, v, "numpy.isnan")
    return new_array(tx, _call(tx, torch.isnan, [arr.tensor]), BOOL, scalar_if_0d=True, c_order=arr.c_order)


def _allclose(tx, *args, **kwargs):
    unsupported("numpy.allclose returns a Python bool computed from the data",
                hint="kiln breaks the graph here; np.isclose(...) keeps the comparison in the graph")


# ---- making arrays ----------------------------------------------------------------------------------

def _factory(fill):
    def handler(tx, shape, dtype=None, **kwargs):
        if kwargs:
            unsupported(f"numpy factory with {sorted(kwargs)}")
        size = _shape_arg([shape], "shape")
        d = as_dtype(_const(dtype, "dtype"), "a NumPy factory") if dtype is not None and _const(dtype, "dtype") is not None else FLOAT64
        fn = {0: torch.zeros, 1: torch.ones, None: torch.empty}[fill]
        return NDArrayValue(_call(tx, fn, [ConstantValue(size)], {"dtype": ConstantValue(NUMPY_TO_TORCH[d])}), d,
                            c_order=True)
    return handler


def _full(tx, shape, fill_value, dtype=None):
    size = _shape_arg([shape], "shape")
    if not is_python_number(fill_value):
        unsupported("numpy.full with a fill value that is not a Python number")
    value = fill_value.as_constant()
    from kiln.capture.values.numpy_promotion import dtype_of_python_value

    d = as_dtype(_const(dtype, "dtype"), "numpy.full") if dtype is not None and _const(dtype, "dtype") is not None \
        else dtype_of_python_value(value)
    np = numpy_module()
    try:
        value = np.array(value, dtype=d).item()
    except Exception as exc:
        unsupported(f"numpy.full({value!r}, dtype={d}) raised {type(exc).__name__}")
    return NDArrayValue(_call(tx, torch.full, [ConstantValue(size), ConstantValue(value)],
                              {"dtype": ConstantValue(NUMPY_TO_TORCH[d])}), d, c_order=True)


def _full_like(tx, a, fill_value, dtype=None):
    arr = as_array(tx, a, "numpy.full_like")
    d = dtype if dtype is not None and _const(dtype, "dtype") is not None else ConstantValue(arr.dtype)
    out = _full(tx, ConstantValue(arr.shape), fill_value, d)
    out.c_order = arr.c_order and out.c_order
    return out


def _like(fill):
    def handler(tx, a, dtype=None, **kwargs):
        if kwargs:
            unsupported(f"numpy *_like with {sorted(kwargs)}")
        arr = as_array(tx, a, "numpy *_like")
        d = as_dtype(_const(dtype, "dtype"), "numpy *_like") if dtype is not None and _const(dtype, "dtype") is not None else arr.dtype
        fn = {0: torch.zeros, 1: torch.ones, None: torch.empty}[fill]
        return NDArrayValue(_call(tx, fn, [ConstantValue(arr.shape)], {"dtype": ConstantValue(NUMPY_TO_TORCH[d])}), d,
                            c_order=arr.c_order)
    return handler


def _arange(tx, *args, dtype=None):
    np = numpy_module()
    values = [_const(a, "arguments of numpy.arange") for a in args]
    d = _const(dtype, "dtype")
    try:
        expected = np.arange(*values, dtype=d)
    except Exception as exc:
        unsupported(f"numpy.arange{tuple(values)} raised {type(exc).__name__}: {exc}")
    from kiln.capture.values.numpy_promotion import check_dtype

    check_dtype(expected.dtype, "numpy.arange")
    if expected.dtype.kind == "f" and len(expected) > 0:
        # float ranges: NumPy's start + i * step
        start = float(values[0]) if len(values) > 1 else 0.0
        step = float(values[2]) if len(values) > 2 else 1.0
        idx = _call(tx, torch.arange, [ConstantValue(len(expected))], {"dtype": ConstantValue(torch.float64)})
        out = _call(tx, torch.add, [_call(tx, torch.mul, [idx, ConstantValue(step)]), ConstantValue(start)])
        return new_array(tx, out, expected.dtype)
    if len(expected) == 0:
        out = _call(tx, torch.empty, [ConstantValue((0,))], {"dtype": ConstantValue(NUMPY_TO_TORCH[expected.dtype])})
        return NDArrayValue(out, expected.dtype)
    start, step = int(expected[0]), (int(expected[1]) - int(expected[0]) if len(expected) > 1 else 1)
    out = _call(tx, torch.arange, [ConstantValue(start), ConstantValue(start + step * len(expected)), ConstantValue(step)],
                {"dtype": ConstantValue(NUMPY_TO_TORCH[expected.dtype])})
    return NDArrayValue(out, expected.dtype)


def _linspace(tx, start, stop, num=None, endpoint=None, dtype=None):
    n = _const(num, "num", 50)
    if not _const(endpoint, "endpoint", True):
        unsupported("numpy.linspace with endpoint=False")
    d = as_dtype(_const(dtype, "dtype"), "numpy.linspace") if dtype is not None and _const(dtype, "dtype") is not None else FLOAT64
    if d.kind != "f":
        unsupported("numpy.linspace with an integer dtype")
    lo, hi = _const(start, "start"), _const(stop, "stop")
    out = _call(tx, torch.linspace, [ConstantValue(float(lo)), ConstantValue(float(hi)), ConstantValue(n)],
                {"dtype": ConstantValue(torch.float64)})
    return new_array(tx, out, d)


def _eye(tx, N, M=None, k=None, dtype=None):
    if _const(k, "k", 0) != 0:
        unsupported("numpy.eye with k != 0")
    d = as_dtype(_const(dtype, "dtype"), "numpy.eye") if dtype is not None and _const(dtype, "dtype") is not None else FLOAT64
    n = _const(N, "N")
    m = _const(M, "M", None)
    args = [ConstantValue(n)] + ([ConstantValue(m)] if m is not None else [])
    return NDArrayValue(_call(tx, torch.eye, args, {"dtype": ConstantValue(NUMPY_TO_TORCH[d])}), d, c_order=True)


def _tensor_as_array(tx, obj):
    """np.asarray(t) / np.array(t) of a tensor: Tensor.__array__ is t.numpy() (shares its memory)."""
    from kiln.capture.values.numpy_values import tensor_as_ndarray

    return tensor_as_ndarray(tx, obj, [], {}) if isinstance(obj, TensorValue) else obj


def _array(tx, obj, dtype=None, copy=None, **kwargs):
    if kwargs:
        unsupported(f"numpy.array with {sorted(kwargs)}")
    obj = _tensor_as_array(tx, obj)
    if copy is not None and _const(copy, "copy") is None:
        return _asarray(tx, obj, dtype)
    if copy is not None and _const(copy, "copy") is not True:
        unsupported("numpy.array(..., copy=False) (NumPy 2 raises where a copy is needed)")
    arr = as_array(tx, obj, "numpy.array")
    d = as_dtype(_const(dtype, "dtype"), "numpy.array") if dtype is not None and _const(dtype, "dtype") is not None else arr.dtype
    if arr.view_of is None and arr.source is None and not isinstance(obj, NDArrayValue):
        return new_array(tx, arr.tensor, d, c_order=arr.c_order)  # a fresh constant or stack
    return NDArrayValue(_method(tx, "clone", [cast(tx, arr.tensor, d)]), d, c_order=arr.c_order)


def _asarray(tx, obj, dtype=None, **kwargs):
    if kwargs:
        unsupported(f"numpy.asarray with {sorted(kwargs)}")
    obj = _tensor_as_array(tx, obj)
    arr = as_array(tx, obj, "numpy.asarray")
    d = as_dtype(_const(dtype, "dtype"), "numpy.asarray") if dtype is not None and _const(dtype, "dtype") is not None else arr.dtype
    if isinstance(obj, NDArrayValue) and d == arr.dtype:
        if arr.scalar:
            return NDArrayValue(_method(tx, "clone", [arr.tensor]), d)  # np.asarray(np.float64(1)) is a 0-d array
        return arr  # the very same array
    if not isinstance(obj, NDArrayValue):
        return new_array(tx, arr.tensor, d, c_order=arr.c_order)
    return NDArrayValue(_method(tx, "clone", [cast(tx, arr.tensor, d)]), d, c_order=arr.c_order)


def _copy_fn(tx, a, **kwargs):
    """np.copy(x): a new array (a 0-d array for a NumPy scalar)."""
    if kwargs:
        unsupported(f"numpy.copy with {sorted(kwargs)}")
    arr = as_array(tx, a, "numpy.copy")
    return NDArrayValue(_method(tx, "clone", [arr.tensor]), arr.dtype, c_order=arr.c_order)


def _copy_method(tx, a, **kwargs):
    """x.copy(): a new array, or the same NumPy scalar type for a scalar."""
    if kwargs:
        unsupported(f"ndarray.copy with {sorted(kwargs)}")
    return NDArrayValue(_method(tx, "clone", [a.tensor]), a.dtype, scalar=a.scalar, c_order=a.c_order)


def _astype(tx, a, dtype, copy=None, **kwargs):
    if kwargs:
        unsupported(f"ndarray.astype with {sorted(kwargs)} (casting= is not traced)")
    d = as_dtype(_const(dtype, "dtype"), "ndarray.astype")
    if copy is not None and _const(copy, "copy") is False and d == a.dtype:
        return a
    t = _method(tx, "to", [a.tensor, ConstantValue(NUMPY_TO_TORCH[d])])
    if d == a.dtype:
        t = _method(tx, "clone", [a.tensor])
    return NDArrayValue(t, d, scalar=a.scalar, c_order=a.c_order)


def _fill(tx, a, value):
    from kiln.capture.values.numpy_indexing import array_setitem

    array_setitem(tx, a, ConstantValue(Ellipsis), value)
    return ConstantValue(None)


def _setitem_method(tx, a, index, value):
    from kiln.capture.values.numpy_indexing import array_setitem

    array_setitem(tx, a, index, value)
    return ConstantValue(None)


def _len_method(tx, a):
    if a.ndim == 0:
        unsupported("len() of a 0-d array (NumPy raises TypeError)")
    return ConstantValue(a.shape[0])


def _needs_data(name):
    def handler(tx, *args, **kwargs):
        unsupported(f"numpy.ndarray.{name}() needs the array's data",
                    hint="kiln breaks the graph here and runs it as Python")
    return handler


def _random(tx, *args, **kwargs):
    unsupported("numpy.random inside a compiled function: NumPy's generator is not torch's",
                hint="kiln breaks the graph here; the call runs as Python")
