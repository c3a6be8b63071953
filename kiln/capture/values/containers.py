"""Tuples, lists, dicts, sets, slices, named tuples and iterators over them."""
from __future__ import annotations

import collections

from typing import Any

from kiln.capture.values.base import ConstantValue, Value, note_mutation, unsupported


def constants_of(values: list[Value]) -> list[Any] | None:
    if all(v.is_constant() for v in values):
        return [v.as_constant() for v in values]
    return None


class SequenceValue(Value):
    python_kind: type = tuple

    def __init__(self, items: list[Value], source=None, created_here: bool = True):
        self.elements = list(items)
        self.source = source
        # objects created during tracing may be mutated freely; ones from the frame may not (yet)
        self.created_here = created_here

    def python_type(self) -> type:
        return self.python_kind

    def is_constant(self) -> bool:
        return all(v.is_constant() for v in self.elements)

    def as_constant(self):
        return self.python_kind(v.as_constant() for v in self.elements)

    def items(self, tx) -> list[Value]:
        return list(self.elements)

    def truth(self, tx) -> bool:
        return len(self.elements) > 0

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.base import method_or_unsupported

        return method_or_unsupported(self, name)

    def getitem(self, tx, index: Value) -> Value:
        idx = index.as_constant() if index.is_constant() else unsupported(f"indexing a {self.python_kind.__name__} with {index}")
        if isinstance(idx, slice):
            self._probe(lambda probe: probe[idx], f"{self.python_kind.__name__}[{idx!r}]")  # (a zero step)
            return type(self)(self.elements[idx]) if type(self) in (TupleValue, ListValue) else TupleValue(self.elements[idx])
        try:
            return self.elements[idx]
        except (IndexError, TypeError):
            self._probe(lambda probe: probe[idx], f"{self.python_kind.__name__}[{idx!r}]")
            unsupported(f"{self.python_kind.__name__} index {idx!r}")

    def _probe(self, operation, what: str) -> None:
        """Run `operation` on a stand-in sequence of this one's kind and length first: an IndexError,
        TypeError or ValueError CPython would raise (an index out of range, an extended slice of another
        length), message and all, is raised as the program's own, before anything is changed."""
        from kiln.capture.values.exceptions import raise_as_traced

        try:
            operation(self.python_kind([None] * len(self.elements)))
        except (IndexError, TypeError, ValueError) as exc:
            raise_as_traced(exc, what)

    def reconstruct(self, cg) -> None:
        for v in self.elements:
            cg.reconstruct(v)
        cg.build(self.python_kind, len(self.elements))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.elements!r})"


class TupleValue(SequenceValue):
    python_kind = tuple

    def call_method(self, tx, name, args, kwargs):
        if name == "index" and len(args) == 1 and args[0].is_constant() and self.is_constant():
            return ConstantValue(self.as_constant().index(args[0].as_constant()))
        if name == "count" and len(args) == 1 and args[0].is_constant() and self.is_constant():
            return ConstantValue(self.as_constant().count(args[0].as_constant()))
        if name == "__getitem__":
            return self.getitem(tx, args[0])
        if name in ("index", "count") and len(args) == 1 and not kwargs:
            return search_sequence(tx, self, name, args[0])
        unsupported(f"tuple.{name}")


def search_sequence(tx, seq: "SequenceValue", name: str, item: Value) -> Value:
    """seq.index(item) / seq.count(item) / list.remove(item): each element compared as CPython does,
    `element == item` after an identity check (PyObject_RichCompareBool), stopping at the first match
    for index and remove. The index, or None for remove."""
    from kiln.capture.values.ops import equal_bool

    count = 0
    for i, element in enumerate(list(seq.elements)):
        if equal_bool(tx, element, item):
            if name != "count":
                return ConstantValue(i)
            count += 1
    if name == "count":
        return ConstantValue(count)
    unsupported(f"{seq.python_kind.__name__}.{name}(x): x is not in the {seq.python_kind.__name__} (ValueError)")


