"""Python's builtin functions and types, applied to symbolic values."""
from __future__ import annotations

import builtins
import functools
import itertools
import math
import operator
import types
from typing import Callable

import torch

from kiln.capture.class_guards import note_name
from kiln.capture.values.base import BINARY_OPERATORS, ConstantValue, KnownFunctionValue, Value, unsupported
from kiln.capture.values.containers import DictValue, ListValue, SequenceValue, SetValue, SliceValue, TupleValue
from kiln.capture.values.container_keys import dict_key, set_key
from kiln.capture.values.namedtuples import NamedTupleValue
from kiln.capture.values.tensors import TensorValue

# pure functions that may be evaluated on Python constants at trace time
PURE_CONSTANT_FUNCTIONS: set = {
    abs, all, any, bool, chr, divmod, float, format, hash, int, len, max, min, ord, pow, repr, round,
    sorted, str, sum, isinstance, issubclass, callable, complex, bin, hex, oct,
} | {getattr(math, n) for n in dir(math) if callable(getattr(math, n)) and not n.startswith("_")} \
  | {getattr(operator, n) for n in dir(operator) if callable(getattr(operator, n)) and not n.startswith("_")
     and n not in ("setitem", "delitem", "iadd", "iand", "iconcat", "ifloordiv", "ilshift", "imod", "imul",
                   "imatmul", "ior", "ipow", "irshift", "isub", "itruediv", "ixor", "attrgetter",
                   "itemgetter", "methodcaller")}


# the builtin types whose objects cannot change: their methods, called on constants, are folded
_IMMUTABLE_TYPES = (str, bytes, int, float, complex, bool, tuple, frozenset, range)
_IMMUTABLE_TYPE_METHODS: set = set()  # the ones met so far (str.upper, str.maketrans, int.from_bytes, ...)


