"""`wrap`: turn a real Python object read from the frame into a symbolic value, recording its guards."""
from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import itertools
import types
from typing import Any

import torch

from kiln.capture.guards import GuardKind
from kiln.capture.sources import (AttrSource, BuiltinSource, ClosureSource, ConstantSource, GetItemSource, LocalSource,
                                  Source)
from kiln.capture.values.base import ConstantValue, Value, is_constant_literal, unsupported
from kiln.capture.values.builtins import BuiltinValue
from kiln.capture.values.containers import DictValue, ListValue, SetValue, TupleValue
from kiln.capture.values.namedtuples import NamedTupleValue
from kiln.capture.values.functions import PartialValue, UserFunctionValue, UserMethodValue
from kiln.capture.values.modules import NNModuleValue, guard_module
from kiln.capture.values.objects import ClassValue, UserObjectValue
from kiln.capture.values.scalars import SCALAR_TYPES, UnguardedScalar
from kiln.capture.values.tensors import TensorValue
from kiln.capture.values.torch_functions import (PythonModuleValue, TorchFunctionValue, is_rng_state_function,
                                                 is_torch_function)


def wrap(tx, value: Any, source: Source | None, qualname: str | None = None) -> Value:
    """The symbolic value for `value`, found at `source` (None for values kiln holds directly)."""
    out = tx.output
    key = source.name() if source is not None and not isinstance(source, ConstantSource) else None
    if key is not None and key in out.values_by_source:
        return out.values_by_source[key]
    # a mutable object reached through two places is one value, so writes through one are seen by the other
    mutable = type(value) in _MUTABLE_CONTAINERS or type(value) in _READABLE_ITERATORS or isinstance(value, torch.nn.Module) or (
        not is_constant_literal(value) and type(value).__module__ not in ("builtins",) and hasattr(value, "__dict__")
        and not isinstance(value, (type, types.FunctionType, types.ModuleType)))
    if mutable and id(value) in out.values_by_id:
        found = out.values_by_id[id(value)]
        if key is not None and source is not None:
            tx.output.guards.add(GuardKind.IDENTITY_OF_SOURCE, source, found.source) if found.source is not None else None
        return found
    result = _wrap(tx, value, source, qualname)
    if key is not None:
        out.values_by_source[key] = result
    if mutable:
        out.values_by_id[id(value)] = result
    return result


_MUTABLE_CONTAINERS = (list, dict, set, collections.deque, collections.defaultdict, collections.OrderedDict,
                       collections.Counter)


def _int_place(source: Source | None) -> bool:
    """Where an int may be traced as a symbol: a local or closure variable of the frame, an attribute
    (chain) of one, or an item at an int index of a list or tuple there (``L['n']``, ``L['self'].n``,
    ``L['lengths'][1]``: the ints of ``lengths.tolist()`` a graph break handed on)."""
    while isinstance(source, (AttrSource, GetItemSource)):
        if isinstance(source, GetItemSource) and type(source.index) is not int:
            return False
        source = source.base
    return isinstance(source, (LocalSource, ClosureSource))