class ListValue(SequenceValue):
    python_kind = list

    def _check_mutable(self, tx, what: str) -> None:
        note_mutation(tx, self)
        if not self.created_here:
            if self.source is None or tx is None:
                unsupported(f"{what} on a list kiln cannot locate after the graph runs")
            tx.output.side_effects.container_changed(self)
            self.changed_during_trace = True  # iterators over it cannot be rebuilt (iterators.py)

    def call_method(self, tx, name, args, kwargs):
        from kiln.capture.values.builder import wrap_constant_result

        if kwargs and name != "sort":
            unsupported(f"list.{name} with keyword arguments")
        if name == "append":
            self._check_mutable(tx, "list.append")
            self.elements.append(args[0])
            return ConstantValue(None)
        if name == "extend":
            self._check_mutable(tx, "list.extend")
            if isinstance(args[0], SequenceValue) and args[0].python_kind in (list, tuple):
                self.elements.extend(args[0].items(tx))  # CPython copies a list or tuple first
            else:
                from kiln.capture.values.iterators import iterate

                for item in iterate(tx, args[0]):  # appended one by one: the producer sees them
                    self.elements.append(item)
            return ConstantValue(None)
        if name == "insert":
            idx = args[0].as_constant()
            self._probe(lambda probe: probe.insert(idx, None), "list.insert(...)")  # (a non-int index)
            self._check_mutable(tx, "list.insert")
            self.elements.insert(idx, args[1])
            return ConstantValue(None)
        if name == "pop":
            idx = args[0].as_constant() if args else -1
            self._probe(lambda probe: probe.pop(idx), "list.pop(...)")  # empty, out of range: IndexError
            self._check_mutable(tx, "list.pop")
            return self.elements.pop(idx)
        if name == "clear":
            self._check_mutable(tx, "list.clear")
            self.elements.clear()
            return ConstantValue(None)
        if name == "reverse":
            self._check_mutable(tx, "list.reverse")
            self.elements.reverse()
            return ConstantValue(None)
        if name == "copy":
            return ListValue(list(self.elements))
        if name in ("index", "count") and self.is_constant() and all(a.is_constant() for a in args):
            from kiln.capture.values.exceptions import raise_as_traced

            try:
                return wrap_constant_result(getattr(self.as_constant(), name)(*[a.as_constant() for a in args]))
            except (ValueError, TypeError) as exc:  # `x not in list`: the program's own ValueError
                raise_as_traced(exc, f"list.{name}(...)")
        if name in ("index", "count") and len(args) == 1 and not kwargs:
            return search_sequence(tx, self, name, args[0])
        if name == "remove" and len(args) == 1 and not kwargs:
            found = search_sequence(tx, self, "index", args[0]).as_constant()
            self._check_mutable(tx, "list.remove")
            del self.elements[found]
            return ConstantValue(None)
        if name == "sort" and not args and set(kwargs) <= {"key", "reverse"}:
            # Python's own sort over traced comparisons (values/ordering.py); the list looks empty to
            # the key function meanwhile, as in CPython
            from kiln.capture.values.ordering import sort_values

            self._check_mutable(tx, "list.sort")
            reverse = kwargs.get("reverse")
            items, self.elements = self.elements, []
            ordered = sort_values(tx, items, kwargs.get("key"), bool(reverse and reverse.as_constant()))
            if self.elements:
                unsupported("list modified during sort (ValueError)")
            self.elements = ordered
            return ConstantValue(None)
        unsupported(f"list.{name}")

    def setitem(self, tx, index: Value, value: Value) -> None:
        idx = index.as_constant()
        items = value.items(tx) if isinstance(idx, slice) else value
        self._probe(lambda probe: probe.__setitem__(idx, [None] * len(items) if isinstance(idx, slice) else None),
                    f"list[{idx!r}] = ...")
        self._check_mutable(tx, "list item assignment")
        self.elements[idx] = items

    def delitem(self, tx, index: Value) -> None:
        idx = index.as_constant()
        self._probe(lambda probe: probe.__delitem__(idx), f"del list[{idx!r}]")
        self._check_mutable(tx, "del on a list item")
        del self.elements[idx]


class NamedTupleValue(TupleValue):
    """An instance of a collections.namedtuple / typing.NamedTuple class (or a Python subclass of one),
    or a torch.return_types. A subclass without `__slots__ = ()` gives its instances a __dict__: the
    attributes set on one made while tracing are `attrs` (it is then one object wherever it is held)."""

    def __init__(self, items, tuple_type: type, source=None, created_here: bool = True):
        super().__init__(items, source, created_here)
        self.tuple_type = tuple_type
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


