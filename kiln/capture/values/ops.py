"""Python operators on symbolic values: binary, unary, comparison, containment, subscripts."""
from __future__ import annotations

import enum
import operator
from typing import Any, Callable

import torch

from kiln.capture.values.base import ConstantValue, INPLACE_TO_PLAIN, Value, unsupported
from kiln.capture.values import numpy_values
from kiln.capture.values.containers import (
    DictValue, ListValue, SequenceValue, SetValue, SliceValue, TupleValue,
)
from kiln.capture.values.dict_views import DictViewValue
from kiln.capture.values.iterators import IteratorValue
from kiln.capture.values.scalars import PURE_OPERATORS, defer
from kiln.capture.values.symbolic import concat_sizes, symbolic_binary, symbolic_unary
from kiln.capture.values.symbolic_float import float_binary, float_unary, tensor_float_binary
from kiln.capture.values.tensors import TensorValue

_DUNDER = {
    operator.add: "__add__", operator.sub: "__sub__", operator.mul: "__mul__", operator.truediv: "__truediv__",
    operator.floordiv: "__floordiv__", operator.mod: "__mod__", operator.pow: "__pow__",
    operator.matmul: "__matmul__", operator.and_: "__and__", operator.or_: "__or__", operator.xor: "__xor__",
    operator.lshift: "__lshift__", operator.rshift: "__rshift__", operator.eq: "__eq__", operator.ne: "__ne__",
    operator.lt: "__lt__", operator.le: "__le__", operator.gt: "__gt__", operator.ge: "__ge__",
}


