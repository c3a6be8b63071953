"""Guard gates: the guards that read an nn.Module tree are skipped while nothing they read changed.

A model's guards are mostly about its module tree: each submodule is the same object, has no hooks,
keeps its config attributes (`conv.padding == (1, 1)`, `bn.training is False`). A ResNet-50 has
about a thousand of them, and checking them in Python costs more per call than the rest of the call's
host work. Every one of them reads only through dicts (a module's `__dict__`, its `_modules` /
`_parameters` / `_buffers` dicts, its hook dicts, a module's globals) down from an object whose
identity is fixed (a guarded argument like `L['self']`, or an object kiln holds), and checks something
that cannot change while those dicts and the objects' types do not (identity, an immutable constant,
a type, the keys of a dict).

CPython gives every change to a dict a new version tag (`ma_version_tag`, never reused) and clears a
type's version tag when it or a base class changes. So ``plan_gate`` sorts the guards into those that
are *gated* (the block above) and the rest, and lists what the gated ones read through: dicts (their
versions), owners (whose `__dict__` must still be that dict), and objects whose type (and the type's
version tag) must not change. The check function then runs the gated block only when
``gate_unchanged`` (C, ``_guard_gate.c``) says something changed. The tags are taken (``gate_snapshot``)
at the top of the check function, before any guard reads: a change made after a read (another thread)
must not be in the tags recorded, and the every-call guards may read a place the gated ones use again.
After the block passes it calls ``gate_record``, which stores those tags, but only when every place
the guards read through still holds the planned object (a submodule replaced and put back, a dict
swapped for another, one of two places holding one object rebound: the tags are then not stored and
the block runs every time until the objects are the planned ones again).

What is never gated: tensor metadata (its own C check), global state, anything read through a list,
a property or other data descriptor, a class's own `__getattribute__`, a call, an iterator, a mutable
constant (a list value is compared each time), or an attribute the class also has with a value of a
mutable class (that class may gain ``__get__``/``__set__`` later, changing the read and no tag watched). The printed guard function shows the block
under ``if not ___gate_unchanged(...)``.
"""
from __future__ import annotations

import collections
import dataclasses
import sys
from typing import Any

import torch

from kiln.capture.guards import class_assignable
from kiln.capture.sources import (AttrSource, BuiltinSource, ClosureSource, ConstantSource, DictEntrySource,
                                  GenericAttrSource, GetItemSource, GlobalSource, LocalSource, RawDictItemSource,
                                  Source)

_ROOTS = (LocalSource, GlobalSource, ClosureSource, BuiltinSource)
_IMMUTABLE_SCALARS = (int, float, complex, str, bytes, bool, type(None), type(Ellipsis),
                      torch.dtype, torch.device, torch.layout, torch.memory_format)
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_MISSING = object()
_IMMUTABLETYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: a class whose attributes cannot be set (int, function, ...)


def gate_functions():
    """(gate_unchanged, gate_record, type_version, gate_snapshot) of kiln's C extension, or None when it is missing or
    older than them (the guards then run in full every call, as before)."""
    from kiln.capture import hook

    fns = tuple(getattr(hook._C, name, None)
                for name in ("gate_unchanged", "gate_record", "type_version", "gate_snapshot"))
    return fns if all(fns) else None


@dataclasses.dataclass
class GatePlan:
    gated: list  # the guards checked only when something they read changed
    state: tuple  # the C functions' state (see _guard_gate.c)
    reached: list[str]  # the places (texts) of the state's expected objects, in order
    rechecks: list  # (obj, attr, generic): reads that must stay plain when a watched type changes
    record: Any = None  # the check function's ___gate_record (make_recorder)


def make_recorder(plan: GatePlan, c_record):
    """``record(state, reached, snap)`` for the check function: the C record of the tags in ``snap``
    (taken before the gated guards ran). When it refuses because a watched type changed (a class
    attribute set anywhere in its bases: torch.compile's first call sets some on nn.Module), every read
    through those types is checked again to still be plain, and the snapshot's type tags become the
    planned ones, so the gate opens again."""

    def record(state, reached, snap) -> bool:
        """Whether the tags were stored (the gate opens); False when the guards must run next call too."""
        if c_record(state, reached, snap):
            return True
        typed, types = state[5], state[6]
        if any(o is not None and type(o) is not t for o, t in zip(typed, types)):
            return False  # (None: a class watched itself, class_guards.py)
        if not all(reads_plainly(o, a, g) for o, a, g in plan.rechecks):
            return False
        type_tags = snap[8 * len(state[1]):]
        if any(int.from_bytes(type_tags[i:i + 4], sys.byteorder) == 0 for i in range(0, len(type_tags), 4)):
            return False
        state[7][:] = type_tags
        return bool(c_record(state, reached, snap))

    return record


def deep_immutable(value: Any) -> bool:
    if type(value) in _IMMUTABLE_SCALARS:
        return True
    if type(value) in (tuple, frozenset):
        return all(deep_immutable(v) for v in value)
    return False


