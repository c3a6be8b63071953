"""Iterators passed in from outside (list, tuple, dict and range iterators): kiln reads their remaining
items without advancing them (guarded), unrolls the loop over them, and advances the real iterator
after the graph by as many items as the code consumed, so the caller sees it where eager leaves it."""
import copy

import torch

from .support import check_breaks, t

STATE: dict = {}


def _remaining():
    return list(copy.copy(STATE["it"]))  # a copy: reading it does not advance the iterator under test


def _set(make):
    def setup():
        STATE["it"] = make()
    return setup


def test_for_loop_over_list_iterator_from_outside():
    def fn(x):
        total = x * 0
        for k in STATE["it"]:
            total = total + x * len(k)
        return total

    # dynamo runs this frame eagerly (0 graphs)
    check_breaks(fn, t(3), graphs=1, breaks=0, setup=_set(lambda: iter(["a", "bb", "ccc"])), observe=_remaining,
                 dynamo_graphs=0, dynamo_breaks=-1)


def test_dict_item_and_key_iterators_from_outside():
    def fn(x, items):
        total = x * 0
        for name, w in items:
            total = total + w * len(name)
        for key in STATE["it"]:
            total = total - len(key)
        return total

    d = {"p": t(3, seed=1), "qq": t(3, seed=2)}
    check_breaks(lambda x: fn(x, iter(d.items())), t(3), graphs=1, breaks=0,
                 setup=_set(lambda: iter({"u": 1, "vv": 2})), observe=_remaining, dynamo_graphs=0, dynamo_breaks=-1)


def test_iterator_partly_consumed_then_break_then_rest():
    def fn(x):
        it = STATE["it"]
        a = next(it)
        b = next(it)
        y = x * a + b
        print("took two")  # BREAK:iter_print
        c = next(it)
        return y * c

    # the first graph consumed two items: the real iterator is advanced before the print, and the
    # resume function reads on from the third
    check_breaks(fn, t(3), graphs=2, breaks=1, setup=_set(lambda: iter([1, 2, 3, 4, 5])), observe=_remaining,
                 where=["BREAK:iter_print"])


def test_loop_over_tuple_iterator_left_early_with_break_statement():
    def fn(x):
        out = []
        for v in STATE["it"]:
            out.append(x * v)
            if v == 2:
                break
        return out

    check_breaks(fn, t(3), graphs=1, breaks=0, setup=_set(lambda: iter((1, 2, 3, 4))), observe=_remaining)


def test_range_iterator_from_outside():
    def fn(x):
        total = x
        for i in STATE["it"]:
            total = total * 2 + i
        return total

    check_breaks(fn, t(3), graphs=1, breaks=0, setup=_set(lambda: iter(range(3))), observe=_remaining)