def binary_op(tx, op: Callable, a: Value, b: Value) -> Value:
    from kiln.capture.values import binary_dunders

    if binary_dunders.handles(op, a, b):  # CPython's order of __op__/__rop__/__iop__ (binary_dunders.py)
        return binary_dunders.python_object_binary(tx, op, a, b)
    if isinstance(a, numpy_values.NDArrayValue) or isinstance(b, numpy_values.NDArrayValue):
        return numpy_values.binary_op(tx, op, a, b)  # NumPy's semantics (values/numpy_values.py)
    if isinstance(a, TensorValue) or isinstance(b, TensorValue):
        dynamic_float = tensor_float_binary(tx, op, a, b)  # a float argument as a graph input
        if dynamic_float is not None:
            return dynamic_float
        if op in INPLACE_TO_PLAIN and not isinstance(a, TensorValue):
            op = INPLACE_TO_PLAIN[op]  # number += tensor rebinds the name to a new tensor
        return tx.output.call("call_function", op, [a, b], {})
    symbolic = symbolic_binary(tx, op, a, b)  # sizes of dynamic dims stay symbolic (values/symbolic.py)
    if symbolic is None:
        symbolic = float_binary(tx, op, a, b)  # float arguments as graph inputs (values/symbolic_float.py)
    if symbolic is None and op in (operator.add, operator.iadd):
        symbolic = concat_sizes(a, b)
    if symbolic is not None:
        return symbolic
    plain = INPLACE_TO_PLAIN.get(op, op)
    if plain in (operator.eq, operator.ne) and (_symbolic_sequence(a) or _symbolic_sequence(b)):
        same = _sizes_equal(tx, a, b)  # (before the constant folding below, which would specialize them)
        if same is not None:
            return ConstantValue(same if plain is operator.eq else not same)
    for value, other, reflected in ((a, b, False), (b, a, True)):
        if hasattr(value, "binary"):  # values with their own operators (collections' containers)
            result = value.binary(tx, plain if reflected else op, other, reflected)
            if result is not NotImplemented:
                return result
    if plain in PURE_OPERATORS:
        deferred = defer(plain, [a, b])  # e.g. a step counter or an item() result: no guard on its value
        if deferred is not None:
            return deferred
    if a.is_constant() and b.is_constant() and not isinstance(a, (ListValue, SetValue, DictValue)) \
            and not isinstance(b, (ListValue, SetValue, DictValue)):
        try:
            return wrap_const(plain(a.as_constant(), b.as_constant()))
        except Exception as exc:
            from kiln.capture.values.exceptions import raise_as_traced

            raise_as_traced(exc, f"{a.as_constant()!r} {_sym(plain)} {b.as_constant()!r}")
    if isinstance(a, SequenceValue) and isinstance(b, SequenceValue) and plain is operator.add:
        if isinstance(a, ListValue) and op is operator.iadd:
            a.call_method(tx, "extend", [b], {})
            return a
        if type(a.python_type()) is type(b.python_type()) or a.python_kind is b.python_kind:
            return (ListValue if a.python_kind is list else TupleValue)(a.elements + b.elements)
    if plain is operator.add and _tuple_operand(a) and _tuple_operand(b) and \
            (isinstance(a, SequenceValue) or isinstance(b, SequenceValue)):
        # tuple.__add__ (a namedtuple's too): a plain tuple of both items
        return TupleValue(_tuple_items(a) + _tuple_items(b))
    if isinstance(a, ListValue) and op is operator.iadd and (isinstance(b, (IteratorValue, DictViewValue, SetValue,
                                                                          DictValue)) or
                                                           b.is_constant() and type(b.as_constant()) in
                                                           (tuple, str, bytes, range, frozenset)):
        a.call_method(tx, "extend", [b], {})  # list += iterable extends it (list_inplace_concat)
        return a
    if isinstance(a, SequenceValue) and plain is operator.mul and b.is_constant() or \
            isinstance(b, SequenceValue) and plain is operator.mul and a.is_constant():
        return _repeat(tx, op, a, b)
    if op in _SET_INPLACE_METHODS and isinstance(a, SetValue) and a.kind is set and _set_like(b):
        a.call_method(tx, _SET_INPLACE_METHODS[op], [b], {})  # s |= t changes s itself (set_ior and co.)
        return a
    if op is operator.ior and isinstance(a, DictValue) and a.python_type() is dict:
        a.call_method(tx, "update", [b], {})  # d |= other is d.update(other), on d itself (dict_ior)
        return a
    if (isinstance(a, SetValue) or isinstance(b, SetValue)) and _set_like(a) and _set_like(b) and \
            plain in (operator.or_, operator.and_, operator.sub, operator.xor):
        from kiln.capture.values.set_order import set_binary

        return set_binary(tx, plain, a, b)  # on real sets: the result iterates as eager's (set_order.py)
    if (isinstance(a, SetValue) or isinstance(b, SetValue)) and _set_like(a) and _set_like(b) and \
            plain in (operator.le, operator.lt, operator.ge, operator.gt, operator.eq, operator.ne):
        from kiln.capture.values.set_order import set_compare

        return set_compare(tx, plain, a, b)  # subset/superset/equality of the members
    if isinstance(a, DictValue) and isinstance(b, DictValue) and plain is operator.or_:
        from kiln.capture.values.hashed_keys import merge

        entries = dict(a.entries)
        merge(tx, entries, b.entries)
        return DictValue(entries)
    if isinstance(a, DictViewValue) or isinstance(b, DictViewValue):
        if plain in (operator.or_, operator.and_, operator.sub, operator.xor, operator.eq, operator.ne,
                     operator.lt, operator.le, operator.gt, operator.ge):
            view, other = (a, b) if isinstance(a, DictViewValue) else (b, a)
            return view.binary(tx, plain, other, reflected=view is b)
    if plain in _REFLECTED:
        compared = rich_compare(tx, plain, a, b)
        if compared is not None:
            return compared
    if plain in (operator.eq, operator.ne):
        if a.is_constant() and b.is_constant():
            return wrap_const(plain(a.as_constant(), b.as_constant()))
        if _eq_is_identity(a) and _eq_is_identity(b):
            same = is_op(tx, a, b)
            return ConstantValue(same if plain is operator.eq else not same)
    dunder = _DUNDER.get(plain)
    if dunder:
        from kiln.capture.values.objects import user_dunder

        result = user_dunder(tx, a, dunder, [b])
        if result is not None:
            return result
    unsupported(f"operator {_sym(plain)} between {a} and {b}")


