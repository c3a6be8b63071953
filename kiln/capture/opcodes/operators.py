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
    unsupported(f"del on {obj}")