class ObjectKey:
    """A dict key or set member that is a Python object whose class keeps object's __hash__ and __eq__:
    hashed and compared by identity, as CPython does. `value` is the symbolic object."""

    __slots__ = ("value", "ident")

    def __init__(self, value: Value, ident):
        self.value, self.ident = value, ident

    def __hash__(self) -> int:
        return hash(self.ident)

    def __eq__(self, other) -> bool:
        return isinstance(other, ObjectKey) and other.ident == self.ident

    def __repr__(self) -> str:
        return f"<{self.value!r}>"


class HashedObjectKey(ObjectKey):
    """A dict key / set member whose class has a Python __hash__: the object (by identity, as ObjectKey)
    and the hash its __hash__ gave, kept as CPython keeps a stored key's hash (values/hashed_keys.py)."""

    __slots__ = ("user_hash",)
    made = 0  # how many were ever made: lookups of constant keys skip their scan while none exists

    def __init__(self, value: Value, ident, user_hash: int):
        super().__init__(value, ident)
        self.user_hash = user_hash
        HashedObjectKey.made += 1

    def __hash__(self) -> int:
        return self.user_hash  # a real set of these keys has the table (and order) CPython's has


def key_value(key: Any) -> Value:
    """The symbolic value of a dict key / set member as dict_key stored it."""
    return key.value if isinstance(key, ObjectKey) else ConstantValue(key)


def dict_key(tx, key: Value, entries: dict | None = None) -> Any:
    """Dict keys are Python constants (strings, ints, ...), or objects compared by identity; objects with a
    Python __hash__ only where the dict's (or set's) `entries` are given: they are looked up in them with
    the __hash__ and __eq__ calls CPython makes (values/hashed_keys.py)."""
    from kiln.capture.values import hashed_keys
    from kiln.capture.values.ops import is_python_object

    if is_python_object(key):
        if entries is not None and tx is not None and hashed_keys.has_python_hash(key.python_type()):
            return hashed_keys.resolve(tx, key, entries, _object_ident(tx, key))
        return _object_key(tx, key)
    if key.is_constant():
        constant = key.as_constant()
        try:
            hash(constant)
        except TypeError as exc:  # a list or dict as a key: the program's own "unhashable type"
            from kiln.capture.values.exceptions import raise_as_traced

            raise_as_traced(exc, "hash()")
        if entries:
            hashed_keys.check_constant_key(constant, entries)
        return constant
    from kiln.capture.values.tensors import TensorValue

    if isinstance(key, TensorValue):  # by identity, as tensors hash (compared with the other tensor keys:
        if tx is not None and entries:  # an input and a tensor a module holds may be one object later)
            from kiln.capture.values.ops import check_tensor_identity_guarded

            others = [k.value for k in entries if type(k) is TensorKey]
            if others:
                check_tensor_identity_guarded(tx, [key, *others])
        return TensorKey(key.example, key)
    unsupported(f"dict key {key}")


def _object_key(tx, key: Value) -> ObjectKey:
    """hash(obj) of a Python object: object's identity hash, TypeError for `__hash__ = None` (a class that
    defines __eq__ alone), a break for a Python __hash__. Objects from outside used as keys are guarded
    to stay distinct from each other (the same object passed in two places later is one key)."""
    cls = key.python_type()
    if cls.__hash__ is None:
        from kiln.capture.values.exceptions import raise_traced

        raise_traced(TypeError, f"unhashable type: '{cls.__name__}'")
    if cls.__hash__ is not object.__hash__ or cls.__eq__ is not object.__eq__:
        unsupported(f"a {cls.__name__} as a dict key or set member: its class defines __hash__/__eq__",
                    hint="kiln hashes objects by identity only")
    return ObjectKey(key, _object_ident(tx, key))


