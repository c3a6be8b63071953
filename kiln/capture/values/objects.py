"""User-defined classes and their instances: objects from the frame, and objects created while tracing."""
from __future__ import annotations

import dataclasses
import functools
import types

from kiln.capture.class_guards import note_class, note_name
from kiln.capture.sources import AttrSource, ConstantSource
from kiln.capture.values.base import ConstantValue, Value, unsupported
from kiln.capture.values.class_stores import class_has_pending, class_source, pending_class_attribute, \
    stored_into as _stored_into
from kiln.capture.values.functions import UserFunctionValue, UserMethodValue


def class_attribute(tx, cls: type, name: str, self_value: Value | None) -> Value:
    """Look `name` up on cls's MRO and bind it like Python would (methods, properties, static/classmethods)."""
    from kiln.capture.values.builder import wrap

    note_class(cls, name)  # (what is found, or not, along its MRO is guarded: class_guards.py)
    for klass in cls.__mro__:
        pending = pending_class_attribute(tx, klass, name)
        if pending is not None:  # stored while tracing: plain data, no binding (class_stores.py)
            return pending
        if name in vars(klass):
            attr = vars(klass)[name]
            break
    else:
        unsupported(f"{cls.__name__!r} object has no attribute {name!r}")
    src = ConstantSource(f"{cls.__qualname__}.{name}", attr)
    if isinstance(attr, (staticmethod, classmethod)):  # the function's own place (its cells are read there)
        src = ConstantSource(f"{cls.__qualname__}.{name}", attr.__func__)
    if isinstance(attr, staticmethod):
        return wrap(tx, attr.__func__, src)
    if isinstance(attr, classmethod):
        return UserMethodValue(wrap(tx, attr.__func__, src), ClassValue(cls))
    if isinstance(attr, property):
        if self_value is None:
            return wrap(tx, attr, src)
        return wrap(tx, attr.fget, src).call(tx, [self_value], {})
    if isinstance(attr, types.FunctionType):
        if _stored_into(cls):
            fn = wrap(tx, attr, AttrSource(class_source(cls, self_value), name))  # guarded by identity
        else:
            fn = UserFunctionValue(attr, src)
        return UserMethodValue(fn, self_value) if self_value is not None else fn
    if self_value is not None and is_once_logging_method(cls, attr):
        return OnceLoggingCall(attr, self_value)
    if klass is object and self_value is not None:
        if name == "__class__":  # object's getset descriptor: the exact type (guarded where it was read)
            return ClassValue(cls)
        if name in OBJECT_SLOT_METHODS:
            return ObjectSlotMethod(self_value, name)
    if type(attr) is types.MemberDescriptorType and isinstance(self_value, UserObjectValue):
        # a __slots__ attribute (e.g. dataclasses.Field.name): read from the object, through its place
        try:
            found = attr.__get__(self_value.obj, cls)
        except AttributeError:
            unsupported(f"slot {name!r} of a {cls.__name__} is not set")
        return wrap(tx, found, AttrSource(self_value.source, name) if self_value.source is not None else None)
    if type(attr) is functools.cached_property and self_value is not None:
        return _cached_property_get(tx, cls, name, attr, self_value,
                                    ConstantSource(f"{cls.__qualname__}.{name}", attr.func))
    if python_slot(type(attr), "__get__") is not None:  # a user descriptor: its __get__ traced
        desc = _descriptor_value(tx, klass, name, attr)
        instance = self_value if self_value is not None else ConstantValue(None)
        return class_attribute(tx, type(attr), "__get__", desc).call(tx, [instance, ClassValue(cls)], {})
    if hasattr(attr, "__get__") and not isinstance(attr, (int, float, str, tuple, type(None), bool)) \
            and not isinstance(attr, type):
        unsupported(f"descriptor {type(attr).__name__} for attribute {name!r} of {cls.__name__}")
    if self_value is not None:
        # a plain class attribute (a constant, a tensor, a config object): read and guarded through the class
        src = AttrSource(class_source(cls, self_value), name)
    return wrap(tx, attr, src)


def _descriptor_value(tx, klass: type, name: str, descriptor) -> Value:
    """A descriptor object of a class, read from the class's own dict (`K.__dict__[name]`: no __get__ runs
    at guard time) so that its identity and the attributes its methods read are guarded."""
    from kiln.capture.sources import GetItemSource
    from kiln.capture.values.builder import wrap

    return wrap(tx, descriptor, GetItemSource(AttrSource(ConstantSource(klass.__qualname__, klass), "__dict__"), name))


