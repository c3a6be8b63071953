"""Stack manipulation and no-ops."""
from __future__ import annotations

from kiln.capture.opcodes.registry import handles
from kiln.capture.values.base import NULL


@handles("NOP", "RESUME", "PRECALL", "CACHE", "EXTENDED_ARG", "COPY_FREE_VARS")
def NOP(tx, inst):
    pass


@handles()
def POP_TOP(tx, inst):
    tx.pop()


@handles()
def PUSH_NULL(tx, inst):
    tx.push(NULL)


@handles()
def COPY(tx, inst):
    tx.push(tx.stack[-inst.arg])


@handles()
def SWAP(tx, inst):
    i = inst.arg
    tx.stack[-1], tx.stack[-i] = tx.stack[-i], tx.stack[-1]


@handles()
def END_FOR(tx, inst):  # 3.12: pops the exhausted iterator and its last value
    tx.popn(2)
