"""Stack manipulation and no-ops."""
from __future__ import annotations

from kiln.capture.opcodes.registry import handles
from kiln.capture.values.base import NULL


@handles("NOP", "RESUME", "PRECALL", "CACHE", "EXTENDED_ARG", "COPY_FREE_VARS")
def NOP(tx, inst):
    pass


@handles()
def POP_TOP(tx, inst):
    value = tx.pop()
    if getattr(value, "loop_only", False):  # a `break` out of `for v in gen(...)`: its last reference
        from kiln.capture.values.lazy_generators import drop_loop_iterators

        drop_loop_iterators(tx, [value])


@handles()
def PUSH_NULL(tx, inst):
    tx.push(NULL)


@handles()
def COPY(tx, inst):
    value = tx.stack[-inst.arg]
    if getattr(value, "loop_only", False):
        value.loop_only = False  # (two references: not closed when one goes)
    tx.push(value)


@handles()
def SWAP(tx, inst):
    i = inst.arg
    tx.stack[-1], tx.stack[-i] = tx.stack[-i], tx.stack[-1]


@handles()
def END_FOR(tx, inst):  # 3.12: pops the exhausted iterator and its last value
    tx.popn(2)
