"""Iterators, modelled lazily: one item at a time, as CPython's iterator objects produce them.

Every iterator is an `IteratorValue`. `next_item(tx)` produces ONE item (or None once exhausted), so
`map(f, xs)` calls `f` only for the items a consumer takes, `zip` takes from its arguments in CPython's
order, an iterator over a list sees the list grow while it runs (CPython's listiter indexes into the
live list), and a dict view sees later insertions. A `StopIteration` raised by traced code while an item
is produced (a mapped function, a user `__next__`) ends the iteration, as in CPython's iterator protocol.

An iterator that must be kept after the graph (a graph break, the return value) is rebuilt as the very
same kind of object in the state the trace left it in (`reconstruct`), or the rebuild is refused
(`unsupported`) where its state cannot be written back exactly (a cycle's saved items, a tee's buffer).
``map``/``filter``/``zip``/``enumerate`` objects are in iterator_combinators.py, iterators passed in from
outside in external_iterators.py, generator expressions in
generator_expressions.py; materialized ones (`ListIteratorValue`) hold items computed ahead (generators run to
their end, nn.Module's iterators).
"""
from __future__ import annotations

import collections

from kiln.capture.values.base import ConstantValue, Value, method_or_unsupported, note_mutation, unsupported

MAX_DRAINED = 100_000  # draining more than this many items (an infinite iterator) breaks the graph


def stop_iteration_raised(exc) -> bool:
    from kiln.capture.values.exceptions import TracedRaise

    return isinstance(exc, TracedRaise) and exc.matches(StopIteration)


def raise_traced(cls: type, message: str):
    from kiln.capture.values.exceptions import raise_traced as raise_exception

    raise_exception(cls, message)


class IteratorValue(Value):
    """An iterator object made while tracing. Subclasses implement `_next(tx)` (one item, or None when
    exhausted), `children()` (the values `reconstruct` emits, so the graph outputs their tensors) and
    `reconstruct(cg)`."""

    iter_type: type = type(iter([]))
    created_here = True
    source = None

    def python_type(self) -> type:
        return self.iter_type

    def next_item(self, tx=None) -> Value | None:
        """The next item, or None when exhausted (a StopIteration raised by traced code ends it too)."""
        note_mutation(tx, self)
        try:
            return self._next(tx)
        except Exception as exc:
            if stop_iteration_raised(exc):
                return None
            raise

    def _next(self, tx) -> Value | None:
        raise NotImplementedError

    def items(self, tx) -> list[Value]:
        """Drain the iterator (list(it), unpacking, sum(...)): repeated next_item."""
        out = []
        while True:
            item = self.next_item(tx)
            if item is None:
                return out
            out.append(item)
            if len(out) > MAX_DRAINED:
                unsupported(f"draining a {self.iter_type.__name__} with more than {MAX_DRAINED} items "
                            f"(an infinite iterator?)")

    def truth(self, tx) -> bool:
        return True

    def is_constant(self) -> bool:
        return False

    def getattr(self, tx, name: str) -> Value:
        return method_or_unsupported(self, name)

    def call_method(self, tx, name, args, kwargs):
        if name == "__next__" and not args and not kwargs:
            item = self.next_item(tx)
            if item is None:
                self.raise_stop()
            return item
        if name == "__iter__" and not args and not kwargs:
            return self
        unsupported(f"{self.iter_type.__name__}.{name}()")

    def raise_stop(self):
        """next(it) found it exhausted: the StopIteration it raises (a generator's carries its return value)."""
        raise_stop_iteration()

    def children(self) -> list[Value]:
        return []

    def reconstruct(self, cg) -> None:
        unsupported(f"a {self.iter_type.__name__} object kept after the graph: kiln cannot rebuild its state",
                    hint="consume the iterator (list(...)) before the graph break or return")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def raise_stop_iteration():
    from kiln.capture.values.exceptions import ExceptionValue, TracedRaise

    raise TracedRaise(ExceptionValue(StopIteration, []))


# ---- runtime helpers the transformed code calls to rebuild iterators --------------------------------

def rebuild_seq_iterator(seq, index: int, reverse: bool = False):
    """iter(seq) (or reversed(seq)) positioned at `index`, as CPython's __setstate__ does."""
    it = reversed(seq) if reverse else iter(seq)
    it.__setstate__(index)
    return it