def _cached_property_get(tx, cls: type, name: str, prop, obj: Value, src) -> Value:
    """functools.cached_property.__get__, reached when the instance dict lacks the name (a non-data
    descriptor: once cached, the dict entry wins): calls prop.func(obj) and writes the result into
    obj.__dict__ directly (no __setattr__ runs), as CPython's does."""
    from kiln.capture.values.base import note_mutation
    from kiln.capture.values.builder import wrap

    if prop.attrname != name or python_slot(cls, "__getattribute__") is not None:
        unsupported(f"cached_property {name!r} of {cls.__name__} stored under another name, or read through "
                    f"a Python __getattribute__")
    if isinstance(obj, NewObjectValue) and cls.__dictoffset__:
        value = wrap(tx, prop.func, src).call(tx, [obj], {})
        note_mutation(tx, obj)
        obj.attrs[name] = value
        return value
    if isinstance(obj, UserObjectValue) and hasattr(obj.obj, "__dict__"):
        value = wrap(tx, prop.func, src).call(tx, [obj], {})
        note_mutation(tx, obj)
        tx.output.side_effects.store_attr(obj, name, value, raw=True)
        return value
    unsupported(f"cached_property {name!r} of a {cls.__name__} object kiln does not model as a plain object")


# object's C methods an attribute read may reach (copy's protocol looks them up on the instance)
OBJECT_SLOT_METHODS = frozenset({"__reduce_ex__", "__reduce__", "__getstate__"})


class ObjectSlotMethod(Value):
    """`obj.__reduce_ex__` (or __reduce__, __getstate__) found on `object` itself: bound, not traced.
    copy.copy/deepcopy (values/copying.py) recognize it as the default protocol; calling it breaks."""

    def __init__(self, obj: Value, name: str):
        self.obj, self.name = obj, name

    def call(self, tx, args, kwargs) -> Value:
        unsupported(f"object.{self.name}() of a {self.obj.python_type().__name__} is a C method kiln does not run",
                    hint="kiln runs it between two graphs")

    def reconstruct(self, cg) -> None:
        cg.prepare_call(getattr)
        cg.reconstruct(self.obj)
        cg.load_const(self.name)
        cg.call(2)

    def __repr__(self) -> str:
        return f"ObjectSlotMethod({self.obj!r}.{self.name})"


def python_slot(cls: type, name: str):
    """The Python function cls's MRO gives for `name` (e.g. __delattr__), or None when the first
    definition is not a plain Python function (object's C slot, a builtin base's)."""
    note_class(cls, name)
    for klass in cls.__mro__:
        if name in vars(klass):
            found = vars(klass)[name]
            return found if isinstance(found, types.FunctionType) else None
    return None


def data_descriptor_of(cls: type, name: str):
    """The data descriptor (property, slot, getset) cls's MRO has for `name`, else None."""
    note_class(cls, name)
    for klass in cls.__mro__:
        if name in vars(klass):
            found = vars(klass)[name]
            return found if hasattr(type(found), "__set__") or hasattr(type(found), "__delete__") else None
    return None


def delete_attribute(tx, obj: Value, name: str) -> None:
    """`del obj.name` / `delattr(obj, name)`: a class's Python __delattr__ runs as written, else object's."""
    if not isinstance(obj, (UserObjectValue, NewObjectValue)) or type(obj).__name__ == "DictObjectValue":
        unsupported(f"deleting attribute {name!r} of {obj}")
    if isinstance(obj, UserObjectValue) and obj.source is None:
        unsupported(f"deleting attribute {name!r} of a {obj.python_type().__name__} kiln cannot name")
    cls = obj.python_type()
    if python_slot(cls, "__delattr__") is not None:
        class_attribute(tx, cls, "__delattr__", obj).call(tx, [ConstantValue(name)], {})
        return
    if not has_generic_delattr(cls):
        unsupported(f"deleting attribute {name!r} of a {cls.__name__}, whose __delattr__ is a C method")
    obj.raw_delattr(tx, name)


def set_through_descriptor(tx, cls: type, name: str, obj: Value, value: Value) -> bool:
    """object.__setattr__'s first step: a data descriptor of cls for `name` takes the store. A property
    with a Python setter runs it (traced) and answers True; no descriptor: False; others break."""
    descriptor = data_descriptor_of(cls, name)
    if descriptor is None:
        return False
    if type(descriptor) is property and isinstance(descriptor.fset, types.FunctionType):
        UserFunctionValue(descriptor.fset, ConstantSource(f"{cls.__qualname__}.{name}.fset", descriptor.fset)) \
            .call(tx, [obj, value], {})
        return True
    if python_slot(type(descriptor), "__set__") is not None:  # a user data descriptor: its __set__ traced
        klass = next(k for k in cls.__mro__ if name in vars(k))
        desc = _descriptor_value(tx, klass, name, descriptor)
        class_attribute(tx, type(descriptor), "__set__", desc).call(tx, [obj, value], {})
        return True
    unsupported(f"assigning attribute {name!r} of a {cls.__name__}: the class has a {type(descriptor).__name__} "
                f"of that name{' without a setter (AttributeError)' if type(descriptor) is property else ''}")


