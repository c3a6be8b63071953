"""collections' containers inside compiled code: defaultdict, OrderedDict, Counter, deque, dict.fromkeys.

Made while tracing they are symbolic containers (items are any values, keys are constants as for
dicts) and are rebuilt after the graph with their own type (and default_factory / maxlen). Passed in
from the frame they are read through guarded places (keys in order, the factory's identity, maxlen);
changing one is a recorded side effect: after the graph the same object gets its new contents
(clear + update, or clear + extend for a deque).

- defaultdict: `d[k]` on a missing key calls default_factory (traced) and inserts its result;
  `get`, `in` and match's mapping patterns do not insert; a None factory raises KeyError.
- OrderedDict: `move_to_end(key, last=)`, `popitem(last=)`; `==` between two OrderedDicts compares
  order too (answered by Python on the constants).
- Counter: counts are constants (ints): every method is Python's own Counter run on the constants
  (construction from iterables/mappings, missing key 0, most_common, arithmetic, update/subtract,
  elements, total).
- deque: a deque of symbolic values, so append/appendleft/pop/popleft/extend/extendleft/rotate/maxlen
  are Python's own deque operations on them; `count`/`index`/`remove`/`in` compare identity then `==`.
"""
from __future__ import annotations

import collections
import operator

from kiln.capture.values.base import ConstantValue, Value, note_mutation, unsupported
from kiln.capture.values.containers import DictValue, ListValue, TupleValue
from kiln.capture.values.container_keys import TensorKey, dict_key, key_value
from kiln.capture.values.iterators import ListIteratorValue

_COLLECTION_DICTS = (collections.OrderedDict, collections.defaultdict, collections.Counter)


class CollectionDictValue(DictValue):
    """A dict of one of collections' dict types. Passed-in ones may change (a recorded side effect:
    clear + update after the graph keeps the object, its type and factory)."""

    def _check_mutable(self, tx, what: str) -> None:
        note_mutation(tx, self)
        if not self.created_here:
            if self.source is None or tx is None:
                unsupported(f"{what} on a {self.dict_type.__name__} kiln cannot locate after the graph runs")
            tx.output.side_effects.container_changed(self)

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.base import BoundMethodValue

        if callable(getattr(self.dict_type, name, None)):
            return BoundMethodValue(self, name)
        unsupported(f"attribute {name!r} of a {self.dict_type.__name__}")

    def copy_value(self) -> "CollectionDictValue":
        return type(self)(self.entries, self.dict_type)

    def call_method(self, tx, name, args, kwargs):
        if name == "copy" and not args and not kwargs:
            return self.copy_value()
        if name == "popitem" and not kwargs and not args and self.dict_type is not collections.OrderedDict:
            return _popitem(tx, self, last=True)
        return super().call_method(tx, name, args, kwargs)

    def binary(self, tx, op, other: Value, reflected: bool):
        """`self op other` (other op self when reflected) for | and ==/!= ; NotImplemented otherwise."""
        if op in (operator.or_, operator.ior) and isinstance(other, DictValue) and not reflected:
            if op is operator.ior:
                self.call_method(tx, "update", [other], {})
                return self
            merged = self.copy_value()
            merged.entries.update(other.entries)
            return merged
        if op is operator.or_ and isinstance(other, DictValue) and reflected:
            merged = self.copy_value()  # dict | subclass: the subclass' __ror__ runs first
            merged.entries = {**other.entries, **self.entries}
            return merged
        return NotImplemented


def _popitem(tx, d: DictValue, last: bool) -> Value:
    d._check_mutable(tx, "popitem")
    if not d.entries:
        from kiln.capture.values.exceptions import raise_traced

        raise_traced(KeyError, "dictionary is empty")
    key = next(reversed(d.entries)) if last else next(iter(d.entries))
    from kiln.capture.values.container_keys import key_value

    return TupleValue([key_value(key), d.entries.pop(key)])  # an object key is the object itself


