"""Operators: BINARY_OP, comparisons, unary ops, `is`, `in`, subscripts."""
from __future__ import annotations

import operator

from kiln.capture.opcodes.registry import handles
from kiln.capture.values.base import BINARY_OPERATORS, COMPARE_OPERATORS, ConstantValue, unsupported
from kiln.capture.values.ops import binary_op, compare_op, contains_op, getitem, is_op, setitem, unary_op
from kiln.capture.values.containers import SliceValue

_NB_OPS = ["+", "&", "//", "<<", "@", "*", "%", "|", "**", ">>", "-", "/", "^",
           "+=", "&=", "//=", "<<=", "@=", "*=", "%=", "|=", "**=", ">>=", "-=", "/=", "^="]


@handles()
def BINARY_OP(tx, inst):
    b = tx.pop()
    a = tx.pop()
    tx.push(binary_op(tx, BINARY_OPERATORS[_NB_OPS[inst.arg]], a, b))


@handles()
def COMPARE_OP(tx, inst):
    b = tx.pop()
    a = tx.pop()
    op = inst.argval
    if op not in COMPARE_OPERATORS:
        unsupported(f"comparison {op}")
    tx.push(compare_op(tx, COMPARE_OPERATORS[op], a, b))


@handles()
def IS_OP(tx, inst):
    b = tx.pop()
    a = tx.pop()
    result = is_op(tx, a, b)
    tx.push(ConstantValue(result != bool(inst.arg)))


@handles()
def CONTAINS_OP(tx, inst):
    container = tx.pop()
    item = tx.pop()
    result = contains_op(tx, item, container)
    tx.push(ConstantValue(result != bool(inst.arg)))


@handles()
def UNARY_NEGATIVE(tx, inst):
    tx.push(unary_op(tx, operator.neg, tx.pop()))


@handles()
def UNARY_POSITIVE(tx, inst):
    tx.push(unary_op(tx, operator.pos, tx.pop()))


@handles()
def UNARY_INVERT(tx, inst):
    tx.push(unary_op(tx, operator.invert, tx.pop()))


@handles()
def UNARY_NOT(tx, inst):
    tx.push(ConstantValue(not tx.truth(tx.pop())))


@handles()
def BINARY_SUBSCR(tx, inst):
    index = tx.pop()
    obj = tx.pop()
    from kiln.capture.values.modules import NNModuleValue

    if isinstance(obj, NNModuleValue):
        tx.push(obj.getitem(tx, index))
        return
    tx.push(getitem(tx, obj, index))


@handles()
def BINARY_SLICE(tx, inst):  # 3.12
    stop = tx.pop()
    start = tx.pop()
    obj = tx.pop()
    tx.push(getitem(tx, obj, SliceValue(start, stop, ConstantValue(None))))


@handles()
def STORE_SUBSCR(tx, inst):
    index = tx.pop()
    obj = tx.pop()
    value = tx.pop()
    setitem(tx, obj, index, value)


@handles()
def STORE_SLICE(tx, inst):  # 3.12
    stop = tx.pop()
    start = tx.pop()
    obj = tx.pop()
    value = tx.pop()
    setitem(tx, obj, SliceValue(start, stop, ConstantValue(None)), value)


@handles()
def DELETE_SUBSCR(tx, inst):
    index = tx.pop()
    obj = tx.pop()
    if hasattr(obj, "delitem"):
        obj.delitem(tx, index)
        return
    from kiln.capture.values.ops import is_python_object

    if is_python_object(obj):  # the class's Python __delitem__ (looked up on the type, as the slot is)
        from kiln.capture.values.exceptions import raise_traced
        from kiln.capture.values.objects import class_attribute, python_slot

        cls = obj.python_type()
        if python_slot(cls, "__delitem__") is not None:
            class_attribute(tx, cls, "__delitem__", obj).call(tx, [index], {})
            return
        if not hasattr(cls, "__delitem__"):
            raise_traced(TypeError, f"'{cls.__name__}' object does not support item deletion")
    unsupported(f"del on {obj}")
