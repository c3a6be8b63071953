"""itertools, modelled lazily and exactly: each itertools object is an IteratorValue with the real type,
taking items from its input iterators only when CPython's C code would (islice stops without reading
past its stop, takewhile reads the first failing item and stops, zip_longest pads, tee buffers what
the leading copy read). Infinite ones (count, cycle, repeat without times) work when consumed finitely.
product/permutations/combinations read their inputs when made (as CPython does) and walk index tuples
with the real itertools function, so the order is CPython's.

`ITERTOOLS_BUILDERS` maps each itertools callable to the handler that builds its value (merged into
builtins' handler table)."""
from __future__ import annotations

import itertools
import operator

from kiln.capture.values.base import ConstantValue, Value, unsupported
from kiln.capture.values.iterators import IteratorValue, iterate, make_iterator, raise_traced


def _tuple(items):
    from kiln.capture.values.containers import TupleValue

    return TupleValue(list(items))


def _int_arg(value: Value | None, what: str, default=None):
    if value is None:
        return default
    if not value.is_constant() or not isinstance(value.as_constant(), (int, type(None))):
        unsupported(f"{what} that is not an int constant")
    return value.as_constant()


class CountIterator(IteratorValue):
    """count(start, step): start, start + step, ... (repeated addition, as CPython)."""

    iter_type = itertools.count

    def __init__(self, start: Value, step: Value):
        self.current = start
        self.step = step

    def _next(self, tx):
        from kiln.capture.values.ops import binary_op

        value = self.current
        self.current = binary_op(tx, operator.add, value, self.step)
        return value

    def children(self):
        return [self.current, self.step]

    def reconstruct(self, cg) -> None:
        cg.prepare_call(itertools.count)
        cg.reconstruct(self.current)
        cg.reconstruct(self.step)
        cg.call(2)


class CycleIterator(IteratorValue):
    """cycle(iterable): the first pass reads the input lazily and saves its items; then the saved ones."""

    iter_type = itertools.cycle

    def __init__(self, iterator: IteratorValue):
        self.iterator = iterator
        self.saved: list[Value] = []
        self.first_pass = True
        self.index = 0

    def _next(self, tx):
        if self.first_pass:
            item = self.iterator.next_item(tx)
            if item is not None:
                self.saved.append(item)
                return item
            self.first_pass = False
        if not self.saved:
            return None
        item = self.saved[self.index]
        self.index = (self.index + 1) % len(self.saved)
        return item


class RepeatIterator(IteratorValue):
    """repeat(obj[, times]): the same object each time."""

    iter_type = itertools.repeat

    def __init__(self, obj: Value, times: int | None):
        self.obj = obj
        self.times = None if times is None else max(times, 0)

    def _next(self, tx):
        if self.times is not None:
            if self.times == 0:
                return None
            self.times -= 1
        return self.obj

    def children(self):
        return [self.obj]

    def reconstruct(self, cg) -> None:
        cg.prepare_call(itertools.repeat)
        cg.reconstruct(self.obj)
        if self.times is None:
            cg.call(1)
        else:
            cg.load_const(self.times)
            cg.call(2)


class AccumulateIterator(IteratorValue):
    """accumulate(iterable, func=operator.add, *, initial=None)."""

    iter_type = itertools.accumulate

    def __init__(self, iterator: IteratorValue, func: Value | None, initial: Value | None):
        self.iterator = iterator
        self.func = func
        self.total = initial
        self.pending_initial = initial is not None

    def _next(self, tx):
        if self.pending_initial:
            self.pending_initial = False
            return self.total
        item = self.iterator.next_item(tx)
        if item is None:
            return None
        if self.total is None:
            self.total = item
        elif self.func is None:
            from kiln.capture.values.ops import binary_op

            self.total = binary_op(tx, operator.add, self.total, item)
        else:
            self.total = self.func.call(tx, [self.total, item], {})
        return self.total