def _wrap(tx, value, source, qualname) -> Value:
    guards = tx.output.guards
    if isinstance(value, torch.Tensor):
        if source is None or isinstance(source, ConstantSource):
            # a tensor kiln holds directly (e.g. a class attribute): an attribute of the graph
            return tx.output.add_attr(value, qualname or "const_tensor")
        if type(value) not in (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer if hasattr(torch.nn, "Buffer") else torch.Tensor):
            unsupported(f"tensor subclass {type(value).__name__}")
        if value.is_nested or value.is_quantized:
            unsupported(f"{'nested' if value.is_nested else 'quantized'} tensor {source.name()}",
                        hint="kiln's fake tensors do not model nested or quantized tensors yet")
        v = tx.output.add_input(source, value)
        v.tensor_type = type(value)
        return v
    if type(value) is torch.Size and _int_place(source):
        sizes = _size_of_int_inputs(tx, value, source)  # a torch.Size local (one a graph break handed on)
        if sizes is not None:
            return sizes
    if is_constant_literal(value):
        if type(value) is int and _int_place(source):
            symbolic = tx.output.add_int_input(source, value)  # Options.dynamic_ints (None: a constant)
            if symbolic is not None:
                return symbolic
        if type(value) is float and _int_place(source):
            from kiln.capture.values.symbolic_float import add_float_input

            symbolic = add_float_input(tx.output, source, value)  # Options.dynamic_floats (None: a constant)
            if symbolic is not None:
                return symbolic
        if type(value) in SCALAR_TYPES and source is not None and not isinstance(source, ConstantSource):
            guards.type(source, value)  # its value is guarded where it is used (values/scalars.py)
            return UnguardedScalar(value, source, guards)
        if source is not None:
            guards.constant(source, value)
        return ConstantValue(value, source)
    if is_type_annotation(value):  # typing.Optional[int], Union, list[str]: immutable; pinned by identity
        if source is not None and not isinstance(source, ConstantSource):
            guards.identity(source, value)
        return ConstantValue(value, source)
    from kiln.capture.values.numpy_values import is_numpy_object, wrap_numpy_object

    if is_numpy_object(value):  # arrays, NumPy scalars, the numpy module and its functions
        return wrap_numpy_object(tx, value, source)
    if isinstance(value, torch.nn.Module):
        if source is not None:
            guard_module(guards, source, value)
        return NNModuleValue(value, source, qualname or (source.name() if source else type(value).__name__))
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        if source is not None:
            guards.length(source, value)
        return NamedTupleValue([wrap(tx, v, _item(source, i)) for i, v in enumerate(value)], type(value),
                               source=source, created_here=False)
    special = _wrap_stdlib_object(tx, value, source)  # lru_cache functions, collections' containers
    if special is not None:
        return special
    if type(value) in (tuple, list):
        if source is not None:
            guards.length(source, value)
        items = [wrap(tx, v, _item(source, i)) for i, v in enumerate(value)]
        cls = TupleValue if type(value) is tuple else ListValue
        return cls(items, source=source, created_here=False)
    if type(value) is dict or (isinstance(value, dict) and type(value).__module__ == "collections"):
        if source is not None:
            guards.dict_keys(source, value)
        if not all(is_constant_literal(k) for k in value):
            return _dict_with_tensor_keys(tx, value, source)
        return DictValue({k: wrap(tx, v, _item(source, k)) for k, v in value.items()}, type(value),
                         source=source, created_here=False)
    if type(value) in (set, frozenset):
        if all(is_constant_literal(v) for v in value):
            if source is not None:
                guards.constant(source, value)
            return SetValue([ConstantValue(v) for v in value], created_here=False, source=source, kind=type(value),
                            outside=value)
        unsupported("set of non-constant values")
    if isinstance(value, enum.Enum):
        if source is not None:
            guards.identity(source, value)
        return ConstantValue(value, source)
    if type(value) in (torch.no_grad, torch.enable_grad) and source is not None:
        from kiln.capture.values.contexts import GradModeValue

        guards.type(source, value)  # outside its block its only state is the class (__enter__ saves the mode)
        found = GradModeValue(type(value) is torch.enable_grad)
        found.source, found.obj = source, value
        return found
    if isinstance(value, types.ModuleType):
        if source is not None and not isinstance(source, ConstantSource):
            guards.identity(source, value)
        return PythonModuleValue(value, source)
    from kiln.capture.values.user_kernels import wrap_user_kernel

    user_kernel = wrap_user_kernel(tx, value, source)  # custom ops, user Triton kernels
    if user_kernel is not None:
        return user_kernel
    if is_torch_function(value):
        if source is not None and not isinstance(source, ConstantSource):
            guards.identity(source, value)
        return TorchFunctionValue(value, source)
    if isinstance(value, types.FunctionType) and value.__module__ == "kiln.api" and value.__name__ == "graph_break":
        return ForcedBreakValue()
    if isinstance(value, types.FunctionType) and is_rng_state_function(value):
        return TorchFunctionValue(value, source)  # a named break: the call runs between two graphs
    if isinstance(value, types.FunctionType):
        answer = COMPILE_STATE_QUERIES.get((value.__module__, value.__name__))
        if answer is not None:
            return ConstantFunctionValue(value, answer)
        if (value.__module__, value.__name__) == ("torch.utils._python_dispatch", "_get_current_dispatch_mode_stack"):
            return DispatchModeStackValue(value)
        if source is not None and not isinstance(source, ConstantSource):
            if _is_nested_function(value):
                return _wrap_nested_function(tx, value, source)
            guards.identity(source, value)
        return UserFunctionValue(value, source)
    if isinstance(value, types.MethodType):
        if source is not None and not isinstance(source, ConstantSource):
            # a bound method is a new object each time it is read (e.g. the __exit__ of a with block
            # handed to a resume function): guard what it binds, not the method object itself
            return UserMethodValue(wrap(tx, value.__func__, AttrSource(source, "__func__")),
                                   wrap(tx, value.__self__, AttrSource(source, "__self__")), source=source)
        self_value = wrap(tx, value.__self__, ConstantSource("__self__", value.__self__)) \
            if not isinstance(value.__self__, torch.nn.Module) else \
            NNModuleValue(value.__self__, ConstantSource("__self__", value.__self__), type(value.__self__).__name__)
        return UserMethodValue(wrap(tx, value.__func__, ConstantSource("__func__", value.__func__)), self_value)
    if isinstance(value, (types.BuiltinFunctionType, types.BuiltinMethodType)) or \
            (isinstance(value, type) and value in _BUILTIN_CALLABLES):
        if not isinstance(value, type) and getattr(value, "__self__", None) is not None \
                and not isinstance(value.__self__, types.ModuleType):
            if source is not None and not isinstance(source, ConstantSource) and not isinstance(value.__self__, type):
                if type(value.__self__) is dict and value.__name__ in _DICT_READERS and \
                        all(is_constant_literal(k) for k in value.__self__):
                    # e.g. `get = d.get` handed to a resume function: the dict, read through __self__
                    from kiln.capture.values.base import BoundMethodValue

                    guards.type(source, value)
                    guards.constant(AttrSource(source, "__name__"), value.__name__)
                    return BoundMethodValue(wrap(tx, value.__self__, AttrSource(source, "__self__")), value.__name__)
                if type(value.__self__) in (list, dict, set):
                    # e.g. `losses.append` handed to a resume function: tracing on would guard the
                    # list's items by value (floats from item() change every call)
                    unsupported(f"{type(value.__self__).__name__}.{value.__name__} bound to a "
                                f"{type(value.__self__).__name__} from outside (e.g. `add = losses.append` kept "
                                f"across a graph break)")
                # a C method of an object kiln does not model (random.random, a C context manager's
                # __exit__): held, and calling it breaks the graph at the call
                guards.type(source, value)
                return OpaqueObjectValue(value, source)
            unsupported(f"builtin method {value.__name__} bound to a {type(value.__self__).__name__} object")
        if source is not None and not isinstance(source, (ConstantSource, BuiltinSource)):
            # `fn` handed in as list, then tuple: the code differs. (A name read from the builtins dict is
            # trusted as it always was: a guard per builtin used would be paid on every call.)
            guards.identity(source, value)
        return BuiltinValue(value, source)
    if isinstance(value, functools.partial):
        if source is not None and not isinstance(source, ConstantSource):
            guards.type(source, value)
        return PartialValue(wrap(tx, value.func, _attr(source, "func")),
                            [wrap(tx, v, _item(_attr(source, "args"), i)) for i, v in enumerate(value.args)],
                            {k: wrap(tx, v, _item(_attr(source, "keywords"), k)) for k, v in value.keywords.items()},
                            source)
    if isinstance(value, type):
        if source is not None and not isinstance(source, ConstantSource):
            guards.identity(source, value)
        if value in _BUILTIN_CALLABLES:
            return BuiltinValue(value, source)
        return ClassValue(value, source)
    if isinstance(value, (torch.finfo, torch.iinfo)):
        return ConstantValue(value, None)
    from kiln.capture.values.contexts import GradModeExit, GradModeValue, WithExitValue

    from kiln.capture.values.iterators import ListIteratorValue, ResumeIterator

    from kiln.capture.sources import READABLE_ITERATOR_TYPES, IteratorRemainingSource, iterator_remaining

    from kiln.capture.values.external_iterators import COMPOSITE_ITERATOR_TYPES, wrap_external_iterator

    if type(value) is type(iter([])) and source is not None and not isinstance(source, ConstantSource):
        from kiln.capture.values.external_iterators import wrap_external_list_iterator

        return wrap_external_list_iterator(tx, value, source)  # an index into the live list
    if type(value) in COMPOSITE_ITERATOR_TYPES and source is not None and not isinstance(source, ConstantSource):
        result = wrap_external_iterator(tx, value, source)  # zip/map/filter/enumerate: through __reduce__
        if result is not None:
            return result
    if type(value) in READABLE_ITERATOR_TYPES and source is not None and not isinstance(source, ConstantSource):
        from kiln.capture.values.external_iterators import ExternalIteratorValue

        remaining = iterator_remaining(value)
        if len(remaining) > 1000:
            unsupported(f"iterating over a {type(value).__name__} with {len(remaining)} items left")
        guards.type(source, value)
        items_source = IteratorRemainingSource(source)
        guards.length(items_source, remaining)
        result = ExternalIteratorValue([wrap(tx, v, GetItemSource(items_source, i)) for i, v in enumerate(remaining)],
                                       source, tx)
        result._real = value
        return result
    if type(value) is ResumeIterator and source is not None:
        guards.constant(AttrSource(source, "pos"), value.pos)
        items_source = AttrSource(source, "items")
        guards.length(items_source, value.items)
        # reading ahead is not a side effect here: the real iterator is only ever advanced by the
        # code kiln generates, which rebuilds it at the next break
        return ListIteratorValue([wrap(tx, v, GetItemSource(items_source, i))
                                  for i, v in enumerate(value.items) if i >= value.pos])
    if type(value) is GradModeExit:  # a grad-mode block continued in a resume function
        if source is not None:
            guards.type(source, value)
            guards.constant(AttrSource(source, "previous"), value.previous)
        return WithExitValue(GradModeValue(torch.is_grad_enabled(), previous=value.previous), source)
    from kiln.capture.values.operator_objects import OPERATOR_OBJECT_TYPES, wrap_operator_object

    if type(value) in OPERATOR_OBJECT_TYPES and source is not None:
        found = wrap_operator_object(tx, value, source)
        if found is not None:
            return found
    if source is None:
        unsupported(f"object of type {type(value).__name__} without a place in the frame")
    if isinstance(value, torch.optim.Optimizer):
        from kiln.capture.values.optimizers import OptimizerValue

        guards.type(source, value)
        return OptimizerValue(value, source)
    if type(value).__module__ in ("builtins",) or type(value).__module__.startswith("torch") or \
            not hasattr(value, "__dict__") and not hasattr(type(value), "__slots__"):
        # an object kiln does not model (an optimizer, a numpy array, a file, an iterator): it can be
        # held and handed back, and using it breaks the graph where it is used; its type is guarded
        # (isinstance() and type() answer from it: `reversed([..])` then an int must not share code)
        guards.type(source, value)
        return OpaqueObjectValue(value, source)
    guards.type(source, value)
    return UserObjectValue(value, source)


