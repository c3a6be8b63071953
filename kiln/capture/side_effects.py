"""Side effects on the world outside the graph, recorded while tracing and replayed after the graph runs.

Writes to attributes of existing objects and modules, to globals, to closure cells of the frame,
and changes to existing lists and dicts are not performed while tracing. They are recorded here
(later writes to the same place replace earlier ones), reads see the recorded value, and the
transformed code applies them, in program order, after the graph has run.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from kiln.capture.values.base import Value


@dataclasses.dataclass
class AttrWrite:
    """`obj.name = value` on an existing object. `raw`: the store a class's Python __setattr__ reached
    through `object.__setattr__` (replayed as that, so the Python __setattr__ does not run twice)."""

    obj: Value
    name: str
    value: Value
    raw: bool = False
    deleted_before: bool = False  # an earlier `del obj.name` in this trace (the key moved in __dict__)


@dataclasses.dataclass
class AttrDelete:
    """`del obj.name` / `delattr(obj, name)` on an existing object (the instance dict entry; replayed
    with object.__delattr__ when `raw`, i.e. reached from a class's Python __delattr__)."""

    obj: Value
    name: str
    raw: bool = False

    @property
    def value(self) -> Value:
        from kiln.capture.values.base import ConstantValue

        return ConstantValue(None)


# what load_attr answers for an attribute deleted while tracing
DELETED = object()


@dataclasses.dataclass
class GlobalWrite:
    name: str
    value: Value


@dataclasses.dataclass
class CellWrite:
    """A write to a closure cell that existed before the call: the frame's own free variable (a
    `var_name` on the cell value: STORE_DEREF) or a cell reached through a function's closure."""

    cell: Value
    value: Value


@dataclasses.dataclass
class ContainerUpdate:
    """An existing list, dict or set whose new contents replace the old ones."""

    container: Value


@dataclasses.dataclass
class IteratorAdvance:
    """An iterator from outside (list, tuple, dict, range iterator) that tracing read items from: the
    real one is advanced by as many items after the graph."""

    iterator: Value

    @property
    def value(self) -> Value:
        """(the iterator, how many items to advance it): the iterator is read before any effect is
        applied (an effect may rebind the place it was read from)."""
        from kiln.capture.values.base import ConstantValue
        from kiln.capture.values.containers import TupleValue

        return TupleValue([self.iterator, ConstantValue(self.iterator.consumed())])


@dataclasses.dataclass
class DeferredCall:
    """A call whose only effect is on the world outside the program's data (a once-only log message,
    `logger.warning_once(msg)`): made after the graph, in its place among the other side effects.
    `packed` is (the callable, args tuple, kwargs dict)."""

    packed: Value

    @property
    def value(self) -> Value:
        return self.packed


def run_deferred_call(packed) -> None:
    """Make the call as Python, with kiln's frame hook off (a log call's frames are not compiled)."""
    from kiln.capture.hook import call_without_hook

    fn, args, kwargs = packed
    call_without_hook(fn, *args, **kwargs)


class SideEffects:
    def __init__(self) -> None:
        self._effects: dict[Any, Any] = {}  # insertion-ordered; key identifies the written place
        self.write_count = 0  # every write recorded so far, also those replacing an earlier one
        self._calls: list = []  # keys of the deferred calls
        self.class_stores: set = set()  # (class, name) of the class attributes stored (values/class_stores.py)

    def places_written(self) -> list[tuple]:
        """(kind, place) of every object written ("attr" and "item" writes; place as ``_place``)."""
        return [key[:2] for key in self._effects if isinstance(key, tuple) and len(key) >= 2 and key[0] != "call"]

    @staticmethod
    def _place(obj: Value):
        """What identifies the written object: the real object when there is one (two sources can
        reach the same object), else the symbolic value."""
        real = getattr(obj, "obj", None)
        if real is None:
            real = getattr(obj, "module", None)
        if real is None:
            real = getattr(obj, "side_effect_place", None)  # a class (values/class_stores.py)
        return id(real) if real is not None else id(obj)

    def _move_to_end(self, key) -> None:
        """A later write to a place moves its effect to the end (replay keeps program order). Past a
        deferred call that would let the call see the older value: not allowed."""
        if key in self._effects and self._calls:
            position = list(self._effects).index(key)
            if any(position < list(self._effects).index(call) for call in self._calls):
                from kiln.capture.values.base import unsupported

                unsupported("a write after a deferred call to a place also written before it")
        self._effects.pop(key, None)

    def deferred_call(self, packed: Value) -> None:
        self.write_count += 1
        key = ("call", len(self._calls))
        self._calls.append(key)
        self._effects[key] = DeferredCall(packed)

    def store_attr(self, obj: Value, name: str, value: Value, raw: bool = False) -> None:
        self.write_count += 1
        key = ("attr", self._place(obj), name)
        earlier = self._effects.get(key)
        deleted_before = isinstance(earlier, AttrDelete) or getattr(earlier, "deleted_before", False)
        self._move_to_end(key)
        self._effects[key] = AttrWrite(obj, name, value, raw, deleted_before)

    def delete_attr(self, obj: Value, name: str, raw: bool = False, existed: bool = True) -> None:
        """Record `del obj.name`. `existed`: the real object had the attribute before the trace; if not,
        the deletion only undoes stores recorded in this trace (their replay is dropped)."""
        self.write_count += 1
        key = ("attr", self._place(obj), name)
        self._move_to_end(key)
        if existed:
            self._effects[key] = AttrDelete(obj, name, raw)

    def load_attr(self, obj: Value, name: str):
        """The value recorded for obj.name, DELETED after a recorded delete, None if not written."""
        key = ("attr", self._place(obj), name)
        found = self._effects.get(key)
        if isinstance(found, AttrDelete):
            return DELETED
        return found.value if found is not None else None

    def attr_effects(self, obj: Value) -> list:
        """The recorded stores and deletes of obj's attributes, in replay order."""
        place = self._place(obj)
        return [effect for key, effect in self._effects.items()
                if key[0] == "attr" and key[1] == place]

    def store_global(self, name: str, value: Value) -> None:
        self.write_count += 1
        self._move_to_end(("global", name))
        self._effects[("global", name)] = GlobalWrite(name, value)

    def load_global(self, name: str) -> Value | None:
        found = self._effects.get(("global", name))
        return found.value if found is not None else None

    def store_cell(self, cell: Value, value: Value) -> None:
        self.write_count += 1
        key = ("cell", id(cell.real))
        self._move_to_end(key)
        self._effects[key] = CellWrite(cell, value)

    def _before_a_call(self, key) -> bool:
        if key not in self._effects or not self._calls:
            return False
        order = list(self._effects)
        return order.index(key) < order.index(self._calls[-1])

    def container_changed(self, container: Value) -> None:
        self.write_count += 1
        key = ("container", id(container))
        if self._before_a_call(key):  # the replay writes the final contents where the first change was
            from kiln.capture.values.base import unsupported

            unsupported("a container changed both before and after a deferred call")
        self._effects.setdefault(key, ContainerUpdate(container))

    def iterator_read(self, iterator: Value) -> None:
        self.write_count += 1
        key = ("iterator", id(iterator))
        if self._before_a_call(key):
            from kiln.capture.values.base import unsupported

            unsupported("an iterator advanced both before and after a deferred call")
        self._effects.setdefault(key, IteratorAdvance(iterator))

    def __iter__(self):
        # iterators from outside are advanced last: a list iterator then walks its list's final contents
        effects = list(self._effects.values())
        advances = [e for e in effects if isinstance(e, IteratorAdvance)]
        return iter([e for e in effects if not isinstance(e, IteratorAdvance)] + advances)

    def __len__(self) -> int:
        return len(self._effects)

    def values(self) -> list[Value]:
        """Every value the replay needs (its tensors must be graph outputs)."""
        out = []
        for effect in self._effects.values():
            out.append(effect.container if isinstance(effect, ContainerUpdate) else effect.value)
        return out


def replace_list(target: list, new_items: list) -> None:
    target[:] = new_items


def replace_set(target: set, new_members: set) -> None:
    target.intersection_update(new_members)
    target.update(new_members)


def replace_dict(target: dict, new_entries: dict) -> None:
    target.clear()
    target.update(new_entries)