_SET_INPLACE_METHODS = {operator.ior: "update", operator.iand: "intersection_update",
                        operator.isub: "difference_update", operator.ixor: "symmetric_difference_update"}

_REFLECTED = {operator.eq: operator.eq, operator.ne: operator.ne, operator.lt: operator.gt,
              operator.gt: operator.lt, operator.le: operator.ge, operator.ge: operator.le}


def is_python_object(v: Value) -> bool:
    """An instance of a class written in Python over object alone (no builtin base): its comparisons are
    its class's Python methods or object's defaults."""
    from kiln.capture.values.objects import NewObjectValue, UserObjectValue

    if type(v) not in (NewObjectValue, UserObjectValue):
        return False
    return all(k.__flags__ & (1 << 9) for k in v.python_type().__mro__[:-1])


_COMPARISONS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")


def _builtin_operand(v: Value) -> bool:
    """A value whose comparison methods return NotImplemented for a Python object: a builtin type's, or a
    class keeping object's comparisons (an nn.Module, a function)."""
    from kiln.capture.values.functions import NestedFunctionValue, UserFunctionValue
    from kiln.capture.values.objects import ClassValue

    if isinstance(v, (SequenceValue, DictValue, SetValue, UserFunctionValue, NestedFunctionValue, ClassValue)):
        return type(v).__name__ != "NamedTupleValue"
    try:
        kind = v.python_type()  # (a scalar's type, without guarding its value)
    except Exception:
        return False
    if v.is_constant() and kind.__module__ == "builtins":
        return True
    return all(getattr(kind, name, None) is getattr(object, name) for name in _COMPARISONS)


def rich_compare(tx, op: Callable, a: Value, b: Value) -> Value | None:
    """`a <op> b` where one side is a Python object, as CPython's do_richcompare: the reflected method of
    a right operand whose class is a strict subclass first, then a's method, then b's reflected one;
    NotImplemented from all of them gives identity for == and !=, and a TypeError for orderings.
    None where neither side is a Python object (other rules apply)."""
    if not (is_python_object(a) or is_python_object(b)):
        return None
    for side in (a, b):
        if not is_python_object(side) and not _builtin_operand(side):
            unsupported(f"comparing {a} with {b}")
    reflected = _REFLECTED[op]
    ta, tb = a.python_type(), b.python_type()
    reverse_first = ta is not tb and issubclass(tb, ta) and is_python_object(b)  # (its slot, whatever it is)
    if reverse_first:
        result = _compare_method(tx, b, reflected, a)
        if result is not NotImplemented:
            return result
    result = _compare_method(tx, a, op, b)
    if result is not NotImplemented:
        return result
    if not reverse_first:
        result = _compare_method(tx, b, reflected, a)
        if result is not NotImplemented:
            return result
    if op in (operator.eq, operator.ne):
        same = _same_object(a, b, tx)
        return ConstantValue(same if op is operator.eq else not same)
    from kiln.capture.values.exceptions import raise_traced

    raise_traced(TypeError, f"'{_sym_of(op)}' not supported between instances of '{ta.__name__}' and '{tb.__name__}'")


def _sym_of(op) -> str:
    return {operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">="}.get(op, "?")


def _python_method(cls: type, name: str):
    from kiln.capture.values.objects import python_slot

    return python_slot(cls, name)


def _compare_method(tx, x: Value, op: Callable, y: Value):
    """type(x).__op__(x, y): a Python method traced, object's defaults as CPython's object_richcompare;
    NotImplemented when the method gives NotImplemented (or x is a builtin value)."""
    from kiln.capture.values.objects import class_attribute

    if not is_python_object(x):
        return NotImplemented
    cls = x.python_type()
    name = _DUNDER[op]
    if _python_method(cls, name) is not None:
        result = class_attribute(tx, cls, name, x).call(tx, [y], {})
    elif getattr(cls, name) is not getattr(object, name):
        unsupported(f"{cls.__name__}.{name} is not a Python function")
    elif op is operator.eq:
        return ConstantValue(True) if _same_object(x, y, tx) else NotImplemented
    elif op is operator.ne:  # object.__ne__: the class's __eq__, inverted unless NotImplemented
        equal = _compare_method(tx, x, operator.eq, y)
        return equal if equal is NotImplemented else ConstantValue(not tx.truth(equal))
    else:
        return NotImplemented
    if result.is_constant() and result.as_constant() is NotImplemented:
        return NotImplemented
    return result