class BatchedIterator(IteratorValue):
    """batched(iterable, n) (Python 3.12+): tuples of up to n items; strict=True (3.13) raises on a short
    last batch."""

    def __init__(self, iterator: IteratorValue, n: int, strict: bool):
        self.iter_type = itertools.batched
        self.iterator = iterator
        self.n = n
        self.strict = strict

    def _next(self, tx):
        batch = []
        while len(batch) < self.n:
            item = self.iterator.next_item(tx)
            if item is None:
                break
            batch.append(item)
        if not batch:
            return None
        if self.strict and len(batch) < self.n:
            raise_traced(ValueError, "batched(): incomplete batch")
        return _tuple(batch)

    def children(self):
        return [self.iterator]

    def reconstruct(self, cg) -> None:
        if self.strict:
            unsupported("a batched(strict=True) object kept after the graph")
        cg.prepare_call(itertools.batched)
        cg.reconstruct(self.iterator)
        cg.load_const(self.n)
        cg.call(2)


def rebuild_chain(active, rest):
    """A chain object going on with `active` (an iterator, or None) and then the iterables of `rest`."""
    head = () if active is None else (active,)
    return itertools.chain.from_iterable(itertools.chain(head, rest))


class ChainIterator(IteratorValue):
    """chain(*iterables) / chain.from_iterable(iterable): takes the next iterable from its source and
    calls iter() on it only when the previous one is exhausted."""

    iter_type = itertools.chain

    def __init__(self, source: IteratorValue):
        self.source = None  # (the Value attribute `source` names a place in the frame: not this)
        self.iterables = source
        self.active: IteratorValue | None = None
        self.exhausted = False

    def _next(self, tx):
        while not self.exhausted:
            if self.active is None:
                iterable = self.iterables.next_item(tx)
                if iterable is None:
                    self.exhausted = True
                    return None
                self.active = make_iterator(tx, iterable)
            item = self.active.next_item(tx)
            if item is not None:
                return item
            self.active = None
        return None

    def children(self):
        return [] if self.exhausted else [v for v in (self.active, self.iterables) if v is not None]

    def reconstruct(self, cg) -> None:
        cg.prepare_call(rebuild_chain)
        if self.active is None:
            cg.load_const(None)
        else:
            cg.reconstruct(self.active)
        if self.exhausted:
            cg.load_const(())
        else:
            cg.reconstruct(self.iterables)
        cg.call(2)


class CompressIterator(IteratorValue):
    """compress(data, selectors): a datum, then its selector; stops at the first exhausted one."""

    iter_type = itertools.compress

    def __init__(self, data: IteratorValue, selectors: IteratorValue):
        self.data = data
        self.selectors = selectors

    def _next(self, tx):
        while True:
            datum = self.data.next_item(tx)
            if datum is None:
                return None
            selector = self.selectors.next_item(tx)
            if selector is None:
                return None
            if tx.truth(selector):
                return datum

    def children(self):
        return [self.data, self.selectors]

    def reconstruct(self, cg) -> None:
        cg.prepare_call(itertools.compress)
        cg.reconstruct(self.data)
        cg.reconstruct(self.selectors)
        cg.call(2)


class DropWhileIterator(IteratorValue):
    """dropwhile(pred, iterable): skips items while pred holds, then yields everything."""

    iter_type = itertools.dropwhile

    def __init__(self, pred: Value, iterator: IteratorValue):
        self.pred = pred
        self.iterator = iterator
        self.dropping = True

    def _next(self, tx):
        while True:
            item = self.iterator.next_item(tx)
            if item is None:
                return None
            if not self.dropping:
                return item
            if not tx.truth(self.pred.call(tx, [item], {})):
                self.dropping = False
                return item


class TakeWhileIterator(IteratorValue):
    """takewhile(pred, iterable): yields items while pred holds; the first failing item is read and
    dropped, and nothing more is read."""

    iter_type = itertools.takewhile

    def __init__(self, pred: Value, iterator: IteratorValue):
        self.pred = pred
        self.iterator = iterator
        self.stopped = False

    def _next(self, tx):
        if self.stopped:
            return None
        item = self.iterator.next_item(tx)
        if item is None:
            return None
        if tx.truth(self.pred.call(tx, [item], {})):
            return item
        self.stopped = True
        return None

    def children(self):
        return [] if self.stopped else [self.pred, self.iterator]

    def reconstruct(self, cg) -> None:
        cg.prepare_call(itertools.takewhile)
        if self.stopped:  # a takewhile that yields nothing more
            cg.load_const(bool)
            cg.load_const(())
        else:
            cg.reconstruct(self.pred)
            cg.reconstruct(self.iterator)
        cg.call(2)


_GROUPER_TYPE = type(next(itertools.groupby([1]))[1])


