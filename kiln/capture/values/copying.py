"""`copy.copy(x)` and `copy.deepcopy(x)` on symbolic values, as CPython's copy module does them.

kiln does not trace into the copy module (stdlib); it models what the module does for the values it
knows, and breaks the graph for anything else:

- atomic values (numbers, strings, None, classes, functions): the value itself;
- other constants (tuples of constants, torch.Size, devices): copied for real while tracing;
- tuples: deep-copied items, the same tuple when every item copied to itself;
- lists, dicts, OrderedDicts, sets: new containers (items deep-copied for deepcopy);
- `obj.__dict__`: a new dict of its (deep-copied) attributes;
- namedtuples of collections.namedtuple/typing.NamedTuple classes without copy hooks: a new one;
- tensors (deepcopy): an in-graph `clone` of a tensor that needs no grad, owns its whole storage and
  is dense (what Tensor.__deepcopy__ gives then); a tensor that requires grad breaks (eager either
  makes a new leaf, or raises for a non-leaf);
- plain objects: the default protocol of object.__reduce_ex__(4), traced where it runs Python: the
  lookups of `__deepcopy__`, `__reduce_ex__`, `__reduce__`, `__getstate__` on the object and of
  `__setstate__`/`__dict__` on the copy go through the class's own `__getattribute__` (transformers'
  configs define one), then `cls.__new__(cls)` and `copy.__dict__.update(state)`. The class must use
  object's `__new__`, `__reduce_ex__`, `__reduce__`, `__getstate__`, have no `__copy__`/`__deepcopy__`/
  `__setstate__`/`__getnewargs__`, no `__slots__` and no copyreg reducer; else the call breaks.

The memo is kept by identity of the objects the values stand for, so shared and cyclic references
copy as in eager.
"""
from __future__ import annotations

import collections
import copy
import copyreg
import types

from kiln.capture.values.base import ConstantValue, Value, unsupported

# the types copy's dispatch tables copy as themselves
_ATOMIC = frozenset(t for t, f in copy._deepcopy_dispatch.items() if f is copy._deepcopy_atomic)
_COPY_HOOKS = ("__reduce_ex__", "__reduce__", "__getstate__", "__setstate__", "__getnewargs__",
               "__getnewargs_ex__", "__copy__", "__deepcopy__")
_HEAPTYPE = 1 << 9


