"""Instances of Python subclasses of dict / OrderedDict created while tracing (HuggingFace's
`ModelOutput` dataclasses, config-like dicts).

Such an object has two parts: its instance attributes (as any new object) and its dict items. The
class's Python methods (__init__, __post_init__, __setattr__, __getitem__, to_tuple, ...) are traced
as written; what they reach of the C base class is modeled here:

    super().__setitem__(k, v) / dict.__setitem__      item k = v (no Python __setitem__ runs)
    super().__setattr__(k, v) / object.__setattr__    attribute k = v (no Python __setattr__ runs)
    super().__init__(...) of dict / OrderedDict        items from a mapping or pairs, and keywords
    keys() values() items() get() in len() iter()      read the items (unless the class overrides them)
    obj.__dict__                                       the instance attributes, read-only

After the graph the object is rebuilt without running any of its Python code: `cls.__new__(cls)`, then
the base class's own __setitem__ for each item (in order) and object.__setattr__ for each attribute.
"""
from __future__ import annotations

import collections
import types

from kiln.capture.values.base import BoundMethodValue, ConstantValue, Value, note_mutation, unsupported
from kiln.capture.values.containers import DictValue
from kiln.capture.values.container_keys import dict_key, key_value
from kiln.capture.values.objects import NewObjectValue, class_attribute

_DICT_BASES = (dict, collections.OrderedDict)
_ITEM_READERS = {"keys", "values", "items", "get", "__contains__", "__getitem__", "copy"}


def is_dict_subclass(cls: type) -> bool:
    """A Python class deriving from dict or OrderedDict, with dict's own __new__ and a metaclass that does
    not change instantiation (transformers' ModelOutput has one that only renames class attributes)."""
    from kiln.capture.values.objects import metaclass_keeps_instantiation

    return (isinstance(cls, type) and issubclass(cls, dict) and cls not in _DICT_BASES
            and metaclass_keeps_instantiation(cls) and cls.__new__ is dict.__new__
            and not any(k.__module__ == "builtins" and k not in (dict, object) for k in cls.__mro__))


def python_override(cls: type, name: str):
    """The Python function `name` of cls's MRO if one comes before the C bases, else None."""
    for klass in cls.__mro__:
        if klass in _DICT_BASES or klass is object:
            return None
        found = vars(klass).get(name)
        if found is not None:
            return found if isinstance(found, types.FunctionType) else None
    return None


class DictObjectValue(NewObjectValue):
    """A new instance of a dict subclass: attributes (self.attrs) and items (self.store)."""

    def __init__(self, cls: type):
        super().__init__(cls)
        self.store = DictValue({}, dict_type=dict)
        self.store.view_owner = self  # its dict views stand for views of this object (dict_views.py)

    # ---- attributes --------------------------------------------------------------------------

    def getattr(self, tx, name: str) -> Value:
        if name in self.attrs:
            return self.attrs[name]
        if name == "__dict__":
            return AttrsView(self)
        if name in _ITEM_READERS or name in ("__len__", "__iter__", "__setitem__", "update", "setdefault", "pop"):
            if python_override(self.cls, name) is None:
                return BoundMethodValue(self, name)
        return super().getattr(tx, name)

    def raw_setattr(self, tx, name: str, value: Value) -> None:
        """object.__setattr__: the instance attribute, whatever the class's __setattr__ does."""
        NewObjectValue.setattr(self, tx, name, value)

    def raw_setitem(self, tx, key: Value, value: Value) -> None:
        """dict.__setitem__: the item, whatever the class's __setitem__ does."""
        note_mutation(tx, self)
        self.store.entries[dict_key(tx, key, self.store.entries)] = value

    def raw_init(self, tx, args: list[Value], kwargs: dict[str, Value]) -> None:
        """dict.__init__ / OrderedDict.__init__(self, mapping_or_pairs=(), **kwargs)."""
        if len(args) > 1:
            unsupported(f"{self.cls.__name__}: dict.__init__ takes at most one positional argument")
        for arg in args:
            if isinstance(arg, DictValue):
                for k, v in arg.entries.items():
                    self.raw_setitem(tx, key_value(k), v)
            else:
                for pair in tx.items(arg):
                    k, v = tx.items(pair)
                    self.raw_setitem(tx, k, v)
        for k, v in kwargs.items():
            self.raw_setitem(tx, ConstantValue(k), v)

    # ---- the C methods of dict reached through the object ------------------------------------

    def call_method(self, tx, name, args, kwargs):
        override = python_override(self.cls, name)
        if override is not None:
            return class_attribute(tx, self.cls, name, self).call(tx, args, kwargs)
        if name == "__setitem__" and len(args) == 2 and not kwargs:
            self.raw_setitem(tx, args[0], args[1])
            return ConstantValue(None)
        if name in _ITEM_READERS or name in ("__len__", "__iter__"):
            return _dict_read(self, tx, name, args, kwargs)
        if name == "update":
            self.raw_init(tx, args, kwargs)
            return ConstantValue(None)
        unsupported(f"{self.cls.__name__}.{name}() (a dict method) on an object made while tracing")

    def getitem(self, tx, key: Value) -> Value:
        return self.call_method(tx, "__getitem__", [key], {})

    def items(self, tx) -> list[Value]:
        if python_override(self.cls, "__iter__") is not None:
            return tx.items(class_attribute(tx, self.cls, "__iter__", self).call(tx, [], {}))
        return [key_value(k) for k in self.store.entries]

    def truth(self, tx) -> bool:
        if python_override(self.cls, "__bool__") is not None or python_override(self.cls, "__len__") is not None:
            return super().truth(tx)
        return bool(self.store.entries)

    def reconstruct(self, cg) -> None:
        cg.prepare_call(rebuild_dict_object)
        cg.load_const(self.cls)
        cg.reconstruct(DictValue(self.attrs))
        cg.reconstruct(self.store)
        cg.call(3)

    def __repr__(self) -> str:
        return f"NewDictObject({self.cls.__name__}, items={list(self.store.entries)})"