def _wrap_stdlib_object(tx, value, source) -> Value | None:
    """lru_cache functions and collections' containers (values/functools_values.py, collections_values.py)."""
    if isinstance(value, functools._lru_cache_wrapper):
        from kiln.capture.values.functools_values import LruCacheFunctionValue

        if source is not None and not isinstance(source, ConstantSource):
            tx.output.guards.identity(source, value)
        return LruCacheFunctionValue(value, source)
    from kiln.capture.values.collections_values import wrap_collection

    return wrap_collection(tx, value, source)


def _is_nested_function(fn: types.FunctionType) -> bool:
    """A function made by a `def` or `lambda` inside another function: a new object each time that
    code runs (e.g. a closure created before a graph break and handed to the resume function)."""
    return fn.__closure__ is not None or "<locals>" in fn.__qualname__


def _wrap_nested_function(tx, fn: types.FunctionType, source: Source) -> Value:
    """Guard a nested function by what its calls depend on, not by its identity: its code object, its
    globals, its defaults (read through guarded places) and its closure cells' contents (read through
    guarded places when it is called, see UserFunctionValue.bind_closure)."""
    guards = tx.output.guards
    guards.type(source, fn)
    guards.identity(AttrSource(source, "__code__"), fn.__code__)
    guards.identity(AttrSource(source, "__globals__"), fn.__globals__)
    if fn.__closure__ is None:
        guards.add(GuardKind.NONE, AttrSource(source, "__closure__"), True)
    else:
        guards.length(AttrSource(source, "__closure__"), fn.__closure__)
    value = UserFunctionValue(fn, source)
    value.guarded_by_code = True
    return value