class _Watch:
    """What a set of gated guards reads through, deduplicated by object identity."""

    def __init__(self, type_version):
        self.type_version = type_version
        self.dicts: dict[int, Any] = {}
        self.owners: dict[int, tuple[Any, Any]] = {}
        self.typed: dict[int, tuple[Any, type, int]] = {}
        # place text -> object: every place, also one holding an object already reached at another (the
        # object is watched once; each place must still hold it for the tags to stand for what is read)
        self.reached: dict[str, Any] = {}
        self.rechecks: dict[tuple, tuple[Any, str, bool]] = {}  # (obj, attr, generic): reads_plainly held

    def reach(self, text: str, obj: Any) -> None:
        self.reached.setdefault(text, obj)

    def dict(self, text: str, d: Any) -> bool:
        if type(d) not in (dict, collections.OrderedDict):
            return False
        self.dicts.setdefault(id(d), d)
        self.reach(text, d)
        return True

    def typed_object(self, text: str, obj: Any) -> bool:
        if deep_immutable(obj):
            return True  # (the type of an int or a tuple cannot be reassigned)
        tag = self.type_version(type(obj))
        if not tag:
            return False
        self.typed.setdefault(id(obj), (obj, type(obj), tag))
        self.reach(text, obj)
        return True

    def own_tags(self, classes) -> bool:
        """Watch the tags of ``classes`` themselves (a ClassGuard's: its own check compares their dicts
        again after a change, before the record takes the new tags)."""
        tags = [self.type_version(t) for t in classes]
        if not all(tags):
            return False
        for t, tag in zip(classes, tags):
            self.typed.setdefault(("class", id(t)), (None, t, tag))
        return True

    def attribute_owner(self, text: str, obj: Any, attr: str, generic: bool) -> bool:
        """Whether ``obj.attr`` is read from ``obj.__dict__`` or from a plain class attribute, as
        nothing but the dict's and the type's versions decide (then watched)."""
        if not reads_plainly(obj, attr, generic) or not self.typed_object(text, obj):
            return False
        instance_dict = object.__getattribute__(obj, "__dict__")
        self.rechecks.setdefault((id(obj), attr, generic), (obj, attr, generic))  # (one per read, not per guard)
        self.owners.setdefault(id(obj), (obj, instance_dict))
        self.dicts.setdefault(id(instance_dict), instance_dict)
        return True


def reads_plainly(obj: Any, attr: str, generic: bool) -> bool:
    """Whether reading ``obj.attr`` (``object.__getattribute__(obj, attr)`` when ``generic``) gives the
    value in the object's own ``__dict__`` or a plain (non-descriptor) class attribute: no class's
    own ``__getattribute__``, no data descriptor (property, slot), no ``__getattr__``, no method bound
    anew on each read. ``__dict__`` itself: the object's own plain dict."""
    cls = type(obj)
    getattribute = next(k.__dict__["__getattribute__"] for k in cls.__mro__ if "__getattribute__" in k.__dict__)
    if not generic and getattribute is not object.__dict__["__getattribute__"]:
        return False  # (looked up in the MRO, as Python does: `cls.__getattribute__` would ask the metaclass)
    if isinstance(obj, type):
        return False  # (a class's attributes: type.__getattribute__ and the metaclass decide)
    own = next((k.__dict__["__dict__"] for k in cls.__mro__ if "__dict__" in k.__dict__), None)
    if type(own).__name__ != "getset_descriptor":
        return False  # (no instance dict, or a class that defines its own __dict__)
    try:
        instance_dict = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return False
    if type(instance_dict) is not dict:
        return False
    if attr == "__dict__":
        return True
    on_class = _MISSING
    for klass in cls.__mro__:
        if attr in klass.__dict__:
            on_class = klass.__dict__[attr]
            break
    kind = type(on_class)
    if on_class is not _MISSING and not kind.__flags__ & _IMMUTABLETYPE:
        return False  # (its class may gain __get__/__set__ later: a change to no tag the gate watches)
    if on_class is not _MISSING and (hasattr(kind, "__set__") or hasattr(kind, "__delete__")):
        return False  # a data descriptor (property, slot, __dict__) decides
    if attr not in instance_dict and (on_class is _MISSING or hasattr(kind, "__get__")):
        return False  # __getattr__, or a method bound anew on each read
    return True


