"""Dicts iterated: dict key/value/item iterators (forward and reversed) and live dict views."""
from __future__ import annotations

from kiln.capture.values.base import ConstantValue, Value, method_or_unsupported, unsupported
from kiln.capture.values.iterators import IteratorValue, _refuse_changed_outside, raise_traced


def rebuild_dict_iterator(d: dict, kind: str, reverse: bool, position: int):
    view = getattr(d, kind)()
    it = reversed(view) if reverse else iter(view)
    for _ in range(position):
        next(it)
    return it


def exhausted_dict_iterator(kind: str, reverse: bool):
    return rebuild_dict_iterator({}, kind, reverse, 0)


def dict_view(d: dict, kind: str):
    return getattr(d, kind)()


def base_dict_view(obj: dict, kind: str):
    """A view of a dict subclass's items as its C base gives it (no Python override runs)."""
    import collections

    base = collections.OrderedDict if isinstance(obj, collections.OrderedDict) else dict
    return getattr(base, kind)(obj)


def _view_base_type(dict_value: Value) -> type:
    """The dict type whose views a view of `dict_value` has: its own, or for the items of a dict
    subclass object made while tracing (dict_objects.py), that object's C base."""
    import collections

    owner = getattr(dict_value, "view_owner", None)
    if owner is not None:
        return collections.OrderedDict if issubclass(owner.python_type(), collections.OrderedDict) else dict
    return _dict_type(dict_value)


def _dict_type(dict_value: Value) -> type:
    return getattr(dict_value, "dict_type", dict)


def _iter_type(dict_type: type, kind: str, reverse: bool) -> type:
    """The real iterator type (OrderedDict's are odict_iterator, ...): made on an empty dict of that type."""
    view = getattr(dict_type(), kind)()
    return type(reversed(view) if reverse else iter(view))


class DictIterator(IteratorValue):
    """iter(d), iter(d.values()), iter(d.items()) (and reversed(...)): walks the keys the dict had when
    the iterator was made; values are read live (an assignment to an existing key is seen). A dict that
    changes size meanwhile raises RuntimeError at the next step, as CPython does; other key changes
    break the graph."""

    def __init__(self, dict_value: Value, kind: str = "keys", reverse: bool = False):
        self.dict_value = dict_value
        self.kind = kind
        self.reverse = reverse
        self.iter_type = _iter_type(_view_base_type(dict_value), kind, reverse)
        self.keys = tuple(self._entries())
        self.position = 0
        self.exhausted = False
        self.size_error = False

    def _entries(self) -> dict:
        return self.dict_value.entries

    def _check_unchanged(self) -> None:
        entries = self._entries()
        if (self.size_error or len(entries) != len(self.keys)) and _dict_type(self.dict_value) is not dict:
            unsupported("a dict subclass changed size while it was being iterated")
        if self.size_error or len(entries) != len(self.keys):
            self.size_error = True  # sticky, as CPython's di_used = -1
            raise_traced(RuntimeError, "dictionary changed size during iteration")
        if tuple(entries) != self.keys:
            unsupported("a dict's keys changed while it was being iterated")

    def _next(self, tx):
        if self.exhausted:
            return None
        self._check_unchanged()
        if self.position >= len(self.keys):
            self.exhausted = True
            return None
        key = self.keys[-1 - self.position if self.reverse else self.position]
        self.position += 1
        value = self._entries()[key]
        from kiln.capture.values.container_keys import key_value

        if self.kind == "keys":
            return key_value(key)
        if self.kind == "values":
            return value
        from kiln.capture.values.containers import TupleValue

        return TupleValue([key_value(key), value])

    def children(self) -> list[Value]:
        return [] if self.exhausted else [self.dict_value]

    def reconstruct(self, cg) -> None:
        if self.exhausted:
            cg.prepare_call(exhausted_dict_iterator)
            cg.load_const(self.kind)
            cg.load_const(self.reverse)
            cg.call(2)
            return
        if self.size_error or tuple(self._entries()) != self.keys:
            unsupported("a dict iterator whose dict changed, kept after the graph")
        _refuse_changed_outside(self.dict_value)
        if getattr(self.dict_value, "view_owner", None) is not None:
            unsupported("an iterator over the items of a dict subclass object, kept after the graph")
        cg.prepare_call(rebuild_dict_iterator)
        cg.reconstruct(self.dict_value)
        cg.load_const(self.kind)
        cg.load_const(self.reverse)
        cg.load_const(self.position)
        cg.call(4)