def exhausted_iterator(kind: type):
    """An exhausted iterator of the same type as a sequence iterator over `kind` (list, tuple, ...)."""
    it = iter(kind())
    for _ in it:
        pass
    return it


def exhausted_reversed_list():
    it = reversed([])
    next(it, None)
    return it


def make_zip(strict: bool, *iterators):
    return zip(*iterators, strict=True) if strict else zip(*iterators)


def exhausted_callable_iterator():
    it = iter(lambda: None, None)
    next(it, None)
    return it


# ---- the item sources -------------------------------------------------------------------------------

def _is_list_value(v: Value) -> bool:
    from kiln.capture.values.containers import ListValue

    return isinstance(v, ListValue)


class SequenceIterator(IteratorValue):
    """iter(list), iter(tuple), iter(range), iter(str): an index into the LIVE sequence (CPython's
    listiter: items appended while iterating are seen; once exhausted it stays exhausted)."""

    def __init__(self, seq: Value, iter_type: type, index: int = 0):
        self.seq = seq
        self.iter_type = iter_type
        self.index = index
        self.exhausted = False

    def _length(self) -> int:
        from kiln.capture.values.containers import SequenceValue

        if isinstance(self.seq, SequenceValue):
            return len(self.seq.elements)
        return len(self.seq.as_constant())

    def _get(self, i: int) -> Value:
        from kiln.capture.values.containers import SequenceValue

        if isinstance(self.seq, SequenceValue):
            return self.seq.elements[i]
        return ConstantValue(self.seq.as_constant()[i])

    def _next(self, tx):
        if self.exhausted:
            return None
        if self.index < self._length():
            self.index += 1
            return self._get(self.index - 1)
        self.exhausted = True  # CPython drops the sequence: later appends are not seen
        return None

    def remaining(self) -> int:
        return 0 if self.exhausted else max(self._length() - self.index, 0)

    def children(self) -> list[Value]:
        return [] if self.exhausted else [self.seq]

    def reconstruct(self, cg) -> None:
        _refuse_changed_outside(self.seq)
        if self.exhausted and hasattr(self.seq, "elements"):  # CPython dropped the list or tuple
            cg.prepare_call(exhausted_iterator)
            cg.load_const(list if _is_list_value(self.seq) else tuple)
            cg.call(1)
            return
        if self.exhausted:  # an immutable constant (range, str, bytes, tuple of constants)
            cg.prepare_call(rebuild_seq_iterator)
            cg.load_const(self.seq.as_constant())
            cg.load_const(len(self.seq.as_constant()))
            cg.call(2)
            return
        cg.prepare_call(rebuild_seq_iterator)
        cg.reconstruct(self.seq)
        cg.load_const(self.index)
        cg.call(2)

    def __repr__(self) -> str:
        return f"SequenceIterator({self.seq!r}@{self.index})"


def _refuse_changed_outside(container: Value) -> None:
    """A list/dict from outside changed while tracing gets its new contents only after the rebuilt
    iterator exists (the replay of side effects comes last): its position could be clamped wrongly."""
    if not getattr(container, "created_here", True) and getattr(container, "changed_during_trace", False):
        unsupported("an iterator over a list or dict from outside that was changed while tracing, kept after "
                    "the graph")


class ReversedListIterator(IteratorValue):
    """reversed(list): CPython's listreviter, an index from the end into the LIVE list."""

    iter_type = type(reversed([]))

    def __init__(self, seq: Value):
        self.seq = seq
        self.index = len(seq.elements) - 1
        self.exhausted = False

    def _next(self, tx):
        if not self.exhausted and 0 <= self.index < len(self.seq.elements):
            self.index -= 1
            return self.seq.elements[self.index + 1]
        self.exhausted = True
        return None

    def children(self) -> list[Value]:
        return [] if self.exhausted else [self.seq]

    def reconstruct(self, cg) -> None:
        _refuse_changed_outside(self.seq)
        if self.exhausted or not 0 <= self.index < len(self.seq.elements):
            cg.prepare_call(exhausted_reversed_list)
            cg.call(0)
            return
        cg.prepare_call(rebuild_seq_iterator)
        cg.reconstruct(self.seq)
        cg.load_const(self.index)
        cg.load_const(True)
        cg.call(3)