# "Is this code being compiled / traced / scripted?" as asked by library code: inside a kiln graph the
# answer to is_compiling() is yes (code takes its compiler-friendly path), and it is not TorchScript.
COMPILE_STATE_QUERIES = {
    ("torch.compiler", "is_compiling"): True,
    ("torch.compiler", "is_dynamo_compiling"): True,
    ("torch.compiler", "is_exporting"): False,
    ("torch.jit._trace", "is_tracing"): False,
    ("torch._jit_internal", "is_scripting"): False,
    ("torch.jit", "is_scripting"): False,
    ("torch._utils", "is_compiling"): True,
}


class OpaqueObjectValue(Value):
    """An object kiln does not look into. Reading an attribute gives a value that can only be handed
    back to Python; calling, testing or computing with it breaks the graph there."""

    def __init__(self, obj, source):
        self.obj = obj
        self.source = source

    def python_type(self) -> type:
        return type(self.obj)

    def getattr(self, tx, name: str) -> Value:
        """The read is done by the transformed code after the graph (OpaqueAttrValue): exact only where it
        cannot raise nor run code, guarded so on later calls: an instance-dict entry (no data descriptor
        of that name on the type), or a method found on the type (a bound method is made). Anything else
        (properties, C getsets, __getattr__, a missing attribute) breaks the graph at the read."""
        real, cls = self.obj, type(self.obj)
        from kiln.capture.values.class_stores import class_has_pending

        if self.source is None or cls.__getattribute__ is not object.__getattribute__ or \
                class_has_pending(tx, cls, name):
            unsupported(f"attribute {name!r} of a {cls.__qualname__} object, which kiln does not trace")
        class_attr = next((vars(k)[name] for k in cls.__mro__ if name in vars(k)), None)
        try:
            inst_dict = object.__getattribute__(real, "__dict__")
        except AttributeError:
            inst_dict = None
        guards = tx.output.guards
        if inst_dict is not None and name in inst_dict and not hasattr(type(class_attr), "__set__"):
            guards.type(self.source, real)
            guards.contains(AttrSource(self.source, "__dict__"), name, True)
            return OpaqueAttrValue(self, name)
        if _is_plain_method(class_attr):
            guards.type(self.source, real)
            if inst_dict is not None:
                guards.contains(AttrSource(self.source, "__dict__"), name, False)
            return OpaqueAttrValue(self, name)
        unsupported(f"attribute {name!r} of a {cls.__qualname__} object: reading it may run code or raise "
                    f"(a property, a C attribute, __getattr__, or none), so it runs as Python")

    def call(self, tx, args, kwargs) -> Value:
        unsupported(f"calling a {type(self.obj).__qualname__} object, which kiln does not trace")

    def truth(self, tx) -> bool:
        unsupported(f"truth value of a {type(self.obj).__qualname__} object, which kiln does not trace")

    def __repr__(self) -> str:
        return f"Opaque({type(self.obj).__qualname__})"