class DictViewValue(Value):
    """d.keys(), d.values(), d.items(): a LIVE view of the dict (len, `in`, iteration and set operations
    read its current contents). Not an iterator: iter(view) makes a DictIterator."""

    def __init__(self, dict_value: Value, kind: str):
        self.dict_value = dict_value
        self.kind = kind
        self.created_here = True

    def python_type(self) -> type:
        return type(getattr(_view_base_type(self.dict_value)(), self.kind)())

    def entries(self) -> dict:
        return self.dict_value.entries

    def iterate(self) -> DictIterator:
        return DictIterator(self.dict_value, self.kind)

    def items(self, tx) -> list[Value]:
        return self.iterate().items(tx)

    def truth(self, tx) -> bool:
        return bool(self.entries())

    def getattr(self, tx, name: str) -> Value:
        if name == "mapping":
            unsupported("dict view .mapping")
        return method_or_unsupported(self, name)

    def _as_set(self, tx) -> set:
        """The keys (or (key, value) pairs of constants) as a Python set, for set operations."""
        from kiln.capture.values.set_order import refuse_hashed_members

        refuse_hashed_members(self.dict_value)
        if self.kind == "keys":
            return set(self.entries())
        if self.kind == "items" and all(v.is_constant() for v in self.entries().values()):
            return {(k, v.as_constant()) for k, v in self.entries().items()}
        unsupported(f"set operation on dict_{self.kind}")

    def contains(self, tx, item: Value) -> bool:
        from kiln.capture.values.container_keys import dict_key
        from kiln.capture.values.ops import contains_op

        if self.kind == "keys":
            return dict_key(tx, item, self.entries()) in self.entries()
        if self.kind == "values":
            from kiln.capture.values.containers import ListValue

            return contains_op(tx, item, ListValue(list(self.entries().values())))
        pair = tx.items(item) if _is_pair(item) else None
        if pair is None or len(pair) != 2:
            return False
        key = dict_key(tx, pair[0], self.entries())
        if key not in self.entries():
            return False
        value = self.entries()[key]
        if value is pair[1]:
            return True
        if value.is_constant() and pair[1].is_constant():
            return value.as_constant() == pair[1].as_constant()
        unsupported("`in` on dict_items comparing values that are not constants")

    def call_method(self, tx, name, args, kwargs):
        from kiln.capture.values.builder import wrap_constant_result

        if name == "__len__" and not args:
            return ConstantValue(len(self.entries()))
        if name == "__contains__" and len(args) == 1:
            return ConstantValue(self.contains(tx, args[0]))
        if name == "__iter__" and not args:
            return self.iterate()
        if name == "__reversed__" and not args:
            return DictIterator(self.dict_value, self.kind, reverse=True)
        if name == "isdisjoint" and len(args) == 1 and self.kind != "values":
            return ConstantValue(self._as_set(tx).isdisjoint(_constant_members(tx, args[0])))
        unsupported(f"dict_{self.kind}.{name}()")

    def binary(self, tx, op, other: Value, reflected: bool = False) -> Value:
        """keys/items views with &, |, -, ^ and comparisons: computed on their current contents."""
        from kiln.capture.values.builder import wrap_constant_result

        if self.kind == "values":
            unsupported(f"{op.__name__} on dict_values")
        mine = self._as_set(tx)
        theirs = other._as_set(tx) if isinstance(other, DictViewValue) else _constant_members(tx, other)
        result = op(theirs, mine) if reflected else op(mine, theirs)
        return wrap_constant_result(result)

    def reconstruct(self, cg) -> None:
        owner = getattr(self.dict_value, "view_owner", None)
        if owner is not None:  # a view of a dict subclass object's items: of the rebuilt object itself
            cg.prepare_call(base_dict_view)
            cg.reconstruct(owner)
            cg.load_const(self.kind)
            cg.call(2)
            return
        cg.prepare_call(dict_view)
        cg.reconstruct(self.dict_value)
        cg.load_const(self.kind)
        cg.call(2)

    def __repr__(self) -> str:
        return f"DictView[{self.kind}]({self.dict_value!r})"


def _is_pair(v: Value) -> bool:
    from kiln.capture.values.containers import SequenceValue

    return isinstance(v, SequenceValue) or v.is_constant() and isinstance(v.as_constant(), tuple)


def _constant_members(tx, v: Value) -> set:
    from kiln.capture.values.containers import SetValue

    if isinstance(v, DictViewValue):
        return v._as_set(tx)
    if isinstance(v, SetValue) or (v.is_constant() and isinstance(v.as_constant(), (set, frozenset))):
        return set(v.as_constant())
    values = tx.items(v)
    if not all(x.is_constant() for x in values):
        unsupported("set operation with values that are not constants")
    return {x.as_constant() for x in values}
