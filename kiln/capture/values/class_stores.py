"""Class attributes and stores to classes: where a class's attributes are read at guard time, and which
classes compiled code has stored into (their functions are then guarded by identity). See docs/capture.md,
"Class-attribute stores"."""
from __future__ import annotations

import weakref

from kiln.capture.sources import ConstantSource
from kiln.capture.values.base import Value


# Classes compiled code has assigned attributes of (the store runs as Python at a graph break): from then
# on, functions read from them are guarded by identity too, so a cache entry traced with the old method
# is not reused once the store has replaced it.
STORED_CLASSES: "weakref.WeakSet[type]" = weakref.WeakSet()


def note_class_store(cls: type) -> None:
    try:
        STORED_CLASSES.add(cls)
    except TypeError:  # (a class that cannot be weakly referenced)
        pass


def stored_into(cls: type) -> bool:
    return bool(STORED_CLASSES) and any(k in STORED_CLASSES for k in cls.__mro__)


def class_source(cls: type, self_value: Value | None):
    """Where cls's attributes are read at guard time: `type(obj)` for an object from the frame, else the
    class itself (held): a class attribute read through an object made while tracing, or through
    type(obj), is guarded like any attribute, so a store to the class between calls is not read stale."""
    from kiln.capture.sources import GenericAttrSource

    source = getattr(self_value, "source", None)
    if source is not None:
        return GenericAttrSource(source, "__class__")
    return ConstantSource(cls.__qualname__, cls)


# ---- stores to classes recorded while tracing ----------------------------------------------------------
#
# `C.count += 1`, `cls.registry = {}`, `type(self).n = v`: a recorded side effect (replayed after the graph
# as `C.name = value`), seen by every later read in the trace through C, its subclasses and their
# instances: the class-dict lookups (objects.class_attribute, generic_getattr of objects from the frame
# and of new ones, ClassValue.getattr, super(), hasattr) ask `pending_class_attribute` first, class by
# class along the MRO. Only plain data is modelled: the stored value and the value it replaces have no
# `__get__` (no functions, properties, descriptors: those change how lookups bind), the name is not a
# dunder (type slots), and the class and every subclass alive are plain Python classes (metaclass type
# or ABCMeta, no nn.Module, no builtin base) whose lookups all go through those paths. Anything else
# breaks at the store, which then runs as Python.


class _ClassPlace:
    """What SideEffects keys a class's attribute stores by (the class itself)."""

    __slots__ = ("side_effect_place",)

    def __init__(self, cls: type):
        self.side_effect_place = cls


def pending_class_attribute(tx, klass: type, name: str):
    """The Value recorded for `klass.name` (in klass's own dict) in this trace, else None."""
    effects = tx.output.side_effects
    if not effects.class_stores or (klass, name) not in effects.class_stores:
        return None
    return effects.load_attr(_ClassPlace(klass), name)


def class_has_pending(tx, cls: type, name: str) -> bool:
    """Whether a store recorded in this trace may change what `name` resolves to through cls's MRO."""
    stores = tx.output.side_effects.class_stores
    return bool(stores) and any((klass, name) in stores for klass in cls.__mro__)


def _plain_class(cls: type) -> bool:
    import abc

    import torch

    if cls is object:
        return True
    if issubclass(cls, torch.nn.Module):  # NNModuleValue.getattr asks for stores too; torch's own: not modelled
        return type(cls) is type and all(k is object or k.__flags__ & (1 << 9) for k in cls.__mro__)
    return bool(cls.__flags__ & (1 << 9)) and type(cls) in (type, abc.ABCMeta) and \
        all(k is object or k.__flags__ & (1 << 9) for k in cls.__mro__)


def _torch_class(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "torch"


def _shadowed_module_member(tx, cls: type, name: str):
    """A module of this trace, an instance of cls, with a parameter, buffer or submodule ``name``: a class
    attribute of that name would shadow it (class attributes come before nn.Module.__getattr__)."""
    import torch

    if not issubclass(cls, torch.nn.Module):
        return None
    from kiln.capture.values.modules import NNModuleValue

    for value in [*tx.output.values_by_source.values(), *tx.output.values_by_id.values()]:
        if isinstance(value, NNModuleValue) and isinstance(value.module, cls):
            d = value.module.__dict__
            if any(name in d.get(table, {}) for table in ("_parameters", "_buffers", "_modules")):
                return value.module
    return None


def _family(cls: type) -> list:
    seen, todo = [], [cls]
    while todo:
        k = todo.pop()
        if k not in seen:
            seen.append(k)
            todo.extend(type.__subclasses__(k))
    return seen


def _binds(value) -> bool:
    return hasattr(type(value), "__get__")


def store_class_attribute(tx, class_value, name: str, value: Value) -> None:
    """`C.name = value` while tracing: recorded, or Unsupported (the store then runs at a graph break)."""
    from kiln.capture.values.base import unsupported

    cls = class_value.cls
    why = None
    if name.startswith("__") and name.endswith("__"):
        why = "a dunder name (a type slot)"
    elif not isinstance(cls, type) or not all(_plain_class(k) for c in _family(cls) for k in c.__mro__):
        why = "the class or a subclass is not a plain Python class (a builtin base, a metaclass)"
    elif _torch_class(cls):
        why = "a class of torch (kiln models its modules' lookups its own way)"
    elif _shadowed_module_member(tx, cls, name) is not None:
        why = f"a module of this class has a parameter, buffer or submodule {name!r}, which it would shadow"
    else:
        try:
            stored_type = value.python_type()
        except Exception:
            stored_type = None
        current = _current(tx, cls, name)
        if stored_type is None or hasattr(stored_type, "__get__"):
            why = f"the value stored ({value}) is a function or descriptor"
        elif current is not _MISSING and not isinstance(current, Value) and _binds(current):
            why = f"it replaces a {type(current).__name__} (a function or descriptor)"
    if why is not None:
        note_class_store(cls)  # later traces guard the functions they read from it (objects.py)
        unsupported(f"assigning class attribute {cls.__qualname__}.{name}: {why}",
                    hint="the store runs as Python at a graph break")
    target = type(class_value)(cls, ConstantSource(cls.__qualname__, cls))
    target.side_effect_place = cls
    tx.output.side_effects.class_stores.add((cls, name))
    tx.output.side_effects.store_attr(target, name, value)


_MISSING = object()


def _current(tx, cls: type, name: str):
    for klass in cls.__mro__:
        pending = pending_class_attribute(tx, klass, name)
        if pending is not None:
            return pending
        if name in vars(klass):
            return vars(klass)[name]
    return _MISSING