def _python_slot(cls: type, name: str) -> bool:
    """Whether `name` is a `__slots__` member of a Python class in cls's MRO (the descriptor found for it):
    object.__setattr__ stores the value in the object's slot; kiln keeps it with the new object's
    attributes and the rebuild stores it with object.__setattr__ again."""
    descriptor = data_descriptor_of(cls, name)
    if type(descriptor) is not types.MemberDescriptorType:
        return False
    owner = descriptor.__objclass__
    slots = getattr(owner, "__slots__", ())
    slots = (slots,) if isinstance(slots, str) else tuple(slots)
    return bool(owner.__flags__ & (1 << 9)) and name in slots  # (1 << 9): a class written in Python


def _refuse_descriptor(cls: type, name: str, what: str) -> None:
    if data_descriptor_of(cls, name) is not None:
        unsupported(f"{what} attribute {name!r} of a {cls.__name__}: the class has a data descriptor "
                    f"(property, slot) of that name, whose code kiln does not run")


_LOGGER_METHODS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}


def is_once_logging_method(cls: type, attr) -> bool:
    """A functools.lru_cache-wrapped function attached to logging.Logger whose body only calls the logger's
    own methods (transformers' `warning_once`/`info_once`: each message is logged once per process)."""
    import functools
    import logging

    if not isinstance(attr, functools._lru_cache_wrapper) or not issubclass(cls, logging.Logger):
        return False
    code = getattr(getattr(attr, "__wrapped__", None), "__code__", None)
    return code is not None and set(code.co_names) <= _LOGGER_METHODS


class OnceLoggingCall(Value):
    """`logger.warning_once(msg)`: a deferred call (side_effects.DeferredCall) made after the graph, in
    program order among the other side effects; the lru_cache keeps it once-only then, as in eager."""

    def __init__(self, fn, logger: Value):
        self.fn, self.logger = fn, logger

    def call(self, tx, args, kwargs) -> Value:
        from kiln.capture.values.containers import DictValue, TupleValue

        if not all(v.is_constant() for v in [*args, *kwargs.values()]):
            unsupported(f"{self.fn.__name__}() with arguments that are not constants")
        bound = TupleValue([self.logger, *args])
        tx.output.side_effects.deferred_call(TupleValue([ConstantValue(self.fn), bound, DictValue(dict(kwargs))]))
        return ConstantValue(None)


def user_dunder(tx, obj: Value, name: str, args: list[Value]) -> Value | None:
    """Call a user-defined dunder method (e.g. __add__) if obj's class defines one in Python."""
    if not isinstance(obj, (UserObjectValue, NewObjectValue)):
        return None
    cls = obj.python_type()
    for klass in cls.__mro__[:-1]:
        if name in vars(klass) and isinstance(vars(klass)[name], types.FunctionType):
            return class_attribute(tx, cls, name, obj).call(tx, args, {})
    return None


def has_generic_getattribute(cls: type) -> bool:
    """Attribute reads of cls's instances are object.__getattribute__'s (dict's and list's slot is the same
    generic lookup, so subclasses of them count too)."""
    return cls.__getattribute__ in (object.__getattribute__, dict.__getattribute__, list.__getattribute__,
                                    types.SimpleNamespace.__getattribute__)  # (PyObject_GenericGetAttr)


def has_generic_setattr(cls: type) -> bool:
    """Attribute stores of cls's instances are object.__setattr__'s (types.SimpleNamespace's slot is
    PyObject_GenericSetAttr too: values/namespaces.py)."""
    return cls.__setattr__ in (object.__setattr__, types.SimpleNamespace.__setattr__)


def has_generic_delattr(cls: type) -> bool:
    """Attribute deletes of cls's instances are object.__delattr__'s (SimpleNamespace's too)."""
    return cls.__delattr__ in (object.__delattr__, types.SimpleNamespace.__delattr__)