def _same_object(a: Value, b: Value, tx=None) -> bool:
    """`a is b` for a Python object and any value (different kinds of values are different objects)."""
    if is_python_object(a) and is_python_object(b):
        return is_op(tx, a, b)
    return a is b


def equal_bool(tx, a: Value, b: Value) -> bool:
    """PyObject_RichCompareBool(a, b, Py_EQ), what `in`, list.index/count/remove use: identity, then ==."""
    if a is b or (is_python_object(a) and is_python_object(b) and is_op(tx, a, b)):
        return True
    if isinstance(a, TensorValue) or isinstance(b, TensorValue):
        from kiln.capture.values.tensor_compare import tensor_equal_bool

        return tensor_equal_bool(tx, a, b)  # identity, then bool(a == b): eager's error or a break
    from kiln.capture.values.symbolic import is_symbolic_value

    if a.is_constant() and b.is_constant() and not (is_python_object(a) or is_python_object(b)) \
            and not (is_symbolic_value(a) or is_symbolic_value(b)):  # (a size's value would be guarded)
        return a.as_constant() == b.as_constant()
    return tx.truth(binary_op(tx, operator.eq, a, b))


def _symbolic_sequence(v: Value) -> bool:
    from kiln.capture.values.symbolic import is_symbolic_value

    return isinstance(v, SequenceValue) and any(is_symbolic_value(x) for x in v.elements)


def _sizes_equal(tx, a: Value, b: Value) -> bool | None:
    """``a == b`` for tuples (``torch.Size`` among them) holding symbolic sizes, as tuple's own
    comparison: lengths, then item by item (identity, then ``==``) to the first difference; each
    symbolic comparison a guard on the expression (``s0 == s1``), not on the sizes' values. None where
    either side is not a tuple (a list is never equal to a tuple: the generic path says so)."""
    def items(v):
        if isinstance(v, SequenceValue) and v.python_kind is tuple:
            return list(v.elements)
        if v.is_constant() and isinstance(v.as_constant(), tuple):
            return [ConstantValue(x) for x in v.as_constant()]
        return None

    xs, ys = items(a), items(b)
    if xs is None or ys is None:
        return None
    return len(xs) == len(ys) and all(equal_bool(tx, x, y) for x, y in zip(xs, ys))


def _tuple_operand(v: Value) -> bool:
    """A tuple value (a namedtuple too), or a constant that is a plain tuple."""
    if isinstance(v, SequenceValue):
        return v.python_kind is tuple and getattr(v, "tuple_type", None) is not torch.Size
    return v.is_constant() and type(v.as_constant()) is tuple


def _tuple_items(v: Value) -> list[Value]:
    return list(v.elements) if isinstance(v, SequenceValue) else [ConstantValue(x) for x in v.as_constant()]


def check_tensor_identity_guarded(tx, tensors: list) -> None:
    """Before the identity of tensors is compared (`is`, dict keys, set members): a tensor passed in and a
    tensor a module holds are one object in a later call if the caller passes the parameter itself. Each
    such pair is guarded to stay as it is now: the same object, or `input is not <held tensor>`."""
    output = tx.output
    inputs = {id(fake): (source, real) for source, real, fake, *_ in output._tensor_inputs}
    held = {id(fake): real for real, fake, _ in output._held}
    passed = [inputs[id(t.example)] for t in tensors if id(t.example) in inputs]
    kept = [held[id(t.example)] for t in tensors if id(t.example) in held]
    for source, real in passed:
        for tensor in kept:
            if real is tensor:  # a parameter passed in: compared as one object only if it is one fake
                if not any(r is tensor and id(f) in inputs for r, f, _ in output._held):
                    unsupported("comparing the identity of a parameter passed in with the same parameter "
                                "held by a module", hint="kiln runs the comparison as Python")
                output.guards.identity(source, tensor)
            else:
                output.guards.not_object(source, tensor)


