"""Iterators: lazy map/filter/zip/enumerate/reversed/iter, next() and StopIteration, dict views, exact
iterator types, and the builtins that consume iterables (sum, min, max, sorted, any, all, list, dict)."""
import collections

import torch

from .harness import check, dynamo_bug


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def _first(it):
    try:
        return next(it)
    except StopIteration:
        return "stop"


# ---- laziness with side effects ------------------------------------------------------------------------

def test_map_calls_function_only_for_items_taken():
    def fn(x):
        calls = 0

        def scaled(v):
            nonlocal calls
            calls += 1
            return x * v

        it = map(scaled, [1, 2, 3, 4])
        a = next(it)
        b = next(it)
        return a + b, calls

    check(fn, _t(3))


def test_map_stops_with_shorter_zip_partner():
    def fn(x):
        calls = 0

        def double(v):
            nonlocal calls
            calls += 1
            return v * 2

        pairs = list(zip(range(2), map(double, [1, 2, 3, 4])))
        return x * len(pairs), calls, pairs

    check(fn, _t(3))


def test_zip_takes_one_item_too_many_from_first_iterator():
    def fn(x):
        it = iter([1, 2, 3, 4, 5])
        pairs = list(zip(it, range(2)))
        return x + len(pairs), pairs, list(it)

    check(fn, _t(3))


def test_zip_with_shorter_first_argument_leaves_second_untouched():
    def fn(x):
        it = iter([1, 2, 3, 4, 5])
        pairs = list(zip(range(2), it))
        return x + 1, pairs, list(it)

    check(fn, _t(3))


def test_any_short_circuits_over_map():
    def fn(x):
        seen = []

        def positive(v):
            seen.append(v)
            return v > 1

        found = any(map(positive, [0, 1, 2, 3, 4]))
        return x * len(seen), found, seen

    check(fn, _t(3))


def test_all_short_circuits_over_map():
    def fn(x):
        seen = []

        def small(v):
            seen.append(v)
            return v < 2

        ok = all(map(small, [0, 1, 2, 3, 4]))
        return x + len(seen), ok, seen

    check(fn, _t(3))


def test_filter_is_lazy_with_counter():
    def fn(x):
        tested = 0

        def even(v):
            nonlocal tested
            tested += 1
            return v % 2 == 0

        it = filter(even, range(10))
        first = next(it)
        second = next(it)
        return x * (first + second), tested

    check(fn, _t(3))


def test_map_over_two_iterables_of_unequal_length():
    def fn(x):
        calls = []

        def add(a, b):
            calls.append((a, b))
            return a + b

        it = iter([10, 20, 30])
        out = list(map(add, it, [1, 2]))
        return x + sum(out), calls, list(it)

    check(fn, _t(3))


def test_extend_with_map_that_reads_the_growing_list():
    def fn(x):
        xs = [1, 2, 3]
        xs.extend(map(lambda v: len(xs), range(3)))
        return x * len(xs), xs

    check(fn, _t(3))


def test_iadd_with_map_that_reads_the_growing_list():
    def fn(x):
        out = [0]
        out += map(lambda v: len(out) + v, range(3))
        return x + out[-1], out

    check(fn, _t(3))


def test_iter_callable_sentinel_with_counter():
    def fn(x):
        state = [0]

        def tick():
            state[0] += 1
            return state[0]

        values = list(iter(tick, 4))
        return x * sum(values), values, state

    check(fn, _t(3))


# ---- live sequences and dicts ----------------------------------------------------------------------------

def test_for_loop_sees_items_appended_to_list():
    def fn(x):
        xs = [1, 2]
        out = []
        for v in xs:
            if len(xs) < 5:
                xs.append(v + 10)
            out.append(x * v)
        return torch.stack(out), xs

    check(fn, _t(3))


def test_list_iterator_sees_append_after_creation():
    def fn(x):
        xs = [x]
        it = iter(xs)
        xs.append(x * 2)
        return list(it)

    check(fn, _t(3))


def test_exhausted_list_iterator_stays_exhausted():
    def fn(x):
        xs = [1]
        it = iter(xs)
        first = list(it)
        xs.append(2)
        return x + 1, first, list(it)

    check(fn, _t(3))


