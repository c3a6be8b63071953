"""Iterators passed in from outside the compiled frame: list iterators (an index into the live list),
tuple/dict/range iterators (read ahead with __reduce__ without advancing them), and zip/map/filter/
enumerate objects (read through __reduce__ down to those). Items consumed while tracing advance the real
iterators after the graph (side_effects.IteratorAdvance); handing one on hands on the very same object."""
from __future__ import annotations

from typing import Any

from kiln.capture.values.base import Value, note_mutation, unsupported
from kiln.capture.values.iterator_combinators import EnumerateIterator, FilterIterator, MapIterator, ZipIterator
from kiln.capture.values.iterators import IteratorValue, ListIteratorValue, ResumeIterator, SequenceIterator


class ExternalIteratorValue(ListIteratorValue):
    """A list/tuple/dict/range iterator passed in from outside: its remaining items were read (and
    guarded) without advancing it; items consumed while tracing advance the real one after the graph
    (a side effect), and handing it on hands on the very same object."""

    def __init__(self, items: list[Value], source, tx):
        super().__init__(items)
        self.source = source
        self.initial = len(items)
        self.created_here = False
        self._tx = tx
        self._real: Any = None

    def python_type(self) -> type:
        return type(self._real)

    def consumed(self) -> int:
        return self.initial - len(self.remaining)

    records_reads = True  # False under an enumerate from outside, which is advanced itself
    read_before = False

    def next_item(self, tx=None) -> Value | None:
        tx = tx or self._tx
        note_mutation(tx, self)
        self.read_before = True
        if self.records_reads:
            tx.output.side_effects.iterator_read(self)
        return self._next(tx)

    def reconstruct(self, cg) -> None:
        self.source.emit(cg)

    def __repr__(self) -> str:
        return f"ExternalIterator({self.remaining!r})"


# ---- zip/map/filter/enumerate objects passed in from outside (e.g. a for loop split by a graph break) ----

COMPOSITE_ITERATOR_TYPES = (zip, map, filter, enumerate)


def wrap_external_iterator(tx, value, source) -> IteratorValue | None:
    """A zip/map/filter/enumerate object from the frame, read through its __reduce__ (which gives its
    inner iterators and, for enumerate, its count) down to list/tuple/dict/range iterators (read ahead
    without advancing them). After the graph the items consumed are replayed on the real objects: on the
    leaf iterators (zip, map and filter keep no other state; map's and filter's functions are not called
    again), or, under an enumerate, on the enumerate itself (its count moves too). None: not modelled."""
    return _wrap_tree(tx, value, source, record=True)


def _is_top(source) -> bool:
    """Whether ``source`` is the iterator object itself, not an inner iterator read through __reduce__."""
    from kiln.capture.sources import GetItemSource

    return not isinstance(source, GetItemSource)


def _reduce_args(source):
    from kiln.capture.sources import AttrSource, CallSource, GetItemSource

    return GetItemSource(CallSource(AttrSource(source, "__reduce__")), 1)