def _repeat(tx, op, a: Value, b: Value) -> Value:
    """seq * n, n * seq, seq *= n: CPython's own TypeError for a count that is not an int; `list *= n`
    repeats the same list in place (others holding it see it), a tuple gets a new one."""
    seq, count = (a, b) if isinstance(a, SequenceValue) else (b, a)
    n = count.as_constant()
    try:
        seq.python_kind([None]) * n
    except TypeError as exc:
        from kiln.capture.values.exceptions import raise_as_traced

        raise_as_traced(exc, "sequence repetition")
    if op is operator.imul and seq is a and isinstance(a, ListValue):
        a._check_mutable(tx, "list *=")
        a.elements = a.elements * n
        return a
    return (ListValue if seq.python_kind is list else TupleValue)(seq.elements * n)


def _set_like(v: Value) -> bool:
    return isinstance(v, SetValue) or v.is_constant() and isinstance(v.as_constant(), (set, frozenset))


def _definite_object(v: Value) -> bool:
    """Values that stand for one known object (so `is` between them can be decided while tracing)."""
    from kiln.capture.values.base import KnownFunctionValue
    from kiln.capture.values.builder import OpaqueObjectValue
    from kiln.capture.values.exceptions import ExceptionValue
    from kiln.capture.values.collections_values import DequeValue
    from kiln.capture.values.exit_stacks import ExitStackValue
    from kiln.capture.values.functions import NestedFunctionValue, UserFunctionValue
    from kiln.capture.values.modules import NNModuleValue
    from kiln.capture.values.objects import ClassValue, NewObjectValue, UserObjectValue

    return isinstance(v, (TensorValue, SequenceValue, DictValue, SetValue, IteratorValue, NNModuleValue,
                          UserFunctionValue, NestedFunctionValue, UserObjectValue, NewObjectValue,
                          OpaqueObjectValue, ClassValue, KnownFunctionValue, ExitStackValue,
                          ExceptionValue, DequeValue)) or v.is_constant()


def _eq_is_identity(v: Value) -> bool:
    """Whether `==` on this value falls back to identity (no __eq__ of its own), so it is decidable."""
    from kiln.capture.values.builder import OpaqueObjectValue
    from kiln.capture.values.functions import NestedFunctionValue, UserFunctionValue
    from kiln.capture.values.modules import NNModuleValue
    from kiln.capture.values.objects import NewObjectValue, UserObjectValue

    if isinstance(v, (NNModuleValue, UserFunctionValue, NestedFunctionValue, IteratorValue)):
        return True
    if isinstance(v, (UserObjectValue, NewObjectValue, OpaqueObjectValue)):
        return v.python_type().__eq__ is object.__eq__
    return v.is_constant() and not isinstance(v, (SequenceValue, DictValue, SetValue))


def _sym(op) -> str:
    return getattr(op, "__name__", str(op))


def unary_op(tx, op: Callable, a: Value) -> Value:
    if isinstance(a, numpy_values.NDArrayValue) and op is not operator.not_:
        return numpy_values.unary_op(tx, op, a)
    if isinstance(a, TensorValue):
        return tx.output.call("call_function", op, [a], {})
    symbolic = symbolic_unary(tx, op, a)
    if symbolic is None:
        symbolic = float_unary(tx, op, a)
    if symbolic is not None:
        return symbolic
    if op is operator.not_:
        return ConstantValue(not tx.truth(a))
    if op in PURE_OPERATORS:
        deferred = defer(op, [a])
        if deferred is not None:
            return deferred
    if a.is_constant():
        return wrap_const(op(a.as_constant()))
    from kiln.capture.values.objects import user_dunder

    name = {operator.neg: "__neg__", operator.pos: "__pos__", operator.invert: "__invert__",
            operator.abs: "__abs__"}.get(op)
    result = user_dunder(tx, a, name, []) if name else None
    if result is not None:
        return result
    unsupported(f"unary {_sym(op)} of {a}")


