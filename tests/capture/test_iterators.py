"""Unit tests of the iterator values (kiln/capture/values/iterators.py, itertools_values.py): each one steps
like CPython's object, and the runtime helpers that rebuild them give CPython's state back."""
import itertools
import types

import pytest

from kiln.capture.values.base import ConstantValue
from kiln.capture.values.containers import DictValue, ListValue, TupleValue
from kiln.capture.values.exceptions import TracedRaise
from kiln.capture.values.dict_views import (
    DictIterator, DictViewValue, exhausted_dict_iterator, rebuild_dict_iterator,
)
from kiln.capture.values.iterator_combinators import EnumerateIterator, FilterIterator, MapIterator, ZipIterator
from kiln.capture.values.iterators import ReversedListIterator, exhausted_iterator, make_iterator, rebuild_seq_iterator
from kiln.capture.values.itertools_values import (
    ITERTOOLS_BUILDERS, rebuild_chain, rebuild_islice,
)
from kiln.errors import Unsupported


class FakeTracer:
    """What the iterator values ask of a tracer: truth, items, and the output's generator floor."""

    output = types.SimpleNamespace(generator_floor=None)

    def truth(self, v):
        return v.truth(self)

    def items(self, v):
        return v.items(self)


TX = FakeTracer()


def consts(values):
    return [ConstantValue(v) for v in values]


def drain(it):
    return [v.as_constant() for v in it.items(TX)]