class ReversedSequenceIterator(IteratorValue):
    """reversed(tuple), reversed(str): the generic `reversed` object over an immutable sequence."""

    iter_type = reversed

    def __init__(self, seq: Value):
        self.seq = seq
        self.index = _seq_len(seq) - 1

    def _next(self, tx):
        if self.index < 0:
            return None
        self.index -= 1
        return _seq_get(self.seq, self.index + 1)

    def children(self) -> list[Value]:
        return [self.seq]

    def reconstruct(self, cg) -> None:
        cg.prepare_call(rebuild_seq_iterator)
        cg.reconstruct(self.seq)
        cg.load_const(self.index)
        cg.load_const(True)
        cg.call(3)


def _seq_len(seq: Value) -> int:
    return len(seq.elements) if hasattr(seq, "elements") else len(seq.as_constant())


def _seq_get(seq: Value, i: int) -> Value:
    return seq.elements[i] if hasattr(seq, "elements") else ConstantValue(seq.as_constant()[i])


class SetIterator(IteratorValue):
    """iter(set): the members in kiln's order; a set that changes size meanwhile breaks the graph."""

    iter_type = type(iter(set()))

    def __init__(self, set_value: Value, tx=None):
        self.set_value = set_value
        self.members = set_value.items(tx)  # in a real set's order (guarded where it needs a guard)
        self.size = len(self.members)
        self.position = 0

    def _next(self, tx):
        if len(self.set_value.members) != self.size:
            unsupported("a set changed size while it was being iterated")
        if self.position >= len(self.members):
            return None
        self.position += 1
        return self.members[self.position - 1]


class CallableIterator(IteratorValue):
    """iter(callable, sentinel): calls the callable until it returns the sentinel."""

    iter_type = type(iter(int, 1))

    def __init__(self, fn: Value, sentinel: Value):
        self.fn = fn
        self.sentinel = sentinel
        self.exhausted = False

    def _next(self, tx):
        if self.exhausted:
            return None
        item = self.fn.call(tx, [], {})
        import operator

        from kiln.capture.values.ops import binary_op

        if tx.truth(binary_op(tx, operator.eq, item, self.sentinel)):
            self.exhausted = True
            return None
        return item

    def children(self) -> list[Value]:
        return [] if self.exhausted else [self.fn, self.sentinel]

    def reconstruct(self, cg) -> None:
        if self.exhausted:
            cg.prepare_call(exhausted_callable_iterator)
            cg.call(0)
            return
        cg.prepare_call(iter)
        cg.reconstruct(self.fn)
        cg.reconstruct(self.sentinel)
        cg.call(2)


class UserIteratorValue(IteratorValue):
    """An object of a user class with a Python __next__ (its __iter__ returned it), stepped by FOR_ITER
    or a consumer: each step calls __next__ as traced code; a StopIteration it raises ends it. Only kept
    on the stack or inside consumers (never bound to a name): rebuilt as the object itself."""

    def __init__(self, obj: Value):
        self.obj = obj

    def python_type(self) -> type:
        return self.obj.python_type()

    def next_item(self, tx=None):
        try:
            return self.obj.call_method(tx, "__next__", [], {})
        except Exception as exc:
            if stop_iteration_raised(exc):
                return None
            raise

    def children(self) -> list[Value]:
        return [self.obj]

    def reconstruct(self, cg) -> None:
        cg.reconstruct(self.obj)


class _OldSequence:
    def __getitem__(self, i):
        raise IndexError(i)


def sequence_iterator_at(obj, index: int, exhausted: bool):
    """CPython's iterator over an object with __getitem__ and no __iter__, ``index`` items in (set without
    calling __getitem__: the iterator's __setstate__), or one already exhausted."""
    if exhausted:
        it = iter(_OldSequence())
        next(it, None)
        return it
    it = iter(obj)
    it.__setstate__(index)
    return it