def compare_op(tx, op: Callable, a: Value, b: Value) -> Value:
    return binary_op(tx, op, a, b)


def is_op(tx, a: Value, b: Value) -> bool:
    if isinstance(a, numpy_values.NDArrayValue) or isinstance(b, numpy_values.NDArrayValue):
        return a is b  # one value per array object (arrays passed in are memoized by identity)
    if _symbolic_number(a) or _symbolic_number(b):
        return _symbolic_identity(a, b)
    if a.is_constant() and b.is_constant() and not isinstance(a, (SequenceValue, DictValue, SetValue)) \
            and not isinstance(b, (SequenceValue, DictValue, SetValue)):
        same = a.as_constant() is b.as_constant()
        _guard_constant_identity(tx, a, b, same)
        return same
    if isinstance(a, TensorValue) and isinstance(b, TensorValue):
        # one tensor object is one fake tensor: inputs of one object are one input, held tensors are
        # memoized, in-place ops (and no-op conversions) return their input's (container_keys.TensorKey)
        check_tensor_identity_guarded(tx, [a, b])
        return a.example is b.example
    if not (_definite_object(a) and _definite_object(b)):
        unsupported(f"`is` between {a} and {b}: kiln does not know what object each one is")
    if a.is_constant() and a.as_constant() is None or b.is_constant() and b.as_constant() is None:
        return False  # one side is None, the other a definite non-None object
    from kiln.capture.values.builder import underlying_object

    ra, rb = underlying_object(a), underlying_object(b)
    same = ra is rb if ra is not None and rb is not None else a is b
    sa, sb = getattr(a, "source", None), getattr(b, "source", None)
    if not same and tx is not None and sa is not None and sb is not None:
        # two places that held different objects (lists, sets, objects passed in): the same object
        # passed in both places later is `is` (and one value: builder.wrap memoizes mutable objects by id)
        tx.output.guards.not_same(sa, sb)
    return same


def _symbolic_number(v: Value) -> bool:
    from kiln.capture.values.symbolic import SymbolicInt
    from kiln.capture.values.symbolic_float import SymbolicFloat

    return isinstance(v, (SymbolicInt, SymbolicFloat))


def _symbolic_identity(a: Value, b: Value) -> bool:
    """``a is b`` where one side is a number computed from symbolic sizes (or an int argument made a
    symbol): not None / ``...`` (a number never is); anything else depends on which int objects CPython
    made (equal ints above 256 are distinct objects, ``x.shape[0] is x.shape[0]`` is False for them): the
    frame runs as Python."""
    other = b if _symbolic_number(a) else a
    if not _symbolic_number(other) and other.is_constant() and (
            other.as_constant() is None or other.as_constant() is Ellipsis or other.as_constant() is NotImplemented):
        return False
    from kiln.capture.values.object_ids import run_frame_as_python

    run_frame_as_python(f"`is` between {a} and {b}: a number computed from sizes has no object identity "
                        "kiln can model (equal ints above 256 are distinct objects)", "compare")


def _identity_is_value(obj) -> bool:
    """Whether ``x is obj`` follows from a value guard ``x == obj`` (with the type): singletons, the
    ints CPython keeps one object of (-5..256), dtypes, enum members, and objects whose ``==`` is
    identity (classes, functions)."""
    if obj is None or obj is Ellipsis or obj is NotImplemented or type(obj) is bool:
        return True
    if type(obj) is int:
        return -5 <= obj <= 256
    if isinstance(obj, (torch.dtype, torch.layout, torch.memory_format, enum.Enum)):
        return True
    return type(obj).__eq__ is object.__eq__


