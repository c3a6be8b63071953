"""NumPy's dtype rules, as kiln models them (NumPy 2, NEP 50), for the dtypes kiln traces.

Supported dtypes: bool, int8, int16, int32, int64, uint8, float16, float32, float64 (each has a torch
dtype with the same values). Anything else (uint16/32/64, complex, datetime, strings, objects) is
refused where it appears, so every rule below is total over what it is given.

Operands of an operation are *strong* (arrays and NumPy scalars: their dtype counts) or *weak*
(Python bool/int/float: NEP 50, they take the kind of the strong operands where it is at least theirs):

- strong with strong: `promote` (the table of `np.promote_types` for these dtypes);
- a Python int with integer arrays keeps the array's dtype (an int that does not fit breaks: NumPy
  raises OverflowError); with bool arrays it gives int64;
- a Python float with integer or bool arrays gives float64, with float arrays their dtype;
- a Python bool never changes the result; Python complex breaks.

Per-ufunc rules (`ufunc_dtype`) then say what the loop NumPy picks computes in (true_divide of ints is
float64, sqrt of int8 is float16, ...). `tests/capture/test_numpy_promotion.py` checks every rule
against the installed NumPy, pair by pair.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from kiln.capture.values.base import unsupported

NUMPY_TO_TORCH = {
    np.dtype(np.bool_): torch.bool, np.dtype(np.int8): torch.int8, np.dtype(np.int16): torch.int16,
    np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64, np.dtype(np.uint8): torch.uint8,
    np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
}
TORCH_TO_NUMPY = {t: n for n, t in NUMPY_TO_TORCH.items()}
SUPPORTED = tuple(NUMPY_TO_TORCH)

BOOL = np.dtype(np.bool_)
INT64 = np.dtype(np.int64)
FLOAT16 = np.dtype(np.float16)
FLOAT64 = np.dtype(np.float64)

_SIGNED = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64)]
_FLOATS = [np.dtype(t) for t in (np.float16, np.float32, np.float64)]


def numpy_major() -> int:
    return int(np.__version__.split(".")[0])


def check_dtype(dtype: np.dtype, where: str) -> np.dtype:
    """`dtype` if kiln models it, else a graph break naming it."""
    if dtype not in NUMPY_TO_TORCH:
        unsupported(f"NumPy dtype {dtype} in {where}",
                    hint="kiln traces bool, int8-64, uint8 and float16-64 arrays; this runs as Python")
    return dtype


def as_dtype(spec: Any, where: str) -> np.dtype:
    """np.dtype(spec) for a dtype argument (np.float32, 'float32', float, np.dtype(...))."""
    try:
        dtype = np.dtype(spec)
    except TypeError as exc:
        unsupported(f"dtype argument {spec!r} of {where}: {exc}")
    return check_dtype(dtype, where)


def _float_for_int(dtype: np.dtype) -> np.dtype:
    """The smallest float that holds every value of an integer (or bool) dtype."""
    if dtype.kind == "b" or dtype.itemsize == 1:
        return _FLOATS[0]
    return _FLOATS[1] if dtype.itemsize == 2 else _FLOATS[2]


def promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """np.promote_types(a, b) for the supported dtypes."""
    if a == b:
        return a
    if a.kind == "b":
        return b
    if b.kind == "b":
        return a
    if a.kind == "f" and b.kind == "f":
        return a if a.itemsize >= b.itemsize else b
    if a.kind == "f" or b.kind == "f":
        f, i = (a, b) if a.kind == "f" else (b, a)
        wide = _float_for_int(i)
        return f if f.itemsize >= wide.itemsize else wide
    if a.kind == b.kind:  # both signed (uint8 is the only unsigned dtype)
        return a if a.itemsize >= b.itemsize else b
    s, _ = (a, b) if a.kind == "i" else (b, a)
    return s if s.itemsize > 1 else _SIGNED[1]  # uint8 with int8 needs int16


def result_type(operands: list) -> np.dtype:
    """The common dtype of `operands`: np.dtype (strong) or a Python bool/int/float value (weak)."""
    strong = [o for o in operands if isinstance(o, np.dtype)]
    weak = [o for o in operands if not isinstance(o, np.dtype)]
    if not strong:  # Python scalars only: their default dtypes (np.where(c, 1, 2.5) is float64)
        strong = [dtype_of_python_value(max(weak, key=lambda w: (bool, int, float).index(type(w))
                                            if type(w) in (bool, int, float) else 3))]
    out = strong[0]
    for d in strong[1:]:
        out = promote(out, d)
    for w in weak:
        out = _with_weak(out, w)
    return out


def _with_weak(dtype: np.dtype, value: Any) -> np.dtype:
    if type(value) is bool:
        return dtype
    if type(value) is int:
        if dtype.kind == "b":
            return INT64
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            if not info.min <= value <= info.max:
                unsupported(f"Python integer {value} out of bounds for {dtype} (NumPy raises OverflowError)")
        return dtype
    if type(value) is float:
        return dtype if dtype.kind == "f" else FLOAT64
    unsupported(f"a Python {type(value).__name__} operand of a NumPy operation")


# how each ufunc's loops treat the promoted input dtype
FLOAT_LOOPS = "float"         # only float loops: bool/ints go to the smallest float holding them
SAME = "same"                 # a loop for every supported dtype, bool included
NO_BOOL = "no_bool"           # no bool loop and bool does not cast to one: TypeError
BOOL_AS_INT8 = "bool_as_int8"  # no bool loop: bool inputs run the int8 loop
TRUE_DIVIDE = "true_divide"   # ints and bool divide in float64
COMPARE = "compare"           # any inputs, bool result
INTEGER = "integer"           # bool and integer loops only: floats raise TypeError

UFUNC_RULES = {
    "add": SAME, "multiply": SAME, "maximum": SAME, "minimum": SAME, "absolute": SAME, "floor": SAME,
    "ceil": SAME, "logical_and": COMPARE, "logical_or": COMPARE, "logical_xor": COMPARE,
    "subtract": NO_BOOL, "negative": NO_BOOL, "positive": NO_BOOL, "sign": NO_BOOL,
    "floor_divide": BOOL_AS_INT8, "square": BOOL_AS_INT8, "power": BOOL_AS_INT8, "remainder": BOOL_AS_INT8,
    "true_divide": TRUE_DIVIDE,
    "sqrt": FLOAT_LOOPS, "exp": FLOAT_LOOPS, "log": FLOAT_LOOPS, "sin": FLOAT_LOOPS, "cos": FLOAT_LOOPS,
    "tanh": FLOAT_LOOPS, "rint": FLOAT_LOOPS, "tan": FLOAT_LOOPS, "arctan": FLOAT_LOOPS, "log1p": FLOAT_LOOPS,
    "expm1": FLOAT_LOOPS, "log2": FLOAT_LOOPS, "log10": FLOAT_LOOPS, "exp2": FLOAT_LOOPS,
    "bitwise_and": INTEGER, "bitwise_or": INTEGER, "bitwise_xor": INTEGER, "invert": INTEGER,
    "equal": COMPARE, "not_equal": COMPARE, "less": COMPARE, "less_equal": COMPARE, "greater": COMPARE,
    "greater_equal": COMPARE,
}


def ufunc_dtypes(name: str, promoted: np.dtype) -> tuple[np.dtype, np.dtype]:
    """(dtype the inputs are computed in, dtype of the result) of ufunc `name` on inputs promoted to
    `promoted`."""
    rule = UFUNC_RULES[name]
    if rule == SAME:
        return promoted, promoted
    if rule == COMPARE:
        return promoted, BOOL
    if rule == INTEGER:
        if promoted.kind == "f":
            unsupported(f"numpy.{name} of float arrays (NumPy raises TypeError)")
        return promoted, promoted
    if rule == NO_BOOL:
        if promoted.kind == "b":
            unsupported(f"numpy.{name} of bool arrays (NumPy raises TypeError)")
        return promoted, promoted
    if rule == BOOL_AS_INT8:
        d = _SIGNED[0] if promoted.kind == "b" else promoted
        return d, d
    if rule == TRUE_DIVIDE:
        d = promoted if promoted.kind == "f" else FLOAT64
        return d, d
    d = promoted if promoted.kind == "f" else _float_for_int(promoted)
    return d, d


def can_cast_same_kind(src: np.dtype, dst: np.dtype) -> bool:
    """np.can_cast(src, dst, 'same_kind') (in-place operators write their result with this rule)."""
    order = {"b": 0, "u": 1, "i": 1, "f": 2}
    if order[src.kind] < order[dst.kind]:
        return True
    if order[src.kind] > order[dst.kind]:
        return False
    return not (src.kind == "i" and dst.kind == "u")  # signed to unsigned is not "same kind"


def sum_dtype(dtype: np.dtype) -> np.dtype:
    """The result dtype of sum/prod without dtype=: bool and small ints add up in int64."""
    if dtype.kind in "bi":
        return INT64
    if dtype.kind == "u":
        unsupported(f"sum/prod of {dtype} arrays (NumPy adds them up in uint64, which kiln does not trace)")
    return dtype


def mean_dtype(dtype: np.dtype) -> np.dtype:
    """The result dtype of mean/std/var without dtype=: ints and bool give float64."""
    return dtype if dtype.kind == "f" else FLOAT64


def dtype_of_python_value(value: Any) -> np.dtype:
    """The dtype np.asarray gives a Python scalar (np.array(3) is int64, np.array(2.5) float64)."""
    if type(value) is bool:
        return BOOL
    if type(value) is int:
        return INT64
    if type(value) is float:
        return FLOAT64
    unsupported(f"a NumPy array of Python {type(value).__name__}")