def rebuild_dict_object(cls, attrs: dict, items: dict):
    """Rebuild a dict-subclass object that tracing created, running none of its Python code."""
    obj = cls.__new__(cls)
    base = next(k for k in cls.__mro__ if k in _DICT_BASES)
    for key, value in items.items():
        base.__setitem__(obj, key, value)
    for name, value in attrs.items():
        object.__setattr__(obj, name, value)
    return obj


class AttrsView(Value):
    """`obj.__dict__` of an object made while tracing: its attributes (writes: values/instance_dicts.py)."""

    def __init__(self, obj: NewObjectValue):
        self.obj = obj

    def python_type(self) -> type:
        return dict

    def getattr(self, tx, name: str) -> Value:
        if name in ("get", "__getitem__", "__contains__", "keys", "values", "items", "copy", "__len__",
                    "__setitem__", "__delitem__", "update"):
            return BoundMethodValue(self, name)
        unsupported(f"__dict__.{name} of an object made while tracing")

    def state(self, tx) -> list:
        return list(self.obj.attrs.items())

    def getitem(self, tx, key: Value) -> Value:
        return self.call_method(tx, "__getitem__", [key], {})

    def delitem(self, tx, key: Value) -> None:
        from kiln.capture.values.instance_dicts import write_instance_dict

        write_instance_dict(tx, self.obj, "__delitem__", [key], {})

    def items(self, tx) -> list[Value]:
        return [ConstantValue(k) for k in self.obj.attrs]

    def truth(self, tx) -> bool:
        return bool(self.obj.attrs)

    def call_method(self, tx, name, args, kwargs) -> Value:
        from kiln.capture.values.instance_dicts import WRITES, write_instance_dict

        if name in WRITES:  # (a copy of the attributes below would drop the write)
            return write_instance_dict(tx, self.obj, name, args, kwargs)
        if name == "__len__":
            return ConstantValue(len(self.obj.attrs))
        if name in ("keys", "values", "items"):
            from kiln.capture.values.instance_dicts import InstanceDictView

            return InstanceDictView(self, name)
        if name not in ("get", "__getitem__", "__contains__", "copy"):
            unsupported(f"__dict__.{name}() of an object made while tracing")
        return DictValue(self.obj.attrs).call_method(tx, name, args, kwargs)

    def reconstruct(self, cg) -> None:
        cg.prepare_call(object.__getattribute__)
        cg.reconstruct(self.obj)
        cg.load_const("__dict__")
        cg.call(2)


class RawSetattr(Value):
    """`super().__setattr__` reaching object.__setattr__ from a Python __setattr__: the attribute of an
    object made while tracing, or a recorded store on an existing one (values/objects.py)."""

    def __init__(self, obj: Value):
        self.obj = obj

    def call(self, tx, args, kwargs) -> Value:
        from kiln.capture.values.objects import UserObjectValue

        if len(args) != 2 or kwargs or not args[0].is_constant():
            unsupported("object.__setattr__ with a non-constant name")
        name = args[0].as_constant()
        if not isinstance(name, str):
            unsupported(f"object.__setattr__ with a {type(name).__name__} name (TypeError)")
        if isinstance(self.obj, DictObjectValue):
            self.obj.raw_setattr(tx, name, args[1])
        elif isinstance(self.obj, UserObjectValue):
            self.obj.raw_setattr(tx, name, args[1])
        else:
            NewObjectValue.setattr(self.obj, tx, name, args[1])
        return ConstantValue(None)


