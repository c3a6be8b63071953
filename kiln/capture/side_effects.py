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
    obj: Value
    name: str
    value: Value


@dataclasses.dataclass
class GlobalWrite:
    name: str
    value: Value


@dataclasses.dataclass
class CellWrite:
    var_name: str
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
        from kiln.capture.values.base import ConstantValue

        return ConstantValue(self.iterator.consumed())


class SideEffects:
    def __init__(self) -> None:
        self._effects: dict[Any, Any] = {}  # insertion-ordered; key identifies the written place
        self.write_count = 0  # every write recorded so far, also those replacing an earlier one

    @staticmethod
    def _place(obj: Value):
        """What identifies the written object: the real object when there is one (two sources can
        reach the same object), else the symbolic value."""
        real = getattr(obj, "obj", None)
        if real is None:
            real = getattr(obj, "module", None)
        return id(real) if real is not None else id(obj)

    def store_attr(self, obj: Value, name: str, value: Value) -> None:
        self.write_count += 1
        key = ("attr", self._place(obj), name)
        self._effects.pop(key, None)  # a later write moves to the end: replay keeps program order
        self._effects[key] = AttrWrite(obj, name, value)

    def load_attr(self, obj: Value, name: str) -> Value | None:
        key = ("attr", self._place(obj), name)
        found = self._effects.get(key)
        return found.value if found is not None else None

    def store_global(self, name: str, value: Value) -> None:
        self.write_count += 1
        self._effects.pop(("global", name), None)
        self._effects[("global", name)] = GlobalWrite(name, value)

    def load_global(self, name: str) -> Value | None:
        found = self._effects.get(("global", name))
        return found.value if found is not None else None

    def store_cell(self, var_name: str, value: Value) -> None:
        self.write_count += 1
        self._effects.pop(("cell", var_name), None)
        self._effects[("cell", var_name)] = CellWrite(var_name, value)

    def load_cell(self, var_name: str) -> Value | None:
        found = self._effects.get(("cell", var_name))
        return found.value if found is not None else None

    def container_changed(self, container: Value) -> None:
        self.write_count += 1
        self._effects.setdefault(("container", id(container)), ContainerUpdate(container))

    def iterator_read(self, iterator: Value) -> None:
        self.write_count += 1
        self._effects.setdefault(("iterator", id(iterator)), IteratorAdvance(iterator))

    def __iter__(self):
        return iter(list(self._effects.values()))

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