class PyFunction:
    """A callable Value over a Python function of constants, counting its calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def is_constant(self):
        return False

    def call(self, tx, args, kwargs):
        self.calls += 1
        return ConstantValue(self.fn(*[a.as_constant() for a in args]))


def test_list_iterator_sees_appends_and_stays_exhausted():
    lst = ListValue(consts([1, 2]))
    it = make_iterator(TX, lst)
    assert it.python_type() is type(iter([]))
    assert it.next_item(TX).as_constant() == 1
    lst.elements.append(ConstantValue(3))
    assert drain(it) == [2, 3]
    lst.elements.append(ConstantValue(4))
    assert it.next_item(TX) is None  # exhausted for good, as CPython's listiter


def test_tuple_range_and_string_iterators_have_real_types():
    assert make_iterator(TX, TupleValue(consts([1]))).python_type() is type(iter(()))
    assert make_iterator(TX, ConstantValue(range(3))).python_type() is type(iter(range(3)))
    assert make_iterator(TX, ConstantValue("ab")).python_type() is type(iter("ab"))
    assert drain(make_iterator(TX, ConstantValue(range(2, 8, 3)))) == [2, 5]


def test_reversed_list_iterator_ignores_appends():
    lst = ListValue(consts([1, 2, 3]))
    it = ReversedListIterator(lst)
    lst.elements.append(ConstantValue(4))
    assert drain(it) == [3, 2, 1]


def test_dict_iterator_values_live_and_size_change_raises():
    d = DictValue({"a": ConstantValue(1), "b": ConstantValue(2)})
    values = DictIterator(d, "values")
    assert values.next_item(TX).as_constant() == 1
    d.entries["b"] = ConstantValue(20)
    assert values.next_item(TX).as_constant() == 20
    keys = DictIterator(d, "keys")
    keys.next_item(TX)
    d.entries["c"] = ConstantValue(3)
    with pytest.raises(TracedRaise) as info:
        keys.next_item(TX)
    assert info.value.matches(RuntimeError)
    with pytest.raises(TracedRaise):  # sticky, as CPython
        keys.next_item(TX)


def test_dict_view_is_live():
    d = DictValue({"a": ConstantValue(1)})
    view = DictViewValue(d, "keys")
    assert view.python_type() is type({}.keys())
    d.entries["b"] = ConstantValue(2)
    assert view.call_method(TX, "__len__", [], {}).as_constant() == 2
    assert view.contains(TX, ConstantValue("b"))
    assert drain(view.iterate()) == ["a", "b"]


def test_map_calls_only_for_items_taken_and_zip_order():
    f = PyFunction(lambda v: v * 10)
    source = make_iterator(TX, ListValue(consts([1, 2, 3])))
    m = MapIterator(f, [source])
    assert m.next_item(TX).as_constant() == 10
    assert f.calls == 1
    first = make_iterator(TX, ListValue(consts([1, 2, 3])))
    z = ZipIterator([first, make_iterator(TX, ConstantValue(range(1)))])
    assert len(z.items(TX)) == 1
    assert drain(first) == [3]  # zip took 2 from the first before finding the second exhausted


@pytest.mark.parametrize("lengths", [(2, 1, 2), (1, 2, 1), (1, 1, 2), (2, 2, 1), (3, 3, 3)])
def test_zip_strict_matches_cpython(lengths):
    lists = [list(range(n)) for n in lengths]
    try:
        expected = list(zip(*lists, strict=True))
    except ValueError as exc:
        expected = str(exc)
    z = ZipIterator([make_iterator(TX, ListValue(consts(x))) for x in lists], strict=True)
    try:
        got = [tuple(v.as_constant() for v in t.elements) for t in z.items(TX)]
    except TracedRaise as exc:
        got = exc.exc_value.args[0].as_constant()
    assert got == expected


def test_filter_and_enumerate():
    f = FilterIterator(PyFunction(lambda v: v % 2), make_iterator(TX, ConstantValue(range(6))))
    assert drain(f) == [1, 3, 5]
    e = EnumerateIterator(make_iterator(TX, ConstantValue("ab")), ConstantValue(5))
    assert [tuple(v.as_constant() for v in t.elements) for t in e.items(TX)] == [(5, "a"), (6, "b")]


def _itertool(fn, *args, **kwargs):
    return ITERTOOLS_BUILDERS[fn](TX, *args, **kwargs)


def test_islice_reads_as_far_as_cpython():
    f = PyFunction(lambda v: v)
    m = MapIterator(f, [make_iterator(TX, ConstantValue(range(100)))])
    s = _itertool(itertools.islice, m, ConstantValue(1), ConstantValue(7), ConstantValue(2))
    assert drain(s) == [1, 3, 5]
    calls = []
    list(itertools.islice(map(calls.append, range(100)), 1, 7, 2))
    assert f.calls == len(calls) == 7  # the item between 5 and the stop is read, nothing after it


def test_count_cycle_repeat_consumed_finitely():
    c = _itertool(itertools.count, ConstantValue(2), ConstantValue(3))
    assert [c.next_item(TX).as_constant() for _ in range(3)] == [2, 5, 8]
    cy = _itertool(itertools.cycle, ListValue(consts([1, 2])))
    assert [cy.next_item(TX).as_constant() for _ in range(5)] == [1, 2, 1, 2, 1]
    r = _itertool(itertools.repeat, ConstantValue("x"), ConstantValue(2))
    assert drain(r) == ["x", "x"]
    with pytest.raises(Unsupported):  # draining an infinite one breaks the graph
        _itertool(itertools.count).items(TX)


def test_groupby_groups_and_invalidation():
    g = _itertool(itertools.groupby, ListValue(consts([1, 1, 2, 3, 3])))
    key, group = g.next_item(TX).elements
    assert key.as_constant() == 1
    key2, group2 = g.next_item(TX).elements
    assert group.items(TX) == []  # the groupby moved on
    assert key2.as_constant() == 2 and drain(group2) == [2]
    assert [t.elements[0].as_constant() for t in g.items(TX)] == [3]


def test_tee_shares_a_buffer():
    f = PyFunction(lambda v: v)
    a, b = _itertool(itertools.tee, MapIterator(f, [make_iterator(TX, ConstantValue(range(3)))])).elements
    assert a.next_item(TX).as_constant() == 0 and f.calls == 1
    assert drain(b) == [0, 1, 2] and f.calls == 3
    assert drain(a) == [1, 2] and f.calls == 3


def test_combinatorics_follow_cpython_order():
    pool = ListValue(consts("abc"))
    for fn, args in [(itertools.permutations, [ConstantValue(2)]), (itertools.combinations, [ConstantValue(2)]),
                     (itertools.combinations_with_replacement, [ConstantValue(2)])]:
        got = [tuple(v.as_constant() for v in t.elements) for t in _itertool(fn, pool, *args).items(TX)]
        assert got == list(fn("abc", 2))
    prod = _itertool(itertools.product, pool, ListValue(consts([0, 1])), repeat=ConstantValue(2))
    assert len(prod.items(TX)) == len(list(itertools.product("abc", [0, 1], repeat=2)))


def test_rebuild_helpers_give_cpython_state():
    lst = [1, 2, 3]
    it = rebuild_seq_iterator(lst, 1)
    assert type(it) is type(iter(lst)) and list(it) == [2, 3]
    rev = rebuild_seq_iterator(lst, 1, reverse=True)
    assert list(rev) == [2, 1]
    assert list(rebuild_seq_iterator(range(10), 7)) == [7, 8, 9]
    assert list(exhausted_iterator(list)) == [] and type(exhausted_iterator(tuple)) is type(iter(()))
    d = {"a": 1, "b": 2}
    assert list(rebuild_dict_iterator(d, "items", False, 1)) == [("b", 2)]
    assert list(rebuild_dict_iterator(d, "keys", True, 1)) == ["a"]
    assert type(exhausted_dict_iterator("values", False)) is type(iter({}.values()))
    chained = rebuild_chain(iter([1]), iter([[2, 3], (4,)]))
    assert type(chained) is itertools.chain and list(chained) == [1, 2, 3, 4]
    sliced = rebuild_islice(iter(range(10)), 1, 5, 2)
    assert type(sliced) is itertools.islice and list(sliced) == [1, 3]


def test_generator_run_ahead_refuses_generator_methods_for_the_whole_frame():
    from kiln.capture.values.iterators import ListIteratorValue

    gen = ListIteratorValue(consts([1]), kind="generator")
    for name in ("throw", "send", "close", "gi_frame"):
        with pytest.raises(Unsupported) as info:
            gen.getattr(TX, name)
        assert info.value.root_index == -1  # no graph break: a ResumeIterator has none of these
    assert gen.getattr(TX, "__next__") is not None