def _guard_constant_identity(tx, a: Value, b: Value, same: bool) -> None:
    """``a is b`` of two constants, decided from the objects seen while tracing. Constants are guarded
    by value; where identity does not follow from the value (an int over 256, a string, a float, a
    tuple), the answer holds for later calls only if:
    - both were read from places: the places are guarded to hold the same (or different) objects;
    - neither is an object read from a place (a literal, or made in the frame): it is the same on
      every call (but ``x.device`` and ``x.shape`` are new objects at each read in eager, one constant in
      kiln: they run as Python too).
    Otherwise (an item of a tuple argument, a string method that returned its argument) the frame runs
    as Python: a graph break would compare constants rebuilt after the graph, and equal literals of one
    code object are one object."""
    ca, cb = a.as_constant(), b.as_constant()  # (first: a deferred scalar guards its inputs here)
    if _identity_is_value(ca) or _identity_is_value(cb):
        return  # (x is V, for V the one object of its value: x's value guard decides it)
    if tx is None:
        return
    sa, sb = getattr(a, "source", None), getattr(b, "source", None)
    if sa is not None and sb is not None:
        guards = tx.output.guards
        guards.same(sa, sb) if same else guards.not_same(sa, sb)
        return
    held = _objects_read_from_places(tx)
    if id(ca) not in held and id(cb) not in held and not isinstance(ca, _MADE_PER_READ) \
            and not isinstance(cb, _MADE_PER_READ):
        return
    from kiln.capture.values.object_ids import run_frame_as_python

    run_frame_as_python(f"`is` between {a} and {b}: an object read from an argument (or another place) "
                        "compared by identity with one kiln cannot guard by place", "compare")


# values a tensor attribute makes anew at each read in eager (``x.device``, ``x.shape``), which kiln
# holds as one constant
_MADE_PER_READ = (torch.device, torch.Size)


def _objects_read_from_places(tx) -> set[int]:
    """The ids of the constants the trace read from places (each guarded by value), and of the items of
    those that are tuples or frozensets: objects the caller holds, which a later call may replace by
    equal ones. (Alive while tracing: ids are not reused.)"""
    from kiln.capture.guards import GuardKind

    ids: set[int] = set()
    stack = [g.value for g in tx.output.guards if g.kind is GuardKind.CONSTANT]
    while stack:
        obj = stack.pop()
        if id(obj) in ids:
            continue
        ids.add(id(obj))
        if type(obj) in (tuple, frozenset):
            stack.extend(obj)
    return ids


def contains_op(tx, item: Value, container: Value) -> bool:
    if isinstance(container, (DictValue, SetValue)):
        from kiln.capture.values.container_keys import dict_key, set_key

        if isinstance(container, SetValue):
            if isinstance(item, TensorValue) and container.has_tensors():
                check_tensor_identity_guarded(tx, [item, *[m for m in container.members.values()
                                                          if isinstance(m, TensorValue)]])
            return set_key(tx, item, container.members) in container.members  # tensors by identity
        return dict_key(tx, item, container.entries) in container.entries
    from kiln.capture.values.collections_values import DequeValue

    if isinstance(container, TensorValue) or isinstance(item, TensorValue) and not isinstance(
            container, (SequenceValue, IteratorValue, DequeValue)) and not _python_membership(container):
        # (sequences compare as equal_bool does; a Python __contains__/__iter__ is traced: whatever it
        # does with the tensor is checked there)
        unsupported("`in` on a tensor depends on its data")
    from kiln.capture.values.symbolic import symbolic_in

    found = symbolic_in(tx, item, container)  # n in (1, 2, 3) of a size: guards on each test
    if found is not None:
        return found
    if container.is_constant() and item.is_constant():
        return item.as_constant() in container.as_constant()
    if isinstance(container, DictViewValue):
        return container.contains(tx, item)
    if isinstance(container, (SequenceValue, IteratorValue)):
        if isinstance(container, IteratorValue):
            # `in` on an iterator consumes items up to the first match only
            elements = iter(lambda: container.next_item(tx), None)
        else:
            elements = container.items(tx)
        # element == item after an identity check, as list_contains compares (equal_bool)
        return any(equal_bool(tx, element, item) for element in elements)
    from kiln.capture.values.instance_dicts import InstanceDictValue

    if isinstance(container, InstanceDictValue):
        return tx.truth(container.call_method(tx, "__contains__", [item], {}))
    found = _contains_by_iteration(tx, item, container)
    if found is not None:
        return found
    result = container.call_method(tx, "__contains__", [item], {})
    return tx.truth(result)


