"""``id(obj)`` while tracing.

An object's id is a number CPython gives it when it is made, so what kiln can know while tracing depends
on where the object comes from:

- **An object the frame reads from a place** (an argument, a global, an attribute: it has a source),
  other than a tensor: the id is the real object's, a constant, with a guard that the place still holds
  that very object (``optimizers[id(model)]`` looks the optimizer up while tracing, and a call with
  another model compiles again). The guard holds a reference, so the id cannot be reused by another
  object while the compiled code lives.
- **Anything else** (an object made in the frame, a tensor): an ``ObjectIdValue``, a number known only
  when the code runs. Comparing two of them with ``==``/``!=`` is comparing the objects with ``is``
  (``values/ops.is_op``, with its guards), which is what equal ids mean while both objects are alive;
  handed on (returned, stored) it is computed again as ``id(obj)`` after the graph. Every other use
  (a dict key, arithmetic, printing, comparing with a number) would need the number itself: a graph
  break, never a made-up number.
"""
from __future__ import annotations

import operator

from kiln.capture.values.base import ConstantValue, Value, unsupported


class ObjectIdValue(Value):
    """``id(target)`` where the number is only known when the code runs."""

    def __init__(self, target: Value):
        self.target = target
        self.source = None

    def python_type(self) -> type:
        return int

    def truth(self, tx) -> bool:
        return True  # (an id is never 0)

    def binary(self, tx, op, other: Value, reflected: bool):
        from kiln.capture.values.ops import is_op

        if op in (operator.eq, operator.ne) and isinstance(other, ObjectIdValue):
            same = is_op(tx, self.target, other.target)
            return ConstantValue(same if op is operator.eq else not same)
        unsupported(f"id() of {self.target} used as a number (with {op.__name__}): its value is only known "
                    "when the code runs", hint="comparing two ids with == or != (or the objects with `is`) "
                    "stays in the graph")

    def reconstruct(self, cg) -> None:
        cg.prepare_call(id)
        cg.reconstruct(self.target)
        cg.call(1)

    def __repr__(self) -> str:
        return f"ObjectIdValue(id({self.target!r}))"


def object_id(tx, obj: Value) -> Value:
    """The value of ``id(obj)`` (module docstring)."""
    from kiln.capture.values.builder import underlying_object
    from kiln.capture.values.tensors import TensorValue

    if type(obj) is ConstantValue and (obj.value is None or obj.value is Ellipsis or type(obj.value) is bool):
        return ConstantValue(id(obj.value))  # (singletons: one object in the process)
    source = getattr(obj, "source", None)
    real = underlying_object(obj)
    if source is not None and real is not None and not isinstance(obj, TensorValue):
        tx.output.guards.identity(source, real)
        return ConstantValue(id(real))
    return ObjectIdValue(obj)
