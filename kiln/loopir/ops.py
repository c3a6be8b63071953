"""The closed set of scalar ops a loop body may call, and the handler protocol.

A loop body is a plain Python function ``body(ops, index)`` (pointwise) or ``body(ops, index, rindex)``
(reduction input) whose only way to compute is to call methods of the ``ops`` handler it is given.
The handler decides what a call means: the C++ and Triton generators emit code, ``ReadsWrites``
records memory accesses, ``Printer`` writes a readable listing, ``Evaluator`` computes with torch.
Handlers are always passed explicitly; there is no global "current handler".

Values flowing through a body are whatever the handler returns; every handler's values know their
dtype (``value.dtype``), so rules such as "comparisons return bool" live here once.
"""
from __future__ import annotations

import torch

# name -> number of value operands. Math ops take operands of one dtype (the lowering casts first)
# and return that dtype, except the ops in BOOL_RESULT.
UNARY = (
    "neg abs exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal sin cos tan asin acos atan "
    "sinh cosh tanh asinh acosh atanh sigmoid erf erfc erfinv lgamma floor ceil trunc round frac "
    "sign signbit bitwise_not logical_not isnan isinf isfinite relu square"
).split()
BINARY = (
    "add sub mul truediv floordiv truncdiv mod fmod pow maximum minimum fmax fmin atan2 hypot "
    "copysign nextafter bitwise_and bitwise_or bitwise_xor lshift rshift "
    "eq ne lt le gt ge logical_and logical_or logical_xor"
).split()
BOOL_RESULT = frozenset(
    "eq ne lt le gt ge logical_and logical_or logical_xor logical_not isnan isinf isfinite signbit".split()
)
REDUCTION_TYPES = ("sum", "prod", "max", "min", "argmax", "argmin", "any", "all")

# The non-math entry points every handler provides:
#   load(name, index)                    value of buffer ``name`` at linear offset ``index`` (sympy)
#   store(name, index, value)            write ``value`` (already of the buffer's dtype)
#   constant(value, dtype)               a Python scalar as a value of ``dtype``
#   index_expr(expr, dtype)              a sympy expression over loop variables as a value
#   to_dtype(x, dtype)                   conversion with C/ATen semantics
#   where(cond, a, b)                    select
#   reduction(kind, value, dtype)        the running reduction of ``value`` over the reduction loop;
#                                        returns the reduced value (argmax/argmin: an int64 index)
#   store_reduction(name, index, value)  write a reduced value
#   scan(kind, value, dim)               the running scan of ``value`` along loop-IR dim ``dim`` of a Scan
#                                        node (loopir/scan.py says the kinds and their exact semantics)
#   masked(mask, body, other)            ``body()`` where the bool value ``mask`` is true, else the Python
#                                        scalar ``other`` (as ``body()``'s dtype). ``body`` is a function
#                                        of no arguments that calls ops on this same handler; its loads
#                                        and indirect indices may be out of bounds where ``mask`` is
#                                        false, so a handler must not perform them there (C++: a lambda
#                                        called under ``mask ? body() : other``; Triton: every load inside
#                                        ``body`` gets ``mask=`` and the result is
#                                        ``tl.where(mask, value, other)``; Evaluator: loads clamp masked-off
#                                        indices to 0). Masks nest: an inner body runs where both hold.
#                                        ``body`` never contains a reduction.
#   indirect_indexing(value, size, wrap_negative=True)
#                                        an integer *value* (read from an index tensor) as a sympy symbol
#                                        usable in the index of later ``load``s of the same body. A
#                                        negative value counts from the end (``+ size``) when
#                                        ``wrap_negative``; a result outside ``[0, size)`` is the user's
#                                        error: the handler raises it (the Evaluator raises IndexError;
#                                        C++ sets the library's error flag, which the wrapper turns into
#                                        IndexError, and reads element 0 instead of out of bounds).
#                                        Under ``masked`` the check applies only where the mask holds.
#   scatter_store(name, index, value, mode)
#                                        combine ``value`` into buffer ``name`` at ``index`` (which may hold
#                                        indirect symbols): mode ``store`` overwrites, ``add mul max min``
#                                        read-modify-write (atomic on GPU); only ``ScatterBuffer`` bodies
#                                        (kiln/loopir/scatter.py) call it. The buffer is also read.
SPECIAL = ("load", "store", "constant", "index_expr", "to_dtype", "where", "reduction", "store_reduction",
           "masked", "indirect_indexing", "scatter_store", "scan")

ALL_OPS = frozenset(UNARY) | frozenset(BINARY) | frozenset(SPECIAL)


def result_dtype(op: str, *operand_dtypes: torch.dtype) -> torch.dtype:
    """The dtype of ``op``'s result given its operands' dtypes (math ops only)."""
    if op in BOOL_RESULT:
        return torch.bool
    return operand_dtypes[0]


def reduction_identity(kind: str, dtype: torch.dtype):
    """The starting value of a reduction of ``kind`` over values of ``dtype``."""
    if kind == "sum" or kind == "any":
        return False if dtype == torch.bool else 0
    if kind == "prod" or kind == "all":
        return True if dtype == torch.bool else 1
    if kind in ("max", "argmax"):
        if dtype.is_floating_point:
            return float("-inf")
        return False if dtype == torch.bool else torch.iinfo(dtype).min
    if kind in ("min", "argmin"):
        if dtype.is_floating_point:
            return float("inf")
        return True if dtype == torch.bool else torch.iinfo(dtype).max
    raise ValueError(f"unknown reduction {kind!r}")


class OpsHandler:
    """Base of handlers: an op a subclass does not implement fails loudly, naming itself.

    Subclasses implement ``unary(op, x)`` and ``binary(op, a, b)`` once for all math ops, or override
    single ops by name.
    """

    def unary(self, op: str, x):
        raise NotImplementedError(f"{type(self).__name__} has no rule for ops.{op}")

    def binary(self, op: str, a, b):
        raise NotImplementedError(f"{type(self).__name__} has no rule for ops.{op}")

    def __getattr__(self, name: str):
        if name in UNARY:
            return lambda x: self.unary(name, x)
        if name in BINARY:
            return lambda a, b: self.binary(name, a, b)
        raise AttributeError(f"ops.{name} is not a loop-IR op; the ops are listed in kiln/loopir/ops.py")
