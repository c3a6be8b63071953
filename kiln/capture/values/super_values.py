"""super() inside a method: the lookup that starts after a class in the object's MRO, and what it finds on
object and builtin bases (object.__getattribute__/__setattr__/__delattr__/__new__/__init__)."""
from __future__ import annotations

import collections
import types

from kiln.capture.sources import ConstantSource
from kiln.capture.values.base import ConstantValue, Value, unsupported
from kiln.capture.values.functions import UserMethodValue
from kiln.capture.values.objects import ClassValue, NewObjectValue, ObjectNew, UserObjectValue


class SuperValue(Value):
    """super() inside a method: attribute lookups start after `cls` in type(self).__mro__."""

    def __init__(self, cls: type, self_value: Value):
        self.cls = cls
        self.self_value = self_value

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.class_guards import note_name
        from kiln.capture.values.builder import wrap

        note_name(name)
        # super(C, cls) with a class (in __new__ or a classmethod): the class's own MRO, functions unbound
        of_class = isinstance(self.self_value, ClassValue) and issubclass(self.self_value.cls, self.cls)
        start_type = self.self_value.cls if of_class else self.self_value.python_type()
        mro = start_type.__mro__
        if self.cls not in mro:
            unsupported(f"super({self.cls.__name__}, ...): the object is not an instance or subclass")
        start = mro.index(self.cls) + 1
        from kiln.capture.values.class_stores import pending_class_attribute

        for klass in mro[start:]:
            stored = pending_class_attribute(tx, klass, name)
            if stored is not None:
                return stored
            if name in vars(klass):
                attr = vars(klass)[name]
                src = ConstantSource(f"{klass.__qualname__}.{name}", getattr(attr, "__func__", attr)
                                     if isinstance(attr, (staticmethod, classmethod)) else attr)
                if isinstance(attr, types.FunctionType):
                    if of_class:
                        return wrap(tx, attr, src)
                    return UserMethodValue(wrap(tx, attr, src), self.self_value)
                if isinstance(attr, classmethod):
                    return UserMethodValue(wrap(tx, attr.__func__, src),
                                           self.self_value if of_class else ClassValue(start_type))
                if isinstance(attr, staticmethod):
                    return wrap(tx, attr.__func__, src)
                if attr is object.__init__:
                    return _NoOp()
                from kiln.capture.values import exceptions

                if name == "__init__" and klass in exceptions.SIMPLE_BUILTIN_EXCEPTIONS and \
                        isinstance(self.self_value, exceptions.ExceptionValue):
                    return exceptions.BaseExceptionInit(self.self_value)
                if attr is object.__new__:
                    return ObjectNew()
                if attr is object.__getattribute__ and isinstance(self.self_value, (UserObjectValue, NewObjectValue)):
                    return _GenericGetattr(self.self_value)
                from kiln.capture.values import dict_objects

                if attr is object.__setattr__ and isinstance(self.self_value, (UserObjectValue, NewObjectValue)):
                    return dict_objects.RawSetattr(self.self_value)
                if attr is object.__delattr__ and isinstance(self.self_value, (UserObjectValue, NewObjectValue)):
                    return dict_objects.RawDelattr(self.self_value)
                if klass in (dict, collections.OrderedDict) and \
                        isinstance(self.self_value, dict_objects.DictObjectValue):
                    return dict_objects.RawDictMethod(self.self_value, name)
                if klass in (dict, collections.OrderedDict) and name in ("get", "__getitem__", "__contains__") \
                        and isinstance(self.self_value, UserObjectValue) and self.self_value.source is not None:
                    return dict_objects.ExistingDictRead(self.self_value, name)
                if callable(attr) and klass.__module__.startswith("torch") and name == "__init__":
                    return _NoOp()
                if hasattr(attr, "__get__") and not isinstance(attr, (int, float, str, tuple, bool, type(None))):
                    # a C method of a builtin base (dict.get, list.append, ...): bound, and run as Python
                    return _SuperBoundAttr(self.cls, self.self_value, name)
                return wrap(tx, attr, src)
        unsupported(f"super().{name}")


class _SuperBoundAttr(Value):
    """`super().name` for a C-level attribute: kiln does not run it, but can hand it back bound."""

    def __init__(self, cls: type, self_value: Value, name: str):
        self.cls, self.self_value, self.name = cls, self_value, name

    def call(self, tx, args, kwargs) -> Value:
        unsupported(f"super().{self.name}() of {self.cls.__name__} is a C method kiln does not trace",
                    hint="kiln runs it between two graphs")

    def reconstruct(self, cg) -> None:
        cg.prepare_call(super)
        cg.load_const(self.cls)
        cg.reconstruct(self.self_value)
        cg.call(2)
        cg.load_attr(self.name)


class _GenericGetattr(Value):
    """`super().__getattribute__` reaching object.__getattribute__ from a Python __getattribute__."""

    def __init__(self, obj: "UserObjectValue | NewObjectValue"):
        self.obj = obj

    def call(self, tx, args, kwargs) -> Value:
        if len(args) != 1 or kwargs or not args[0].is_constant():
            unsupported("object.__getattribute__ with a non-constant name")
        return self.obj.generic_getattr(tx, args[0].as_constant())


class _NoOp(Value):
    def call(self, tx, args, kwargs) -> Value:
        return ConstantValue(None)