def old_sequence_protocol(cls) -> bool:
    """iter() of an object of ``cls`` is CPython's sequence iterator over its Python __getitem__: the class
    has no __iter__ (not even ``__iter__ = None``, which makes it not iterable)."""
    import types

    return not any("__iter__" in vars(k) for k in cls.__mro__) and \
        isinstance(getattr(cls, "__getitem__", None), types.FunctionType)


class GetItemIterator(IteratorValue):
    """iter(obj) for an object whose class has a Python __getitem__ and no __iter__ (the old sequence
    protocol): each step calls obj.__getitem__(0), (1), ... as traced code, until it raises IndexError or
    StopIteration. Rebuilt at its position (``sequence_iterator_at``)."""

    iter_type = type(iter(_OldSequence()))

    def __init__(self, obj: Value):
        self.obj = obj
        self.index = 0
        self.exhausted = False

    def _next(self, tx):
        if self.exhausted:
            return None
        try:
            item = self.obj.call_method(tx, "__getitem__", [ConstantValue(self.index)], {})
        except Exception as exc:
            from kiln.capture.values.exceptions import TracedRaise

            if isinstance(exc, TracedRaise) and (exc.matches(IndexError) or exc.matches(StopIteration)):
                self.exhausted = True
                return None
            raise
        self.index += 1
        return item

    def children(self) -> list[Value]:
        return [self.obj]

    def reconstruct(self, cg) -> None:
        cg.prepare_call(sequence_iterator_at)
        cg.reconstruct(self.obj)
        cg.reconstruct(ConstantValue(self.index))
        cg.reconstruct(ConstantValue(self.exhausted))
        cg.call(3)


# ---- iter() -----------------------------------------------------------------------------------------------

_COLLECTION_DICT_TYPES = (collections.OrderedDict, collections.defaultdict, collections.Counter)


def make_iterator(tx, value: Value) -> IteratorValue:
    """iter(value) as GET_ITER and the consumers (zip, map, sum, ...) do it."""
    from kiln.capture.values.containers import DictValue, ListValue, SequenceValue, SetValue
    from kiln.capture.values.dict_views import DictIterator, DictViewValue

    if isinstance(value, IteratorValue):
        return value
    if isinstance(value, ListValue):
        return SequenceIterator(value, type(iter([])))
    if isinstance(value, SequenceValue):
        return SequenceIterator(value, type(iter(())))
    if isinstance(value, DictValue) and (type(value) is DictValue or value.dict_type in _COLLECTION_DICT_TYPES):
        return DictIterator(value, "keys")  # dicts, and collections' OrderedDict/defaultdict/Counter
    if isinstance(value, DictViewValue):
        return value.iterate()
    if isinstance(value, SetValue):
        return SetIterator(value, tx)
    if value.is_constant() and not hasattr(value, "elements"):
        found = _constant_iterator(value)
        if found is not None:
            return found
    from kiln.capture.values.tensors import TensorValue

    if isinstance(value, TensorValue):  # Tensor.__iter__: iter(self.unbind(0))
        from kiln.capture.values.containers import TupleValue

        return SequenceIterator(TupleValue(tx.items(value)), type(iter(())))
    user = user_iterator(tx, value)
    if user is not None:
        return user
    from kiln.capture.values.dict_objects import DictObjectValue, python_override

    if isinstance(value, DictObjectValue) and python_override(value.cls, "__iter__") is not None:
        from kiln.capture.values.objects import class_attribute

        result = class_attribute(tx, value.cls, "__iter__", value).call(tx, [], {})
        if isinstance(result, IteratorValue):  # a dict subclass's own __iter__: what it returns
            return result
        unsupported(f"iter() of a {value.cls.__name__} whose __iter__ returns {result}")
    return ListIteratorValue(tx.items(value), iter_type=_real_iter_type(value))


