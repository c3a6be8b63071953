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