class OrderedDictValue(CollectionDictValue):
    def call_method(self, tx, name, args, kwargs):
        if name == "move_to_end":
            key = dict_key(tx, args[0], self.entries)
            last = _flag(args[1:], kwargs, "last", True)
            if key not in self.entries:
                unsupported(f"OrderedDict.move_to_end({key!r}): KeyError")
            self._check_mutable(tx, "OrderedDict.move_to_end")
            value = self.entries.pop(key)
            self.entries = {key: value, **self.entries} if not last else {**self.entries, key: value}
            return ConstantValue(None)
        if name == "popitem":
            return _popitem(tx, self, _flag(args, kwargs, "last", True))
        return super().call_method(tx, name, args, kwargs)


def _flag(args, kwargs, name: str, default: bool) -> bool:
    value = args[0] if args else kwargs.get(name)
    return default if value is None else bool(value.as_constant())


class DefaultDictValue(CollectionDictValue):
    def __init__(self, entries, factory: Value, source=None, created_here: bool = True):
        super().__init__(entries, collections.defaultdict, source, created_here)
        self.factory = factory

    def is_constant(self) -> bool:
        return super().is_constant() and self.factory.is_constant()

    def as_constant(self):
        return collections.defaultdict(self.factory.as_constant(), {k: v.as_constant() for k, v in self.entries.items()})

    def copy_value(self) -> "DefaultDictValue":
        return DefaultDictValue(self.entries, self.factory)

    def child_values(self) -> list[Value]:
        return [*self.entries.values(), self.factory]

    def getattr(self, tx, name: str) -> Value:
        if name == "default_factory":
            return self.factory
        return super().getattr(tx, name)

    def getitem(self, tx, key: Value) -> Value:
        k = dict_key(tx, key, self.entries)
        if k in self.entries:
            return self.entries[k]
        if self.factory.is_constant() and self.factory.as_constant() is None:
            from kiln.capture.values.exceptions import ExceptionValue, TracedRaise

            raise TracedRaise(ExceptionValue(KeyError, [key]), repr(k))
        value = tx.call(self.factory, [], {})  # __missing__: the factory's result is inserted
        self.setitem(tx, key, value)
        return value

    def call_method(self, tx, name, args, kwargs):
        if name == "__getitem__":
            return self.getitem(tx, args[0])
        if name == "__missing__":
            return self.getitem(tx, args[0])
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, cg) -> None:
        cg.prepare_call(collections.defaultdict)
        cg.reconstruct(self.factory)
        cg.reconstruct(DictValue(self.entries))
        cg.call(2)


class CounterValue(CollectionDictValue):
    """A Counter whose counts are constants: its methods are Counter's own, run on the constants."""

    def __init__(self, entries, source=None, created_here: bool = True):
        super().__init__(entries, collections.Counter, source, created_here)

    def copy_value(self) -> "CounterValue":
        return CounterValue(self.entries)

    def as_constant(self):
        return collections.Counter({k: v.as_constant() for k, v in self.entries.items()})

    def real(self) -> collections.Counter:
        """A real Counter of the counts (constants) keyed by the dict keys: constants, and tensors and
        objects by identity (container_keys), which hash and compare as the objects themselves do."""
        return collections.Counter(_real_mapping(self, "a Counter"))

    def set_from(self, counter: collections.Counter) -> None:
        self.entries = {k: ConstantValue(v) for k, v in dict(counter).items()}

    def getitem(self, tx, key: Value) -> Value:
        k = dict_key(tx, key, self.entries)
        return self.entries.get(k, ConstantValue(0))  # __missing__ returns 0 and inserts nothing

    def call_method(self, tx, name, args, kwargs):
        if name == "__getitem__":
            return self.getitem(tx, args[0])
        if name in ("keys", "values", "items", "get", "__contains__", "copy", "__setitem__", "pop",
                    "setdefault"):
            return super().call_method(tx, name, args, kwargs)
        if name in ("update", "subtract", "clear", "popitem"):
            self._check_mutable(tx, f"Counter.{name}")
            real = self.real()
            result = _on_real(f"Counter.{name}()", getattr(real, name), *[_counter_arg(tx, a, self) for a in args],
                              **{k: _constant(v) for k, v in kwargs.items()})
            self.set_from(real)
            return _wrap(result)
        if name in ("most_common", "elements", "total"):
            result = getattr(self.real(), name)(*[_constant(a) for a in args])
            if name == "elements":
                return ListIteratorValue([key_value(v) for v in result])
            return _wrap(result)
        return super().call_method(tx, name, args, kwargs)

    def binary(self, tx, op, other: Value, reflected: bool):
        plain = {operator.iadd: operator.add, operator.isub: operator.sub, operator.ior: operator.or_,
                 operator.iand: operator.and_}.get(op, op)
        if plain not in (operator.add, operator.sub, operator.or_, operator.and_, operator.eq, operator.ne,
                         operator.le, operator.lt, operator.ge, operator.gt):
            return NotImplemented
        if not isinstance(other, DictValue):
            return NotImplemented
        mine = self.real()
        theirs = other.real() if isinstance(other, CounterValue) else _real_mapping(other, "a dict", other.dict_type)
        a, b = (theirs, mine) if reflected else (mine, theirs)
        try:
            result = op(a, b)  # in place: on a fresh real Counter (self.real() is a copy)
        except TypeError:
            return NotImplemented
        if result is NotImplemented:
            return NotImplemented
        if op is not plain:  # in place: the same Counter
            self._check_mutable(tx, "Counter in-place operator")
            self.set_from(result)
            return self
        return _wrap(result)

    def reconstruct(self, cg) -> None:
        cg.prepare_call(collections.Counter)
        cg.reconstruct(DictValue(self.entries))
        cg.call(1)


