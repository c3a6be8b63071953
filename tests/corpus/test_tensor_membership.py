"""Tensors compared by Python's containers: `in`, list/tuple index/count/remove (identity first, then
`==`, whose tensor result's truth raises for more than one element), Counters, dicts and sets keyed by
tensors (by identity), iterating sets of tensors (order from the objects' hashes)."""
import collections

import pytest
import torch

import kiln

from .harness import (
    USE_DYNAMO, CountingBackend, assert_same, check, check_recompiles, compile_fn, dynamo_bug, reset,
)


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


_EQ_TENSOR = "gives a tensor where eager gives a bool (its == result is not passed through bool())"


# ---- `in`, index, count, remove -----------------------------------------------------------------------

class _Members:
    """A container whose `in` is its own Python code (identity only)."""

    def __init__(self, items):
        self.items = items

    def __contains__(self, item):
        return any(v is item for v in self.items)


class _IterMembers:
    """No __contains__: `in` steps its __iter__ (identity first, then ==)."""

    def __init__(self, items):
        self.items = items

    def __iter__(self):
        return iter(self.items)


def test_in_on_a_python_container_runs_its_contains():
    # `tensor in obj` broke the graph ("`in` on a tensor depends on its data") before asking the object's
    # class: its __contains__ (or __iter__) is Python code, traced like any call (a new user's case)
    def fn(x, y):
        made = _Members([x])
        return (x + 1 if x in _Members([y, x]) else x - 1), y in made, x in _IterMembers([x, y]), x in made

    check(fn, _t(3), _t(3, seed=1), breaks=0)


@dynamo_bug(_EQ_TENSOR)
def test_in_and_index_decided_by_identity():
    def fn(x, y):
        a = x + 1
        lst = [x, a]
        return (x in (x, y), a in [a], [a, a].count(a), lst.index(x), (y, a).index(y),
                y in iter([y, a]), a * 2)

    check(fn, _t(3), _t(3, seed=1), breaks=0)


@dynamo_bug(_EQ_TENSOR)
def test_eq_of_tensors_of_several_elements_raises_eagers_error():
    def fn(x, y):
        a = x + 1
        caught = []
        for attempt in (lambda: y in (a, y), lambda: [x, y].index(y), lambda: [a, x].count(a),
                        lambda: [a, x].remove(x), lambda: 3 in [x], lambda: x[:0] in [a[:0]]):
            try:
                attempt()
            except RuntimeError as e:
                caught.append(str(e))
        return caught, a

    check(fn, _t(3), _t(3, seed=1), breaks=0)


def test_eq_of_a_tensor_with_none_is_false():
    def fn(x):
        return None in [x], [x, None].index(None), x + 1

    check(fn, _t(3), breaks=0)


@dynamo_bug(_EQ_TENSOR)
def test_eq_of_one_element_tensors_breaks():
    def fn(x, y):
        a = x[:1] * 2
        b = y[:1]
        found = b in [a, b]  # a == b first: its truth depends on the data
        return found, a + 1

    check(fn, _t(3), _t(3, seed=1), graphs=2, breaks=1, dynamo_graphs=1)


@dynamo_bug(_EQ_TENSOR)
def test_in_uncaught_raises_at_the_statement():
    def fn(x, y, log):
        a = x + 1
        log.append("before")
        return a in [y, a]  # y == a raises RuntimeError, as in eager, after the append

    reset()
    counter = CountingBackend()
    compiled = compile_fn(fn, counter)
    for run in (fn, compiled, compiled):
        log = []
        with pytest.raises(RuntimeError, match="more than one value"):
            run(_t(3), _t(3, seed=1), log)
        assert log == ["before"]
    assert counter.graph_count == 1


class _HoldsWeight(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))
        self.b = torch.nn.Parameter(torch.zeros(2))

    def forward(self, x):
        try:
            found = x in [self.w]  # True by identity when the parameter itself is passed, else w == x raises
        except RuntimeError:
            found = "raised"
        return found, self.b in (self.b, self.w), x * 2