def _metaclass_data_descriptor(cls, name: str) -> bool:
    """Whether `name` is a data descriptor (a property, a slot) in a Python metaclass of `cls`: then
    `cls.name` calls its __get__ whatever the class's own MRO holds."""
    for meta in type(cls).__mro__:
        if meta.__flags__ & (1 << 9) and name in vars(meta):  # (Py_TPFLAGS_HEAPTYPE: a Python class)
            kind = type(vars(meta)[name])
            return hasattr(kind, "__set__") or hasattr(kind, "__delete__")
    return False


class ClassValue(Value):
    """A class: calling it builds an object (user classes are traced through __init__)."""

    def __init__(self, cls: type, source=None):
        self.cls = cls
        self.source = source
        note_class(cls)

    def python_type(self) -> type:
        return type(self.cls)

    def is_constant(self) -> bool:
        return True

    def as_constant(self):
        return self.cls

    def items(self, tx) -> list[Value]:
        from kiln.capture.values.enums import enum_class_members, is_enum_class

        if is_enum_class(self.cls):
            return enum_class_members(self.cls)
        return super().items(tx)

    def truth(self, tx) -> bool:
        """`if cls:` is True unless the metaclass defines `__bool__` or `__len__` (EnumMeta's, a user's)."""
        if any(("__bool__" in vars(meta) or "__len__" in vars(meta)) for meta in type(self.cls).__mro__
               if meta is not type and meta is not object):
            unsupported(f"truth value of class {self.cls!r}: its metaclass defines __bool__ or __len__")
        return True

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.builder import wrap

        note_name(name)
        if name in ("__name__", "__qualname__", "__module__"):
            return ConstantValue(getattr(self.cls, name))
        if name == "_make" and isinstance(self.cls, type) and issubclass(self.cls, tuple):
            from kiln.capture.values.namedtuples import NamedTupleMake, _generated_member

            if _generated_member(self.cls, "_make"):
                return NamedTupleMake(self.cls)
        from kiln.capture.values.collections_values import class_attribute_hook

        special = class_attribute_hook(self.cls, name)  # OrderedDict.fromkeys
        if special is not None:
            return special
        if name == "__dict__" and isinstance(self.cls, type) and tx.output.side_effects.class_stores and \
                any(k is self.cls for k, _ in tx.output.side_effects.class_stores):
            unsupported(f"{self.cls.__qualname__}.__dict__ after a store to the class in this trace")
        # a data descriptor of a user metaclass wins over the class's own attributes (type.__getattribute__)
        for klass in () if _metaclass_data_descriptor(self.cls, name) else self.cls.__mro__:
            stored = pending_class_attribute(tx, klass, name)
            if stored is not None:
                return stored
            if name in vars(klass):
                attr = vars(klass)[name]
                if isinstance(attr, classmethod):
                    return UserMethodValue(wrap(tx, attr.__func__, ConstantSource(name, attr.__func__)), self)
                if isinstance(attr, staticmethod):
                    return wrap(tx, attr.__func__, ConstantSource(name, attr.__func__))
                break
        try:
            value = getattr(self.cls, name)
        except AttributeError:
            unsupported(f"type object {self.cls.__name__!r} has no attribute {name!r}")
        if self.source is None and isinstance(self.cls, type) and self.cls.__module__ != "builtins" and \
                not isinstance(value, types.FunctionType):  # (functions: identity-guarded once stored into)
            return wrap(tx, value, AttrSource(ConstantSource(self.cls.__qualname__, self.cls), name))
        if self.source is None and isinstance(self.cls, type) and _stored_into(self.cls):
            return wrap(tx, value, AttrSource(ConstantSource(self.cls.__qualname__, self.cls), name))
        return wrap(tx, value, AttrSource(self.source, name) if self.source else ConstantSource(name, value))

    def call(self, tx, args, kwargs) -> Value:
        from kiln.capture.values.builtins import construct_builtin_type

        cls = self.cls
        from kiln.capture.values.stdlib import CLASS_CALLS  # functools.partial, collections (values/stdlib.py)

        special = CLASS_CALLS.get(cls)
        if special is not None:
            return special(tx, args, kwargs)
        from kiln.capture.values.contexts import make_context_manager

        context = make_context_manager(tx, cls, args, kwargs)
        if context is not None:
            return context
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            from kiln.capture.values.namedtuples import namedtuple_new_is_generated

            if not namedtuple_new_is_generated(cls):
                unsupported(f"creating a {cls.__qualname__}: the namedtuple class defines its own __new__")
            made = _make_namedtuple(tx, cls, args, kwargs)
            if python_slot(cls, "__init__") is not None:  # type.__call__ runs a subclass's __init__ too
                class_attribute(tx, cls, "__init__", made).call(tx, args, kwargs)
            return made
        if issubclass(cls, BaseException):
            from kiln.capture.values.exceptions import make_exception

            return make_exception(cls, args, kwargs, tx)
        from kiln.capture.values.operator_objects import OPERATOR_OBJECT_TYPES, make_operator_object

        if cls in OPERATOR_OBJECT_TYPES:
            return make_operator_object(cls, args, kwargs)
        from kiln.capture.values.module_construction import construct_torch_module, is_torch_module_class

        if is_torch_module_class(cls):  # nn.CrossEntropyLoss() in a forward: built while tracing
            return construct_torch_module(tx, cls, args, kwargs)
        if cls.__module__ == "builtins" or cls.__module__.startswith("torch"):
            return construct_builtin_type(tx, cls, args, kwargs)
        from kiln.capture.values.dict_objects import DictObjectValue, is_dict_subclass, python_override

        if is_dict_subclass(cls):
            obj = DictObjectValue(cls)
            if python_override(cls, "__init__") is not None:
                class_attribute(tx, cls, "__init__", obj).call(tx, args, kwargs)
            else:
                obj.raw_init(tx, args, kwargs)
            return obj
        from kiln.capture.values.enums import call_enum_class, is_enum_class

        if is_enum_class(cls):
            return call_enum_class(tx, cls, args, kwargs)
        if has_python_new(cls):
            return self._call_python_new(tx, args, kwargs)
        if not plainly_instantiable(cls):
            unsupported(f"creating an instance of {cls.__qualname__} (custom __new__ or metaclass)")
        obj = NewObjectValue(cls)
        init = cls.__init__
        if init is not object.__init__:
            class_attribute(tx, cls, "__init__", obj).call(tx, args, kwargs)
        elif args or kwargs:
            unsupported(f"{cls.__name__}() takes no arguments")
        return obj

    def _call_python_new(self, tx, args, kwargs) -> Value:
        """type.__call__ with a Python __new__: obj = cls.__new__(cls, *args); __init__ runs only when obj is
        an instance of cls (then type(obj).__init__, with the same arguments)."""
        cls = self.cls
        made = class_attribute(tx, cls, "__new__", None).call(tx, [self, *args], kwargs)
        try:
            made_type = made.python_type()
        except Exception:
            unsupported(f"{cls.__qualname__}.__new__ returned {made}, whose type kiln does not know")
        if not (isinstance(made_type, type) and issubclass(made_type, cls)):
            return made
        if python_slot(made_type, "__init__") is not None:
            class_attribute(tx, made_type, "__init__", made).call(tx, args, kwargs)
        elif made_type.__init__ is not object.__init__:
            unsupported(f"{made_type.__qualname__}.__init__ is not a Python function")
        return made

    def reconstruct(self, cg) -> None:
        cg.load_const(self.cls)

    def __repr__(self) -> str:
        return f"Class({self.cls.__qualname__})"