def _constant(v: Value):
    if not v.is_constant():
        unsupported(f"a Counter method with argument {v}, which is not a constant")
    return v.as_constant()


def _counter_arg(tx, v: Value, counter: "CounterValue | None" = None):
    """An argument of Counter(...)/update/subtract as the real Counter sees it: a mapping of dict keys
    (constants; tensors and plain objects by identity) to constants, or the list of an iterable's keys."""
    if isinstance(v, CounterValue):
        return v.real()
    if isinstance(v, DictValue):
        return _real_mapping(v, "a dict", v.dict_type)
    if v.is_constant():
        return v.as_constant()
    items = tx.items(v)
    from kiln.capture.values.ops import check_tensor_identity_guarded
    from kiln.capture.values.tensors import TensorValue

    tensors = [item for item in items if isinstance(item, TensorValue)]
    tensors += [k.value for k in (counter.entries if counter is not None else ()) if type(k) is TensorKey]
    check_tensor_identity_guarded(tx, tensors)  # an input and a parameter may be one object later
    return [_constant(item) if item.is_constant() else dict_key(tx, item) for item in items]


def _real_mapping(d: DictValue, what: str, kind=dict):
    """d's entries as a real mapping from its keys (constant or identity keys) to constant values."""
    from kiln.capture.values.container_keys import HashedObjectKey

    if any(isinstance(k, HashedObjectKey) for k in d.entries):
        unsupported(f"{what} keyed by objects with a Python __hash__ in a Counter operation")
    if kind is collections.defaultdict:
        kind = dict  # the same items, order and comparisons; its factory is never called here
    if kind not in (dict, collections.OrderedDict, collections.Counter):
        unsupported(f"a Counter operation with a {kind.__name__}")
    return kind((k, _constant(v)) for k, v in d.entries.items())


def _wrap(result) -> Value:
    """A real result back as a value: Counters keep their keys; other results hold keys as the values
    they stand for (most_common's pairs, popitem's)."""
    if isinstance(result, collections.Counter):
        return CounterValue({k: ConstantValue(v) for k, v in result.items()})
    from kiln.capture.values.builder import wrap_constant_result
    from kiln.capture.values.container_keys import ObjectKey

    if isinstance(result, ObjectKey):
        return key_value(result)
    if type(result) in (list, tuple) and any(isinstance(r, (ObjectKey, list, tuple)) for r in result):
        return (ListValue if type(result) is list else TupleValue)([_wrap(r) for r in result])
    return wrap_constant_result(result)