class GroupByIterator(IteratorValue):
    """groupby(iterable, key): (key, group) pairs sharing one input iterator, as CPython's: advancing
    the groupby leaves the previous group (it yields nothing more); keys must compare as constants."""

    iter_type = itertools.groupby

    def __init__(self, iterator: IteratorValue, key: Value | None):
        self.iterator = iterator
        self.key = key
        self.tgtkey = self.currkey = self.currvalue = None  # Values (None: not set)
        self.current_grouper: GrouperIterator | None = None

    def step(self, tx) -> bool:
        item = self.iterator.next_item(tx)
        if item is None:
            return False
        self.currkey = item if self.key is None else self.key.call(tx, [item], {})
        self.currvalue = item
        return True

    def keys_equal(self, tx, a: Value, b: Value) -> bool:
        from kiln.capture.values.ops import binary_op

        return tx.truth(binary_op(tx, operator.eq, a, b))

    def _next(self, tx):
        self.current_grouper = None
        while True:
            if self.currkey is None:
                pass
            elif self.tgtkey is None or not self.keys_equal(tx, self.tgtkey, self.currkey):
                break
            if not self.step(tx):
                return None
        self.tgtkey = self.currkey
        self.current_grouper = GrouperIterator(self, self.tgtkey)
        return _tuple([self.currkey, self.current_grouper])


class GrouperIterator(IteratorValue):
    """One group of a groupby: valid while its groupby has not moved on."""

    iter_type = _GROUPER_TYPE

    def __init__(self, parent: GroupByIterator, tgtkey: Value):
        self.parent = parent
        self.tgtkey = tgtkey

    def _next(self, tx):
        parent = self.parent
        if parent.current_grouper is not self:
            return None
        if parent.currvalue is None and not parent.step(tx):
            return None
        if not parent.keys_equal(tx, self.tgtkey, parent.currkey):
            return None
        item, parent.currvalue = parent.currvalue, None
        return item


def rebuild_islice(iterator, start: int, stop, step: int):
    return itertools.islice(iterator, start, stop, step)


class ISliceIterator(IteratorValue):
    """islice(iterable, [start,] stop[, step]): CPython's counters; nothing is read past `stop`."""

    iter_type = itertools.islice

    def __init__(self, iterator: IteratorValue, start: int, stop: int | None, step: int):
        self.iterator = iterator
        self.next_index = start
        self.stop = stop
        self.step_size = step
        self.count = 0
        self.exhausted = False

    def _next(self, tx):
        if self.exhausted:
            return None
        while self.count < self.next_index:
            if self.iterator.next_item(tx) is None:
                return self._empty()
            self.count += 1
        if self.stop is not None and self.count >= self.stop:
            return self._empty()
        item = self.iterator.next_item(tx)
        if item is None:
            return self._empty()
        self.count += 1
        old = self.next_index
        self.next_index += self.step_size
        if self.next_index < old or (self.stop is not None and self.next_index > self.stop):
            self.next_index = self.stop
        return item

    def _empty(self):
        self.exhausted = True  # CPython drops the input iterator
        return None

    def children(self):
        return [] if self.exhausted else [self.iterator]

    def reconstruct(self, cg) -> None:
        cg.prepare_call(rebuild_islice)
        if self.exhausted:
            cg.load_const(())
            cg.load_const(0)
            cg.load_const(0)
        else:
            cg.reconstruct(self.iterator)
            cg.load_const(self.next_index - self.count)
            cg.load_const(None if self.stop is None else self.stop - self.count)
        cg.load_const(self.step_size)
        cg.call(4)


class PairwiseIterator(IteratorValue):
    """pairwise(iterable): (previous, current) pairs."""

    iter_type = itertools.pairwise

    def __init__(self, iterator: IteratorValue):
        self.iterator = iterator
        self.old: Value | None = None
        self.exhausted = False

    def _next(self, tx):
        if self.exhausted:
            return None
        if self.old is None:
            self.old = self.iterator.next_item(tx)
            if self.old is None:
                self.exhausted = True
                return None
        new = self.iterator.next_item(tx)
        if new is None:
            self.exhausted = True
            self.old = None
            return None
        pair = _tuple([self.old, new])
        self.old = new
        return pair


