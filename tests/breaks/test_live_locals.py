"""Live state across a break: many locals of different kinds, objects and containers built before
the break, closures made before and called after, nested functions returned, *args/**kwargs."""
import dataclasses

import torch
import torch.nn as nn

from .support import check_breaks, graph_break, t


class _Config:
    def __init__(self, scale, name):
        self.scale = scale
        self.name = name


@dataclasses.dataclass
class _Stats:
    count: int = 0
    total: float = 0.0


def test_many_live_locals_of_different_kinds():
    lin = nn.Linear(3, 3)

    def fn(x, cfg, model):
        a = x * cfg.scale
        n = x.shape[0]
        f = 0.5
        s = cfg.name + "_out"
        items = [a, n, "tag"]
        table = {"a": a, "n": n}
        pair = (a.sum(), s)
        none = None
        dt = torch.float32
        sl = slice(0, 2)
        print("live:", n, s)  # BREAK:many_locals
        b = model(items[0]) + table["a"] * f + pair[0]
        return b[sl].to(dt), n, s, none, len(items), sorted(table)

    check_breaks(fn, t(4, 3), _Config(2.0, "blk"), lin, graphs=2, breaks=1, where=["BREAK:many_locals"])


def test_closure_created_before_break_called_after():
    def fn(x, bias):
        def affine(v):
            return v * 2 + bias

        y = affine(x)
        graph_break()
        return affine(y)

    check_breaks(fn, t(3), t(3, seed=1), graphs=2, breaks=1)


def test_returned_nested_function_keeps_working():
    def fn(x):
        center = x.mean()
        print("center computed")

        def recenter(v):
            return v - center

        return recenter(x), recenter

    probe = t(3, seed=7)
    check_breaks(fn, t(5), graphs=2, breaks=1, post=lambda out: (out[0], out[1](probe)))


def test_returned_closure_over_mutated_cell():
    def fn(x):
        count = 0

        def bump(v):
            nonlocal count
            count += 1
            return v * count

        y = bump(x)
        graph_break()
        y = bump(y)
        return y, bump

    probe = t(2, seed=3)
    check_breaks(fn, t(2), graphs=2, breaks=1, post=lambda out: (out[0], out[1](probe), out[1](probe)))


def test_new_user_object_across_break():
    class Accumulator:
        def __init__(self):
            self.total = None
            self.n = 0

        def add(self, v):
            self.total = v if self.total is None else self.total + v
            self.n += 1

    def fn(x, y):
        acc = Accumulator()
        acc.add(x * 2)
        print("first added")
        acc.add(y * 3)
        return acc.total / acc.n, acc.n

    check_breaks(fn, t(3), t(3, seed=1), graphs=2, breaks=1)


def test_dataclass_and_dict_built_before_break():
    def fn(x):
        stats = _Stats()
        cache = {}
        stats.count += 1
        stats.total += 2.5
        cache["h"] = x.relu()
        graph_break()
        cache["h2"] = cache["h"] * stats.total
        stats.count += 1
        return cache, stats

    check_breaks(fn, t(4), graphs=2, breaks=1)


def test_varargs_and_kwargs_live_across_break():
    def fn(*xs, **opts):
        s = sum(xs)
        graph_break()
        return s * opts["scale"] + len(xs), sorted(opts)

    check_breaks(fn, t(3), t(3, seed=1), t(3, seed=2), kwargs={"scale": 2.0, "mode": "x"}, graphs=2, breaks=1)


def test_keyword_only_and_defaults_across_break():
    def fn(x, y=None, *, alpha=0.5, eps=1e-3):
        y = x if y is None else y
        h = x * alpha
        print("alpha", alpha)
        return h + y + eps

    check_breaks(fn, t(3), graphs=2, breaks=1)
    check_breaks(fn, t(3), t(3, seed=4), kwargs={"alpha": 2.0}, graphs=2, breaks=1)


def test_deleted_local_and_shadowing_across_break():
    def fn(x):
        tmp = x * 2
        out = tmp + 1
        del tmp
        graph_break()
        tmp = out.sum()
        return out - tmp

    check_breaks(fn, t(3), graphs=2, breaks=1)


def test_list_iterator_live_across_break():
    def fn(xs):
        it = iter(xs)
        first = next(it) * 2
        graph_break()
        second = next(it) * 3
        rest = [v.sum() for v in it]
        return first + second, rest

    check_breaks(fn, [t(2, seed=i) for i in range(4)], graphs=2, breaks=1)


def test_tuple_unpacking_and_star_across_break():
    def fn(x):
        head, *tail = x.unbind(0)
        print("split into", 1 + len(tail))
        return head * 2, torch.stack(tail).sum(0)

    check_breaks(fn, t(4, 2), graphs=2, breaks=1)


def test_bound_dict_get_live_across_break():
    def fn(x, d):
        get = d.get
        items = d.items
        y = x * get("scale", 1.0)
        graph_break()
        n = 0
        for _k, _v in items():
            n += 1
        return y + get("shift") + get("missing", 3) + n + len(d), "shift" in d

    check_breaks(fn, arg_sets=[(t(3), {"scale": 2.0, "shift": t(3, seed=1)}),
                               (t(3), {"scale": 2.0, "shift": t(3, seed=2)})], graphs=2, breaks=1)