_PLAIN_METHODS = (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
                  types.WrapperDescriptorType, types.ClassMethodDescriptorType, classmethod, staticmethod)


def _is_plain_method(attr) -> bool:
    """A class attribute whose read on an instance only binds it (no code of the program runs, nothing
    raises): functions, C method descriptors, and callables with a C __get__ (Cython functions)."""
    if isinstance(attr, _PLAIN_METHODS):
        return True
    getter = getattr(type(attr), "__get__", None)
    return callable(attr) and not hasattr(type(attr), "__set__") and getter is not None and \
        not isinstance(getter, types.FunctionType)


class OpaqueAttrValue(Value):
    """`opaque.name`, not yet used."""

    def __init__(self, obj: Value, name: str):
        self.obj, self.name = obj, name

    def call(self, tx, args, kwargs) -> Value:
        unsupported(f"{type(self.obj.obj).__qualname__}.{self.name}() runs outside kiln's graphs",
                    hint="kiln runs it between two graphs")

    def getattr(self, tx, name: str) -> Value:
        unsupported(f"attribute {name!r} of {type(self.obj.obj).__qualname__}.{self.name}")

    def truth(self, tx) -> bool:
        unsupported(f"truth value of {type(self.obj.obj).__qualname__}.{self.name}")

    def reconstruct(self, cg) -> None:
        cg.reconstruct(self.obj)
        cg.load_attr(self.name)