def test_for_loop_popping_the_list():
    def fn(x):
        xs = [1, 2, 3, 4]
        seen = []
        for v in xs:
            seen.append(v)
            xs.pop()
        return x * len(seen), seen, xs

    check(fn, _t(3))


def test_reversed_list_does_not_see_appends():
    def fn(x):
        xs = [1, 2, 3]
        it = reversed(xs)
        xs.append(4)
        return x + 1, list(it)

    check(fn, _t(3))


def test_dict_keys_view_sees_later_insertions():
    def fn(x):
        d = {"a": x}
        keys = d.keys()
        d["b"] = x * 2
        return list(keys), len(keys), "b" in keys

    check(fn, _t(3))


def test_dict_values_view_sees_updates():
    def fn(x):
        d = {"a": x, "b": x + 1}
        values = d.values()
        d["a"] = x * 10
        d["c"] = x * 3
        return torch.stack(list(values)).sum(0)

    check(fn, _t(3))


def test_dict_items_view_len_and_membership():
    def fn(x):
        d = {"a": 1}
        items = d.items()
        d["b"] = 2
        return x * len(items), ("b", 2) in items, ("b", 3) in items, bool(items)

    check(fn, _t(3))


def test_dict_keys_set_operations():
    def fn(x):
        d = {"a": 1, "b": 2, "c": 3}
        e = {"b": 0, "d": 0}
        both = d.keys() & e.keys()
        only = d.keys() - e.keys()
        union = d.keys() | {"z"}
        return x + len(union), sorted(both), sorted(only), d.keys() == {"a", "b", "c"}

    check(fn, _t(3))


def test_dict_value_assignment_while_iterating_keys():
    def fn(x):
        d = {"a": x, "b": x + 1}
        for k in d:
            d[k] = d[k] * 2
        return d

    check(fn, _t(3))


def _grow_while_iterating(d):
    try:
        for k in d:
            d[k + "x"] = 1
    except RuntimeError as e:
        return str(e)
    return "no error"


def test_dict_changed_size_during_iteration_raises():
    def fn(x):
        d = {"a": 0}
        msg = _grow_while_iterating(d)
        return x + len(d), msg

    check(fn, _t(3))


def test_reversed_dict_and_items():
    def fn(x):
        d = {"a": 1, "b": 2, "c": 3}
        return x + 1, list(reversed(d)), list(reversed(d.items())), list(reversed(d.values()))

    check(fn, _t(3))


def test_dict_view_iterated_twice():
    def fn(x):
        d = {"p": x, "q": x * 2}
        items = d.items()
        first = [k for k, _ in items]
        total = sum(v for _, v in items)
        return total, first

    check(fn, _t(3))


# ---- dict(), update() and used-up iterators -------------------------------------------------------------

def test_iterator_passed_to_dict_is_used_up():
    def fn(x):
        it = iter([("a", 1), ("b", 2)])
        d = dict(it)
        return x + len(d), d, list(it)

    check(fn, _t(3))


def test_dict_from_zip_of_names_and_tensors():
    def fn(x):
        names = ["q", "k", "v"]
        d = dict(zip(names, x.unbind(0)))
        return d["k"] * 2, list(d)

    check(fn, _t(3, 2))


def test_dict_from_same_iterator_twice_in_zip():
    def fn(x):
        it = iter([1, 2, 3, 4, 5])
        d = dict(zip(it, it))
        return x * len(d), d, list(it)

    check(fn, _t(3))


def test_dict_update_with_zip_and_pairs():
    def fn(x):
        d = {"a": x}
        d.update(zip(["b", "c"], [x * 2, x * 3]))
        d.update([("d", x * 4)])
        return d

    check(fn, _t(3))


def test_ordered_dict_update_with_pairs():
    def fn(x):
        d = collections.OrderedDict()
        d.update([("a", x), ("b", x + 1)])
        d.update((("c", x * 3),))
        return list(d.keys()), d["c"] + d["a"]

    check(fn, _t(3))


def test_list_of_iterator_then_list_again_is_empty():
    def fn(x):
        it = map(lambda v: x * v, [1, 2])
        first = list(it)
        second = list(it)
        return torch.stack(first), len(second)

    check(fn, _t(3))


# ---- exact types ------------------------------------------------------------------------------------------