def _real_iter_type(value: Value) -> type | None:
    """The type iter() gives for a value kiln iterates by its items: nn.Module containers (a
    dict_valueiterator for ModuleList/Sequential, ...; iter() of the real module makes nothing run),
    deques, arrays, dict subclasses and instance dicts. None (a list_iterator) for others."""
    import torch

    from kiln.capture.values.collections_values import DequeValue
    from kiln.capture.values.dict_objects import AttrsView, DictObjectValue
    from kiln.capture.values.modules import NNModuleValue
    from kiln.capture.values.numpy_values import NDArrayValue, numpy_module

    from kiln.capture.values.instance_dicts import InstanceDictView

    if isinstance(value, InstanceDictView):  # vars(obj).keys() ...: dict_keyiterator ...
        return type(iter(getattr({}, value.kind)()))
    if isinstance(value, NNModuleValue):
        containers = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict, torch.nn.ParameterList,
                      torch.nn.ParameterDict)
        cls = type(value.module)
        if any(cls.__iter__ is base.__iter__ for base in containers):
            return type(iter(value.module))
        return None
    if isinstance(value, DequeValue):
        return type(iter(collections.deque()))
    if isinstance(value, NDArrayValue):
        return type(iter(numpy_module().empty(1)))
    if isinstance(value, (DictObjectValue, AttrsView)):
        return type(iter({}))
    return None


def _constant_iterator(value: Value) -> IteratorValue | None:
    """Iterators over immutable constants (tuple, str, bytes, range, torch.Size, frozenset); None for
    other constants (a class, an enum: iterated as their items() say)."""
    import torch

    const = value.as_constant()
    if type(const) in (tuple, str, bytes, range) or type(const) is torch.Size:
        return SequenceIterator(value, type(iter(const)))
    if type(const) in (set, frozenset):
        return ListIteratorValue([ConstantValue(v) for v in const], iter_type=type(iter(const)))
    return None


def user_iterator(tx, value: Value) -> IteratorValue | None:
    """iter(obj) for an object whose class defines __iter__ in Python: its result, lazily; an object that
    is its own iterator (a Python __next__) is stepped through __next__."""
    import types

    from kiln.capture.values.objects import NewObjectValue, UserObjectValue, class_attribute

    from kiln.capture.values.dict_objects import DictObjectValue

    if not isinstance(value, (NewObjectValue, UserObjectValue)) or isinstance(value, DictObjectValue):
        return None
    cls = value.python_type()
    if old_sequence_protocol(cls):
        return GetItemIterator(value)
    if not isinstance(getattr(cls, "__iter__", None), types.FunctionType):
        return None
    result = class_attribute(tx, cls, "__iter__", value).call(tx, [], {})
    if isinstance(result, IteratorValue):
        return result
    if isinstance(result, (NewObjectValue, UserObjectValue)) and \
            isinstance(getattr(result.python_type(), "__next__", None), types.FunctionType):
        return UserIteratorValue(result)
    result_type = result.python_type()
    if not callable(getattr(result_type, "__next__", None)):  # CPython's PyIter_Check on the result
        from kiln.capture.values.exceptions import raise_traced

        raise_traced(TypeError, f"iter() returned non-iterator of type '{result_type.__name__}'")
    return ListIteratorValue(tx.items(result))


def iterate(tx, value: Value):
    """Python-side loop over the items of `value`, taken one at a time (lazily)."""
    it = make_iterator(tx, value)
    while True:
        item = it.next_item(tx)
        if item is None:
            return
        yield item


# ---- materialized and external iterators (kept from the earlier model) ----------------------------------

_MATERIALIZED_TYPES = {"generator": type(x for x in ()), "iterator": type(iter([]))}