class ForcedBreakValue(Value):
    """kiln.graph_break: calling it inside compiled code breaks the graph there."""

    def call(self, tx, args, kwargs) -> Value:
        unsupported("kiln.graph_break() was called", hint="remove the call to keep one graph")

    def reconstruct(self, cg) -> None:
        from kiln.api import graph_break

        cg.load_const(graph_break)


def _eager_branch_codes() -> frozenset:
    """Library functions whose `is_compiling()` branch would compute something else than eager does, so
    kiln answers False there and follows eager's branch. TransformerEncoder.forward skips its mask check
    when compiling, and with it the nested-tensor path that zero-fills padded positions: eager's check
    (data-dependent) then breaks the graph, and the result is eager's."""
    import torch.nn.modules.transformer as transformer

    return frozenset({transformer.TransformerEncoder.forward.__code__})


_EAGER_BRANCH_CODES = _eager_branch_codes()


class ConstantFunctionValue(Value):
    """A function whose answer is known while tracing (compile-state queries)."""

    def __init__(self, fn, answer):
        self.fn, self.answer = fn, answer

    def call(self, tx, args, kwargs) -> Value:
        if self.fn.__name__ == "is_compiling" and tx.code in _EAGER_BRANCH_CODES:
            return ConstantValue(False)
        return ConstantValue(self.answer)

    def reconstruct(self, cg) -> None:
        cg.load_const(self.fn)


class DispatchModeStackValue(Value):
    """torch.utils._python_dispatch._get_current_dispatch_mode_stack (nn.MultiheadAttention asks it
    whether make_fx is tracing): an empty list while no TorchDispatchMode is active, guarded so."""

    def __init__(self, fn):
        self.fn = fn

    def call(self, tx, args, kwargs) -> Value:
        from kiln.capture.sources import CallSource

        if args or kwargs:
            unsupported("_get_current_dispatch_mode_stack() with arguments")
        count = torch._C._len_torch_dispatch_stack
        if count():
            unsupported("a TorchDispatchMode is active", hint="kiln does not trace under dispatch modes")
        tx.output.guards.constant(CallSource(ConstantSource("torch._C._len_torch_dispatch_stack", count)), 0)
        return ListValue([])

    def reconstruct(self, cg) -> None:
        cg.load_const(self.fn)


_DICT_READERS = {"get", "__getitem__", "__contains__", "keys", "values", "items", "__len__"}

_BUILTIN_CALLABLES = {tuple, list, dict, set, frozenset, slice, int, float, bool, str, complex, range, type,
                      zip, enumerate, reversed, map, filter, super, object, isinstance, len, print, iter, next}
from kiln.capture.sources import READABLE_ITERATOR_TYPES as _READABLE_ITERATORS  # noqa: E402

_BUILTIN_CALLABLES |= {v for v in vars(itertools).values() if isinstance(v, type)}  # itertools_values.py
# collections.OrderedDict is a ClassValue: values/collections_values.py builds it (stdlib.CLASS_CALLS)


def _dict_with_tensor_keys(tx, value: dict, source) -> Value:
    """A dict from outside keyed by constants and tensors (per-parameter settings, optimizer-style state):
    its keys guard pins each tensor key by identity; a key is held by the graph like a parameter
    (its metadata guarded), so it is the same fake tensor as the parameter read through its module."""
    from kiln.capture.sources import ObjectKeyItemSource
    from kiln.capture.values.container_keys import TensorKey

    tensor_types = (torch.Tensor, torch.nn.Parameter)
    if source is None or isinstance(source, ConstantSource) or \
            not all(is_constant_literal(k) or type(k) in tensor_types or identity_keyed(k) for k in value):
        unsupported(f"a dict from outside whose keys are not all constants, classes or tensors "
                    f"({', '.join(sorted({type(k).__name__ for k in value if not is_constant_literal(k)}))})")
    entries = {}
    for k, v in value.items():
        if is_constant_literal(k):
            entries[k] = wrap(tx, v, _item(source, k))
            continue
        if identity_keyed(k):  # the class itself is the key (a lookup by a class constant finds it)
            entries[k] = wrap(tx, v, ObjectKeyItemSource(source, ConstantSource("dict_key", k)))
            continue
        held = ConstantSource("dict_key", k)
        key = wrap(tx, k, held)
        entries[TensorKey(key.example, key)] = wrap(tx, v, ObjectKeyItemSource(source, held))
    return DictValue(entries, type(value), source=source, created_here=False)