@dynamo_bug("iter(()) is modelled as a list_iterator")
def test_iterator_type_names():
    def fn(x):
        names = [type(iter(range(3))).__name__, type(iter([])).__name__, type(iter(())).__name__,
                 type(iter({})).__name__, type(iter({}.values())).__name__, type(iter({}.items())).__name__,
                 type(zip()).__name__, type(map(abs, [])).__name__, type(filter(None, [])).__name__,
                 type(enumerate([])).__name__, type(reversed([])).__name__, type(reversed((1,))).__name__,
                 type(reversed(range(2))).__name__, type({}.keys()).__name__]
        return x + 1, names

    check(fn, _t(3))


@dynamo_bug("iter(()) is modelled as a list_iterator")
def test_isinstance_agrees_on_iterator_types():
    def fn(x):
        it = zip([1], [2])
        checks = (isinstance(it, zip), isinstance(map(abs, [1]), map), isinstance(enumerate([]), enumerate),
                  isinstance(iter(range(2)), type(iter(range(5)))), isinstance(reversed([]), type(reversed([1]))),
                  type(iter([])) is type(iter([1, 2])), isinstance(iter(()), type(iter([]))))
        return x * 2, checks

    check(fn, _t(3))


def test_iter_of_iterator_is_itself():
    def fn(x):
        it = iter([1, 2])
        z = zip([1], [2])
        return x + 1, iter(it) is it, iter(z) is z

    check(fn, _t(3))


# ---- next, StopIteration ------------------------------------------------------------------------------------

def test_next_with_default_on_exhausted():
    def fn(x):
        it = iter([x])
        a = next(it, None)
        b = next(it, "done")
        return a * 2, b

    check(fn, _t(3))


def test_stop_iteration_caught_in_helper():
    def fn(x):
        it = map(lambda v: v * x, [1])
        a = _first(it)
        b = _first(it)
        return a, b

    check(fn, _t(3))


def test_stop_iteration_from_mapped_function_ends_the_loop():
    def stop_at_two(v):
        if v == 2:
            raise StopIteration
        return v

    def fn(x):
        out = list(map(stop_at_two, [0, 1, 2, 3]))
        return x * len(out), out

    check(fn, _t(3))


def test_zip_strict_equal_lengths():
    def fn(x):
        return [a * b for a, b in zip(x.unbind(0), [1.0, 2.0], strict=True)]

    check(fn, _t(2, 3))


def _strict_zip_error(a, b, c):
    try:
        return list(zip(a, b, c, strict=True))
    except ValueError as e:
        return str(e)


@dynamo_bug("its zip(strict=True) error message differs from CPython's")
def test_zip_strict_unequal_lengths_message():
    def fn(x):
        return (x + 1, _strict_zip_error([1, 2], [1], [1, 2]), _strict_zip_error([1], [1, 2], [3]),
                _strict_zip_error([1], [1], [1, 2]), _strict_zip_error([1, 2], [1, 2], [1]))

    check(fn, _t(3))


def _next_of(value):
    try:
        return next(value)
    except TypeError as e:
        return str(e)


@dynamo_bug("next() on a list returns its first item instead of raising TypeError")
def test_next_on_a_list_is_a_type_error():
    def fn(x):
        return x + 1, _next_of([1, 2])

    check(fn, _t(3))


def test_for_else_over_iterator():
    def fn(x):
        it = iter([1, 3, 5])
        for v in it:
            if v % 2 == 0:
                found = v
                break
        else:
            found = -1
        return x * found

    check(fn, _t(3))


def test_loop_left_early_then_rest_of_iterator():
    def fn(x):
        it = iter(x.unbind(0))
        head = next(it)
        for v in it:
            head = head + v
            break
        rest = list(it)
        return head, len(rest)

    check(fn, _t(4, 2))


def test_in_on_iterator_consumes_up_to_match():
    def fn(x):
        it = iter([1, 2, 3, 4])
        found = 2 in it
        return x + 1, found, list(it)

    check(fn, _t(3))


def test_unpacking_map_and_star():
    def fn(x):
        a, b = map(lambda v: x * v, [1, 2])
        first, *rest = iter(range(4))
        return a + b, first, rest

    check(fn, _t(3))


# ---- consumers of any iterable -----------------------------------------------------------------------------