class _Planner:
    def __init__(self, guards, frame, type_version):
        self.L, self.G, self.C, self.B = frame
        self.watch = _Watch(type_version)
        self.fixed_roots = {g.source.name() for g in guards
                            if g.kind.name == "IDENTITY" and isinstance(g.source, _ROOTS)}
        self._values: dict[str, Any] = {}

    def value(self, source: Source) -> Any:
        """The object at ``source`` now, if every step to it from a fixed root is watched; else _MISSING."""
        name = source.name()
        if name in self._values:
            return self._values[name]
        self._values[name] = _MISSING  # (while computing, and if it cannot be)
        try:
            found = self._step(source)
        except Exception:
            found = _MISSING
        self._values[name] = found
        return found

    def _step(self, s: Source) -> Any:
        w = self.watch
        if isinstance(s, ConstantSource):
            return s.value
        if isinstance(s, _ROOTS):
            if s.name() not in self.fixed_roots:
                return _MISSING
            if isinstance(s, LocalSource):
                return self.L[s.local_name]
            if isinstance(s, GlobalSource):
                return self.G[s.global_name]
            if isinstance(s, BuiltinSource):
                return self.B[s.builtin_name]
            return self.C[s.index].cell_contents
        base = self.value(s.base) if hasattr(s, "base") else _MISSING
        if base is _MISSING:
            return _MISSING
        btext = s.base.name()
        if isinstance(s, (AttrSource, GenericAttrSource)) and s.attr == "__dict__":
            return self._instance_dict(btext, base)
        if isinstance(s, (AttrSource, GenericAttrSource)):
            if not w.attribute_owner(btext, base, s.attr, generic=isinstance(s, GenericAttrSource)):
                return _MISSING
            return getattr(base, s.attr) if isinstance(s, AttrSource) else object.__getattribute__(base, s.attr)
        if isinstance(s, DictEntrySource):
            if not w.attribute_owner(btext, base, s.dict_attr, generic=False):
                return _MISSING
            d = getattr(base, s.dict_attr)
            if not w.dict(f"{btext}.{s.dict_attr}", d):
                return _MISSING
            return d[s.key]
        if isinstance(s, RawDictItemSource) and not s.contains:
            return dict.__getitem__(base, s.key) if w.dict(btext, base) else _MISSING
        if isinstance(s, GetItemSource):
            if type(base) is tuple:
                return base[s.index]
            if type(s.index) is not slice and w.dict(btext, base):
                return base[s.index]
        return _MISSING

    def _instance_dict(self, text: str, obj: Any) -> Any:
        """``obj.__dict__`` where that is the object's own plain dict (then watched, with the owner)."""
        if not self.watch.attribute_owner(text, obj, "__dict__", generic=False):
            return _MISSING
        d = object.__getattribute__(obj, "__dict__")
        self.watch.reach(f"{text}.__dict__", d)
        return d

    def gate(self, g) -> bool:
        """Whether guard ``g`` can be gated (and what it reads is now watched)."""
        kind = g.kind.name
        if isinstance(g.source, _ROOTS) and kind == "IDENTITY":
            return False  # the roots' own identity: checked on every call
        if kind == "CLASS_STATE":
            return self.watch.own_tags(g.value.types)
        if kind not in ("IDENTITY", "NOT_OBJECT", "NONE", "CONSTANT", "TYPE", "LENGTH", "DICT_KEYS", "CONTAINS",
                        "IDENTITY_OF_SOURCE", "NOT_SAME", "NO_MODULE_HOOKS"):
            return False
        obj = self.value(g.source)
        if obj is _MISSING:
            return False
        text, w = g.source.name(), self.watch
        if kind in ("IDENTITY_OF_SOURCE", "NOT_SAME"):
            return self.value(g.value) is not _MISSING
        if kind == "CONSTANT":
            return deep_immutable(obj)
        if kind == "TYPE":
            return w.typed_object(text, obj)
        if kind == "LENGTH":
            return type(obj) is tuple
        if kind == "DICT_KEYS":
            return type(obj) is dict and w.dict(text, obj)  # (an OrderedDict's order: not in its version)
        if kind == "CONTAINS":
            return w.dict(text, obj)
        if kind == "NO_MODULE_HOOKS":
            if not isinstance(obj, torch.nn.Module):
                return False
            return all(w.attribute_owner(text, obj, h, generic=False) and w.dict(f"{text}.{h}", getattr(obj, h))
                       for h in _HOOK_DICTS)
        if kind == "IDENTITY" and class_assignable(obj):
            return w.typed_object(text, obj)  # (its guard checks the class too)
        return True  # IDENTITY, NOT_OBJECT, NONE: the object at a watched place is the same object


def plan_gate(guards: list, frame: tuple | None, min_gated: int = 8) -> GatePlan | None:
    """The guards of ``guards`` to gate and the state watching what they read, from the frame's values
    ``(L, G, C, B)`` at the call being compiled; None when the C functions are missing or fewer than
    ``min_gated`` guards would be gated (not worth a second code path)."""
    fns = gate_functions()
    if fns is None or frame is None:
        return None
    planner = _Planner(guards, frame, fns[2])
    gated = [g for g in guards if planner.gate(g)]
    if len(gated) < min_gated:
        return None
    w = planner.watch
    dicts = tuple(w.dicts.values())
    owners = tuple(o for o, _ in w.owners.values())
    owner_dicts = tuple(d for _, d in w.owners.values())
    typed = tuple(o for o, _, _ in w.typed.values())
    types = tuple(t for _, t, _ in w.typed.values())
    type_tags = bytearray(b"".join(int(tag).to_bytes(4, sys.byteorder) for _, _, tag in w.typed.values()))
    reached = list(w.reached.items())
    state = (bytearray(1), dicts, bytearray(8 * len(dicts)), owners, owner_dicts, typed, types, type_tags,
             tuple(obj for _, obj in reached))
    plan = GatePlan(gated, state, [text for text, _ in reached], list(w.rechecks.values()))
    plan.record = make_recorder(plan, fns[1])
    return plan
