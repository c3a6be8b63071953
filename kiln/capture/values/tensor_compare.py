"""`element == item` for PyObject_RichCompareBool when a tensor is on either side (`x in [a, b]`,
`lst.index(x)`, `lst.count(x)`, `lst.remove(x)`).

CPython compares identity first; only non-identical pairs reach `==`, which for a tensor gives a tensor
whose truth value is taken: a tensor of more (or fewer) than one element raises eager's RuntimeError, a
one-element tensor's truth depends on its data (a graph break). Identity of tensors is known while
tracing (one tensor object is one fake tensor; a tensor the graph makes is a new object; a tensor passed
in and one a module holds are guarded as they are now, `ops.check_tensor_identity_guarded`).
"""
from __future__ import annotations

import operator

import torch

from kiln.capture.values.base import Value, unsupported
from kiln.capture.values.tensors import TensorValue


def _bool_error(numel: int) -> str:
    """The message eager's bool() of a tensor with `numel` (not 1) elements raises (torch's own text)."""
    try:
        bool(torch.zeros(numel))
    except RuntimeError as exc:
        return str(exc)
    raise AssertionError(f"bool() of a tensor of {numel} elements did not raise")


_MESSAGES: dict[bool, str] = {}


def tensor_truth(tx, t: TensorValue, what: str) -> bool:
    """bool(t) where eager knows the answer without the data: more than one element or none raises
    eager's RuntimeError (a traced exception: an `except` in the traced code catches it); one element
    breaks the graph."""
    from kiln.capture.values.exceptions import raise_traced

    numel = t.example.numel()
    if isinstance(numel, int) and numel != 1:
        empty = numel == 0
        if empty not in _MESSAGES:
            _MESSAGES[empty] = _bool_error(0 if empty else 2)
        raise_traced(RuntimeError, _MESSAGES[empty])
    unsupported(f"{what}: the truth value of a one-element tensor depends on its data",
                hint="compare with `is`, or use torch.equal / torch.where")


def tensor_equal_bool(tx, a: Value, b: Value) -> bool:
    """PyObject_RichCompareBool(a, b, Py_EQ) where a or b is a tensor: identity, then bool(a == b)."""
    from kiln.capture.values.ops import binary_op, is_op

    if a is b or isinstance(a, TensorValue) and isinstance(b, TensorValue) and is_op(tx, a, b):
        return True
    result = binary_op(tx, operator.eq, a, b)
    if isinstance(result, TensorValue):
        return tensor_truth(tx, result, "`==` of tensors inside `in`, index, count or remove")
    return tx.truth(result)