def test_enumerate_with_start_over_partly_used_iterator():
    def fn(x):
        it = iter(x.unbind(0))
        next(it)
        return [i * v for i, v in enumerate(it, start=1)]

    check(fn, _t(3, 2))


def test_enumerate_of_zip():
    def fn(x):
        out = x * 0
        for i, (a, b) in enumerate(zip(x.unbind(0), [3, 4, 5])):
            out = out + a * b * i
        return out

    check(fn, _t(3, 2))


def test_sum_over_map_of_tensors_and_floats():
    def fn(x):
        total = sum(map(lambda v: x * v, [1.0, 2.0]))
        return total, sum([0.1] * 10), sum(iter([1, 2, 3]), 10)

    check(fn, _t(3))


def test_min_max_with_key_over_zip_and_dict_items():
    def fn(x):
        d = {"a": 3, "b": 1, "c": 2}
        lo = min(d.items(), key=lambda kv: kv[1])
        hi = max(zip([1, 5, 2], "xyz"))
        longest = max(map(len, [[1], [1, 2, 3], [1, 2]]))
        return x * longest, lo, hi

    check(fn, _t(3))


def test_sorted_dict_items_by_value_with_tensors():
    def fn(x):
        d = {"a": (3, x), "b": (1, x * 2), "c": (2, x * 3)}
        order = sorted(d.items(), key=lambda kv: kv[1][0])
        return [v for _, (_, v) in order], [k for k, _ in order]

    check(fn, _t(3))


def test_filter_none_and_list_tuple_set_of_iterators():
    def fn(x):
        kept = list(filter(None, [0, 1, "", "a", None, 2]))
        return x + len(kept), kept, tuple(map(abs, [-1, 2])), set(iter([1, 1, 2])) == {1, 2}

    check(fn, _t(3))


def test_stack_of_map_of_relu():
    def fn(xs):
        return torch.stack(list(map(torch.relu, xs))).sum(0)

    check(fn, [_t(3, seed=i) for i in range(3)])


def test_user_iterator_class_in_for_loop_and_list():
    class Countdown:
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return self

        def __next__(self):
            if self.n == 0:
                raise StopIteration
            self.n -= 1
            return self.n

    def fn(x):
        out = x
        for v in Countdown(3):
            out = out + v
        return out, list(Countdown(2)), sum(Countdown(4))

    check(fn, _t(3))


def test_user_iterable_with_iter_returning_list_iterator():
    class Bag:
        def __init__(self, items):
            self.items = items

        def __iter__(self):
            return iter(self.items)

    def fn(x):
        bag = Bag([x, x * 2, x * 3])
        return sum(bag), len(list(zip(bag, range(2)))), max(map(lambda t: 1, bag))

    check(fn, _t(3))


def test_reversed_tuple_range_and_string():
    def fn(x):
        return x + 1, list(reversed((1, 2, 3))), list(reversed(range(1, 7, 2))), "".join(reversed("abc"))

    check(fn, _t(3))


def test_iterator_argument_consumed_by_zip_leaves_the_rest():
    def fn(x, xs):
        it = iter(xs)
        pairs = list(zip(it, range(2)))
        return x * len(pairs), pairs, next(it)

    check(fn, _t(3), [1, 2, 3, 4])


def test_generator_expression_over_map_with_tensors():
    def fn(xs):
        return sum(t.sum() for t in map(lambda v: v * 2, xs))

    check(fn, [_t(3, seed=i) for i in range(3)])


def test_zip_of_dict_items_and_range_in_comprehension():
    def fn(x):
        d = {"a": x, "b": x + 1, "c": x + 2}
        return {k: v * i for (k, v), i in zip(d.items(), range(2))}

    check(fn, _t(3))


# ---- iterators kept across a graph break --------------------------------------------------------------------

def test_map_with_counter_across_graph_break():
    def fn(x):
        calls = [0]

        def scaled(v):
            calls[0] += 1
            return x * v

        it = map(scaled, [1, 2, 3])
        a = next(it)
        print("between")
        b = next(it)
        return a + b, calls

    check(fn, _t(3), graphs=2, dynamo_graphs=3)