# ---- deque ----------------------------------------------------------------------------------------

class DequeValue(Value):
    """A collections.deque of symbolic values (a real deque of Values: its operations are Python's)."""

    def __init__(self, items, maxlen, source=None, created_here: bool = True):
        self.items_ = collections.deque(items, maxlen)
        self.source = source
        self.created_here = created_here

    @property
    def has_identity(self) -> bool:
        return self.created_here

    def python_type(self) -> type:
        return collections.deque

    def child_values(self) -> list[Value]:
        return list(self.items_)

    def items(self, tx) -> list[Value]:
        return list(self.items_)

    def truth(self, tx) -> bool:
        return bool(self.items_)

    def _changing(self, tx, what: str) -> None:
        note_mutation(tx, self)
        if not self.created_here:
            if self.source is None:
                unsupported(f"deque.{what} on a deque kiln cannot locate after the graph runs")
            tx.output.side_effects.container_changed(self)

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.base import BoundMethodValue

        if name == "maxlen":
            return ConstantValue(self.items_.maxlen)
        if callable(getattr(collections.deque, name, None)):
            return BoundMethodValue(self, name)
        unsupported(f"'collections.deque' object has no attribute {name!r}")

    def getitem(self, tx, index: Value) -> Value:
        i = index.as_constant() if index.is_constant() else unsupported("indexing a deque with a non-constant")
        try:
            return self.items_[i]
        except (IndexError, TypeError) as exc:
            unsupported(f"deque index {i!r}: {exc}")

    def setitem(self, tx, index: Value, value: Value) -> None:
        self._changing(tx, "__setitem__")
        self.items_[index.as_constant()] = value

    _MUTATORS = {"append", "appendleft", "pop", "popleft", "extend", "extendleft", "rotate", "clear",
                 "insert", "reverse", "remove", "__setitem__", "__delitem__"}

    def call_method(self, tx, name, args, kwargs):
        if kwargs:
            unsupported(f"deque.{name} with keyword arguments")
        if name in ("pop", "popleft") and not self.items_:
            from kiln.capture.values.exceptions import raise_traced

            raise_traced(IndexError, f"{name} from an empty deque")
        if name in self._MUTATORS:
            self._changing(tx, name)
        if name in ("append", "appendleft", "pop", "popleft", "clear", "reverse"):
            result = getattr(self.items_, name)(*args)
            return result if isinstance(result, Value) else ConstantValue(None)
        if name in ("extend", "extendleft"):
            getattr(self.items_, name)(list(tx.items(args[0])))
            return ConstantValue(None)
        if name in ("rotate", "insert"):
            constant_args = [a.as_constant() for a in args[:1]] + list(args[1:])
            if name == "insert" and self.items_.maxlen is not None and len(self.items_) == self.items_.maxlen:
                unsupported("deque.insert into a full bounded deque (IndexError)")
            getattr(self.items_, name)(*constant_args)
            return ConstantValue(None)
        if name == "copy":
            return DequeValue(list(self.items_), self.items_.maxlen)
        if name == "__getitem__":
            return self.getitem(tx, args[0])
        if name == "__setitem__":
            self.items_[args[0].as_constant()] = args[1]
            return ConstantValue(None)
        if name == "__len__":
            return ConstantValue(len(self.items_))
        if name in ("count", "index", "remove", "__contains__"):
            return self._by_equality(tx, name, args)
        unsupported(f"deque.{name}")

    def binary(self, tx, op, other: Value, reflected: bool):
        """deque += iterable (extend, in place), deque + deque (a new deque of the same maxlen), deque * n
        and deque *= n (in place), as CPython's deque_concat / deque_inplace_concat / deque_repeat do."""
        if reflected and op is operator.mul and other.is_constant() and type(other.as_constant()) is int:
            return self.binary(tx, op, other, reflected=False)  # n * deque
        if reflected:
            return NotImplemented
        if op is operator.iadd:
            self.call_method(tx, "extend", [other], {})
            return self
        if op is operator.add and isinstance(other, DequeValue):
            result = DequeValue(list(self.items_), self.items_.maxlen)
            result.items_.extend(list(other.items_))
            return result
        if op in (operator.mul, operator.imul) and other.is_constant() and type(other.as_constant()) is int:
            target = self if op is operator.imul else DequeValue(list(self.items_), self.items_.maxlen)
            if op is operator.imul:
                self._changing(tx, "__imul__")
            target.items_ *= other.as_constant()
            return target
        return NotImplemented

    def _by_equality(self, tx, name: str, args) -> Value:
        """count/index/remove/`in` as CPython's deque does: each item compared with the value, identity
        first, then `item == value` (ops.equal_bool: a tensor pair raises eager's error or breaks),
        stopping at the first match except for count."""
        from kiln.capture.values.ops import equal_bool

        if len(args) != 1:
            unsupported(f"deque.{name} with start/stop arguments")
        target, count = args[0], 0
        snapshot = list(self.items_)
        for position, item in enumerate(snapshot):
            found = equal_bool(tx, item, target)
            if len(self.items_) != len(snapshot) or any(a is not b for a, b in zip(self.items_, snapshot)):
                unsupported(f"deque.{name}: an __eq__ changed the deque (RuntimeError)")
            if not found:
                continue
            if name == "count":
                count += 1
            elif name == "__contains__":
                return ConstantValue(True)
            elif name == "index":
                return ConstantValue(position)
            else:
                del self.items_[position]
                return ConstantValue(None)
        if name == "count":
            return ConstantValue(count)
        if name == "__contains__":
            return ConstantValue(False)
        unsupported(f"deque.{name}: the value is not present (ValueError)")

    def new_contents(self) -> Value:
        return ListValue(list(self.items_))

    replace_function = None  # set below (needs the function object)

    def reconstruct(self, cg) -> None:
        if not self.created_here and self.source is not None:
            self.source.emit(cg)
            return
        cg.prepare_call(collections.deque)
        cg.reconstruct(ListValue(list(self.items_)))
        cg.load_const(self.items_.maxlen)
        cg.call(2)

    def __repr__(self) -> str:
        return f"Deque({list(self.items_)!r}, maxlen={self.items_.maxlen})"