def _object_ident(tx, key: Value):
    """The identity of a Python object used as a key: made while tracing, or from outside (guarded)."""
    cls = key.python_type()
    real = getattr(key, "obj", None)
    if real is None:
        return ("new", id(key))
    if tx is None or key.source is None:
        unsupported(f"a {cls.__name__} from outside as a set member or key kiln cannot guard")
    keyed = tx.output.__dict__.setdefault("_outside_object_keys", {})
    for other in keyed.values():
        if other.obj is not real:
            tx.output.guards.not_same(key.source, other.source)
    keyed[id(real)] = key
    return ("object", id(real))


class TensorKey(ObjectKey):
    """A tensor as a set member or dict key: hashed and compared by identity, as tensors are. Two values
    stand for the same tensor object exactly when they share their fake tensor (inputs of one object are
    one input, held tensors are memoized, in-place ops return their input's fake). `value` is the
    TensorValue (an object key like any other: iterated, rebuilt and copied as itself)."""

    __slots__ = ("example",)

    def __init__(self, example, value: Value | None = None):
        super().__init__(value, None)
        self.example = example

    def __hash__(self) -> int:
        return id(self.example)

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorKey) and other.example is self.example


def set_key(tx, value: Value, members: dict | None = None) -> Any:
    """The key of a set member: a constant, or a tensor by identity (TensorKey); looked up in `members`
    where given (objects with a Python __hash__)."""
    from kiln.capture.values.tensors import TensorValue

    if isinstance(value, TensorValue):
        return TensorKey(value.example, value)
    return dict_key(tx, value, members)


class DictValue(Value):
    def __init__(self, entries: dict[Any, Value], dict_type: type = dict, source=None, created_here: bool = True):
        self.entries = dict(entries)
        self.dict_type = dict_type
        self.source = source
        self.created_here = created_here

    def python_type(self) -> type:
        return self.dict_type

    def is_constant(self) -> bool:
        return all(v.is_constant() for v in self.entries.values()) and \
            not any(isinstance(k, ObjectKey) for k in self.entries)

    def as_constant(self):
        return self.dict_type((k, v.as_constant()) for k, v in self.entries.items())

    def items(self, tx) -> list[Value]:
        return [key_value(k) for k in self.entries]

    def truth(self, tx) -> bool:
        return bool(self.entries)

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.base import method_or_unsupported

        return method_or_unsupported(self, name)

    def key_of(self, tx, key: Value) -> Any:
        """The entry key `key` looks up (its __hash__ and __eq__ called as CPython calls them)."""
        return dict_key(tx, key, self.entries)

    def getitem(self, tx, key: Value) -> Value:
        k = self.key_of(tx, key)
        if k not in self.entries:
            if self.dict_type in (dict, collections.OrderedDict):  # no __missing__
                from kiln.capture.values.exceptions import raise_as_traced

                raise_as_traced(KeyError(k), f"dict[{k!r}]")
            unsupported(f"KeyError: {k!r}")
        return self.entries[k]

    def _check_mutable(self, tx, what: str) -> None:
        note_mutation(tx, self)
        if not self.created_here:
            if self.source is None or tx is None or self.dict_type is not dict:
                unsupported(f"{what} on a dict kiln cannot locate after the graph runs")
            tx.output.side_effects.container_changed(self)
            self.changed_during_trace = True  # iterators over it cannot be rebuilt (iterators.py)

    def setitem(self, tx, key: Value, value: Value) -> None:
        self._check_mutable(tx, "dict item assignment")
        self.entries[self.key_of(tx, key)] = value

    def delitem(self, tx, key: Value) -> None:
        k = self.key_of(tx, key)
        if k not in self.entries and self.dict_type in (dict, collections.OrderedDict):
            from kiln.capture.values.exceptions import raise_as_traced

            raise_as_traced(KeyError(k), f"del dict[{k!r}]")
        self._check_mutable(tx, "del on a dict item")
        del self.entries[k]

    def call_method(self, tx, name, args, kwargs):
        if name in ("keys", "values", "items") and not args and not kwargs:
            from kiln.capture.values.dict_views import DictViewValue

            return DictViewValue(self, name)  # a live view
        if name in ("__iter__", "__reversed__") and not args and not kwargs:
            from kiln.capture.values.dict_views import DictIterator

            return DictIterator(self, "keys", reverse=name == "__reversed__")
        if name == "__len__" and not args:
            return ConstantValue(len(self.entries))
        if name == "get":
            k = self.key_of(tx, args[0])
            default = args[1] if len(args) > 1 else ConstantValue(None)
            return self.entries.get(k, default)
        if name == "__getitem__":
            return self.getitem(tx, args[0])
        if name == "__contains__":
            return ConstantValue(self.key_of(tx, args[0]) in self.entries)
        if name == "copy":
            return DictValue(self.entries, self.dict_type)
        if name == "update":
            self._check_mutable(tx, "dict.update")
            if args:
                other = args[0]
                if isinstance(other, DictValue):
                    from kiln.capture.values.hashed_keys import merge

                    merge(tx, self.entries, other.entries)
                else:
                    from kiln.capture.values.iterators import update_from_pairs

                    update_from_pairs(tx, self.entries, other)
            for k, v in kwargs.items():
                self.entries[self.key_of(tx, ConstantValue(k))] = v
            return ConstantValue(None)
        if name == "setdefault":
            self._check_mutable(tx, "dict.setdefault")
            k = self.key_of(tx, args[0])
            if k not in self.entries:
                self.entries[k] = args[1] if len(args) > 1 else ConstantValue(None)
            return self.entries[k]
        if name == "pop":
            self._check_mutable(tx, "dict.pop")
            if not self.entries and self.dict_type is dict and len(args) > 1:
                return args[1]  # _PyDict_Pop: an empty dict answers without hashing the key
            k = self.key_of(tx, args[0])
            if k in self.entries:
                return self.entries.pop(k)
            if len(args) > 1:
                return args[1]
            unsupported(f"KeyError: {k!r}")
        if name == "__setitem__":
            self.setitem(tx, args[0], args[1])
            return ConstantValue(None)
        unsupported(f"dict.{name}")

    def reconstruct(self, cg) -> None:
        from kiln.capture.values.hashed_keys import refuse_rebuild

        refuse_rebuild(self.entries, "dict")
        if self.dict_type is not dict:
            cg.prepare_call(self.dict_type)
        for k, v in self.entries.items():
            if isinstance(k, ObjectKey):
                cg.reconstruct(k.value)
            else:
                cg.load_const(k)
            cg.reconstruct(v)
        cg.build(dict, len(self.entries))
        if self.dict_type is not dict:
            cg.call(1)

    def __repr__(self) -> str:
        return f"Dict({self.entries!r})"


