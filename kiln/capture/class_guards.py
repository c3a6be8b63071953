"""Class guards: what capture read from a class stays what it was.

kiln inlines the methods it finds on a class (``type(m).forward``, ``obj.method()``, a property's
getter, a classmethod), reads class attributes through the MRO and relies on a name being absent from
every class dict along the MRO (a submodule or an instance attribute that a class attribute or a data
descriptor would shadow; ``__getattr__`` not defined). None of that is in the guards of the places it
read (a method is held as a constant), so a change to the class after compiling (``Act.forward =
new_fn`` on a base, ``S.body = other`` shadowing a submodule) would run the old graph.

By construction: every Python class whose value kiln made while tracing (an object from the frame or
made in the trace, a module, a class itself) or whose MRO it looked a name up in (``class_attribute``,
``python_slot``, ``data_descriptor_of``) is noted (``note_class``) in the trace's GuardSet, with its
metaclass when that is a Python class (``cls.name`` asks the metaclass first; its ``__call__`` makes
the instances), and so is
every attribute name the trace looks up (``note_name``: each attribute read of the interpreter,
``getattr``/``hasattr``, ``super()``, the class lookups). The frame's guards then get one more,
``ClassGuard``: each noted class has the same MRO, and in each mutable class of those MROs no name was
removed, and every dunder name and every name looked up is present exactly when it was (an added one
may shadow a base's method or a submodule, or be ``__getattr__``) and holds the same object. Names
the trace never looked up may change freely (torch.compile adds one to nn.Module; a registry kept on
a class), and two more changes are allowed, both read through guarded places anyway: a name the trace
itself stores into the class (replayed after the graph: ``class_stores.py``), and a non-dunder name
whose old and new values are both immutable plain data (an int or str config: every read of one is
guarded by value through ``type(obj).name``; a counter kept on a class does not recompile each call).

Cost: CPython clears a type's ``tp_version_tag`` whenever the type or a base changes. The guard is
``___gate_unchanged(state) or recheck()``: the C check compares the classes' tags with those recorded
when the dicts last compared equal (``_guard_gate.c``, a state of types only); only after a change does
``recheck`` compare the dicts (and record the new tags when they are still the same). Under a guard
gate (guard_gate.py) the guard is gated like a module-tree guard, watching the same tags: nothing per
call while no class changed.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any

_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement (or type(...))
_IMMUTABLETYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: its attributes cannot be set
_PLAIN = (int, float, complex, str, bytes, bool, type(None))
_MISSING = object()
# dunders Python itself stores in a class as caches, which no lookup depends on: pickling an instance
# caches the class's slot names there (copyreg._slotnames: kiln's warm cache pickling a tensor added
# ``torch.Tensor.__slotnames__`` and every frame that had read a tensor's attribute recompiled)
_CACHES = frozenset({"__slotnames__"})
_ACTIVE: list = []  # the GuardSets of the root traces running (innermost last)


def mutable_class(cls: Any) -> bool:
    """Whether `cls` is a class whose attributes can be set (a Python class; not int, not a C type)."""
    return isinstance(cls, type) and bool(cls.__flags__ & _HEAPTYPE) and not cls.__flags__ & _IMMUTABLETYPE


@contextlib.contextmanager
def recording(guards):
    """While a root frame is traced: classes noted go to its GuardSet ``guards``."""
    _ACTIVE.append(guards)
    try:
        yield
    finally:
        _ACTIVE.pop()


def note_class(cls: Any, name: str | None = None) -> None:
    """A class the running trace reads through (its methods, attributes, or a name's absence); ``name``:
    the name looked up in it."""
    if _ACTIVE:
        if isinstance(cls, type) and cls.__flags__ & _HEAPTYPE:
            _ACTIVE[-1].classes.setdefault(id(cls), cls)
            meta = type(cls)  # a lookup on the class asks its metaclass first (data descriptors, __call__)
            if meta.__flags__ & _HEAPTYPE:
                _ACTIVE[-1].classes.setdefault(id(meta), meta)
        if name is not None:
            _ACTIVE[-1].class_names.add(name)


def note_name(name: Any) -> None:
    """An attribute name the running trace looks up (on an object, or a class: where it is found, or
    that it is not, along a class's MRO may matter)."""
    if _ACTIVE and type(name) is str:
        _ACTIVE[-1].class_names.add(name)


def _plain(value: Any) -> bool:
    if type(value) in _PLAIN:
        return True
    return type(value) in (tuple, frozenset) and all(_plain(v) for v in value)


def _dunder(name: Any) -> bool:
    return type(name) is not str or (name.startswith("__") and name.endswith("__"))


class ClassGuard:
    """The noted classes' MROs and the dicts of the mutable classes in them, as they were at the end of
    the trace (see the module docstring); ``stored``: (class, name) the trace stores into."""

    def __init__(self, classes: list[type], stored=(), names=()):
        self.mros = [(cls, cls.__mro__) for cls in classes if mutable_class(cls)]
        seen: dict[int, type] = {}
        for _, mro in self.mros:
            for klass in mro:
                if mutable_class(klass):
                    seen.setdefault(id(klass), klass)
        self.types = tuple(seen.values())  # (whose tags the gate watches)
        self.dicts = [(klass, dict(vars(klass))) for klass in self.types]
        self.stored = {(id(k), name) for k, name in stored}
        self.looked_up = frozenset(names)
        self.state = None  # the gate state of self.types (make_state), when kiln's C extension has one

    def __len__(self) -> int:
        return len(self.mros)

    def names(self) -> str:
        shown = ", ".join(cls.__qualname__ for cls, _ in self.mros[:4])
        return shown + (f" and {len(self.mros) - 4} more" if len(self.mros) > 4 else "")

    def same(self) -> bool:
        """Whether every noted class has its MRO and every class dict its names and objects."""
        for cls, mro in self.mros:
            now = cls.__mro__
            if now is not mro and (len(now) != len(mro) or any(a is not b for a, b in zip(now, mro))):
                return False
        for klass, before in self.dicts:
            now = vars(klass)
            for name, old in before.items():
                new = now.get(name, _MISSING)
                if new is old:
                    continue
                if new is _MISSING:
                    return False  # (removed)
                if not self._matters(name) or (id(klass), name) in self.stored:
                    continue  # (stored by the trace itself: read through guarded places)
                if not _dunder(name) and _plain(old) and _plain(new):
                    continue  # plain data: its reads are guarded by value
                return False
            if len(now) > len(before) and any(name not in before and self._matters(name) for name in now):
                return False  # (added: it may shadow what a lookup found, or was relied on not to find)
        return True

    def _matters(self, name) -> bool:
        """Whether a change to ``name`` in a class dict may change what the trace read: a name it looked
        up, or a dunder (type slots and protocols, which capture also asks for by name in many places)."""
        return (_dunder(name) and name not in _CACHES) or name in self.looked_up

    def recheck(self) -> bool:
        """After a watched class changed (or before the first record): compare the dicts; when they are
        the same, the tags taken before the comparison are recorded (the fast check passes again)."""
        from kiln.capture.guard_gate import gate_functions

        fns = gate_functions()
        snap = fns[3](self.state) if fns is not None and self.state is not None else None
        if not self.same():
            return False
        if snap is not None:
            tags = snap  # (no dicts in this state: the snapshot is the types' tags only)
            if all(int.from_bytes(tags[i:i + 4], sys.byteorder) for i in range(0, len(tags), 4)):
                self.state[7][:] = tags
                fns[1](self.state, (), snap)
        return True


def make_state(types: tuple, type_version) -> tuple | None:
    """A guard gate state (``_guard_gate.c``) watching only the tags of ``types`` (no dicts, no owners; a
    None object: the type itself, not an object's type); None when a type has no tag."""
    tags = [type_version(t) for t in types]
    if not all(tags):
        return None
    type_tags = bytearray(b"".join(int(tag).to_bytes(4, sys.byteorder) for tag in tags))
    return (bytearray(1), (), bytearray(0), (), (), (None,) * len(types), types, type_tags, ())


def class_guard_exprs(guard: ClassGuard, ref) -> list[tuple[str, str]]:
    """The guard's (expression, description); ``ref`` names an object in the check function."""
    from kiln.capture.guard_gate import gate_functions

    fns = gate_functions()
    if guard.state is None and fns is not None:
        guard.state = make_state(guard.types, fns[2])
    what = (f"classes {guard.names()} (and their bases) unchanged: the methods inlined, class attributes, "
            f"names absent (class_guards.py)")
    if guard.state is None:
        return [(f"{ref(guard.recheck)}()", what)]
    return [(f"{ref(fns[0])}({ref(guard.state)}) or {ref(guard.recheck)}()", what)]