def _wrap_tree(tx, value, source, record: bool) -> IteratorValue | None:
    from kiln.capture.sources import READABLE_ITERATOR_TYPES, GetItemSource
    from kiln.capture.values.builder import wrap

    kind = type(value)
    if kind is ResumeIterator and record and source is not None and not _is_top(source):
        # under a zip/map/filter handed on at a break, whose reads are replayed on their leaf iterators
        # after the graph: a ResumeIterator's reads are not (only a for loop's own iterator is advanced, by
        # being rebuilt at the next break), so the real zip would yield them again: a loop over
        # zip(model.parameters()) with a graph break in its body restarted at every break (found by
        # hand, an EMA update). Not modelled. (Under an enumerate the enumerate itself is replayed.)
        return None
    if kind in READABLE_ITERATOR_TYPES or kind is ResumeIterator:
        leaf = wrap(tx, value, source)
        if isinstance(leaf, (ExternalIteratorValue, ExternalListIterator)) and not record:
            if leaf.read_before or not leaf.records_reads:
                return None  # already read through another place
            leaf.records_reads = False
        return leaf if isinstance(leaf, IteratorValue) else None
    if kind not in COMPOSITE_ITERATOR_TYPES:
        return None
    tx.output.guards.type(source, value)
    reduced = value.__reduce__()
    args, args_source = reduced[1], _reduce_args(source)
    if kind is enumerate:
        inner = _wrap_tree(tx, args[0], GetItemSource(args_source, 0), record=False)
        if inner is None:
            return None
        result = EnumerateIterator(inner, wrap(tx, args[1], GetItemSource(args_source, 1)))
        result.__class__ = ExternalEnumerateIterator
        result.calls = 0
    elif kind is zip:
        if len(reduced) > 2:  # zip(strict=True) reduces to (zip, iterators, True)
            unsupported("a zip(strict=True) object from outside")
        inner = [_wrap_tree(tx, a, GetItemSource(args_source, i), record) for i, a in enumerate(args)]
        if any(v is None for v in inner):
            return None
        result = ZipIterator(inner)
    else:
        if not record:  # replaying an enumerate above would call the function again
            return None
        inner = _wrap_tree(tx, args[1], GetItemSource(args_source, 1), record) if kind is filter else None
        iterators = [inner] if kind is filter else \
            [_wrap_tree(tx, a, GetItemSource(args_source, i + 1), record) for i, a in enumerate(args[1:])]
        if any(v is None for v in iterators):
            return None
        fn = wrap(tx, args[0], GetItemSource(args_source, 0))
        result = FilterIterator(fn, iterators[0]) if kind is filter else MapIterator(fn, iterators)
    tx.output.guards.length(args_source, args)
    result.source = source
    result.created_here = False
    return result


class ExternalEnumerateIterator(EnumerateIterator):
    """An enumerate object from outside: its inner iterators are read ahead without recording; after the
    graph the enumerate itself is advanced by as many calls as tracing made (its count moves with it)."""

    def next_item(self, tx=None):
        note_mutation(tx, self)
        tx.output.side_effects.iterator_read(self)
        self.calls += 1
        return super().next_item(tx)

    def consumed(self) -> int:
        return self.calls


class ExternalListIterator(SequenceIterator):
    """A list iterator passed in from outside, modelled like CPython's: an index into the LIVE list (read
    through `it.__reduce__()`, so a list also reachable by name is the same value). After the graph the
    real iterator is advanced by as many calls (or run out, if tracing exhausted it); the replay comes
    after the lists' new contents are written (side_effects.py), so it walks the final contents."""

    def __init__(self, seq: Value, index: int, source, exhausted: bool):
        super().__init__(seq, type(iter([])), index)
        self.initial = index
        self.exhausted = exhausted
        self.was_exhausted = exhausted
        self.source = source
        self.created_here = False

    records_reads = True  # False under an enumerate from outside, which is advanced itself
    read_before = False

    def next_item(self, tx=None):
        note_mutation(tx, self)
        self.read_before = True
        if not self.was_exhausted and self.records_reads:
            tx.output.side_effects.iterator_read(self)
        return self._next(tx)

    def consumed(self) -> int:
        if self.exhausted:
            return -1  # advance_iterator runs it out
        return self.index - self.initial

    def children(self) -> list[Value]:
        return []

    def reconstruct(self, cg) -> None:
        self.source.emit(cg)


def wrap_external_list_iterator(tx, value, source) -> IteratorValue:
    from kiln.capture.sources import AttrSource, CallSource, GetItemSource
    from kiln.capture.values.builder import wrap
    from kiln.capture.values.containers import ListValue

    guards = tx.output.guards
    guards.type(source, value)
    reduced = value.__reduce__()
    reduce_source = CallSource(AttrSource(source, "__reduce__"))
    guards.length(reduce_source, reduced)
    if len(reduced) == 2:  # exhausted: CPython reduces it to iter([])
        return ExternalListIterator(ListValue([]), 0, source, exhausted=True)
    seq = wrap(tx, reduced[1][0], GetItemSource(GetItemSource(reduce_source, 1), 0))
    if not isinstance(seq, ListValue):
        unsupported("a list iterator over a list kiln does not model")
    index = reduced[2]
    guards.constant(GetItemSource(reduce_source, 2), index)
    return ExternalListIterator(seq, index, source, exhausted=False)
