"""itertools inside compiled code: lazy, exact (items taken only as CPython takes them), real types."""
import itertools
from itertools import chain, count, islice

import pytest
import torch

from .harness import check, dynamo_bug


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def _counting(log):
    def f(v):
        log.append(v)
        return v
    return f


def test_count_zipped_with_finite_list():
    def fn(xs):
        return [x * i for i, x in zip(itertools.count(1), xs)]

    check(fn, [_t(2, seed=i) for i in range(3)])


def test_count_with_float_step_and_islice():
    def fn(x):
        steps = list(islice(count(0.5, 0.25), 4))
        return x * steps[-1], steps

    check(fn, _t(3))


def test_count_in_for_loop_with_break():
    def fn(x):
        for i in count():
            x = x * 2
            if i == 3:
                break
        return x

    check(fn, _t(3))


def test_cycle_zipped_with_tensors():
    def fn(xs):
        return [x * s for x, s in zip(xs, itertools.cycle([1.0, -1.0]))]

    check(fn, [_t(2, seed=i) for i in range(5)])


def test_cycle_reads_input_lazily():
    def fn(x):
        log = []
        c = itertools.cycle(map(_counting(log), [1, 2, 3]))
        first = [next(c), next(c)]
        after_two = list(log)
        more = list(islice(c, 5))
        return x + 1, first, after_two, more, log

    check(fn, _t(3))


def test_repeat_with_and_without_times():
    def fn(x):
        a = list(itertools.repeat(x, 3))
        b = [v * w for v, w in zip(itertools.repeat(2.0), x.unbind(0))]
        return torch.stack(a).sum(0), b, list(itertools.repeat("z", -1))

    check(fn, _t(3))


def test_repeat_keeps_identity():
    def fn(x):
        y = x + 1
        items = list(itertools.repeat(y, 2))
        return items[0] is items[1], items[0] * 2

    check(fn, _t(3))


def test_accumulate_default_and_func_and_initial():
    def fn(x):
        sums = list(itertools.accumulate([1, 2, 3, 4]))
        prods = list(itertools.accumulate([1, 2, 3, 4], lambda a, b: a * b))
        with_init = list(itertools.accumulate([1, 2], initial=10))
        running = list(itertools.accumulate(x.unbind(0)))
        return torch.stack(running), sums, prods, with_init

    check(fn, _t(3, 2))


def test_accumulate_max():
    def fn(x):
        return x + 1, list(itertools.accumulate([3, 1, 4, 1, 5], max))

    check(fn, _t(3))


@pytest.mark.skipif(not hasattr(itertools, "batched"), reason="itertools.batched is Python 3.12+")
def test_batched_tensors():
    def fn(xs):
        return [torch.stack(b).sum(0) for b in itertools.batched(xs, 2)]

    check(fn, [_t(2, seed=i) for i in range(5)])


def test_chain_of_lists_and_tensors():
    def fn(xs, ys):
        return torch.stack(list(chain(xs, ys, [xs[0] * 2])))

    check(fn, [_t(2, seed=i) for i in range(2)], [_t(2, seed=5)])


def test_chain_calls_iter_lazily_on_its_arguments():
    def fn(x):
        log = []
        c = chain(map(_counting(log), [1, 2]), map(_counting(log), [3, 4]))
        first = next(c)
        seen = list(log)
        rest = list(c)
        return x * first, seen, rest, log

    check(fn, _t(3))


def test_chain_from_iterable_flattens():
    def fn(x):
        nested = [[1, 2], (3,), range(4, 6)]
        flat = list(chain.from_iterable(nested))
        return x * sum(flat), flat

    check(fn, _t(3))


def test_chain_from_iterable_of_generator():
    def fn(xs):
        return sum(chain.from_iterable([x, x * 2] for x in xs))

    check(fn, [_t(2, seed=i) for i in range(3)])


def test_compress_with_selectors():
    def fn(xs):
        return [x * 2 for x in itertools.compress(xs, [1, 0, 1, 0])]

    check(fn, [_t(2, seed=i) for i in range(3)])


def test_dropwhile_and_takewhile():
    def fn(x):
        nums = [1, 2, 5, 1, 7]
        dropped = list(itertools.dropwhile(lambda v: v < 3, nums))
        taken = list(itertools.takewhile(lambda v: v < 3, nums))
        return x * len(dropped), dropped, taken

    check(fn, _t(3))


def test_takewhile_consumes_the_first_failing_item():
    def fn(x):
        it = iter([1, 2, 10, 3, 4])
        head = list(itertools.takewhile(lambda v: v < 5, it))
        return x + 1, head, list(it)

    check(fn, _t(3))


@dynamo_bug("type(itertools.filterfalse(...)) is filter")
def test_filterfalse():
    def fn(x):
        odds = list(itertools.filterfalse(lambda v: v % 2 == 0, range(7)))
        return x * len(odds), odds, type(itertools.filterfalse(None, [])).__name__

    check(fn, _t(3))


def test_groupby_keys_and_groups():
    def fn(x):
        words = ["apple", "avocado", "banana", "blueberry", "cherry", "apricot"]
        grouped = [(k, list(g)) for k, g in itertools.groupby(words, key=lambda w: w[0])]
        return x + len(grouped), grouped

    check(fn, _t(3))