class SetValue(Value):
    """A set or frozenset of constants. Its iteration order is CPython's: a set made while tracing keeps
    a real set of its members (`order`) changed by the same operations in the same order, and
    operators run on those real sets; a set from the frame iterates in the real object's order,
    guarded (values/set_order.py)."""

    def __init__(self, members: list[Value], created_here: bool = True, source=None, kind: type = set,
                 real=None, outside=None):
        self.members: dict[Any, Value] = {}
        self.kind = kind
        self.order = (set() if real is None else real) if created_here else None
        self.outside = outside  # the real set from the frame (read, never changed while tracing)
        for m in members:
            key = set_key(None, m)
            self.members.setdefault(key, m)
            if self.order is not None and real is None:
                self.order.add(key)
        self.created_here = created_here
        self.source = source

    @classmethod
    def from_real(cls, real, added: list | None = None, values: dict | None = None) -> "SetValue":
        """The result of a set operation computed on real sets (its order is the real one's). `added`:
        the members in the order they were added, where known (a rebuild replays it); `values`: the
        symbolic value of each key (tensors), else constants."""
        keys = [k for k in dict.fromkeys(added) if k in real] if added is not None else list(real)
        values = values or {}
        return cls([values.get(k) or ConstantValue(k) for k in keys], kind=type(real), real=real)

    def python_type(self) -> type:
        return self.kind

    def has_tensors(self) -> bool:
        return any(type(k) is TensorKey for k in self.members)

    def has_identity_members(self) -> bool:
        """Members hashed by identity (tensors, Python objects): their set order follows addresses."""
        return any(type(k) in (TensorKey, ObjectKey) for k in self.members)

    def is_constant(self) -> bool:
        return not any(isinstance(k, (TensorKey, ObjectKey)) for k in self.members)

    def as_constant(self):
        if self.has_tensors():
            unsupported("a set of tensors is not a constant")
        return self.kind(self.members)

    def real(self, tx=None):
        """A real set with this one's members and iteration order."""
        from kiln.capture.values.set_order import real_set

        return real_set(tx, self)

    def items(self, tx) -> list[Value]:
        return [self.members[k] for k in self.real(tx)]

    def truth(self, tx) -> bool:
        return bool(self.members)

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.base import method_or_unsupported

        return method_or_unsupported(self, name)

    def _check_mutable(self, tx, what: str) -> None:
        note_mutation(tx, self)
        if self.kind is frozenset:
            unsupported(f"'frozenset' object has no attribute {what.split('.')[-1]!r}")
        if not self.created_here:
            if self.source is None or tx is None:
                unsupported(f"{what} on a set kiln cannot locate after the graph runs")
            self.outside = None  # its order after the replayed change is not known while tracing
            tx.output.side_effects.container_changed(self)  # the new members replace the old after the graph

    def _add(self, key, value: Value) -> None:
        self.members.setdefault(key, value)
        if self.order is not None:
            self.order.add(key)

    def _discard(self, key) -> None:
        self.members.pop(key, None)
        if self.order is not None:
            self.order.discard(key)

    def call_method(self, tx, name, args, kwargs):
        if name in ("add", "update", "discard", "remove", "clear") and not kwargs:
            self._check_mutable(tx, f"set.{name}")
        if name == "add":
            self._add(set_key(tx, args[0], self.members), args[0])
            return ConstantValue(None)
        if name == "__contains__":
            return ConstantValue(set_key(tx, args[0], self.members) in self.members)
        if name == "update":
            if self.order is not None:  # CPython's update depends on the argument's kind (set_order.py)
                from kiln.capture.values.set_order import real_operand

                self.order.update(*[real_operand(tx, a) for a in args])
            for arg in args:
                for v in arg.items(tx):
                    self.members.setdefault(set_key(tx, v, self.members), v)
            return ConstantValue(None)
        if name in ("discard", "remove") and len(args) == 1:
            key = set_key(tx, args[0], self.members)
            if key not in self.members and name == "remove":
                unsupported(f"KeyError: {key!r} (set.remove)")
            self._discard(key)
            return ConstantValue(None)
        if name == "clear" and not args:
            self.members.clear()
            if self.order is not None:
                self.order.clear()
            return ConstantValue(None)
        if name == "__len__":
            return ConstantValue(len(self.members))
        if name in ("union", "intersection", "difference", "symmetric_difference", "issubset", "issuperset",
                    "isdisjoint", "copy") and not kwargs:
            from kiln.capture.values.set_order import set_method

            return set_method(tx, self, name, args)
        unsupported(f"set.{name}")

    def reconstruct(self, cg) -> None:
        if not self.created_here and self.source is not None:
            self.source.emit(cg)  # the same object (its new members, if any, are a recorded side effect)
            return
        from kiln.capture.values.hashed_keys import refuse_rebuild
        from kiln.capture.values.set_order import rebuild_order

        refuse_rebuild(self.members, "set")
        order = rebuild_order(self)
        if self.kind is frozenset:
            cg.prepare_call(frozenset)
        for key in order:
            cg.reconstruct(self.members[key])
        cg.build(set if self.kind is set else tuple, len(order))  # frozenset((...)): added in order
        if self.kind is frozenset:
            cg.call(1)


class SliceValue(Value):
    def __init__(self, start: Value, stop: Value, step: Value):
        self.parts = (start, stop, step)

    def python_type(self) -> type:
        return slice

    def is_constant(self) -> bool:
        return all(p.is_constant() for p in self.parts)

    def as_constant(self):
        return slice(*[p.as_constant() for p in self.parts])

    def reconstruct(self, cg) -> None:
        for p in self.parts:
            cg.reconstruct(p)
        cg.build(slice, 3)


def __getattr__(name: str):
    """The iterator values moved to values/iterators.py; old imports from here keep working."""
    if name in ("ListIteratorValue", "ResumeIterator", "IteratorValue"):
        from kiln.capture.values import iterators

        return getattr(iterators, name)
    if name == "ExternalIteratorValue":
        from kiln.capture.values.external_iterators import ExternalIteratorValue

        return ExternalIteratorValue
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