def call_copy(tx, fn, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """copy.copy(x) / copy.deepcopy(x[, memo=None])."""
    memo = kwargs.pop("memo", None) if fn is copy.deepcopy else None
    if fn is copy.deepcopy and len(args) == 2 and memo is None:
        memo = args.pop()
    if len(args) != 1 or kwargs or (memo is not None and not (memo.is_constant() and memo.as_constant() is None)):
        unsupported(f"copy.{fn.__name__}() with arguments {args} {kwargs}: kiln models copy(x) and deepcopy(x)")
    if fn is copy.deepcopy:
        return _DeepCopier(tx).copy(args[0])
    return shallow_copy(tx, args[0])


# ---- shallow copies -------------------------------------------------------------------------------

def _plain_dict(x: Value, kind: type) -> bool:
    """A dict or an OrderedDict (no factory, no counts: copied entry by entry)."""
    from kiln.capture.values.collections_values import OrderedDictValue
    from kiln.capture.values.containers import DictValue

    return (type(x) is DictValue and kind in (dict, collections.OrderedDict)) or \
        (type(x) is OrderedDictValue and kind is collections.OrderedDict)


def _new_dict(entries: dict, kind: type) -> Value:
    from kiln.capture.values.collections_values import OrderedDictValue
    from kiln.capture.values.containers import DictValue

    if kind is collections.OrderedDict:
        return OrderedDictValue(entries, kind)
    return DictValue(entries, dict_type=kind)


def shallow_copy(tx, x: Value) -> Value:
    from kiln.capture.values.containers import DictValue, ListValue, SetValue, TupleValue
    from kiln.capture.values.namedtuples import NamedTupleValue
    from kiln.capture.values.objects import NewObjectValue, UserObjectValue

    kind = _python_type(x)
    if kind in _ATOMIC or kind in (tuple, frozenset) or (isinstance(kind, type) and issubclass(kind, type)):
        return x  # copy._copy_immutable
    if type(x) is ListValue:
        return ListValue(list(tx.items(x)))
    if _plain_dict(x, kind):
        return _new_dict(dict(x.entries), kind)
    if type(x) is SetValue:
        return SetValue(list(x.members.values()))
    if type(x) is NamedTupleValue and _plain_namedtuple(kind):
        return NamedTupleValue(list(x.elements), kind)
    if type(x) is TupleValue:
        return x
    if type(x) in (NewObjectValue, UserObjectValue):
        _check_plain_class(kind, deep=False)
        state = _reduce_state(tx, x, deep=False)
        return _reconstruct(tx, kind, state, None)
    unsupported(f"copy.copy() of {x}: kiln models constants, lists, dicts, sets, tuples, namedtuples and plain "
                f"objects", hint="kiln runs the copy between two graphs")


# ---- deep copies ----------------------------------------------------------------------------------

class _DeepCopier:
    """One deepcopy call: the memo maps what a value stands for to its copy."""

    def __init__(self, tx):
        self.tx = tx
        self.memo: dict = {}
        self.real_memo: dict = {}  # for constants, copied for real
        self.storages: dict = {}   # storage of each tensor copied -> the tensor value

    def copy(self, x: Value) -> Value:
        key = _identity(x)
        if key in self.memo:
            return self.memo[key]
        y = self._copy(x, key)
        if y is not x:
            self.memo[key] = y
        return y

    def _copy(self, x: Value, key) -> Value:
        from kiln.capture.values.containers import DictValue, ListValue, SetValue, TupleValue
        from kiln.capture.values.namedtuples import NamedTupleValue
        from kiln.capture.values.dict_objects import AttrsView
        from kiln.capture.values.instance_dicts import InstanceDictValue
        from kiln.capture.values.objects import NewObjectValue, UserObjectValue
        from kiln.capture.values.tensors import TensorValue

        kind = _python_type(x)
        if kind in _ATOMIC or (isinstance(kind, type) and issubclass(kind, type)):
            return x
        if isinstance(x, ConstantValue) and type(x) is ConstantValue:
            try:
                result = copy.deepcopy(x.value, self.real_memo)
            except Exception as exc:
                unsupported(f"copy.deepcopy of {x.value!r} raised {type(exc).__name__}: {exc}")
            return x if result is x.value else ConstantValue(result)
        if type(x) is TupleValue:
            items = [self.copy(v) for v in x.elements]
            if key in self.memo:  # a cycle through a list or object came back here
                return self.memo[key]
            return x if all(a is b for a, b in zip(items, x.elements)) else TupleValue(items)
        if type(x) is ListValue:
            y = ListValue([])
            self.memo[key] = y
            y.elements.extend(self.copy(v) for v in self.tx.items(x))
            return y
        if _plain_dict(x, kind):
            y = _new_dict({}, kind)
            self.memo[key] = y
            for k, v in list(x.entries.items()):
                y.entries[self._copy_key(k)] = self.copy(v)
            return y
        if type(x) in (InstanceDictValue, AttrsView):
            y = DictValue({}, dict_type=dict)
            self.memo[key] = y
            for name, value in _instance_state(self.tx, x.obj) or []:
                y.entries[name] = self.copy(value)
            return y
        if type(x) is SetValue:
            return SetValue([self.copy(m) for m in x.members.values()])
        if type(x) is NamedTupleValue and _plain_namedtuple(kind):
            return NamedTupleValue([self.copy(v) for v in x.elements], kind)
        if isinstance(x, TensorValue):
            return self._copy_tensor(x)
        if type(x) in (NewObjectValue, UserObjectValue):
            _check_plain_class(kind, deep=True)
            state = _reduce_state(self.tx, x, deep=True)
            return _reconstruct(self.tx, kind, state, self, key)
        unsupported(f"copy.deepcopy() of {x}: kiln models constants, containers, tensors and plain objects",
                    hint="kiln runs the copy between two graphs")

    def _copy_key(self, k):
        from kiln.capture.values.container_keys import ObjectKey, dict_key

        if isinstance(k, ObjectKey):
            return dict_key(self.tx, self.copy(k.value))
        try:
            return copy.deepcopy(k, self.real_memo)
        except Exception as exc:
            unsupported(f"copy.deepcopy of the key {k!r} raised {type(exc).__name__}: {exc}")

    def _copy_tensor(self, x) -> Value:
        """Tensor.__deepcopy__ of a plain tensor that needs no grad: a copy of its whole storage with the
        same offset, size and strides; here the storage is exactly the tensor, so a clone."""
        import torch

        ex = x.example
        if x.python_type() is not torch.Tensor:
            unsupported(f"copy.deepcopy of a {x.python_type().__name__} (its __deepcopy__ is not modeled)")
        if ex.requires_grad:
            unsupported("copy.deepcopy of a tensor that requires grad (eager makes a new leaf, or raises for a "
                        "non-leaf)", hint="kiln runs the copy between two graphs")
        if ex.layout is not torch.strided or ex.is_conj() or ex.is_neg():
            unsupported(f"copy.deepcopy of a {ex.layout} tensor or a conjugate/negative view")
        if x.node.op == "get_attr":
            unsupported("copy.deepcopy of a tensor a module holds (a buffer)")
        whole = ex.storage_offset() == 0 and ex.untyped_storage().nbytes() == ex.numel() * ex.element_size()
        dense = ex.numel() <= 1 or any(ex.is_contiguous(memory_format=f) for f in _FORMATS(ex.dim()))
        if not (whole and dense):
            unsupported("copy.deepcopy of a tensor that is a view into a larger storage (eager copies the whole "
                        "storage)")
        storage = ex.untyped_storage()._cdata
        if storage in self.storages and self.storages[storage] is not x:
            unsupported("copy.deepcopy of two tensors sharing one storage (their copies share one too)")
        self.storages[storage] = x
        if x.source is not None:
            self._guard_plain_input(x)
        return self.tx.output.call("call_method", "clone", [x], {})

    def _guard_plain_input(self, x) -> None:
        """An input tensor copies its Python attributes and .grad too: both must be empty (guarded)."""
        from kiln.capture.guards import GuardKind
        from kiln.capture.sources import AttrSource

        output = self.tx.output
        real = next(t for s, t in zip(output.input_sources, output.example_inputs) if s == x.source)
        if real.grad is not None or real.__dict__:
            unsupported("copy.deepcopy of a tensor with a .grad or Python attributes")
        output.guards.add(GuardKind.NONE, AttrSource(x.source, "grad"), True)
        output.guards.length(AttrSource(x.source, "__dict__"), real.__dict__)


def _FORMATS(dim: int):
    import torch

    return [torch.contiguous_format] + ([torch.channels_last] if dim == 4 else []) + \
        ([torch.channels_last_3d] if dim == 5 else [])


def _identity(x: Value):
    """What object a value stands for (the memo key): the real object for existing ones."""
    from kiln.capture.values.dict_objects import AttrsView
    from kiln.capture.values.instance_dicts import InstanceDictValue
    from kiln.capture.values.objects import UserObjectValue

    if isinstance(x, UserObjectValue):
        return ("object", id(x.obj))
    if isinstance(x, InstanceDictValue):
        return ("dict", id(x.obj.obj))
    if isinstance(x, AttrsView):
        return ("dict", id(x.obj))
    real = getattr(x, "obj", None)
    return ("value", id(real) if real is not None and not isinstance(x, ConstantValue) else id(x))


def _python_type(x: Value):
    try:
        return x.python_type()
    except Exception:
        return None


def _plain_namedtuple(cls) -> bool:
    """A collections.namedtuple (or typing.NamedTuple) class whose copies are cls(*items): no copy hooks
    of its own, no instance dict."""
    if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
        return False
    if cls.__dictoffset__ or type(cls) is not type or copyreg.dispatch_table.get(cls) is not None:
        return False
    for klass in cls.__mro__:
        if klass in (tuple, object):
            break
        hooks = [h for h in _COPY_HOOKS if h in vars(klass)]
        if hooks == ["__getnewargs__"] and getattr(vars(klass)["__getnewargs__"], "__code__", None) is \
                _NAMEDTUPLE_GETNEWARGS:
            continue  # namedtuple's own: the items
        if hooks:
            return False
    return True


_NAMEDTUPLE_GETNEWARGS = collections.namedtuple("_", "a").__getnewargs__.__code__


# ---- the default protocol of plain objects --------------------------------------------------------

def _check_plain_class(cls: type, deep: bool) -> None:
    """Classes whose copies the default protocol makes: cls.__new__(cls) then __dict__.update(state)."""
    name = cls.__qualname__
    meta = type(cls)
    if meta is not type and (meta.__getattribute__ is not type.__getattribute__ or hasattr(meta, "__getattr__")):
        unsupported(f"copying a {name}: its metaclass {meta.__name__} changes class attribute lookup")
    if cls.__new__ is not object.__new__:
        unsupported(f"copying a {name}: the class defines __new__ (copy calls cls.__new__(cls))")
    if copyreg.dispatch_table.get(cls) is not None:
        unsupported(f"copying a {name}: copyreg has a reducer for the class")
    if getattr(cls, "__abstractmethods__", None):
        unsupported(f"copying a {name}: abstract class")
    for klass in cls.__mro__[:-1]:
        if not klass.__flags__ & _HEAPTYPE:
            unsupported(f"copying a {name}: it derives from the builtin {klass.__name__}")
        if vars(klass).get("__slots__"):
            unsupported(f"copying a {name}: the class has __slots__")
        hooks = [h for h in _COPY_HOOKS if h in vars(klass)]
        if hooks:
            unsupported(f"copying a {name}: {klass.__qualname__} defines {', '.join(hooks)}",
                        hint="kiln models the default copy protocol only; it runs the copy between two graphs")
    if not cls.__dictoffset__:
        unsupported(f"copying a {name}: its objects have no __dict__")


def _lookup(tx, obj: Value, name: str) -> Value | None:
    """getattr(obj, name, None) as Python does it (the class's __getattribute__ traced)."""
    from kiln.capture.values.builtins import _getattr

    found = _getattr(tx, obj, ConstantValue(name), ConstantValue(None))
    return None if found.is_constant() and found.as_constant() is None else found


def _reduce_state(tx, x: Value, deep: bool):
    """What copy gets from the default protocol: the lookups copy and object.__reduce_ex__(4) make on
    the instance, then the state, the instance dict's (name, value) pairs (None when it is empty)."""
    from kiln.capture.values.objects import ObjectSlotMethod

    if deep and _lookup(tx, x, "__deepcopy__") is not None:
        unsupported(f"copy.deepcopy of a {x.python_type().__name__} whose __deepcopy__ comes from the instance")
    for name in ("__reduce_ex__", "__reduce__", "__getstate__"):
        found = _lookup(tx, x, name)
        if not (isinstance(found, ObjectSlotMethod) and found.obj is x and found.name == name):
            unsupported(f"copying a {x.python_type().__name__}: its {name} is not object's ({found})")
    return _instance_state(tx, x)


def _instance_state(tx, x: Value):
    """The (name, value) pairs of x's instance dict in order, None when it is empty."""
    from kiln.capture.values.objects import NewObjectValue, UserObjectValue

    if isinstance(x, NewObjectValue):
        return list(x.attrs.items()) or None
    if not isinstance(x, UserObjectValue) or x.source is None:
        unsupported(f"the __dict__ of {x}")
    from kiln.capture.side_effects import AttrDelete
    from kiln.capture.sources import GetItemSource
    from kiln.capture.values.builder import wrap

    real = x.obj.__dict__
    dict_source = x.attr_source("__dict__")
    tx.output.guards.dict_keys(dict_source, real)
    state = {name: None for name in real}
    for effect in tx.output.side_effects.attr_effects(x):  # stores and deletes recorded while tracing
        if isinstance(effect, AttrDelete):
            state.pop(effect.name, None)
            continue
        if effect.deleted_before:
            state.pop(effect.name, None)  # deleted, then set again: it moved to the end
        if not effect.raw:
            from kiln.capture.values.objects import data_descriptor_of

            if data_descriptor_of(type(x.obj), effect.name) is not None:
                unsupported(f"copying a {type(x.obj).__name__} after a store to its descriptor {effect.name!r}")
        state[effect.name] = effect.value
    pairs = [(name, value if value is not None else wrap(tx, real[name], GetItemSource(dict_source, name)))
             for name, value in state.items()]
    return pairs or None


def _reconstruct(tx, cls: type, state, copier: _DeepCopier | None, key=None) -> Value:
    """copy._reconstruct for copyreg.__newobj__: y = cls.__new__(cls); y.__dict__.update(state), with the
    `hasattr(y, "__setstate__")` and `y.__dict__` reads traced."""
    from kiln.capture.values.builtins import _hasattr
    from kiln.capture.values.dict_objects import AttrsView
    from kiln.capture.values.objects import NewObjectValue, data_descriptor_of

    y = NewObjectValue(cls)
    if copier is not None:
        copier.memo[key] = y
    if state is None:
        return y
    if copier is not None:
        state = [(name, copier.copy(value)) for name, value in state]
    if _hasattr(tx, y, ConstantValue("__setstate__")).as_constant():
        unsupported(f"copying a {cls.__qualname__}: the copy has a __setstate__")
    view = tx.getattr(y, "__dict__")
    if not (isinstance(view, AttrsView) and view.obj is y):
        unsupported(f"copying a {cls.__qualname__}: its __dict__ attribute is not the instance dict")
    for name, value in state:
        if not isinstance(name, str) or data_descriptor_of(cls, name) is not None:
            unsupported(f"copying a {cls.__qualname__}: its __dict__ holds {name!r}, which a descriptor shadows")
        y.attrs[name] = value
    return y


def is_copy_function(fn) -> bool:
    return isinstance(fn, types.FunctionType) and fn in (copy.copy, copy.deepcopy)