def has_python_new(cls: type) -> bool:
    """cls's __new__ is a Python function (a staticmethod in the class body), reached before object's,
    and its metaclass calls it as type.__call__ does."""
    if not all(k.__flags__ & (1 << 9) for k in cls.__mro__[:-1]):
        return False  # a builtin or C base (int, torch.Tensor): its __new__ makes the object
    for klass in cls.__mro__:
        if "__new__" in vars(klass):
            found = vars(klass)["__new__"]
            return isinstance(found, staticmethod) and isinstance(found.__func__, types.FunctionType) and \
                metaclass_keeps_instantiation(cls) and not getattr(cls, "__abstractmethods__", None)
    return False


class ObjectNew(Value):
    """`object.__new__` (as `super().__new__(cls)` in a Python __new__, or called directly): a new, empty
    instance of a class whose bases are Python classes over object."""

    def call(self, tx, args, kwargs) -> Value:
        if not args or not isinstance(args[0], ClassValue):
            unsupported(f"object.__new__({args}) without a class kiln knows")
        cls = args[0].cls
        if (len(args) > 1 or kwargs) and (cls.__new__ is not object.__new__ or cls.__init__ is object.__init__):
            from kiln.capture.values.exceptions import raise_traced

            # CPython's object_new: extra arguments are an error when __new__ is overridden or __init__ is not
            raise_traced(TypeError, "object.__new__() takes exactly one argument (the type to instantiate)"
                         if cls.__new__ is not object.__new__ else f"{cls.__name__}() takes no arguments")
        if not all(k.__flags__ & (1 << 9) for k in cls.__mro__[:-1]):
            unsupported(f"object.__new__({cls.__qualname__}): the class has a builtin base")
        if not metaclass_keeps_instantiation(cls) or getattr(cls, "__abstractmethods__", None):
            unsupported(f"object.__new__({cls.__qualname__}): metaclass or abstract methods")
        return NewObjectValue(cls)

    def reconstruct(self, cg) -> None:
        cg.load_const(object.__new__)