class BuiltinValue(KnownFunctionValue):
    """A builtin function or type (len, isinstance, tuple, ...)."""

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.dict_objects import UnboundBaseMethod

        if (self.fn is object and name in ("__setattr__", "__delattr__", "__getattribute__")) or (self.fn is dict and name in ("__setitem__", "__init__")):
            return UnboundBaseMethod(self.fn, name)  # object.__setattr__(self, k, v) in a __setattr__
        if self.fn is object and name == "__new__":
            from kiln.capture.values.objects import ObjectNew

            return ObjectNew()
        if self.fn is itertools.chain and name == "from_iterable":
            return BuiltinValue(itertools.chain.from_iterable)
        if self.fn is dict and name == "fromkeys":
            from kiln.capture.values.collections_values import FromKeysValue

            return FromKeysValue(dict)
        if self.fn in _IMMUTABLE_TYPES:  # str.upper, str.maketrans, int.from_bytes: folded on constants
            real = getattr(self.fn, name, None)
            if callable(real) and not isinstance(real, type) and name not in ("__new__", "__init__",
                                                                              "__init_subclass__"):
                _IMMUTABLE_TYPE_METHODS.add(real)
                return BuiltinValue(real)
        if name in ("__name__", "__qualname__", "__module__") and isinstance(getattr(self.fn, name, None), str):
            return ConstantValue(getattr(self.fn, name))  # operator.add.__name__: fixed strings of a C object
        return super().getattr(tx, name)

    def call(self, tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
        fn = self.fn
        if fn in (abs, pow) and not kwargs and len(args) == 2 - (fn is abs):
            from kiln.capture.values.numpy_values import NDArrayValue, builtin_on_arrays

            if any(isinstance(a, NDArrayValue) for a in args):  # abs(a), pow(a, 2): NumPy's ufuncs
                return builtin_on_arrays(tx, fn, args)
        if fn is abs and len(args) == 1 and not kwargs:
            from kiln.capture.values.ops import is_python_object, unary_op

            if is_python_object(args[0]):  # abs(obj): its class's Python __abs__
                return unary_op(tx, operator.abs, args[0])
            from kiln.capture.values.symbolic import symbolic_unary

            symbolic = symbolic_unary(tx, operator.abs, args[0])  # abs(n - 10) of a size
            if symbolic is not None:
                return symbolic
        if fn is round and 1 <= len(args) <= 2 and not kwargs:
            from kiln.capture.values.ops import is_python_object

            if is_python_object(args[0]):
                return _round_object(tx, args)
        from kiln.capture.values.symbolic_float import float_function

        number = float_function(tx, fn, args, kwargs)  # float(n), math.sqrt(n) of sizes: kept symbolic
        if number is None and fn is divmod and len(args) == 2 and not kwargs:
            from kiln.capture.values.symbolic import symbolic_divmod

            number = symbolic_divmod(tx, *args)
        if number is not None:
            return number
        if (fn in (locals, vars, dir) and not args and not kwargs) or (fn in (eval, exec) and len(args) == 1):
            # they read (exec: writes) the frame's local variables, which a graph break does not put back as
            # the program left them (values the trace kept, kiln's own temporaries): the frame runs as Python
            from kiln.errors import Unsupported

            raise Unsupported(f"{fn.__name__}() reads the frame's local variables", whole_frame=True,
                              hint="the function runs eagerly; pass the namespace explicitly (eval(s, g, l)) to "
                                   "compile around it")
        handler = _HANDLERS.get(fn)
        if handler is None:
            from kiln.capture.values.stdlib import BUILTIN_CALLS  # functools, collections (values/stdlib.py)

            handler = BUILTIN_CALLS.get(fn)
        if handler is not None:
            result = handler(tx, *args, **kwargs)
            if result is not NotImplemented:
                return result
        if isinstance(fn, type) and fn is not type and fn is not super:
            return construct_builtin_type(tx, fn, args, kwargs)
        op_name = _OPERATOR_BINARY.get(fn)
        if op_name is not None and len(args) == 2 and not kwargs:
            from kiln.capture.values.ops import binary_op

            return binary_op(tx, fn, args[0], args[1])
        if fn in _OPERATOR_UNARY and len(args) == 1:
            from kiln.capture.values.ops import unary_op

            return unary_op(tx, fn, args[0])
        if (fn in PURE_CONSTANT_FUNCTIONS or fn in _IMMUTABLE_TYPE_METHODS) and all(a.is_constant() for a in args) \
                and all(v.is_constant() for v in kwargs.values()):
            return _fold(fn, args, kwargs)
        if any(isinstance(a, TensorValue) for a in args) and fn in (abs, pow, round, divmod, operator.getitem):
            return tx.output.call("call_function", fn, args, kwargs)
        unsupported(f"builtin {getattr(fn, '__qualname__', fn)}() with arguments {args}",
                    hint="")

    def __repr__(self) -> str:
        return f"Builtin({getattr(self.fn, '__name__', self.fn)})"


def _fold(fn, args, kwargs) -> Value:
    from kiln.capture.values.builder import wrap_constant_result

    try:
        result = fn(*[a.as_constant() for a in args], **{k: v.as_constant() for k, v in kwargs.items()})
    except Exception as exc:
        from kiln.capture.values.exceptions import raise_as_traced

        raise_as_traced(exc, f"{getattr(fn, '__name__', fn)}(...)")
    return wrap_constant_result(result)


_OPERATOR_BINARY = {op: sym for sym, op in BINARY_OPERATORS.items()} | {
    operator.eq: "==", operator.ne: "!=", operator.lt: "<", operator.le: "<=", operator.gt: ">",
    operator.ge: ">=",
}
_OPERATOR_UNARY = {operator.neg, operator.pos, operator.invert, operator.not_, operator.abs}


# ---- handlers, one per builtin -------------------------------------------------------------------

def _len(tx, obj, **kw):
    if isinstance(obj, TensorValue):
        if obj.example.dim() == 0:
            unsupported("len() of a 0-d tensor")
        if isinstance(obj.example.shape[0], torch.SymInt):  # a symbolic size: x.size(0), kept symbolic
            return obj.call_method(tx, "size", [ConstantValue(0)], {})
        return ConstantValue(obj.example.shape[0])
    if isinstance(obj, SequenceValue):
        return ConstantValue(len(obj.elements))
    if isinstance(obj, DictValue):
        return ConstantValue(len(obj.entries))
    if isinstance(obj, SetValue):
        return ConstantValue(len(obj.members))
    if obj.is_constant():
        return _fold(len, [obj], {})
    from kiln.capture.values.modules import NNModuleValue

    if isinstance(obj, NNModuleValue):
        return ConstantValue(len(obj.module))
    from kiln.capture.values.objects import NewObjectValue, UserObjectValue, checked_len

    result = obj.call_method(tx, "__len__", [], {})
    if isinstance(obj, (NewObjectValue, UserObjectValue)):  # a Python __len__: len() checks what it gives
        return ConstantValue(checked_len(result))
    return result


def _isinstance(tx, obj, classes):
    cls = classes.as_constant() if classes.is_constant() else unsupported("isinstance() with a non-constant class")
    t = obj.python_type()
    if isinstance(obj, TensorValue):
        # a fake tensor stands for a torch.Tensor of the recorded type
        kinds = cls if isinstance(cls, tuple) else (cls,)
        return ConstantValue(any(isinstance(k, type) and issubclass(t, k) for k in kinds))
    try:
        return ConstantValue(issubclass(t, cls))
    except TypeError as exc:
        unsupported(f"isinstance(): {exc}")


def _issubclass(tx, a, b):
    return _fold(issubclass, [a, b], {})  # (issubclass(1, int): the program's own TypeError)


def _getattr(tx, obj, name, default=None):
    from kiln.capture.values.exceptions import TracedRaise
    from kiln.capture.values.objects import NewObjectValue, UserObjectValue

    attr = name.as_constant()
    if default is None:
        return tx.getattr(obj, attr)
    if isinstance(obj, (NewObjectValue, UserObjectValue)):
        try:
            return tx.getattr(obj, attr)
        except TracedRaise as exc:  # the lookup (traced as written) raised AttributeError
            if exc.matches(AttributeError):
                return default
            raise
    if _hasattr(tx, obj, name).as_constant():
        return tx.getattr(obj, attr)
    return default


def tensor_hasattr(tx, tensor: TensorValue, attr: str) -> bool:
    """``hasattr`` of a tensor: its class's attributes (methods, properties; not the fake's own), and the
    Python attributes set on the caller's tensor (``p.lr_mult = 2``), guarded on the input; a tensor the
    graph makes has none. A parameter or buffer holding Python attributes has no place to guard: the
    lookup runs as Python."""
    if hasattr(tensor.python_type(), attr):
        return True
    real = tx.output.real_tensor_of(tensor)
    if real is None:
        return False
    present = attr in getattr(real, "__dict__", {})
    if tensor.source is None:
        unsupported(f"hasattr/getattr of {attr!r} on a parameter or buffer",
                    hint="Python attributes of a module's tensors are read outside the graph")
    tx.output.guards.hasattr(tensor.source, attr, present)
    return present


def _hasattr(tx, obj, name):
    from kiln.capture.values.builder import underlying_object
    from kiln.capture.values.objects import NewObjectValue
    from kiln.capture.values.modules import NNModuleValue

    from kiln.capture.values.exceptions import TracedRaise
    from kiln.capture.values.objects import UserObjectValue, has_generic_getattribute

    attr = name.as_constant()
    note_name(attr)
    if isinstance(obj, TensorValue):
        return ConstantValue(tensor_hasattr(tx, obj, attr))
    written = isinstance(obj, UserObjectValue) and tx.output.side_effects.load_attr(obj, attr) is not None
    from kiln.capture.values.class_stores import class_has_pending
    from kiln.capture.values.objects import ClassValue

    if isinstance(obj, ClassValue) and isinstance(obj.cls, type) and class_has_pending(tx, obj.cls, attr):
        return ConstantValue(True)  # (a store recorded in this trace: the name resolves)
    if isinstance(obj, UserObjectValue) and class_has_pending(tx, type(obj.obj), attr):
        written = True  # (traced: the class dict seen with its recorded stores)
    if isinstance(obj, NewObjectValue) or isinstance(obj, UserObjectValue) and obj.source is not None and \
            (written or not has_generic_getattribute(type(obj.obj))):
        # traced as Python would (a Python __getattribute__ runs, and its AttributeError is caught)
        try:
            tx.getattr(obj, attr)
        except TracedRaise as exc:
            if exc.matches(AttributeError):
                return ConstantValue(False)
            raise
        return ConstantValue(True)
    if isinstance(obj, NNModuleValue) and class_has_pending(tx, type(obj.module), attr):
        return ConstantValue(True)  # (a store to its class recorded in this trace)
    if isinstance(obj, NNModuleValue):
        found = hasattr(obj.module, attr)
        if obj.source is not None:  # the same module may gain or lose the attribute between calls
            tx.output.guards.identity(obj.source, obj.module)
            tx.output.guards.hasattr(obj.source, attr, found)
        return ConstantValue(found)
    real = underlying_object(obj)
    if real is not None:
        found = hasattr(real, attr)
        source = getattr(obj, "source", None)
        if source is not None:
            tx.output.guards.hasattr(source, attr, found)
        return ConstantValue(found)
    if obj.is_constant():
        return ConstantValue(hasattr(obj.as_constant(), attr))
    if _plain_class_attribute(obj, attr):  # e.g. `_fields` of a namedtuple made here (dataclasses.astuple)
        return ConstantValue(True)
    unsupported(f"hasattr() on {obj}")


def _plain_class_attribute(obj, attr: str) -> bool:
    """``attr`` is found on the class of ``obj`` (a value made while tracing, of a known class whose
    instances are read by the generic lookup) as a plain value or a method: such a read cannot fail,
    whatever the instance holds."""
    from kiln.capture.values.objects import has_generic_getattribute

    try:
        cls = obj.python_type()
    except Exception:  # (a value without a known class)
        return False
    if not isinstance(cls, type) or not (has_generic_getattribute(cls) or cls.__getattribute__ is tuple.__getattribute__):
        return False
    for klass in cls.__mro__:
        if attr in klass.__dict__:
            found = klass.__dict__[attr]
            return not hasattr(type(found), "__get__") or isinstance(found, _BINDING_NEVER_FAILS)
    return False


# descriptors whose __get__ on an instance of the class cannot raise (methods, class and static methods)
_BINDING_NEVER_FAILS = (types.FunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
                        types.BuiltinFunctionType, classmethod, staticmethod)


def _setattr(tx, obj, name, value):
    tx.setattr(obj, name.as_constant(), value)
    return ConstantValue(None)


def _delattr(tx, obj, name):
    from kiln.capture.values.objects import delete_attribute

    if not name.is_constant() or not isinstance(name.as_constant(), str):
        unsupported("delattr() with a name that is not a constant string")
    delete_attribute(tx, obj, name.as_constant())
    return ConstantValue(None)


def _vars(tx, obj=None):
    if obj is None:
        unsupported("vars() without an argument")
    return tx.getattr(obj, "__dict__")  # PyObject_GetAttr(obj, "__dict__"), as vars() does


def _type(tx, obj, *rest, **kwargs):
    from kiln.capture.values.objects import ClassValue

    if rest or kwargs:
        unsupported("type(name, bases, dict): making a class inside compiled code")
    return ClassValue(obj.python_type())


def _size_min_max(fn, otherwise):
    """``min``/``max`` with symbolic sizes (``values/symbolic.symbolic_min_max``), else ``otherwise``
    (iteration_builtins' handler)."""

    def handler(tx, *args, **kwargs):
        from kiln.capture.values.symbolic import symbolic_min_max

        picked = symbolic_min_max(tx, fn, list(args)) if args and not kwargs else None
        return otherwise(tx, *args, **kwargs) if picked is None else picked
    return handler


def _prod_of_sizes(tx, *args, **kwargs):
    """``math.prod(x.shape)`` with symbolic sizes: multiplied as graph nodes, left to right from
    ``start``, as math.prod does (other arguments: folded as a pure function of constants)."""
    from kiln.capture.values.ops import binary_op
    from kiln.capture.values.symbolic import SymbolicInt, int_like

    if len(args) != 1 or set(kwargs) - {"start"} or not isinstance(args[0], TupleValue):  # (SizeValue is one)
        return NotImplemented
    items = list(args[0].elements)
    start = kwargs.get("start", ConstantValue(1))
    if not any(isinstance(v, SymbolicInt) for v in items) or not all(int_like(v) for v in items + [start]):
        return NotImplemented
    total = start
    for v in items:
        total = binary_op(tx, operator.mul, total, v)
    return total


def _range(tx, *args):
    return _fold(range, list(args), {})  # (range(1.5), range(0, 5, 0): the program's own errors)


def _print(tx, *args, **kwargs):
    unsupported("print() has a side effect outside the graph",
                hint="kiln runs the print between two graphs; move it out of hot code to keep one graph")


def _id(tx, obj):
    from kiln.capture.values.object_ids import object_id

    return object_id(tx, obj)


def _callable(tx, obj):
    from kiln.capture.values.functions import UserFunctionValue, NestedFunctionValue, UserMethodValue
    from kiln.capture.values.modules import NNModuleValue

    if isinstance(obj, (UserFunctionValue, NestedFunctionValue, UserMethodValue, NNModuleValue, BuiltinValue)):
        return ConstantValue(True)
    if isinstance(obj, (TensorValue, SequenceValue, DictValue, SetValue)):
        return ConstantValue(False)
    if obj.is_constant():
        return ConstantValue(callable(obj.as_constant()))
    # CPython's PyCallable_Check: the *type* has a __call__ slot (an instance attribute does not count;
    # every class object answers hasattr(cls, "__call__") through its metaclass, so look in the MRO)
    return ConstantValue(any("__call__" in vars(k) for k in obj.python_type().__mro__))


def _super(tx, *args):
    return tx.make_super(args)


def _tensor_number(kind):
    def handler(tx, obj=None, *rest):
        if isinstance(obj, TensorValue):
            unsupported(f"{kind.__name__}() of a tensor needs its data",
                        hint="keep the value as a tensor, or read it outside the compiled function")
        from kiln.capture.values.numpy_values import NDArrayValue

        if isinstance(obj, NDArrayValue) and obj.known is not None and not rest:
            return ConstantValue(kind(obj.known))  # a NumPy scalar known while tracing
        from kiln.capture.values.objects import NewObjectValue, UserObjectValue

        if kind in (int, float) and isinstance(obj, (NewObjectValue, UserObjectValue)) and not rest:
            return _number_of_object(tx, kind, obj)
        return NotImplemented
    return handler


def _round_object(tx, args: list[Value]) -> Value:
    """round(obj[, ndigits]) of a Python object: its class's __round__, called without arguments when
    ndigits is left out or None (builtin_round)."""
    from kiln.capture.values.exceptions import raise_traced
    from kiln.capture.values.objects import class_attribute, python_slot

    cls = args[0].python_type()
    if python_slot(cls, "__round__") is None:
        if hasattr(cls, "__round__"):
            unsupported(f"round() of a {cls.__name__} (its __round__ is not a Python function)")
        raise_traced(TypeError, f"type {cls.__name__} doesn't define __round__ method")
    rest = [a for a in args[1:] if not (a.is_constant() and a.as_constant() is None)]
    return class_attribute(tx, cls, "__round__", args[0]).call(tx, rest, {})


def _number_of_object(tx, kind: type, obj: Value) -> Value:
    """float(obj) / int(obj) of a Python object (PyNumber_Float / PyNumber_Long): its __float__ / __int__,
    whose result must be exactly a float / an int, else its __index__; anything else is refused."""
    from kiln.capture.values.exceptions import raise_traced
    from kiln.capture.values.objects import class_attribute, python_slot

    cls = obj.python_type()
    if issubclass(cls, (int, float, str, bytes, bytearray)):
        unsupported(f"{kind.__name__}() of an object of a {cls.__name__} subclass")
    slot = "__float__" if kind is float else "__int__"
    for name in (slot, "__index__"):
        if python_slot(cls, name) is None:
            if hasattr(cls, name):  # a slot CPython implements in C for this class: not modelled
                unsupported(f"{kind.__name__}() of a {cls.__name__} ({name} is not a Python function)")
            continue
        result = class_attribute(tx, cls, name, obj).call(tx, [], {})
        expected = float if name == "__float__" else int
        if not result.is_constant():
            unsupported(f"{cls.__name__}.{name} returned {result}")
        value = result.as_constant()
        if type(value) is not expected:
            if isinstance(value, expected):  # a subclass: CPython warns (DeprecationWarning) and converts
                unsupported(f"{cls.__name__}.{name} returned a {type(value).__name__} (a DeprecationWarning)")
            owner = f"{cls.__name__}." if name == "__float__" else ""  # (CPython's messages)
            raise_traced(TypeError, f"{owner}{name} returned non-{expected.__name__} (type {type(value).__name__})")
        if kind is float and type(value) is int and not -2.0 ** 1023 * 2 < value < 2.0 ** 1023 * 2:
            unsupported("float() of an __index__ too large for a float (OverflowError)")
        return ConstantValue(kind(value))
    if kind is int and hasattr(cls, "__trunc__"):
        unsupported(f"int() of a {cls.__name__} through __trunc__ (deprecated)")
    what = "a string or a real number" if kind is float else "a string, a bytes-like object or a real number"
    raise_traced(TypeError, f"{kind.__name__}() argument must be {what}, not '{cls.__name__}'")


def _builtin_hash(tx, *args, **kwargs):
    from kiln.capture.values.hashed_keys import builtin_hash

    return builtin_hash(tx, *args, **kwargs)


def _str_or_repr(use_repr: bool):
    def handler(tx, obj=None, *rest, **kwargs):
        from kiln.capture.values.exceptions import ExceptionValue, exception_str

        if isinstance(obj, ExceptionValue) and not rest and not kwargs:
            return exception_str(tx, obj, use_repr)
        if obj is not None and not rest and not kwargs:
            return python_str_or_repr(tx, obj, use_repr)
        return NotImplemented
    return handler


def python_str_or_repr(tx, obj, use_repr: bool):
    """repr(obj) / str(obj) of a Python object whose class defines the method in Python: traced (str()
    falls back to a Python __repr__ through object.__str__); the result must be a str, as CPython checks."""
    from kiln.capture.values.exceptions import raise_traced
    from kiln.capture.values.objects import class_attribute, python_slot
    from kiln.capture.values.ops import is_python_object

    if not is_python_object(obj):
        return NotImplemented
    cls = obj.python_type()
    name = "__repr__" if use_repr or cls.__str__ is object.__str__ else "__str__"
    if python_slot(cls, name) is None:
        return NotImplemented
    result = class_attribute(tx, cls, name, obj).call(tx, [], {})
    if not result.is_constant():
        unsupported(f"{cls.__name__}.{name} gave {result}, not a known str")
    if not isinstance(result.as_constant(), str):
        raise_traced(TypeError, f"{name} returned non-string (type {type(result.as_constant()).__name__})")
    return ConstantValue(result.as_constant())


_HANDLERS: dict = {
    str: _str_or_repr(False), repr: _str_or_repr(True), hash: _builtin_hash,
    len: _len, isinstance: _isinstance, issubclass: _issubclass, getattr: _getattr, hasattr: _hasattr,
    setattr: _setattr, delattr: _delattr, vars: _vars, range: _range, print: _print, id: _id, callable: _callable, super: _super, type: _type, int: _tensor_number(int), float: _tensor_number(float), bool: _tensor_number(bool),
}


def construct_builtin_type(tx, cls, args, kwargs) -> Value:
    """tuple(...), list(...), dict(...), set(...), slice(...), object() and the numeric types."""
    if cls is tuple:
        return TupleValue(tx.items(args[0]) if args else [])
    if cls is list:
        return ListValue(tx.items(args[0]) if args else [])
    if cls in (set, frozenset):
        from kiln.capture.values.set_order import real_operand

        if not args:
            return SetValue([], kind=cls)
        source = args[0]
        from kiln.capture.values.iterators import IteratorValue

        if isinstance(source, IteratorValue):  # consumed once: its items, in order
            source = ListValue(tx.items(source))
        from kiln.capture.values.hashed_keys import hashed_in_python

        if isinstance(source, SequenceValue) and any(hashed_in_python(v) for v in source.elements):
            # set(list of objects with a Python __hash__): CPython adds the items one by one
            # (set_update_internal), running their __hash__ and __eq__ as BUILD_SET does
            return SetValue([], kind=cls).add_each(tx, source.elements)
        operand = real_operand(tx, source)
        added = list(operand) if isinstance(operand, (list, tuple, str, dict)) else None
        values = {}
        if isinstance(source, SetValue):
            values = dict(source.members)
        elif isinstance(source, (SequenceValue, ListValue)):
            values = {set_key(tx, v): v for v in reversed(source.elements)}  # the first of equal ones
        return SetValue.from_real(cls(operand), added, values,  # CPython's order (values/set_order.py)
                                  one_by_one=isinstance(operand, (list, tuple, str)))
    if cls is dict or (issubclass(cls, dict) and cls.__module__ == "collections"):
        entries = {}
        if args:
            src = args[0]
            if isinstance(src, DictValue):
                entries.update(src.entries)
            else:
                from kiln.capture.values.iterators import update_from_pairs

                update_from_pairs(tx, entries, src)  # one pair at a time: an iterator is used up
        for name in kwargs:  # a str key with the hash of an object key would call its __eq__
            dict_key(tx, ConstantValue(name), entries)
        entries.update(kwargs)
        return DictValue(entries, dict_type=cls)
    if cls is slice:
        parts = list(args) + [ConstantValue(None)] * (3 - len(args))
        if len(args) == 1:
            parts = [ConstantValue(None), args[0], ConstantValue(None)]
        return SliceValue(*parts)
    if cls in (int, float, bool, str, complex) or cls is torch.Size:
        handler = _HANDLERS.get(cls)
        if handler is not None:
            result = handler(tx, *args)
            if result is not NotImplemented:
                return result
        if cls is torch.Size:
            from kiln.capture.values.symbolic import size_of_items

            items = tx.items(args[0])
            return size_of_items(items) or ConstantValue(torch.Size([v.as_constant() for v in items]))
        if all(a.is_constant() for a in args):
            return _fold(cls, args, kwargs)
        if cls is bool and len(args) == 1:
            return ConstantValue(tx.truth(args[0]))
    if cls in (torch.device, torch.dtype, torch.finfo, torch.iinfo) and all(a.is_constant() for a in args):
        return ConstantValue(cls(*[a.as_constant() for a in args]))
    unsupported(f"constructing {cls.__module__}.{cls.__qualname__}")


from kiln.capture.values.iteration_builtins import register as _register_iteration_handlers  # noqa: E402

_register_iteration_handlers(_HANDLERS)  # iter, next, zip, map, sum, ..., and itertools
_HANDLERS[min] = _size_min_max(min, _HANDLERS[min])
_HANDLERS[math.prod] = _prod_of_sizes
_HANDLERS[max] = _size_min_max(max, _HANDLERS[max])