class ListIteratorValue(IteratorValue):
    """An iterator over items computed ahead: nn.Module's iterators (torch.nn's generators, which read
    only the module's own dicts), a ResumeIterator handed to a resume function. Rebuilt as a ResumeIterator over what is left."""

    remake = None  # (callable, args, kwargs) giving a new one, not started: a generator function, Module.parameters
    taken = 0  # items taken so far

    def __init__(self, items: list[Value], kind: str = "iterator", iter_type: type | None = None):
        self.remaining = list(items)
        self.kind = kind
        self.iter_type = iter_type or _MATERIALIZED_TYPES.get(kind, type(iter([])))

    def _next(self, tx=None):
        if not self.remaining:
            return None
        self.taken += 1
        return self.remaining.pop(0)

    def getattr(self, tx, name: str) -> Value:
        if self.kind == "generator" and name not in ("__next__", "__iter__", "__class__"):
            # throw/send/close/gi_frame...: nn.Module's generators run ahead have no frame left to throw into or
            # send to, and a graph break here would hand on a ResumeIterator: the frame runs eagerly
            from kiln.errors import Unsupported

            exc = Unsupported(f"generator.{name} of a generator kiln ran ahead of its consumer",
                              hint="no graph break possible: kiln cannot hand on a generator it ran ahead")
            exc.root_index = -1
            raise exc
        return super().getattr(tx, name)

    def children(self) -> list[Value]:
        return list(self.remaining)

    loop_only = False  # set by graph_break for a for loop's own iterator, which no code can see

    def reconstruct(self, cg) -> None:
        """Where code can see the object, it is made as eager has it: a generator not started yet by
        calling its function again (it then runs lazily, as eager's), a finished one as an exhausted
        generator. Only a for loop's own iterator, which no code can see, becomes a ResumeIterator."""
        if not self.loop_only and self.kind == "generator" and self.taken == 0 and self.remake is not None:
            from kiln.capture import bytecode as bc

            fn, args, kwargs = self.remake
            cg.extend(bc.push_null())
            cg.reconstruct(fn)
            for arg in list(args) + list(kwargs.values()):
                cg.reconstruct(arg)
            cg.extend(bc.call_kw(len(args) + len(kwargs), tuple(kwargs)))
            return
        if not self.loop_only and self.kind == "generator" and not self.remaining:
            from kiln.capture.values.generator_expressions import exhausted_generator

            cg.prepare_call(exhausted_generator)
            cg.call(0)
            return
        if not self.loop_only:  # a ResumeIterator has neither the type nor the methods of the original
            unsupported(f"a {self.iter_type.__name__} kiln computed ahead, kept after the graph where code "
                        f"can see it (its type, a generator's send/throw)",
                        hint="only the iterator of a for loop split by a graph break is handed on")
        cg.prepare_call(ResumeIterator)
        for v in self.remaining:
            cg.reconstruct(v)
        cg.build(tuple, len(self.remaining))
        cg.call(1)

    def __repr__(self) -> str:
        return f"Iterator[{self.kind}]({self.remaining!r})"


class ResumeIterator:
    """An iterator rebuilt by kiln's transformed code (e.g. a for loop over a generator split by a graph
    break). Unlike a tuple iterator, kiln can read what is left in it without consuming it, so the resume
    function that continues the loop is traced like the original."""

    __slots__ = ("items", "pos")

    def __init__(self, items: tuple):
        self.items = items
        self.pos = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.pos >= len(self.items):
            raise StopIteration
        self.pos += 1
        return self.items[self.pos - 1]

    def __repr__(self) -> str:
        return f"ResumeIterator({self.items[self.pos:]!r})"


def update_from_pairs(tx, entries: dict, iterable: Value) -> None:
    """dict(pairs) / d.update(pairs): one pair at a time, as CPython consumes them."""
    from kiln.capture.values.container_keys import dict_key
    from kiln.capture.values.dict_views import DictViewValue

    if hasattr(iterable.python_type(), "keys") and not isinstance(iterable, DictViewValue):
        from kiln.capture.values.objects import NewObjectValue, UserObjectValue

        if not isinstance(iterable, (NewObjectValue, UserObjectValue)):
            unsupported(f"dict update from a mapping {iterable}")
        _update_from_user_mapping(tx, entries, iterable)
        return
    for i, pair in enumerate(iterate(tx, iterable)):
        kv = tx.items(pair)
        if len(kv) != 2:
            raise_traced(ValueError, f"dictionary update sequence element #{i} has length {len(kv)}; 2 is required")
        entries[dict_key(tx, kv[0], entries)] = kv[1]


def _update_from_user_mapping(tx, entries: dict, mapping: Value) -> None:
    """dict(m) / d.update(m) of an object with a keys() method (a Mapping subclass, collections.ChainMap):
    CPython lists m.keys() first, then stores m[key] for each key in that order (PyDict_Merge)."""
    from kiln.capture.values.container_keys import dict_key
    from kiln.capture.values.ops import getitem

    keys = list(iterate(tx, tx.call(tx.getattr(mapping, "keys"), [], {})))
    for key in keys:
        entries[dict_key(tx, key, entries)] = getitem(tx, mapping, key)