def replace_deque(target: collections.deque, new_items: list) -> None:
    target.clear()
    target.extend(new_items)


DequeValue.replace_function = staticmethod(replace_deque)


# ---- construction -------------------------------------------------------------------------------

def _dict_entries(tx, args, kwargs, what: str) -> dict:
    entries = {}
    if len(args) > 1:
        unsupported(f"{what}() with more than one positional argument")
    if args:
        src = args[0]
        if isinstance(src, DictValue):
            entries.update(src.entries)
        else:
            for pair in tx.items(src):
                k, v = tx.items(pair)
                entries[dict_key(tx, k, entries)] = v
    for name in kwargs:  # a str key with the hash of an object key would call its __eq__
        dict_key(tx, ConstantValue(name), entries)
    entries.update(kwargs)
    return entries


def make_ordered_dict(tx, args, kwargs) -> Value:
    return OrderedDictValue(_dict_entries(tx, args, kwargs, "OrderedDict"), collections.OrderedDict)


def make_defaultdict(tx, args, kwargs) -> Value:
    factory = args[0] if args else ConstantValue(None)
    from kiln.capture.values.builtins import BuiltinValue

    if not (factory.is_constant() and factory.as_constant() is None) and \
            not BuiltinValue(callable).call(tx, [factory], {}).as_constant():
        unsupported("defaultdict() first argument must be callable or None (TypeError)")
    return DefaultDictValue(_dict_entries(tx, args[1:], kwargs, "defaultdict"), factory)


def make_counter(tx, args, kwargs) -> Value:
    if len(args) > 1:
        unsupported("Counter() with more than one positional argument")
    real = collections.Counter()
    if args:
        _on_real("Counter()", real.update, _counter_arg(tx, args[0]))
    if kwargs:
        real.update({k: _constant(v) for k, v in kwargs.items()})
    return _wrap(real)