class RawDelattr(Value):
    """`super().__delattr__` / `object.__delattr__` reaching object's C method from a Python __delattr__."""

    def __init__(self, obj: Value):
        self.obj = obj

    def call(self, tx, args, kwargs) -> Value:
        if len(args) != 1 or kwargs or not args[0].is_constant() or not isinstance(args[0].as_constant(), str):
            unsupported("object.__delattr__ with a non-constant name")
        if isinstance(self.obj, DictObjectValue):
            unsupported(f"deleting an attribute of a {self.obj.cls.__name__} (a dict subclass) made while tracing")
        self.obj.raw_delattr(tx, args[0].as_constant(), raw=True)
        return ConstantValue(None)


class RawDictMethod(Value):
    """`super().__setitem__` / `super().__init__` / `super().update` ... reaching dict's C method."""

    def __init__(self, obj: DictObjectValue, name: str):
        self.obj, self.name = obj, name

    def call(self, tx, args, kwargs) -> Value:
        if self.name == "__init__":
            self.obj.raw_init(tx, args, kwargs)
            return ConstantValue(None)
        if self.name == "__setitem__" and len(args) == 2 and not kwargs:
            self.obj.raw_setitem(tx, args[0], args[1])
            return ConstantValue(None)
        if self.name == "update":
            self.obj.raw_init(tx, args, kwargs)
            return ConstantValue(None)
        if self.name in _ITEM_READERS or self.name in ("__len__", "__iter__"):
            return _dict_read(self.obj, tx, self.name, args, kwargs)
        unsupported(f"super().{self.name}() of {self.obj.cls.__name__} (a dict method)")


def _dict_read(obj: DictObjectValue, tx, name, args, kwargs) -> Value:
    if name == "__len__":
        return ConstantValue(len(obj.store.entries))
    if name == "__iter__":
        from kiln.capture.values.containers import ListIteratorValue

        return ListIteratorValue([key_value(k) for k in obj.store.entries])
    return obj.store.call_method(tx, name, args, kwargs)


class UnboundBaseMethod(Value):
    """`object.__setattr__`, `dict.__setitem__`, `dict.__init__` called with an object made while tracing
    as first argument: the base class's own behaviour (no Python override runs)."""

    def __init__(self, owner: type, name: str):
        self.owner, self.name = owner, name

    def call(self, tx, args, kwargs) -> Value:
        from kiln.capture.values.objects import UserObjectValue
        from kiln.capture.values.super_values import _GenericGetattr

        if self.owner is object and args and isinstance(args[0], UserObjectValue) and args[0].source is not None \
                and self.name in ("__setattr__", "__delattr__", "__getattribute__"):
            pass  # an existing object: recorded stores and deletes, reads through its place
        elif not args or not isinstance(args[0], NewObjectValue) or \
                (self.owner is dict and not isinstance(args[0], DictObjectValue)):
            unsupported(f"{self.owner.__name__}.{self.name}() on {args[0] if args else 'nothing'}")
        if self.name == "__setattr__":
            return RawSetattr(args[0]).call(tx, args[1:], kwargs)
        if self.name == "__delattr__":
            return RawDelattr(args[0]).call(tx, args[1:], kwargs)
        if self.name == "__getattribute__":
            return _GenericGetattr(args[0]).call(tx, args[1:], kwargs)
        return RawDictMethod(args[0], self.name).call(tx, args[1:], kwargs)

    def reconstruct(self, cg) -> None:
        cg.load_const(getattr(self.owner, self.name))


class ExistingDictRead(Value):
    """`super().get(k)` / `super().__getitem__(k)` / `super().__contains__(k)` reaching dict's C method on
    a dict-subclass object that existed before the call (transformers' `_CanRecordRegistry.get`): the
    item is read as dict's method reads it, with the key's presence guarded the same way."""

    def __init__(self, obj: Value, name: str):
        self.obj, self.name = obj, name

    def call(self, tx, args, kwargs) -> Value:
        from kiln.capture.sources import RawDictItemSource
        from kiln.capture.values.base import is_constant_literal
        from kiln.capture.values.builder import wrap

        if kwargs or not args or len(args) > (2 if self.name == "get" else 1) or not args[0].is_constant() \
                or not is_constant_literal(args[0].as_constant()):
            unsupported(f"super().{self.name}() of {type(self.obj.obj).__name__} with arguments {args}")
        key = args[0].as_constant()
        present = dict.__contains__(self.obj.obj, key)
        tx.output.guards.constant(RawDictItemSource(self.obj.source, key, contains=True), present)
        if self.name == "__contains__":
            return ConstantValue(present)
        if present:
            return wrap(tx, dict.__getitem__(self.obj.obj, key), RawDictItemSource(self.obj.source, key))
        if self.name == "get":
            return args[1] if len(args) > 1 else ConstantValue(None)
        unsupported(f"KeyError: {key!r}")