class StarMapIterator(IteratorValue):
    """starmap(fn, iterable): fn(*item) for each item."""

    iter_type = itertools.starmap

    def __init__(self, fn: Value, iterator: IteratorValue):
        self.fn = fn
        self.iterator = iterator

    def _next(self, tx):
        item = self.iterator.next_item(tx)
        if item is None:
            return None
        return self.fn.call(tx, tx.items(item), {})

    def children(self):
        return [self.fn, self.iterator]

    def reconstruct(self, cg) -> None:
        cg.prepare_call(itertools.starmap)
        cg.reconstruct(self.fn)
        cg.reconstruct(self.iterator)
        cg.call(2)


class TeeData:
    """What the copies of one tee share: the input iterator and the items read from it so far."""

    def __init__(self, iterator: IteratorValue):
        self.iterator = iterator
        self.buffer: list[Value] = []
        self.ended = False

    def get(self, tx, index: int) -> Value | None:
        while index >= len(self.buffer):
            if self.ended:
                return None
            item = self.iterator.next_item(tx)
            if item is None:
                self.ended = True
                return None
            self.buffer.append(item)
        return self.buffer[index]


_TEE_TYPE = type(itertools.tee([])[0])


class TeeIterator(IteratorValue):
    """One copy made by tee(): reads from the shared buffer; the leading copy reads the input."""

    iter_type = _TEE_TYPE

    def __init__(self, data: TeeData, index: int = 0):
        self.data = data
        self.index = index

    def _next(self, tx):
        item = self.data.get(tx, self.index)
        if item is not None:
            self.index += 1
        return item


def _tee(tx, iterable, n=None):
    count = _int_arg(n, "tee() count", 2)
    if count < 0:
        raise_traced(ValueError, "n must be >= 0")
    it = make_iterator(tx, iterable)
    if count == 0:
        return _tuple([])
    first = it if isinstance(it, TeeIterator) else TeeIterator(TeeData(it))
    copies = [first] + [TeeIterator(first.data, first.index) for _ in range(count - 1)]
    return _tuple(copies)


class ZipLongestIterator(IteratorValue):
    """zip_longest(*iterables, fillvalue=None): pads exhausted inputs (never read again) until all are."""

    iter_type = itertools.zip_longest

    def __init__(self, iterators: list[IteratorValue], fillvalue: Value):
        self.iterators: list[IteratorValue | None] = list(iterators)
        self.fillvalue = fillvalue
        self.active = len(iterators)

    def _next(self, tx):
        if not self.iterators or self.active == 0:
            return None
        items = []
        for i, it in enumerate(self.iterators):
            item = None if it is None else it.next_item(tx)
            if item is None:
                if it is not None:
                    self.active -= 1
                    self.iterators[i] = None
                    if self.active == 0:
                        return None
                item = self.fillvalue
            items.append(item)
        return _tuple(items)


class IndexComboIterator(IteratorValue):
    """product/permutations/combinations/combinations_with_replacement: the inputs were read when it was
    made; the real itertools function walks index tuples, mapped to the items."""

    def __init__(self, kind: type, pools: list[list[Value]], index_iterator, pool_of_position):
        self.iter_type = kind
        self.pools = pools
        self.indices = index_iterator
        self.pool_of_position = pool_of_position

    def _next(self, tx):
        picked = next(self.indices, None)
        if picked is None:
            return None
        return _tuple(self.pools[self.pool_of_position(j)][i] for j, i in enumerate(picked))


# ---- builders: the itertools callables' handlers ----------------------------------------------------------

def _count(tx, start=None, step=None):
    start = start if start is not None else ConstantValue(0)
    step = step if step is not None else ConstantValue(1)
    for v in (start, step):
        if not (v.is_constant() and isinstance(v.as_constant(), (int, float, complex))):
            unsupported("itertools.count() of values that are not number constants")
    return CountIterator(start, step)


def _cycle(tx, iterable):
    return CycleIterator(make_iterator(tx, iterable))


def _repeat(tx, obj, times=None):
    return RepeatIterator(obj, _int_arg(times, "repeat() times"))


def _accumulate(tx, iterable, func=None, initial=None):
    if func is not None and func.is_constant() and func.as_constant() is None:
        func = None
    if initial is not None and initial.is_constant() and initial.as_constant() is None:
        initial = None
    return AccumulateIterator(make_iterator(tx, iterable), func, initial)


