"""Tuples, lists, dicts, sets and slices (named tuples: namedtuples.py; dict keys and set members:
container_keys.py)."""
from __future__ import annotations

import collections

from typing import Any

from kiln.capture.values.base import ConstantValue, Value, note_mutation, unsupported
from kiln.capture.values.container_keys import ObjectKey, TensorKey, dict_key, key_value, set_key


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
            if self.dict_type in (dict, collections.OrderedDict) and args[0].is_constant():
                from kiln.capture.values.exceptions import raise_as_traced

                raise_as_traced(KeyError(args[0].as_constant()), f"dict.pop({k!r})")
            unsupported(f"KeyError: {k!r}")
        if name == "__setitem__":
            self.setitem(tx, args[0], args[1])
            return ConstantValue(None)
        if name == "clear" and not args and not kwargs:
            self._check_mutable(tx, "dict.clear")
            self.entries.clear()
            return ConstantValue(None)
        if name == "popitem" and not args and not kwargs and self.dict_type is dict:
            if not self.entries:
                from kiln.capture.values.exceptions import raise_traced

                raise_traced(KeyError, "popitem(): dictionary is empty")
            self._check_mutable(tx, "dict.popitem")
            k, v = self.entries.popitem()  # the last inserted, as CPython's
            return TupleValue([key_value(k), v])
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
        # the adds and discards (True/False, key) that made its real table from an empty set, where that
        # is all that happened (set_tensor_order.py replays them with the hashes of another call's tensors)
        self.history: list | None = [] if created_here and real is None and not members else None
        for m in members:
            key = set_key(None, m)
            self.members.setdefault(key, m)
            if self.order is not None and real is None:
                self.order.add(key)
        self.created_here = created_here
        self.source = source

    @classmethod
    def from_real(cls, real, added: list | None = None, values: dict | None = None,
                  one_by_one: bool = False) -> "SetValue":
        """The result of a set operation computed on real sets (its order is the real one's). `added`:
        the members in the order they were added, where known (a rebuild replays it); `values`: the
        symbolic value of each key (tensors), else constants; `one_by_one`: `real` was made by adding
        `added` one at a time to an empty set."""
        keys = [k for k in dict.fromkeys(added) if k in real] if added is not None else list(real)
        values = values or {}
        made = cls([values.get(k) or ConstantValue(k) for k in keys], kind=type(real), real=real)
        made.history = [(True, k) for k in added] if one_by_one else None
        return made

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

    def add_each(self, tx, items: list[Value]) -> "SetValue":
        """PySet_Add of each item in turn (BUILD_SET, set(list)): a Python __hash__/__eq__ runs as CPython
        runs it, against the members added before."""
        for item in items:
            self._add(set_key(tx, item, self.members), item)
        return self

    def _add(self, key, value: Value) -> None:
        self.members.setdefault(key, value)
        if self.order is not None:
            self.order.add(key)
        if self.history is not None:
            self.history.append((True, key))

    def _record_update(self, args: list, operands: list) -> None:
        """``update``'s steps in the history: each member of a list, tuple or str added in turn; a set
        (or frozenset) made while tracing with a known history merged whole ("merge", its history: CPython
        merges a set's table, which the guard replays with a real set); anything else (a dict resizes the
        table first) leaves the history unknown."""
        for arg, operand in zip(args, operands):
            if self.history is None:
                return
            if isinstance(operand, (list, tuple, str)):
                self.history += [(True, k) for k in operand]
            elif isinstance(arg, SetValue) and arg.history is not None and isinstance(operand, (set, frozenset)):
                self.history.append(("merge", list(arg.history)))
            else:
                self.history = None

    def _discard(self, key) -> None:
        self.members.pop(key, None)
        if self.history is not None:
            self.history.append((False, key))
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

                operands = [real_operand(tx, a) for a in args]
                self.order.update(*operands)
                self._record_update(args, operands)
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
            self.history = [] if self.order is not None else None  # a new empty table, as a new set
            if self.order is not None:
                self.order.clear()
            return ConstantValue(None)
        if name == "__len__":
            return ConstantValue(len(self.members))
        if name in ("difference_update", "intersection_update", "symmetric_difference_update") and not kwargs:
            from kiln.capture.values.set_order import set_update_method

            self._check_mutable(tx, f"set.{name}")
            set_update_method(tx, self, name, args)
            return ConstantValue(None)
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

    def getattr(self, tx, name: str) -> Value:
        """start/stop/step are the values the slice was built from (the same objects, as in Python); its
        methods (indices, ...) run on the constant slice, and break when a part is not a constant."""
        if name in ("start", "stop", "step"):
            return self.parts[("start", "stop", "step").index(name)]
        if not self.is_constant():
            unsupported(f"attribute {name!r} of a slice with parts that are not constants: {self.parts}")
        return ConstantValue(self.as_constant()).getattr(tx, name)

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
