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
  break, never a made-up number. Two different objects' ids compare unequal only where the object whose
  id was taken first is certainly still alive (a local variable or the caller holds it), so the two
  lived at the same time: CPython hands a freed object's address to the next one made.
- **Numbers, strings and tuples** (constants): read from a place, the real object's id under an identity
  guard (kiln's constant holds the very object); made in the frame, kiln follows their values, not
  which object holds a value (equal ones may be one object or two), so their ids refuse.
"""
from __future__ import annotations

import itertools
import operator

from kiln.capture.values.base import ConstantValue, Value, unsupported


_ORDER = itertools.count()


class ObjectIdValue(Value):
    """``id(target)`` where the number is only known when the code runs."""

    def __init__(self, target: Value):
        self.target = target
        self.source = None
        self.order = next(_ORDER)  # when the id was taken, within the trace

    def python_type(self) -> type:
        return int

    def truth(self, tx) -> bool:
        return True  # (an id is never 0)

    def binary(self, tx, op, other: Value, reflected: bool):
        from kiln.capture.values.ops import is_op

        if op in (operator.eq, operator.ne) and isinstance(other, ObjectIdValue):
            same = is_op(tx, self.target, other.target)
            first = self if self.order < other.order else other
            if not same and not _alive(tx, first.target):
                # CPython gives a freed object's address to the next one: id(x + 1) == id(x + 2) is
                # True in eager when the first sum is gone before the second is made
                run_frame_as_python("comparing the ids of two objects the first of which may be freed "
                                     "already (CPython may reuse its address)")
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


def run_frame_as_python(reason: str, what: str = "take the id of"):
    """Refuse the whole frame (it runs as Python): a graph break would run ``id()`` (or ``is``) on
    values rebuilt after the graph, which are other objects (a constant's copy, a graph output instead
    of a freed temporary)."""
    from kiln.errors import Unsupported

    exc = Unsupported(reason, hint=f"the function runs as Python: a graph break here would {what} "
                                   "a rebuilt object")
    exc.root_index = -1
    raise exc


def _alive(tx, value: Value) -> bool:
    """Whether ``value``'s object is certainly alive now (so it was alive when any id in the trace was
    taken): it came from a place the caller holds (a source), or a local variable of a frame being
    traced holds it (an object cannot come back once freed)."""
    if getattr(value, "source", None) is not None:
        return True
    frame = tx
    while frame is not None:
        if any(v is value for v in getattr(frame, "locals", {}).values()):
            return True
        frame = getattr(frame, "parent", None)
    return False


def object_id(tx, obj: Value) -> Value:
    """The value of ``id(obj)`` (module docstring)."""
    from kiln.capture.guards import _guardable
    from kiln.capture.values.builder import underlying_object
    from kiln.capture.values.containers import TupleValue
    from kiln.capture.values.tensors import TensorValue

    if type(obj) is ConstantValue and (obj.value is None or obj.value is Ellipsis or type(obj.value) is bool):
        return ConstantValue(id(obj.value))  # (singletons: one object in the process)
    source = getattr(obj, "source", None)
    if type(obj) is ConstantValue and source is not None:
        # a number, string or tuple read from a place: the very object there (kiln's constant holds it);
        # a place kiln holds itself (ConstantSource) holds that object for good
        if _guardable(source):
            tx.output.guards.identity(source, obj.value)
        return ConstantValue(id(obj.value))
    if obj.is_constant() and not callable(obj.as_constant()) or isinstance(obj, TupleValue):
        # numbers, strings, tuples: kiln follows their values, not which object holds a value (equal
        # ones may be one object or two, a tuple may be rebuilt after the graph)
        run_frame_as_python(f"id() of the {obj.python_type().__name__} {obj}: kiln tracks its value, "
                             "not which object it is")
    real = underlying_object(obj)
    if source is not None and real is not None and not isinstance(obj, TensorValue):
        tx.output.guards.identity(source, real)
        return ConstantValue(id(real))
    return ObjectIdValue(obj)
