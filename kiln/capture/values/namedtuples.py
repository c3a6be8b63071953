"""Named tuples (collections.namedtuple and typing.NamedTuple classes, with subclasses) and C struct
sequences (torch.return_types, os.stat_result) as symbolic values."""
from __future__ import annotations

import collections

from kiln.capture.class_guards import note_class
from kiln.capture.values.base import ConstantValue, Value, note_mutation, unsupported
from kiln.capture.values.containers import DictValue, TupleValue


class NamedTupleValue(TupleValue):
    """An instance of a collections.namedtuple / typing.NamedTuple class (or a Python subclass of one),
    or a torch.return_types. A subclass without `__slots__ = ()` gives its instances a __dict__: the
    attributes set on one made while tracing are `attrs` (it is then one object wherever it is held)."""

    def __init__(self, items, tuple_type: type, source=None, created_here: bool = True):
        super().__init__(items, source, created_here)
        self.tuple_type = tuple_type
        note_class(tuple_type)
        self.attrs: dict[str, Value] = {}

    def python_type(self) -> type:
        return self.tuple_type

    def has_dict(self) -> bool:
        return bool(getattr(self.tuple_type, "__dictoffset__", 0))

    def is_constant(self) -> bool:
        return not self.has_dict() and super().is_constant()

    def as_constant(self):
        return self.tuple_type(*[v.as_constant() for v in self.elements])

    def fields(self) -> tuple:
        return tuple(getattr(self.tuple_type, "_fields", None) or structseq_fields(self.tuple_type))

    def getattr(self, tx, name: str) -> Value:
        fields = self.fields()
        if name in fields and _generated_member(self.tuple_type, name):
            return self.elements[fields.index(name)]
        if name in self.attrs:
            return self.attrs[name]
        if name == "_fields" and _generated_member(self.tuple_type, name):
            return ConstantValue(fields)
        if name in ("_replace", "_asdict", "index", "count", "_make") and _generated_member(self.tuple_type, name):
            from kiln.capture.values.base import BoundMethodValue

            return BoundMethodValue(self, name)
        if name == "__class__":
            from kiln.capture.values.objects import ClassValue

            return ClassValue(self.tuple_type)
        if name == "__dict__" and self.has_dict() and self.created_here:
            from kiln.capture.values.dict_objects import AttrsView

            return AttrsView(self)
        from kiln.capture.values.objects import class_attribute

        if self.has_dict() and not self.created_here and \
                not any(name in vars(klass) for klass in self.tuple_type.__mro__):
            unsupported(f"attribute {name!r} of a {self.tuple_type.__name__} from outside (its __dict__ is not read)")
        return class_attribute(tx, self.tuple_type, name, self)

    def setattr(self, tx, name: str, value: Value) -> None:
        """obj.name = value: only into the instance dict of a subclass that has one (fields are read-only)."""
        cls = self.tuple_type
        for klass in cls.__mro__:
            if name in vars(klass) and hasattr(type(vars(klass)[name]), "__set__"):
                unsupported(f"assigning {name!r} of a {cls.__name__}: a field or descriptor (AttributeError)")
        if not self.has_dict():
            unsupported(f"assigning {name!r} of a {cls.__name__}, which has no __dict__ (AttributeError)")
        if not self.created_here:
            unsupported(f"assigning attribute {name!r} of a {cls.__name__} from outside")
        note_mutation(tx, self)
        self.attrs[name] = value

    def call_method(self, tx, name, args, kwargs):
        if name == "_replace" and not args:
            if not _generated_member(self.tuple_type, "_make"):
                unsupported(f"{self.tuple_type.__name__}._replace(): the class redefines _make")
            fields = self.fields()
            items = list(self.elements)
            for k, v in kwargs.items():
                if k not in fields:
                    unsupported(f"{self.tuple_type.__name__}._replace() got unexpected field {k!r}")
                items[fields.index(k)] = v
            return NamedTupleValue(items, self.tuple_type)
        if name == "_asdict" and not args and not kwargs:
            return DictValue(dict(zip(self.fields(), self.elements)))
        if name == "_make":
            return NamedTupleMake(self.tuple_type).call(tx, args, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, cg) -> None:
        if self.attrs:
            cg.prepare_call(rebuild_namedtuple)
            cg.load_const(self.tuple_type)
            cg.reconstruct(TupleValue(self.elements))
            cg.reconstruct(DictValue(self.attrs))
            cg.call(3)
            return
        plain = namedtuple_new_is_generated(self.tuple_type) or is_structseq(self.tuple_type)
        cg.prepare_call(self.tuple_type if plain else tuple.__new__)
        if not plain:
            cg.load_const(self.tuple_type)  # tuple.__new__(cls, items): no Python __new__/__init__ runs
            cg.reconstruct(TupleValue(self.elements))
            cg.call(2)
            return
        for v in self.elements:
            cg.reconstruct(v)
        if is_structseq(self.tuple_type):
            cg.build(tuple, len(self.elements))  # torch.return_types.* take one sequence
            cg.call(1)
        else:
            cg.call(len(self.elements))

    def __repr__(self) -> str:
        return f"NamedTuple[{self.tuple_type.__name__}]({self.elements!r})"


def rebuild_namedtuple(cls, items: tuple, attrs: dict):
    """A namedtuple-subclass object made while tracing, with its instance attributes (no Python runs)."""
    obj = tuple.__new__(cls, items)
    for name, value in attrs.items():
        object.__setattr__(obj, name, value)
    return obj


def _is_generated(klass: type) -> bool:
    """A class collections.namedtuple made (typing.NamedTuple classes are such classes too)."""
    return "_make" in vars(klass) and "_field_defaults" in vars(klass) and "_fields" in vars(klass)


def _generated_member(cls: type, name: str) -> bool:
    """cls's MRO finds `name` (a field, _replace, _make, ...) on the generated namedtuple class itself, not on
    a subclass that redefines it (then its own code runs instead)."""
    if is_structseq(cls):
        return True  # torch.return_types: C classes, nothing overridden
    for klass in cls.__mro__:
        if name in vars(klass):
            return _is_generated(klass) or klass is tuple
    return False


def namedtuple_new_is_generated(cls: type) -> bool:
    """cls(...) runs the __new__ collections.namedtuple generated (fields by position or keyword)."""
    for klass in cls.__mro__:
        if "__new__" in vars(klass):
            return _is_generated(klass)
    return False


class NamedTupleMake(Value):
    """`Cls._make(iterable)` of a namedtuple class: a new instance of Cls with the items (TypeError unless
    there is one per field)."""

    def __init__(self, cls: type):
        self.cls = cls

    def call(self, tx, args, kwargs) -> Value:
        if len(args) != 1 or kwargs:
            unsupported(f"{self.cls.__name__}._make() with arguments {args} {kwargs}")
        items = tx.items(args[0])
        if len(items) != len(self.cls._fields):
            unsupported(f"{self.cls.__name__}._make(): expected {len(self.cls._fields)} arguments, got {len(items)} "
                        f"(TypeError)")
        return NamedTupleValue(items, self.cls)

    def reconstruct(self, cg) -> None:
        cg.load_const(self.cls._make)


def is_structseq(cls: type) -> bool:
    return isinstance(getattr(cls, "n_fields", None), int) and issubclass(cls, tuple)


def structseq_fields(cls: type) -> tuple:
    """Field names of a structseq type such as torch.return_types.max (values, indices)."""
    if not is_structseq(cls):
        return ()
    names = [name for name, attr in vars(cls).items() if type(attr).__name__ == "member_descriptor"]
    return tuple(names[: cls.n_sequence_fields])