@dynamo_bug("a list iterator kept across a graph break misses items appended later")
def test_list_iterator_across_graph_break_sees_append():
    def fn(x):
        xs = [1, 2]
        it = iter(xs)
        a = next(it)
        y = x * a
        print("between")
        xs.append(3)
        return y + 1, list(it)

    check(fn, _t(3), graphs=2)


@dynamo_bug("a dict view kept across a graph break is a snapshot")
def test_dict_view_across_graph_break():
    def fn(x):
        d = {"a": 1}
        keys = d.keys()
        y = x * len(keys)
        print("between")
        d["b"] = 2
        return y * len(keys), list(keys)

    check(fn, _t(3), graphs=2)


@dynamo_bug("a set iterates in insertion order, not a real set's")
def test_set_iteration_order_is_a_real_sets():
    def fn(x):
        s = {30, 1, 17, 2, 100}
        s.add(5)
        s.discard(17)
        return x + 1, list(s), [v for v in s], sorted(s)

    check(fn, _t(3))


@dynamo_bug("iter(OrderedDict) is modelled as a dict_keyiterator")
def test_ordered_dict_iterators_and_tensor_iterator_types():
    def fn(x):
        d = collections.OrderedDict([("a", x), ("b", x * 2)])
        names = [type(iter(d)).__name__, type(d.keys()).__name__, type(iter(d.items())).__name__,
                 type(iter(x)).__name__]
        return names, [k for k in d], sum(d.values()), [r * 2 for r in iter(x)]

    check(fn, _t(2, 3))


def test_str_join_of_generator_and_map():
    def fn(x):
        shape = "x".join(str(d) for d in x.shape)
        names = "-".join(map(str, range(3)))
        keys = "".join(k.upper() for k in {"a": 1, "b": 2})
        return x * len(shape), shape, names, keys

    check(fn, _t(2, 3))


class _Output(collections.OrderedDict):
    pass


@dynamo_bug("a keys view of an OrderedDict subclass kept across a graph break is a snapshot")
def test_keys_view_of_dict_subclass_object_across_graph_break():
    def fn(x):
        out = _Output()
        out["a"] = x + 1
        keys = out.keys()
        print("between")
        out["b"] = x * 2
        return type(keys).__name__, list(keys), out["b"]

    # kiln: the resume function (item assignment on the existing dict subclass) runs eagerly
    check(fn, _t(3), graphs=1, dynamo_graphs=2)


def test_zip_of_one_iterator_repeated_groups_pairs():
    def fn(x):
        rows = x.unbind(0)
        pairs = list(zip(*[iter(rows)] * 2))
        return [a + b for a, b in pairs]

    check(fn, _t(5, 2))


def test_transpose_with_zip_star_and_dict_of_enumerate():
    def fn(x):
        grid = [[1, 2, 3], [4, 5, 6]]
        cols = list(zip(*grid))
        index = dict(enumerate("abc", 1))
        return x * len(cols), cols, index

    check(fn, _t(3))


@dynamo_bug("iter(tensor) is modelled as a list_iterator")
def test_iterating_tensor_rows_with_next_and_for():
    def fn(x):
        it = iter(x)
        first = next(it)
        return [first * r for r in it], type(it).__name__

    check(fn, _t(3, 2))


class _OldProtocol:
    """Iterable through __getitem__ alone (no __iter__): CPython's sequence iterator calls it with 0, 1, ...
    until IndexError (or StopIteration)."""

    def __init__(self, items):
        self.items = items

    def __getitem__(self, i):
        if i >= len(self.items):
            raise IndexError(i)
        return self.items[i] * 2


class _StopsAtThree:
    def __getitem__(self, i):
        if i == 3:
            raise StopIteration
        return i


def test_old_sequence_protocol_iterates_through_getitem():
    # it broke the graph ("iterating over NewObject(...)") and ran __getitem__ eagerly (4 graphs; dynamo 1)
    def fn(x, y):
        seq = _OldProtocol([x, y, x + y])
        it = iter(_OldProtocol([x, y]))
        first = next(it)
        return sum(seq) + first, list(_OldProtocol([1, 2])), list(_StopsAtThree()), [v for v in seq][1], \
            type(it).__name__, 5 in _OldProtocol([1, 2, 3])

    check(fn, torch.ones(2), torch.full((2,), 3.0), breaks=0)