def _python_membership(container: Value) -> bool:
    """Whether `x in container` runs Python code of the container's class: its own `__contains__`
    function, or (without one) its `__iter__` function (CPython's iteration search)."""
    import types

    from kiln.capture.values.objects import NewObjectValue, UserObjectValue

    if not isinstance(container, (NewObjectValue, UserObjectValue)):
        return False
    cls = container.python_type()
    contains = getattr(cls, "__contains__", None)
    if contains is not None:
        return isinstance(contains, types.FunctionType)
    return _iterable_in_python(cls)


def _iterable_in_python(cls) -> bool:
    """iter() of an object of ``cls`` runs Python code: its __iter__, or (without one) its __getitem__
    (the old sequence protocol)."""
    import types

    from kiln.capture.values.iterators import old_sequence_protocol

    return isinstance(getattr(cls, "__iter__", None), types.FunctionType) or old_sequence_protocol(cls)


def _contains_by_iteration(tx, item: Value, container: Value) -> bool | None:
    """`item in obj` for an object of a Python class with `__iter__` (or only `__getitem__`) and no
    `__contains__`: CPython's _PySequence_IterSearch, which steps the iterator (lazily) until an element
    is `item` or `== item`. None for other containers."""
    from kiln.capture.values.iterators import iterate
    from kiln.capture.values.objects import NewObjectValue, UserObjectValue

    if not isinstance(container, (NewObjectValue, UserObjectValue)):
        return None
    cls = container.python_type()
    if hasattr(cls, "__contains__") or not _iterable_in_python(cls):
        return None
    return any(equal_bool(tx, element, item) for element in iterate(tx, container))


def _as_index(tx, obj: Value) -> Value:
    """The int a Python class's `__index__` gives (CPython's TypeError when it gives something else)."""
    from kiln.capture.values.objects import user_dunder

    result = user_dunder(tx, obj, "__index__", [])
    if result is None:
        unsupported(f"indexing a sequence with {obj}, whose class has no Python __index__ (TypeError)")
    if not (result.is_constant() and type(result.as_constant()) is int):
        from kiln.capture.values.exceptions import raise_traced

        raise_traced(TypeError, f"__index__ returned non-int (type {result.python_type().__name__})")
    return result


def getitem(tx, obj: Value, index: Value) -> Value:
    if isinstance(obj, TensorValue):
        return tx.output.call("call_function", operator.getitem, [obj, index], {})
    if is_python_object(index) and (isinstance(obj, SequenceValue) or
                                    obj.is_constant() and type(obj.as_constant()) in (tuple, str, bytes, range)):
        index = _as_index(tx, index)  # seq[obj]: PyNumber_AsSsize_t calls the class's __index__
    if isinstance(obj, (SequenceValue, DictValue)):
        return obj.getitem(tx, index)
    if hasattr(obj, "getitem"):
        return obj.getitem(tx, index)
    if obj.is_constant() and index.is_constant():
        try:
            return wrap_const(obj.as_constant()[index.as_constant()])
        except Exception as exc:
            unsupported(f"indexing {obj.as_constant()!r}[{index.as_constant()!r}] raised {type(exc).__name__}")
    return obj.call_method(tx, "__getitem__", [index], {})


def setitem(tx, obj: Value, index: Value, value: Value) -> None:
    if isinstance(obj, TensorValue):
        tx.output.call("call_function", operator.setitem, [obj, index, value], {})
        return
    if isinstance(obj, (ListValue, DictValue)):
        obj.setitem(tx, index, value)
        return
    obj.call_method(tx, "__setitem__", [index, value], {})


def wrap_const(value: Any) -> Value:
    from kiln.capture.values.builder import wrap_constant_result

    return wrap_constant_result(value)