def plainly_instantiable(cls: type) -> bool:
    """cls() is object.__new__(cls) then __init__: object's __new__, and a metaclass that does not change
    instantiation (type, or one such as abc.ABCMeta that keeps type.__call__), no abstract methods left."""
    if cls.__new__ is not object.__new__:
        return False
    if not metaclass_keeps_instantiation(cls):
        return False
    if getattr(cls, "__abstractmethods__", None):
        return False  # object.__new__ raises TypeError
    return True


def metaclass_keeps_instantiation(cls: type) -> bool:
    """cls's metaclass is type, or one whose calls are type.__call__ (abc.ABCMeta, or transformers'
    _BCCacheNameMeta that only hooks class-level __setattr__): cls(...) is __new__ then __init__."""
    meta = type(cls)
    return meta is type or (issubclass(meta, type) and meta.__call__ is type.__call__)


def _make_namedtuple(tx, cls, args, kwargs) -> Value:
    from kiln.capture.values.namedtuples import NamedTupleValue

    fields = cls._fields
    values = list(args)
    for name in fields[len(values):]:
        if name in kwargs:
            values.append(kwargs.pop(name))
        elif name in getattr(cls, "_field_defaults", {}):
            values.append(ConstantValue(cls._field_defaults[name]))
        else:
            unsupported(f"{cls.__name__}() missing argument {name!r}")
    if kwargs or len(values) != len(fields):
        unsupported(f"{cls.__name__}() got unexpected arguments")
    return NamedTupleValue(values, cls)