def _on_real(what: str, fn, *args, **kwargs):
    """fn(*args) on real constants: CPython's own errors (Counter(5), deque(maxlen=-1)) are the program's."""
    try:
        return fn(*args, **kwargs)
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        from kiln.capture.values.exceptions import raise_as_traced

        raise_as_traced(exc, what)


def make_deque(tx, args, kwargs) -> Value:
    names = ("iterable", "maxlen")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    if set(bound) - set(names) or len(args) > 2:
        unsupported("deque() with unexpected arguments")
    maxlen = bound.get("maxlen", ConstantValue(None))
    if not maxlen.is_constant():
        unsupported("deque(maxlen=...) not known while tracing")
    _on_real("deque()", collections.deque, (), maxlen.as_constant())  # checked before the items are read
    items = tx.items(bound["iterable"]) if "iterable" in bound else []
    return DequeValue(items, maxlen.as_constant())


def fromkeys(tx, dict_type: type, args, kwargs) -> Value:
    """dict.fromkeys(keys, value=None) / OrderedDict.fromkeys: every key maps to the same value object."""
    if kwargs or not 1 <= len(args) <= 2:
        unsupported(f"{dict_type.__name__}.fromkeys() with unexpected arguments")
    value = args[1] if len(args) > 1 else ConstantValue(None)
    entries = {}
    for k in tx.items(args[0]):
        entries[dict_key(tx, k, entries)] = value
    if dict_type is dict:
        return DictValue(entries)
    if dict_type is collections.OrderedDict:
        return OrderedDictValue(entries, dict_type)
    unsupported(f"{dict_type.__name__}.fromkeys()")


class FromKeysValue(Value):
    """`dict.fromkeys` / `OrderedDict.fromkeys`, not yet called."""

    def __init__(self, dict_type: type):
        self.dict_type = dict_type

    def call(self, tx, args, kwargs) -> Value:
        return fromkeys(tx, self.dict_type, args, kwargs)

    def reconstruct(self, cg) -> None:
        cg.load_const(self.dict_type)
        cg.load_attr("fromkeys")


def class_attribute_hook(cls: type, name: str) -> Value | None:
    if name == "fromkeys" and cls in (dict, collections.OrderedDict):
        return FromKeysValue(cls)
    return None


# ---- values passed in ---------------------------------------------------------------------------

def wrap_collection(tx, value, source) -> Value | None:
    """A defaultdict/OrderedDict/Counter/deque read from the frame, or None for other objects."""
    from kiln.capture.sources import AttrSource, ConstantSource, GetItemSource
    from kiln.capture.values.base import is_constant_literal
    from kiln.capture.values.builder import wrap

    kind = type(value)
    if kind not in (*_COLLECTION_DICTS, collections.deque):
        return None
    placed = source is not None and not isinstance(source, ConstantSource)
    guards = tx.output.guards
    if kind is collections.deque:
        if placed:
            guards.length(source, value)
            guards.constant(AttrSource(source, "maxlen"), value.maxlen)
        items = [wrap(tx, v, GetItemSource(source, i) if placed else None) for i, v in enumerate(value)]
        return DequeValue(items, value.maxlen, source=source, created_here=not placed)
    if placed:
        guards.dict_keys(source, value)
    if not all(is_constant_literal(k) for k in value):
        unsupported(f"{kind.__name__} with non-constant keys")
    entries = {k: wrap(tx, v, GetItemSource(source, k) if placed else None) for k, v in value.items()}
    if kind is collections.defaultdict:
        factory = wrap(tx, value.default_factory, AttrSource(source, "default_factory") if placed else
                       ConstantSource("default_factory", value.default_factory))
        return DefaultDictValue(entries, factory, source=source, created_here=not placed)
    if kind is collections.Counter:
        return CounterValue(entries, source=source, created_here=not placed)
    return OrderedDictValue(entries, kind, source=source, created_here=not placed)


BUILTIN_HANDLERS: dict = {}
CLASS_HANDLERS: dict = {
    collections.OrderedDict: make_ordered_dict, collections.defaultdict: make_defaultdict,
    collections.Counter: make_counter, collections.deque: make_deque,
}