def test_in_with_a_parameter_passed_in_recompiles():
    reset()
    m = _HoldsWeight()
    other = torch.randn(2)
    compiled = kiln.compile(m, backend="eager")
    for x, expected in ((other, "raised"), (m.w, True), (other, "raised")):
        got, want = compiled(x), m(x)
        assert got[0] == want[0] == expected and got[1] is want[1] is True
        assert torch.equal(got[2], want[2])
    assert kiln.stats.eager_fallbacks == {} and sum(kiln.stats.recompilations.values()) == 1
    assert sum(kiln.stats.graph_breaks.values()) == 0


# ---- Counters and dicts keyed by tensors ----------------------------------------------------------------

def test_counter_of_tensors_counts_by_identity():
    def fn(x, y):
        c = collections.Counter([x, y, x, 3])
        c.update([y, y])
        pairs = c.most_common()
        elements = list(c.elements())
        c2 = c + collections.Counter([x])
        key, count = c2.popitem()
        return (c[x], c[y], c[3], c[x + 1], [t is x for t, _ in pairs], len(elements), elements[0] is x,
                key == 3, count, c2[x], [k is x for k in c], list(c.values()), x + 1)

    check(fn, _t(3), _t(3, seed=1), breaks=0)


def test_counter_of_an_input_and_a_tensor_made_here():
    def fn(x):
        a = x * 2
        c = collections.Counter((a, x, a))
        c.subtract({a: 1})
        return c[a], c[x], list(c.values()), a

    check(fn, _t(3), breaks=0)


def test_counter_with_dict_subclass_arguments():
    def fn(x, y):
        d = collections.defaultdict(int)
        d[x] += 2
        c = collections.Counter(d)
        c.update(collections.OrderedDict([(y, 3)]))
        plain = collections.Counter(a=1)
        return c[x], c[y], plain == collections.defaultdict(int, a=1), x + 1

    check(fn, _t(3), _t(3, seed=1), breaks=0)


def test_containers_keyed_by_tensors_made_in_the_function():
    def fn(x, y):
        d = dict.fromkeys([x, y], 0)
        d[x] += 1
        s = set([x, y, x])
        fs = frozenset((x, y))
        od = collections.OrderedDict([(x, 1), (y, 2)])
        od.move_to_end(x)
        dd = collections.defaultdict(int)
        dd[y] += 3
        a = x + 1
        return d[x], len(s), x in fs, a in fs, [k is y for k in od], dd[y], y in dd, x in dd, a

    check(fn, _t(3), _t(3, seed=1), breaks=0)


@dynamo_bug(_EQ_TENSOR)
def test_deque_compares_tensors_identity_first():
    def fn(x, y):
        dq = collections.deque([x, y, x])
        found = [dq.index(x), x in dq, collections.deque([x, x]).count(x)]
        try:
            dq.count(y)  # x == y: RuntimeError
        except RuntimeError as e:
            found.append(str(e))
        dq.remove(x)
        k = dq.index(x, 1)  # with start/stop: the graph breaks (kiln)
        return found, k, len(dq), dq[0] is y, x + 1

    check(fn, _t(3), _t(3, seed=1), graphs=2, breaks=1, dynamo_graphs=1)


# ---- iterating sets of tensors (their order follows the objects' hashes, i.e. addresses) -----------------

def _fold(ts):
    out = 0
    for t in ts:
        out = out * 2 + t
    return out


@dynamo_bug("iterates a set of tensors in insertion order, not the set's order", strict=False)
def test_iterating_a_set_of_input_tensors_follows_their_hashes():
    def fn(x, y, z):
        s = {x, y, z}
        return _fold(s), sum(s), [t is y for t in s], x + 1

    reset()
    counter = CountingBackend()
    compiled = compile_fn(fn, counter)
    orders, alive = set(), []
    for i in range(24):
        args = (_t(2, seed=i), _t(2, seed=i + 100), _t(2, seed=i + 200))
        alive.append(args)  # distinct objects on every call (ids are not reused)
        orders.add(tuple(next(i for i, a in enumerate(args) if a is t) for t in {*args}))
        assert_same(compiled(*args), fn(*args), path=f"call {i}")
    assert len(orders) > 1, "every call had one order: the case tests nothing"
    assert counter.graph_count == len(orders)  # one graph per order: the guard recompiles for another