class UserObjectValue(Value):
    """An instance of a user class that existed before the compiled function ran. Read-only for now."""

    def __init__(self, obj, source):
        self.obj = obj
        self.source = source
        note_class(type(obj))

    def python_type(self) -> type:
        return type(self.obj)

    def getattr(self, tx, name: str) -> Value:
        cls = type(self.obj)
        if not has_generic_getattribute(cls):
            if isinstance(cls.__getattribute__, types.FunctionType):
                # a Python __getattribute__ (e.g. transformers' PretrainedConfig): trace it
                return class_attribute(tx, cls, "__getattribute__", self).call(tx, [ConstantValue(name)], {})
            unsupported(f"{cls.__name__} defines __getattribute__ in C")
        return self.generic_getattr(tx, name)

    def generic_getattr(self, tx, name: str) -> Value:
        """object.__getattribute__: data descriptors, then the instance dict, then the class (attributes
        stored or deleted while tracing are recorded side effects: reads see them)."""
        from kiln.capture.side_effects import DELETED
        from kiln.capture.values.builder import wrap

        note_name(name)
        pending = tx.output.side_effects.load_attr(self, name)
        if pending is not None and pending is not DELETED:
            return pending
        cls = type(self.obj)
        if name == "__dict__" and hasattr(self.obj, "__dict__"):
            from kiln.capture.values.instance_dicts import InstanceDictValue

            return InstanceDictValue(self)
        attr_source = self.attr_source
        class_attr = None
        for klass in cls.__mro__:
            stored = pending_class_attribute(tx, klass, name)
            if stored is not None:
                class_attr = stored  # (plain data stored into the class while tracing)
                break
            if name in vars(klass):
                class_attr = vars(klass)[name]
                break
        data_descriptor = class_attr is not None and hasattr(type(class_attr), "__set__")
        inst_dict = getattr(self.obj, "__dict__", {}) if pending is not DELETED else {}
        if not data_descriptor and name in inst_dict:
            return wrap(tx, inst_dict[name], attr_source(name))
        if class_attr is not None:
            if not data_descriptor and hasattr(self.obj, "__dict__") and pending is not DELETED:
                # an instance attribute set later would shadow the class attribute (not a data descriptor)
                tx.output.guards.contains(attr_source("__dict__"), name, False)
            return class_attribute(tx, cls, name, self)
        if hasattr(cls, "__getattr__"):
            unsupported(f"{cls.__name__}.__getattr__ for attribute {name!r}")
        if self.source is None:
            unsupported(f"{cls.__name__!r} object has no attribute {name!r}")
        if hasattr(self.obj, "__dict__") and pending is not DELETED:
            tx.output.guards.contains(attr_source("__dict__"), name, False)  # not set later either
        from kiln.capture.values.exceptions import raise_attribute_error

        raise_attribute_error(cls, name)

    def instance_dict_has(self, tx, name: str) -> bool:
        """Whether obj.__dict__ holds `name` now: recorded stores and deletes, else the real dict (guarded)."""
        from kiln.capture.side_effects import DELETED

        pending = tx.output.side_effects.load_attr(self, name)
        if pending is not None:
            return pending is not DELETED
        if not hasattr(self.obj, "__dict__"):
            unsupported(f"a {type(self.obj).__name__} object has no __dict__ (slots)")
        present = name in self.obj.__dict__
        tx.output.guards.contains(self.attr_source("__dict__"), name, present)
        return present

    def raw_setattr(self, tx, name: str, value: Value) -> None:
        """object.__setattr__(obj, name, value) reached from the class's Python __setattr__: a recorded
        store, replayed as object.__setattr__ after the graph."""
        from kiln.capture.values.base import note_mutation

        if set_through_descriptor(tx, type(self.obj), name, self, value):
            return
        if not hasattr(self.obj, "__dict__"):
            unsupported(f"assigning attribute {name!r} of a {type(self.obj).__name__} without __dict__")
        note_mutation(tx, self)
        tx.output.side_effects.store_attr(self, name, value, raw=True)

    def raw_delattr(self, tx, name: str, raw: bool = False) -> None:
        """object.__delattr__: remove the instance dict entry (AttributeError when there is none)."""
        from kiln.capture.values.base import note_mutation

        _refuse_descriptor(type(self.obj), name, "deleting")
        if not self.instance_dict_has(tx, name):
            from kiln.capture.values.exceptions import raise_attribute_error

            raise_attribute_error(type(self.obj), name)
        existed = name in self.obj.__dict__
        tx.output.guards.contains(self.attr_source("__dict__"), name, existed)
        note_mutation(tx, self)
        tx.output.side_effects.delete_attr(self, name, raw, existed)

    def attr_source(self, name: str):
        """Where obj.name is read from: plainly, or bypassing the class's own __getattribute__."""
        from kiln.capture.sources import GenericAttrSource

        if not has_generic_getattribute(type(self.obj)):
            return GenericAttrSource(self.source, name)
        return AttrSource(self.source, name)

    def call(self, tx, args, kwargs) -> Value:
        call = getattr(type(self.obj), "__call__", None)
        if isinstance(call, types.FunctionType):
            return class_attribute(tx, type(self.obj), "__call__", self).call(tx, args, kwargs)
        unsupported(f"calling a {type(self.obj).__name__} object")

    def truth(self, tx) -> bool:
        cls = type(self.obj)
        if not hasattr(cls, "__bool__") and not hasattr(cls, "__len__"):
            return True
        unsupported(f"truth value of a {cls.__name__} object")  # (its __bool__ may read what is not guarded)

    def __repr__(self) -> str:
        return f"Object({type(self.obj).__name__})"


