"""Iterators over other iterators: ``map``, ``filter``, ``zip`` and ``enumerate`` objects, one item at a
time as CPython's produce them (the protocol and the item sources are in iterators.py)."""
from __future__ import annotations

from kiln.capture.values.base import ConstantValue, Value
from kiln.capture.values.iterators import IteratorValue, make_zip, raise_traced

class MapIterator(IteratorValue):
    """map(fn, *iterables): calls fn for one item of each iterator per step (the first exhausted one ends
    it, the ones before it having been advanced). Rebuilt as map(fn, *iterators)."""

    iter_type = map

    def __init__(self, fn: Value, iterators: list[IteratorValue]):
        self.fn = fn
        self.iterators = iterators

    def _next(self, tx):
        args = []
        for it in self.iterators:
            item = it.next_item(tx)
            if item is None:
                return None
            args.append(item)
        return self.fn.call(tx, args, {})

    def children(self) -> list[Value]:
        return [self.fn, *self.iterators]

    def reconstruct(self, cg) -> None:
        cg.prepare_call(map)
        cg.reconstruct(self.fn)
        for it in self.iterators:
            cg.reconstruct(it)
        cg.call(1 + len(self.iterators))


class FilterIterator(IteratorValue):
    """filter(fn, iterable) (fn None: the items' truth). Rebuilt as filter(fn, iterator)."""

    iter_type = filter

    def __init__(self, fn: Value, iterator: IteratorValue, keep_if: bool = True):
        self.fn = fn
        self.iterator = iterator
        self.keep_if = keep_if
        if not keep_if:
            import itertools

            self.iter_type = itertools.filterfalse

    def _next(self, tx):
        while True:
            item = self.iterator.next_item(tx)
            if item is None:
                return None
            test = item if self.fn.is_constant() and self.fn.as_constant() is None else self.fn.call(tx, [item], {})
            if tx.truth(test) == self.keep_if:
                return item

    def children(self) -> list[Value]:
        return [self.fn, self.iterator]

    def reconstruct(self, cg) -> None:
        cg.prepare_call(self.iter_type)
        cg.reconstruct(self.fn)
        cg.reconstruct(self.iterator)
        cg.call(2)


class ZipIterator(IteratorValue):
    """zip(*iterables, strict=...): one item from each iterator in order per step; strict=True raises
    ValueError with CPython's message exactly when CPython does."""

    iter_type = zip

    def __init__(self, iterators: list[IteratorValue], strict: bool = False):
        self.iterators = iterators
        self.strict = strict

    def _next(self, tx):
        from kiln.capture.values.containers import TupleValue

        if not self.iterators:
            return None
        items = []
        for i, it in enumerate(self.iterators):
            item = it.next_item(tx)
            if item is None:
                if self.strict:
                    self._check_strict(tx, i)
                return None
            items.append(item)
        return TupleValue(items)

    def _check_strict(self, tx, i: int) -> None:
        if i:
            plural = " " if i == 1 else "s 1-"
            raise_traced(ValueError, f"zip() argument {i + 1} is shorter than argument{plural}{i}")
        for j in range(1, len(self.iterators)):
            if self.iterators[j].next_item(tx) is not None:
                plural = " " if j == 1 else "s 1-"
                raise_traced(ValueError, f"zip() argument {j + 1} is longer than argument{plural}{j}")

    def children(self) -> list[Value]:
        return list(self.iterators)

    def reconstruct(self, cg) -> None:
        cg.prepare_call(make_zip)
        cg.load_const(self.strict)
        for it in self.iterators:
            cg.reconstruct(it)
        cg.call(1 + len(self.iterators))


class EnumerateIterator(IteratorValue):
    """enumerate(iterable, start): (count, item) pairs. Rebuilt as enumerate(iterator, count)."""

    iter_type = enumerate

    def __init__(self, iterator: IteratorValue, start: Value):
        self.iterator = iterator
        self.count = start

    def _next(self, tx):
        from kiln.capture.values.containers import TupleValue
        from kiln.capture.values.ops import binary_op
        import operator

        item = self.iterator.next_item(tx)
        if item is None:
            return None
        count = self.count
        self.count = binary_op(tx, operator.add, count, ConstantValue(1))
        return TupleValue([count, item])

    def children(self) -> list[Value]:
        return [self.iterator, self.count]

    def reconstruct(self, cg) -> None:
        cg.prepare_call(enumerate)
        cg.reconstruct(self.iterator)
        cg.reconstruct(self.count)
        cg.call(2)