class _Pair(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(2))
        self.b = torch.nn.Parameter(torch.randn(2))
        self.c = torch.nn.Parameter(torch.randn(2))

    def forward(self, x):
        return _fold({self.a, self.b, self.c, 3}) * x, len(frozenset([self.a, self.a]))


@dynamo_bug("iterates a set of tensors in insertion order, not the set's order", strict=False)
def test_iterating_a_set_of_parameters_in_one_graph():
    # eager and compiled run the same module (a copy's parameters would be other objects: another order)
    reset()
    counter = CountingBackend()
    m = _Pair()
    compiled = compile_fn(m, counter)
    for _ in range(2):
        x = _t(2)
        assert_same(compiled(x), m(x))
    assert counter.graph_count == 1
    if not USE_DYNAMO:
        assert sum(kiln.stats.graph_breaks.values()) == 0


def test_iterating_a_set_of_tensors_the_graph_makes_breaks():
    def fn(x, y):
        s = {x + 1, y + 1, x * 2}
        out = 0
        for t in s:  # eager and compiled runs make other objects: only an order-free result compares
            out = out + t
        return out

    check(fn, _t(2), _t(2, seed=1), graphs=1, breaks=1, dynamo_graphs=1)


@dynamo_bug("iterates a set of tensors in insertion order, not the set's order", strict=False)
def test_iterating_a_set_of_input_tensors_after_discards_and_clear():
    def fn(x, y, z, w):
        s = {x, y, z}
        s.discard(y)  # leaves a dummy slot: the guard replays adds and discards alike
        s.add(w)
        s.remove(x)
        s.add(y)
        t = {w}
        t.clear()
        t.update([z, x])
        return _fold(s), _fold(t), [[m is a for a in (x, y, z, w)] for m in (*s, *t)]

    reset()
    counter = CountingBackend()
    compiled = compile_fn(fn, counter)
    orders, alive = set(), []
    for i in range(6):  # (under the recompile limit however many orders come)
        args = tuple(_t(2, seed=i * 10 + k) for k in range(4))
        alive.append(args)
        got, want = compiled(*args), fn(*args)
        assert_same(got, want, path=f"call {i}")
        orders.add(str(want[2]))  # which argument each member is, in the order of s then t
    assert len(orders) > 1, "every call had one order: the case tests nothing"
    if not USE_DYNAMO:
        assert counter.graph_count == len(orders) and sum(kiln.stats.graph_breaks.values()) == 0


def test_iterating_a_set_of_tensors_merged_from_another_set():
    def fn(x, y, z):
        s = {x}
        s.update({y, z})  # merged as a set: the guard replays the merge on a real set
        return sum(s)

    # one call: the next call's copies may land in another order, which recompiles (the test below)
    check(fn, _t(2), _t(2, seed=1), _t(2, seed=2), graphs=1, breaks=0, calls=1)


def test_a_merged_set_iterates_in_eagers_order_on_every_call():
    def fn(a, b, c, d):
        s = {a, b}
        s.discard(a)
        s.update({c, d, a})
        return [[m is v for v in (a, b, c, d)] for m in s]

    reset()
    counter = CountingBackend()
    compiled = compile_fn(fn, counter)
    orders, alive = set(), []
    for i in range(6):
        args = tuple(_t(2, seed=i * 10 + k) for k in range(4))
        alive.append(args)  # (ids are not reused)
        got, want = compiled(*args), fn(*args)
        assert got == want, f"call {i}"
        orders.add(str(want))
    if not USE_DYNAMO:
        assert counter.graph_count <= len(orders) and sum(kiln.stats.graph_breaks.values()) == 0


@dynamo_bug("guards a set passed in by its members, not by its order")
def test_a_set_passed_in_iterates_in_its_own_order_on_every_call():
    # {8, 16} and {16, 8} are equal sets with other orders (8 and 16 share a slot of the 8-slot table):
    # a for loop over the set guards its order (it was unguarded: the second call reused the first order)
    def fn(x, s):
        out = x * 0
        for v in s:
            out = out * 2 + v
        return out

    assert list({8, 16}) != list({16, 8})
    check_recompiles(fn, [(_t(1), {8, 16}), (_t(1), {16, 8}), (_t(1), {8, 16})], graphs=2)