class NewObjectValue(Value):
    """An instance of a user class created while tracing; its attributes are symbolic."""

    def __init__(self, cls: type):
        self.cls = cls
        self.attrs: dict[str, Value] = {}
        self.source = None
        note_class(cls)

    def python_type(self) -> type:
        return self.cls

    def getattr(self, tx, name: str) -> Value:
        getattribute = python_slot(self.cls, "__getattribute__")
        if getattribute is None:
            return self.generic_getattr(tx, name)
        # a Python __getattribute__ (transformers' PretrainedConfig maps names): traced, its
        # super().__getattribute__ reaches generic_getattr; __getattr__ runs on its AttributeError
        from kiln.capture.values.exceptions import TracedRaise

        try:
            return class_attribute(tx, self.cls, "__getattribute__", self).call(tx, [ConstantValue(name)], {})
        except TracedRaise as exc:
            if not exc.matches(AttributeError) or python_slot(self.cls, "__getattr__") is None:
                raise
        return class_attribute(tx, self.cls, "__getattr__", self).call(tx, [ConstantValue(name)], {})

    def generic_getattr(self, tx, name: str) -> Value:
        """object.__getattribute__ on an object whose every instance attribute is known."""
        note_name(name)
        if name in self.attrs and (_python_slot(self.cls, name) or data_descriptor_of(self.cls, name) is None):
            return self.attrs[name]  # (a data descriptor of the class comes first, as in object.__getattribute__)
        if name == "__class__":
            return ClassValue(self.cls)
        if _python_slot(self.cls, name):  # a __slots__ member never set: AttributeError, as object's
            from kiln.capture.values.exceptions import raise_attribute_error

            raise_attribute_error(self.cls, name)
        if name == "__dict__" and self.cls.__dictoffset__:
            from kiln.capture.values.dict_objects import AttrsView

            return AttrsView(self)
        if not any(name in vars(klass) for klass in self.cls.__mro__) and not class_has_pending(tx, self.cls, name):
            if python_slot(self.cls, "__getattr__") is not None and python_slot(self.cls, "__getattribute__") is None:
                return class_attribute(tx, self.cls, "__getattr__", self).call(tx, [ConstantValue(name)], {})
            from kiln.capture.values.exceptions import raise_attribute_error

            raise_attribute_error(self.cls, name)  # every attribute of a new object is known
        return class_attribute(tx, self.cls, name, self)

    def raw_delattr(self, tx, name: str, raw: bool = False) -> None:
        """object.__delattr__: remove the attribute (AttributeError when the object has none)."""
        from kiln.capture.values.base import note_mutation

        _refuse_descriptor(self.cls, name, "deleting")
        if name not in self.attrs:
            from kiln.capture.values.exceptions import raise_attribute_error

            raise_attribute_error(self.cls, name)
        note_mutation(tx, self)
        del self.attrs[name]

    def setattr(self, tx, name: str, value: Value) -> None:
        from kiln.capture.values.base import note_mutation

        if not _python_slot(self.cls, name) and set_through_descriptor(tx, self.cls, name, self, value):
            return
        if not _python_slot(self.cls, name) and self.cls.__dictoffset__ == 0:  # __slots__, none of that name
            from kiln.capture.values.exceptions import raise_attribute_error

            raise_attribute_error(self.cls, name)
        note_mutation(tx, self)
        self.attrs[name] = value  # an instance attribute, or the value of a __slots__ member

    def call(self, tx, args, kwargs) -> Value:
        return class_attribute(tx, self.cls, "__call__", self).call(tx, args, kwargs)

    def items(self, tx) -> list[Value]:
        # iter(obj) runs the class's Python __iter__ (e.g. collections.abc.Sequence's generator over
        # obj[i] until IndexError); C iterators break
        if not isinstance(getattr(self.cls, "__iter__", None), types.FunctionType):
            unsupported(f"iterating over {self}")
        return tx.items(class_attribute(tx, self.cls, "__iter__", self).call(tx, [], {}))

    def truth(self, tx) -> bool:
        return python_truth(tx, self, self.cls)

    def reconstruct(self, cg) -> None:
        from kiln.capture.values.containers import DictValue

        cg.prepare_call(rebuild_object)
        cg.load_const(self.cls)
        cg.reconstruct(DictValue(self.attrs))
        cg.call(2)

    def __repr__(self) -> str:
        return f"NewObject({self.cls.__name__})"


def python_truth(tx, obj: Value, cls: type) -> bool:
    """CPython's slot_nb_bool: a Python __bool__ (it must return a bool: TypeError otherwise), else a
    Python __len__ (len() != 0, with len()'s checks), else True."""
    from kiln.capture.values.exceptions import raise_traced

    if hasattr(cls, "__bool__"):
        result = class_attribute(tx, cls, "__bool__", obj).call(tx, [], {})
        if not (result.is_constant() and type(result.as_constant()) is bool):
            if result.is_constant():
                raise_traced(TypeError, f"__bool__ should return bool, returned {type(result.as_constant()).__name__}")
            unsupported(f"__bool__ of a {cls.__name__} returned {result}")
        return result.as_constant()
    if hasattr(cls, "__len__"):
        return checked_len(class_attribute(tx, cls, "__len__", obj).call(tx, [], {})) != 0
    return True


def checked_len(result: Value) -> int:
    """What len() makes of a Python __len__'s result (PyNumber_AsSsize_t, then the sign check)."""
    from kiln.capture.values.exceptions import raise_traced

    if not result.is_constant():
        unsupported(f"__len__ returned {result} (len() reads it through __index__)")
    value = result.as_constant()
    if not isinstance(value, int):  # (an object with __index__ would be asked: not modelled)
        if hasattr(type(value), "__index__"):
            unsupported(f"__len__ returned a {type(value).__name__} (len() calls its __index__)")
        raise_traced(TypeError, f"'{type(value).__name__}' object cannot be interpreted as an integer")
    if value < 0:
        raise_traced(ValueError, "__len__() should return >= 0")
    return int(value)


def rebuild_object(cls, attrs: dict):
    """Rebuild an object that tracing created: its __init__ ran symbolically, its attributes are known."""
    obj = object.__new__(cls)
    for name, value in attrs.items():
        object.__setattr__(obj, name, value)
    return obj