def _batched(tx, iterable, n, strict=None):
    size = _int_arg(n, "batched() size")
    if size < 1:
        raise_traced(ValueError, "n must be at least one")
    return BatchedIterator(make_iterator(tx, iterable), size, bool(strict.as_constant()) if strict else False)


def _chain(tx, *iterables):
    from kiln.capture.values.iterators import SequenceIterator

    return ChainIterator(SequenceIterator(_tuple(iterables), type(iter(()))))


def _chain_from_iterable(tx, iterable):
    return ChainIterator(make_iterator(tx, iterable))


def _compress(tx, data, selectors):
    return CompressIterator(make_iterator(tx, data), make_iterator(tx, selectors))


def _dropwhile(tx, pred, iterable):
    return DropWhileIterator(pred, make_iterator(tx, iterable))


def _takewhile(tx, pred, iterable):
    return TakeWhileIterator(pred, make_iterator(tx, iterable))


def _filterfalse(tx, pred, iterable):
    from kiln.capture.values.iterator_combinators import FilterIterator

    return FilterIterator(pred, make_iterator(tx, iterable), keep_if=False)


def _groupby(tx, iterable, key=None):
    if key is not None and key.is_constant() and key.as_constant() is None:
        key = None
    return GroupByIterator(make_iterator(tx, iterable), key)


def _islice(tx, iterable, *args):
    if not 1 <= len(args) <= 3:
        unsupported("islice() with a wrong number of arguments")
    values = [_int_arg(a, "islice() argument") for a in args]
    if len(values) == 1:
        start, stop, step = 0, values[0], 1
    else:
        start, stop = values[0] or 0, values[1]
        step = values[2] if len(values) == 3 and values[2] is not None else 1
    if start < 0 or (stop is not None and stop < 0) or step < 1:
        unsupported("islice() with negative or zero arguments (ValueError)")
    return ISliceIterator(make_iterator(tx, iterable), start, stop, step)


def _pairwise(tx, iterable):
    return PairwiseIterator(make_iterator(tx, iterable))


def _starmap(tx, fn, iterable):
    return StarMapIterator(fn, make_iterator(tx, iterable))


def _zip_longest(tx, *iterables, fillvalue=None):
    return ZipLongestIterator([make_iterator(tx, v) for v in iterables],
                              fillvalue if fillvalue is not None else ConstantValue(None))


def _product(tx, *iterables, repeat=None):
    times = _int_arg(repeat, "product() repeat", 1)
    pools = [list(iterate(tx, v)) for v in iterables]
    indices = itertools.product(*[range(len(p)) for p in pools], repeat=times)
    n = len(pools)
    return IndexComboIterator(itertools.product, pools, indices, lambda j: j % n)


def _single_pool(kind, default_r: bool):
    def handler(tx, iterable, r=None):
        pool = list(iterate(tx, iterable))
        size = _int_arg(r, f"{kind.__name__}() r")
        if size is None and not default_r:
            unsupported(f"{kind.__name__}() needs r")
        indices = kind(range(len(pool)), size) if size is not None else kind(range(len(pool)))
        return IndexComboIterator(kind, [pool], indices, lambda j: 0)
    return handler


ITERTOOLS_BUILDERS: dict = {
    itertools.count: _count, itertools.cycle: _cycle, itertools.repeat: _repeat,
    itertools.accumulate: _accumulate, itertools.chain: _chain, itertools.chain.from_iterable: _chain_from_iterable,
    itertools.compress: _compress, itertools.dropwhile: _dropwhile, itertools.filterfalse: _filterfalse,
    itertools.groupby: _groupby, itertools.islice: _islice, itertools.pairwise: _pairwise,
    itertools.starmap: _starmap, itertools.takewhile: _takewhile, itertools.tee: _tee,
    itertools.zip_longest: _zip_longest, itertools.product: _product,
    itertools.permutations: _single_pool(itertools.permutations, True),
    itertools.combinations: _single_pool(itertools.combinations, False),
    itertools.combinations_with_replacement: _single_pool(itertools.combinations_with_replacement, False),
}
if hasattr(itertools, "batched"):  # Python 3.12+
    ITERTOOLS_BUILDERS[itertools.batched] = _batched

# the itertools callables builder.wrap turns into BuiltinValues (calls reach ITERTOOLS_BUILDERS)
ITERTOOLS_CALLABLES = {fn for fn in ITERTOOLS_BUILDERS if isinstance(fn, type) or fn is itertools.tee}