def is_type_annotation(value) -> bool:
    """A typing construct (``Optional[int]``, ``Union``, ``Literal["a"]``, a TypeVar) or a builtin generic
    alias (``list[int]``, ``int | None``): immutable objects that code such as dataclass validators hands to
    ``typing.get_origin`` and looks up in dicts; a constant of the trace, guarded by identity."""
    kind = type(value)
    return kind.__module__ == "typing" and not isinstance(value, type) or kind in _BUILTIN_ALIASES


_BUILTIN_ALIASES = (types.GenericAlias, types.UnionType)


def identity_keyed(key) -> bool:
    """A class or a typing special form (``typing.Union``) whose type hashes and compares it by identity,
    as a dict keyed by types holds them (huggingface_hub's validators by ``get_origin``): a constant key."""
    kind = type(key)
    return (isinstance(key, type) or kind.__module__ == "typing") and \
        kind.__hash__ in (object.__hash__, type.__hash__) and kind.__eq__ in (object.__eq__, type.__eq__)


def _size_of_int_inputs(tx, value: torch.Size, source) -> Value | None:
    """A ``torch.Size`` local or attribute (``s = x.shape`` before a graph break: the resume function gets
    it as an argument) whose ints may be traced as symbols, each as an int argument is
    (``Options.dynamic_ints``: ``L['s'][0]`` a symbol once its value changed, sharing the symbol of a
    tensor size of the same value, guarded equal); None where none is (the Size is then a guarded constant)."""
    from kiln.capture.values.symbolic import SizeValue

    items = []
    for i, n in enumerate(value):
        symbolic = tx.output.add_int_input(GetItemSource(source, i), n, duck=True) if type(n) is int else None
        items.append(symbolic)
    if not any(v is not None for v in items):
        return None
    guards = tx.output.guards
    guards.type(source, value)
    guards.length(source, value)
    return SizeValue([v if v is not None else _guarded_item(guards, source, i, n)
                      for i, (v, n) in enumerate(zip(items, value))])


def _guarded_item(guards, source, i: int, n: int) -> Value:
    item = GetItemSource(source, i)
    guards.constant(item, n)
    return ConstantValue(n, item)


def _item(source, index):
    return GetItemSource(source, index) if source is not None and not isinstance(source, ConstantSource) else None


def _attr(source, name):
    from kiln.capture.sources import AttrSource

    return AttrSource(source, name) if source is not None and not isinstance(source, ConstantSource) else None


def wrap_constant_result(value: Any) -> Value:
    """A value computed at trace time from constants (no source, no guard needed)."""
    if is_constant_literal(value) or isinstance(value, (torch.finfo, torch.iinfo, enum.Enum)):
        return ConstantValue(value)
    if type(value) is tuple:
        return TupleValue([wrap_constant_result(v) for v in value])
    if type(value) is list:
        return ListValue([wrap_constant_result(v) for v in value])
    if type(value) is dict:
        return DictValue({k: wrap_constant_result(v) for k, v in value.items()})
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        return NamedTupleValue([wrap_constant_result(v) for v in value], type(value))
    if isinstance(value, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        return BuiltinValue(value)
    if isinstance(value, type):
        return ClassValue(value)
    if is_type_annotation(value):  # typing.get_origin(Optional[int]) is typing.Union
        return ConstantValue(value)
    if type(value) in (set, frozenset) and all(is_constant_literal(v) for v in value):
        from kiln.capture.values.containers import SetValue

        return SetValue.from_real(value)  # (computed by the real operation: its iteration order is the real one)
    unsupported(f"a {type(value).__name__} computed at trace time")


def underlying_object(v: Value):
    """The real object behind a value that stands for one (modules, objects, functions), else None."""
    if isinstance(v, ClassValue):
        return v.cls
    for attr in ("module", "obj", "fn"):  # (a NewObjectValue's `cls` is its class, not the object)
        if hasattr(v, attr) and not isinstance(v, (ConstantValue,)):
            return getattr(v, attr)
    return None