@dynamo_bug("a groupby group kept after the groupby moved on still yields its items")
def test_groupby_previous_group_is_used_up():
    def fn(x):
        groups = []
        for k, g in itertools.groupby([1, 1, 2, 2, 2, 3]):
            groups.append((k, g))
        return x + 1, [(k, list(g)) for k, g in groups]

    check(fn, _t(3))


def test_groupby_of_tensors_by_shape():
    def fn(xs):
        out = []
        for n, group in itertools.groupby(xs, key=lambda t: t.shape[0]):
            out.append(torch.cat(list(group)).sum() * n)
        return out

    check(fn, [_t(2), _t(2, seed=1), _t(3, seed=2), _t(2, seed=3)])


def test_islice_does_not_read_past_stop():
    def fn(x):
        log = []
        it = map(_counting(log), range(10))
        first = list(islice(it, 3))
        return x * len(first), first, log, next(it)

    check(fn, _t(3))


def test_islice_start_stop_step_and_none_stop():
    def fn(x):
        a = list(islice(range(20), 2, 12, 3))
        b = list(islice("abcdefg", 4, None))
        c = list(islice(count(), 1, 10, 4))
        return x + len(a), a, b, c

    check(fn, _t(3))


def test_islice_over_tensor_rows():
    def fn(x):
        return sum(islice(x, 1, None, 2))

    check(fn, _t(5, 3))


def test_pairwise_differences():
    def fn(xs):
        return [b - a for a, b in itertools.pairwise(xs)]

    check(fn, [_t(2, seed=i) for i in range(4)])


def test_starmap_with_pow_and_tensors():
    def fn(x):
        powers = list(itertools.starmap(pow, [(2, 3), (3, 2)]))
        scaled = list(itertools.starmap(lambda t, s: t * s, zip(x.unbind(0), [1.0, 2.0])))
        return torch.stack(scaled), powers

    check(fn, _t(2, 3))


def test_tee_copies_read_lazily():
    def fn(x):
        log = []
        a, b = itertools.tee(map(_counting(log), [1, 2, 3]))
        first_a = next(a)
        seen = list(log)
        all_b = list(b)
        rest_a = list(a)
        return x * first_a, seen, all_b, rest_a, log

    check(fn, _t(3))


def test_tee_for_pairs_of_tensors():
    def fn(xs):
        a, b = itertools.tee(xs)
        next(b, None)
        return [u + v for u, v in zip(a, b)]

    check(fn, [_t(2, seed=i) for i in range(3)])


def test_zip_longest_with_fillvalue():
    def fn(x):
        pairs = list(itertools.zip_longest([1, 2, 3], "ab", fillvalue="-"))
        plain = list(itertools.zip_longest([x], [x, x * 2]))
        return x + len(pairs), pairs, plain[1][0] is None, plain[1][1]

    check(fn, _t(3))


def test_zip_longest_with_infinite_partner_stopped_by_islice():
    def fn(x):
        return x * 2, list(islice(itertools.zip_longest(count(), [1, 2]), 4))

    check(fn, _t(3))


def test_product_and_repeat():
    def fn(x):
        grid = list(itertools.product([0, 1], "ab"))
        bits = list(itertools.product([0, 1], repeat=3))
        return x + len(grid), grid, bits[5]

    check(fn, _t(3))


def test_product_of_tensor_lists():
    def fn(xs, ys):
        return [a * b for a, b in itertools.product(xs, ys)]

    check(fn, [_t(2, seed=i) for i in range(2)], [_t(2, seed=i + 5) for i in range(3)])


def test_permutations_and_combinations():
    def fn(x):
        perms = list(itertools.permutations([1, 2, 3], 2))
        all_perms = list(itertools.permutations("ab"))
        combos = list(itertools.combinations(range(4), 2))
        cwr = list(itertools.combinations_with_replacement("xy", 2))
        return x * len(perms), perms, all_perms, combos, cwr

    check(fn, _t(3))


def test_combinations_of_tensors_by_position():
    def fn(xs):
        return [a @ b for a, b in itertools.combinations(xs, 2)]

    check(fn, [_t(3, seed=i) for i in range(3)])


def test_itertools_types_match():
    def fn(x):
        names = [type(v).__name__ for v in (
            itertools.count(), itertools.cycle([]), itertools.repeat(1), itertools.accumulate([]), chain(),
            chain.from_iterable([]), itertools.compress([], []), itertools.dropwhile(bool, []),
            itertools.groupby([]), islice([], 1), itertools.pairwise([]), itertools.starmap(pow, []),
            itertools.takewhile(bool, []), itertools.zip_longest(), itertools.product(),
            itertools.permutations([]), itertools.combinations([], 1),
            itertools.combinations_with_replacement([], 1), itertools.tee([])[0])]
        return x + 1, names, isinstance(chain(), itertools.chain)

    check(fn, _t(3), dynamo_graphs=0)  # dynamo: the frame runs eagerly


def test_islice_of_map_with_side_effect_counter():
    def fn(x):
        calls = 0

        def f(v):
            nonlocal calls
            calls += 1
            return x * v

        parts = list(islice(map(f, count()), 2, 4))
        return torch.stack(parts), calls

    check(fn, _t(3))


def test_any_over_takewhile_short_circuits():
    def fn(x):
        log = []
        hit = any(v > 1 for v in itertools.takewhile(lambda v: v < 10, map(_counting(log), [0, 2, 5, 20])))
        return x + 1, hit, log

    check(fn, _t(3))
