"""Symbolic values: one kind per Python kind the interpreter understands.

Every value (a `Value`) knows how to be read from (`getattr`), called (`call`), iterated, tested for
truth and, when it ends up in the frame's result, rebuilt by the transformed code (`reconstruct`).
Real objects enter through `builder.wrap(tx, value, source)`, which also records the guards.
"""
from kiln.capture.values.base import NULL, Value, ConstantValue, unsupported

__all__ = ["NULL", "Value", "ConstantValue", "unsupported"]
