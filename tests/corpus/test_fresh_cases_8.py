"""An eighth batch of fresh, black-box Dynamo-style cases (written without reading kiln's capture code):
ordinary Python mixed with tensor code, in the style of TorchDynamo's own tests (test_misc, test_functions,
test_list, test_dicts, test_sets, test_iter, test_generators, test_itertools, test_functools,
test_ctx_manager, test_exceptions, test_modules, test_repros, test_numpy_interop): lazy iterators, dict views,
dict/OrderedDict/defaultdict/Counter/deque methods, dict.update forms, sets, every itertools builder (batched
through its islice recipe: this Python is 3.11), functools, namedtuples, dataclasses, user classes, closures,
generators, context managers, exceptions, match statements, tensor attributes, NumPy inside the compiled
function, nn.Modules and builtins.

Graph and break counts are TorchDynamo's on torch 2.13 (``KILN_CORPUS_ENGINE=dynamo``; breaks from
``torch._dynamo.utils.counters["graph_break"]`` after one compiled call). Two cases expect 0 graphs because
TorchDynamo runs the whole frame eagerly there (cached_property's RLock on 3.11, super().__init__ in an
Exception subclass). Cases kiln does not pass yet are marked ``kiln_gap`` (xfail under kiln only);
``dynamo_bug`` marks the 4 cases TorchDynamo itself gets wrong (kiln must pass them).

First run under kiln (as written, before any triage): 93 of 100 passed (same results, same graph and break
counts as TorchDynamo). The 7 others all give correct results (no wrong result, no crash, no internal
error, no frame run wholly eagerly where TorchDynamo makes a graph):
- more breaks (1): id() of objects breaks 4 times (Dynamo 0), same single graph;
- fewer breaks (4): dict_keys.isdisjoint, combinations_with_replacement, max/min with key= over tensors
  (kiln 0, Dynamo 1, 2, 2), max/sorted of order=True dataclasses (kiln 1, Dynamo 2); same graph counts;
- more graphs (2): cached_property and an Exception subclass calling super().__init__: kiln captures 1 graph
  where Dynamo runs the frame eagerly (0).
kiln also passes the 4 dynamo_bug cases (partial of a partial flattened, `yield from`'s value, np.dot of 1-d
arrays returning a NumPy scalar, int64 array / 2 giving float64).

Triage: id() is now modelled (values/object_ids.py: an object read from a place gives its real id under an
identity guard; ids of other objects compare with == / != as `is` does), so that case passes as written.
The other 6 capture more than TorchDynamo, exactly: they expect kiln's counts (``dynamo_graphs=`` where the
graph count differs; a comment gives Dynamo's breaks). By graph count alone, 98 of 100 matched TorchDynamo
on the first run and the 2 others were kiln capturing a graph where TorchDynamo ran the frame eagerly.
"""
import collections
import contextlib
import dataclasses
import functools
import itertools
import operator
import typing

import numpy as np
import pytest
import torch
from torch import nn

from .harness import USE_DYNAMO, check, dynamo_bug


def kiln_gap(reason):
    """A case kiln does not yet pass (the reference engine does)."""
    return pytest.mark.xfail(not USE_DYNAMO, strict=True, reason=f"kiln: {reason}")


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


# ---- module-level helpers used by the cases -------------------------------------------------------------

_LOG = []


@functools.lru_cache(maxsize=8)
def _split_sizes(total, parts):
    base, rem = divmod(total, parts)
    return tuple(base + (1 if i < rem else 0) for i in range(parts))


@functools.singledispatch
def _describe(v):
    return "other"


@_describe.register
def _(v: int):
    return "int"


@_describe.register
def _(v: str):
    return "str"


Span = collections.namedtuple("Span", ["start", "stop"], defaults=[None])


class Box(collections.namedtuple("Box", ["lo", "hi"])):
    __slots__ = ()

    @property
    def width(self):
        return self.hi - self.lo

    def scale(self, k):
        return Box(self.lo * k, self.hi * k)


class Tagged(typing.NamedTuple):
    value: torch.Tensor
    tag: str = "none"

    def doubled(self):
        return self._replace(value=self.value * 2)


Tagged.KIND = "tagged"


@dataclasses.dataclass
class Hyper:
    lr: float = 0.1
    steps: int = 3
    tags: list = dataclasses.field(default_factory=list)
    cache: dict = dataclasses.field(default_factory=dict, init=False, repr=False)


@dataclasses.dataclass
class Affine:
    w: torch.Tensor
    b: float = 0.0
    norm: float = dataclasses.field(init=False)

    def __post_init__(self):
        self.norm = float(self.w.shape[0]) ** 0.5


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: int
    b: int = 2


@dataclasses.dataclass(order=True)
class Rank:
    score: int
    name: str = dataclasses.field(compare=False, default="")


class Pt:
    __match_args__ = ("x", "y")

    def __init__(self, x, y):
        self.x = x
        self.y = y


class Grid:
    def __init__(self, n):
        self.cells = [0] * n

    def __len__(self):
        return len(self.cells)

    def __getitem__(self, i):
        return self.cells[i]

    def __setitem__(self, i, v):
        self.cells[i] = v

    def __contains__(self, v):
        return v in self.cells


class Lazy:
    real = 5

    def __init__(self):
        self.looked_up = []

    def __getattr__(self, name):
        self.looked_up.append(name)
        return len(name)


class Plain:
    def __init__(self, v):
        self.v = v


class Empty:
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)


class Flagged:
    def __init__(self, ok):
        self.ok = ok

    def __bool__(self):
        return self.ok




class Shape2:
    def __init__(self, w, h):
        self.w = w
        self.h = h

    @classmethod
    def square(cls, s):
        return cls(s, s)

    def area(self):
        return self.w * self.h


class Shape3(Shape2):
    def __init__(self, w, h, d=1):
        super().__init__(w, h)
        self.d = d

    def area(self):
        return super().area() * self.d


class A0:
    def f(self, x, *, k=1):
        return x + k


class A1(A0):
    def f(self, x, *, k=1):
        return super().f(x, k=k * 2) * 2


class A2(A1):
    def f(self, x, *, k=1):
        return super().f(x, k=k + 1) - 1


class Stats:
    def __init__(self, t):
        self.t = t
        self.computed = 0

    @functools.cached_property
    def mean(self):
        self.computed += 1
        return self.t.mean()


class AppError(Exception):
    pass


class ConfigError(AppError):
    def __init__(self, key):
        super().__init__(f"bad key {key}")
        self.key = key


class Recorder:
    def __init__(self, name, log):
        self.name = name
        self.log = log

    def __enter__(self):
        self.log.append("enter " + self.name)
        return self.name

    def __exit__(self, *exc):
        self.log.append("exit " + self.name)
        return False


@contextlib.contextmanager
def _guarded(log):
    log.append("start")
    try:
        yield len(log)
    except ValueError:
        log.append("handled")
    finally:
        log.append("end")


def _counting_gen(log):
    total = 0
    while True:
        got = yield total
        if got is None:
            return total
        log.append(got)
        total = total + got


def _inner_gen(n):
    for i in range(n):
        yield i
    return n * 10


def _outer_gen(n):
    r = yield from _inner_gen(n)
    yield r


# ---- lazy iterators (5)  -------------------------------------------------------------------------------------

def test_map_lazy_side_effects_partly_consumed():
    def fn(x):
        log = []

        def f(v):
            log.append(v)
            return x * v

        m = map(f, [1, 2, 3, 4])
        first = next(m)
        after_first = list(log)
        second = next(m)
        rest = list(m)
        return first + second, len(rest), after_first, log

    check(fn, _t(3), graphs=1, breaks=0)


def test_zip_partly_consumed_then_loop():
    def fn(x):
        a = iter([x, x + 1, x + 2, x + 3])
        z = zip(a, range(10))
        t0, i0 = next(z)
        acc = t0 * i0
        for t, i in z:
            acc = acc + t * i
        return acc, list(a)

    check(fn, _t(3), graphs=1, breaks=0)


def test_filter_lazy_predicate_counts_calls():
    def fn(x):
        calls = 0

        def pred(v):
            nonlocal calls
            calls += 1
            return v % 3 == 0

        f = filter(pred, range(1, 20))
        a = next(f)
        b = next(f)
        return x * (a + b), calls

    check(fn, _t(3), graphs=1, breaks=0)


def test_shared_iterator_zip_with_itself():
    def fn(x):
        it = iter([x, x * 2, x * 3, x * 4, x * 5])
        head = next(it)
        pairs = list(zip(it, it))
        return head, [a - b for a, b in pairs], len(pairs)

    check(fn, _t(2), graphs=1, breaks=0)


def test_map_two_iterables_side_effect_order():
    def fn(xs):
        order = []

        def mul(a, k):
            order.append(k)
            return a * k

        m = map(mul, xs, itertools.count(1))
        out = [next(m), next(m)]
        order.append("mid")
        out.extend(m)
        return out, order

    check(fn, [_t(2, seed=i) for i in range(4)], graphs=1, breaks=0)




# ---- dict views (3) ------------------------------------------------------------------------------------------

def test_dict_values_view_sees_later_update():
    def fn(x):
        d = {"a": x}
        vals = d.values()
        d["b"] = x * 2
        d["a"] = x - 1
        return sum(vals), len(vals)

    check(fn, _t(3), graphs=1, breaks=0)


def test_dict_items_view_membership_after_insert():
    def fn(x):
        d = {"a": 1}
        items = d.items()
        d["b"] = 2
        ok = ("b", 2) in items
        missing = ("b", 3) in items
        return x * len(items), ok, missing, list(items)

    check(fn, _t(3), graphs=1, breaks=0)


def test_dict_keys_view_set_ops_after_pop():
    def fn(x):
        d = {"a": 1, "b": 2, "c": 3}
        keys = d.keys()
        d.pop("b")
        d["z"] = 4
        inter = keys & {"a", "z", "q"}
        diff = keys - {"a"}
        return x + len(inter), sorted(inter), sorted(diff), keys.isdisjoint({"b"})

    check(fn, _t(3), graphs=1, breaks=0)  # Dynamo: 1 break(s); kiln models it exactly




# ---- dict / OrderedDict / defaultdict / Counter / deque methods (7) ----------------------------------------

def test_dict_fromkeys_copy_clear():
    def fn(x):
        d = dict.fromkeys(["a", "b", "c"], 0)
        c = d.copy()
        d["a"] = 5
        c.clear()
        c["n"] = 1
        return x * d["a"] + d["b"], d, c

    check(fn, _t(3), graphs=1, breaks=0)




def test_ordereddict_equality_and_reversed():
    def fn(x):
        a = collections.OrderedDict([("x", 1), ("y", 2)])
        b = collections.OrderedDict([("y", 2), ("x", 1)])
        plain = {"y": 2, "x": 1}
        return x * len(a), a == b, a == plain, list(reversed(a)), b.popitem(last=True)

    check(fn, _t(3), graphs=1, breaks=0)


def test_defaultdict_access_creates_membership_does_not():
    def fn(x):
        d = collections.defaultdict(set)
        d["a"].add(1)
        has_b = "b" in d
        _ = d["c"]
        got = d.get("e")
        return x * len(d), has_b, sorted(d), got is None, d.default_factory is set

    check(fn, _t(3), graphs=1, breaks=0)


def test_defaultdict_nested_lambda_factory():
    def fn(xs):
        tree = collections.defaultdict(lambda: collections.defaultdict(int))
        for i, t in enumerate(xs):
            tree[i % 2][i % 3] += 1
        total = xs[0] * 0
        for outer, inner in tree.items():
            for k, n in inner.items():
                total = total + xs[k] * n * (outer + 1)
        return total, {k: dict(v) for k, v in tree.items()}

    check(fn, [_t(2, seed=i) for i in range(5)], graphs=1, breaks=0)


def test_counter_and_or_elements_total():
    def fn(x):
        a = collections.Counter(a=3, b=1, c=2)
        b = collections.Counter(a=1, b=4)
        both = a & b
        either = a | b
        elems = sorted(a.elements())
        return x * a.total(), dict(both), dict(either), elems, sorted(a.items())

    check(fn, _t(3), graphs=1, breaks=0)


def test_deque_extendleft_index_remove_count():
    def fn(x):
        d = collections.deque([1, 2, 3])
        d.extendleft([10, 20])
        pos = d.index(1)
        d.remove(2)
        d.append(3)
        n3 = d.count(3)
        d.reverse()
        return x * pos + n3, list(d), d[-1]

    check(fn, _t(3), graphs=1, breaks=0)


def test_deque_maxlen_sliding_window_of_tensors():
    def fn(xs):
        window = collections.deque(maxlen=3)
        outs = []
        for t in xs:
            window.append(t)
            outs.append(sum(window) / len(window))
        return outs, len(window)

    check(fn, [_t(2, seed=i) for i in range(5)], graphs=1, breaks=0)


# ---- dict.update forms (3) -----------------------------------------------------------------------------------

def test_dict_update_with_pairs_list_and_kwargs():
    def fn(x):
        d = {"a": 1}
        d.update([("b", 2), ("c", 3)])
        d.update(c=30, d=4)
        d.update({"a": 10}, e=5)
        return x * d["a"] + d["c"], list(d.items())

    check(fn, _t(3), graphs=1, breaks=0)


def test_dict_update_with_zip_and_generator():
    def fn(x):
        d = {}
        d.update(zip("abc", (x, x * 2, x * 3)))
        d.update((k + k, v + 1) for k, v in list(d.items()))
        return sorted(d), d["bb"] - d["a"]

    check(fn, _t(3), graphs=1, breaks=0)


def test_dict_constructor_mapping_plus_kwargs_and_ior():
    def fn(x):
        base = {"w": 1.0, "b": 0.0}
        d = dict(base, b=2.0, extra=3)
        d |= [("w", 4.0)]
        merged = {**base, **d, "z": 9}
        return x * d["w"] + d["b"], list(d), list(merged), base

    check(fn, _t(3), graphs=1, breaks=0)


# ---- sets / frozensets (4) ----------------------------------------------------------------------------------

def test_set_inplace_update_methods():
    def fn(x):
        s = {1, 2, 3, 4}
        s.update([5, 6], (7,))
        s.intersection_update(range(2, 7))
        s.difference_update({3})
        s.symmetric_difference_update({6, 8})
        return x * len(s), sorted(s)

    check(fn, _t(3), graphs=1, breaks=0)


def test_set_predicates_subset_disjoint():
    def fn(x):
        a = {1, 2}
        b = {1, 2, 3}
        out = x
        if a.issubset(b) and b.issuperset(a) and a < b:
            out = out + 1
        if a.isdisjoint({9}) and not a.isdisjoint(b):
            out = out * 3
        return out, a <= a, a < a, sorted(a.symmetric_difference(b))

    check(fn, _t(3), graphs=1, breaks=0)


def test_frozenset_ops_keep_type_and_hash():
    def fn(x):
        f = frozenset({1, 2})
        u = f | {3}
        i = {2, 3} & f
        same = hash(frozenset([2, 1])) == hash(f)
        return x * len(u), type(u).__name__, type(i).__name__, same, f == {1, 2}

    check(fn, _t(3), graphs=1, breaks=0)


def test_set_of_tensor_shapes_dedup():
    def fn(xs):
        shapes = {tuple(t.shape) for t in xs}
        dims = {t.dim() for t in xs}
        out = [t.sum() for t in xs if tuple(t.shape) in shapes]
        return sorted(shapes), dims, sum(out)

    check(fn, [_t(2, 3), _t(3, seed=1), _t(2, 3, seed=2)], graphs=1, breaks=0)




# ---- itertools (14) -----------------------------------------------------------------------------------------

def test_itertools_product_three_iterables_weights():
    def fn(x):
        acc = x * 0
        for a, b, c in itertools.product([1, 2], (0, 1), range(2)):
            acc = acc + x * (a * 4 + b * 2 + c)
        return acc, len(list(itertools.product("ab", repeat=3)))

    check(fn, _t(3), graphs=1, breaks=0)


def test_itertools_permutations_r2_over_tensors():
    def fn(a, b, c):
        out = [p - q for p, q in itertools.permutations([a, b, c], 2)]
        return torch.stack(out).sum(0), len(out)

    check(fn, _t(3), _t(3, seed=1), _t(3, seed=2), graphs=1, breaks=0)


def test_itertools_combinations_with_replacement_pairs():
    def fn(x):
        pairs = list(itertools.combinations_with_replacement(range(3), 2))
        combos = list(itertools.combinations("abcd", 3))
        return x * sum(i * j for i, j in pairs), pairs, len(combos)

    check(fn, _t(3), graphs=1, breaks=0)  # Dynamo: 2 break(s); kiln models it exactly


def test_itertools_chain_from_iterable_of_generator():
    def fn(x):
        nested = ([x * i] * i for i in range(1, 4))
        flat = list(itertools.chain.from_iterable(nested))
        mixed = list(itertools.chain([1], (2, 3), range(4, 6)))
        return sum(flat), len(flat), mixed

    check(fn, _t(3), graphs=1, breaks=0)


def test_itertools_pairwise_over_tensor_list():
    def fn(xs):
        diffs = [b - a for a, b in itertools.pairwise(xs)]
        letters = list(itertools.pairwise("abc"))
        return diffs, letters

    check(fn, [_t(3, seed=i) for i in range(4)], graphs=1, breaks=0)


def test_itertools_accumulate_max_and_initial():
    def fn(x):
        run_max = list(itertools.accumulate([3, 1, 4, 1, 5], max))
        with_init = list(itertools.accumulate([1, 2, 3], initial=100))
        prods = list(itertools.accumulate([x, x, x], operator.mul))
        return run_max, with_init, prods[-1]

    check(fn, _t(3), graphs=1, breaks=0)


def test_itertools_groupby_key_lambda_groups_consumed():
    def fn(x):
        words = ["apple", "avocado", "banana", "blueberry", "cherry", "apricot"]
        groups = []
        for key, grp in itertools.groupby(words, key=lambda w: w[0]):
            groups.append((key, len(list(grp))))
        return x * len(groups), groups

    check(fn, _t(3), graphs=1, breaks=0)


def test_itertools_islice_start_stop_step_of_generator():
    def fn(x):
        gen = (x * i for i in range(10))
        picked = list(itertools.islice(gen, 1, 8, 3))
        rest = next(gen)
        return picked, rest

    check(fn, _t(3), graphs=1, breaks=0)


def test_itertools_starmap_takewhile_dropwhile_on_ints():
    def fn(x):
        powers = list(itertools.starmap(pow, [(2, 3), (3, 2), (10, 0)]))
        small = list(itertools.takewhile(lambda v: v < 5, [1, 3, 6, 2]))
        tail = list(itertools.dropwhile(lambda v: v < 5, [1, 3, 6, 2]))
        return x * sum(powers), small, tail

    check(fn, _t(3), graphs=1, breaks=0)


def test_itertools_filterfalse_and_zip_longest_tensors():
    def fn(a, b):
        odd = list(itertools.filterfalse(lambda v: v % 2 == 0, range(7)))
        zl = list(itertools.zip_longest([a, b], [b], fillvalue=None))
        out = [p + (q if q is not None else 1) for p, q in zl]
        return odd, out

    check(fn, _t(3), _t(3, seed=1), graphs=1, breaks=0)


def test_itertools_count_float_step_cycle_repeat():
    def fn(x):
        c = itertools.count(0.5, 0.25)
        steps = [next(c) for _ in range(3)]
        cyc = itertools.cycle([x, -x])
        alt = [next(cyc) for _ in range(3)]
        reps = list(itertools.repeat(2, 3))
        return steps, sum(alt), reps

    check(fn, _t(3), graphs=1, breaks=0)


def test_itertools_tee_consumers_at_different_rates():
    def fn(x):
        src = (x * i for i in range(4))
        a, b = itertools.tee(src, 2)
        first_a = next(a)
        all_b = list(b)
        rest_a = list(a)
        return first_a, len(all_b), len(rest_a), all_b[-1] - rest_a[0]

    check(fn, _t(3), graphs=1, breaks=0)


def test_itertools_compress_selectors_from_shape():
    def fn(x):
        sel = [d > 2 for d in x.shape]
        kept = list(itertools.compress(range(x.dim()), sel))
        return x.sum(dim=kept), kept

    check(fn, _t(2, 3, 4), graphs=1, breaks=0)


def test_itertools_batched_recipe_via_islice():
    # itertools.batched is 3.12+; this Python is 3.11, so the islice recipe
    def batched(iterable, n):
        it = iter(iterable)
        while batch := tuple(itertools.islice(it, n)):
            yield batch

    def fn(xs):
        return [torch.stack(b).mean(0) for b in batched(xs, 2)], [len(b) for b in batched(range(5), 2)]

    check(fn, [_t(3, seed=i) for i in range(5)], graphs=1, breaks=0)


# ---- functools (6) ------------------------------------------------------------------------------------------

def test_functools_reduce_building_dict():
    def fn(x):
        pairs = [("a", 1), ("b", 2), ("a", 3)]
        d = functools.reduce(lambda acc, kv: {**acc, kv[0]: acc.get(kv[0], 0) + kv[1]}, pairs, {})
        return x * d["a"], d

    check(fn, _t(3), graphs=1, breaks=0)


@dynamo_bug("a partial of a partial is not flattened: p2.args[0] is the 2, not x (eager: args (x, 2), func f)")
def test_partial_of_partial_attributes_merge():
    def fn(x):
        def f(a, b, c=0, d=0):
            return a * b + c - d

        p1 = functools.partial(f, x, c=1)
        p2 = functools.partial(p1, 2, d=3)
        return p2(), p2(c=5), p2.args[0] is x, p2.keywords, p2.func is f

    check(fn, _t(3), graphs=1, breaks=0)


def test_lru_cache_tuple_result_drives_split():
    def fn(x):
        sizes = _split_sizes(x.shape[0], 3)
        parts = torch.split(x, list(sizes))
        return [p.sum() for p in parts], sizes

    check(fn, _t(7), graphs=1, breaks=0)


def test_functools_wraps_wrapped_attribute():
    def fn(x):
        def deco(f):
            @functools.wraps(f)
            def wrapper(t):
                return f(t) + 1

            return wrapper

        def square(t):
            """Squares."""
            return t * t

        w = deco(square)
        return w(x), w.__name__, w.__doc__, w.__wrapped__(x)

    check(fn, _t(3), graphs=1, breaks=0)


def test_cached_property_computed_once():
    def fn(x):
        s = Stats(x)
        a = s.mean
        b = s.mean
        return x - a + b, s.computed

    # Dynamo runs the frame eagerly: Python 3.11's cached_property.__get__ enters an RLock it cannot trace.
    check(fn, _t(3), graphs=1, dynamo_graphs=0, breaks=0)  # kiln captures it; Dynamo runs the frame eagerly


def test_singledispatch_on_python_types():
    def fn(x):
        kinds = [_describe(3), _describe("s"), _describe(2.5)]
        return x * len(kinds), kinds

    check(fn, _t(3), graphs=1, breaks=3)


# ---- namedtuples (4) ----------------------------------------------------------------------------------------

def test_namedtuple_subclass_property_and_method():
    def fn(x):
        b = Box(x, x + 2)
        s = b.scale(3)
        return s.width, b.width.sum(), isinstance(s, Box), s._fields

    check(fn, _t(3), graphs=1, breaks=0)


def test_namedtuple_make_defaults_and_fields():
    def fn(x):
        s = Span(1)
        t = Span(2, 5)
        u = t._replace(stop=7)
        return x * u.stop + s.start, s.stop is None, Span._field_defaults, u._asdict()

    check(fn, _t(3), graphs=1, breaks=0)


def test_namedtuple_index_count_and_unpack():
    def fn(x):
        p = Span(3, 3)
        a, b = p
        return x * (a + b), p.count(3), p.index(3), p[-1], p + (1,), p == (3, 3)

    check(fn, _t(3), graphs=1, breaks=0)


def test_typing_namedtuple_class_attribute_and_replace():
    def fn(x):
        t = Tagged(x)
        d = t.doubled()
        return d.value, d.tag, Tagged.KIND, t.KIND, len(d)

    check(fn, _t(3), graphs=1, breaks=0)


# ---- dataclasses (5) ----------------------------------------------------------------------------------------

def test_dataclass_init_false_field_and_default_factory():
    def fn(x):
        h = Hyper(lr=0.5)
        h.tags.append("t")
        h.cache["k"] = x.sum()
        h2 = Hyper()
        return x * h.lr * h.steps, h.tags, h2.tags, h.cache["k"], len(h2.cache)

    check(fn, _t(3), graphs=1, breaks=0)


def test_dataclass_post_init_uses_tensor_shape():
    def fn(x):
        a = Affine(x, b=1.0)
        return a.w / a.norm + a.b, a.norm

    check(fn, _t(4), graphs=1, breaks=0)


def test_frozen_dataclass_assignment_raises():
    def fn(x):
        f = Frozen(1)
        try:
            f.a = 5
            blocked = False
        except dataclasses.FrozenInstanceError:
            blocked = True
        return x * f.a + f.b, blocked, hash(f) == hash(Frozen(1, 2))

    check(fn, _t(3), graphs=1, breaks=0)


def test_dataclass_replace_astuple_fields():
    def fn(x):
        f = Frozen(3)
        g = dataclasses.replace(f, b=7)
        names = [fl.name for fl in dataclasses.fields(g)]
        return x * sum(dataclasses.astuple(g)), names, dataclasses.asdict(g), f == Frozen(3, 2)

    check(fn, _t(3), graphs=1, breaks=0)


def test_dataclass_order_comparison_ignores_compare_false():
    def fn(x):
        a = Rank(3, "a")
        b = Rank(5, "b")
        c = Rank(3, "c")
        best = max([a, b, c])
        return x * best.score, a < b, a == c, sorted([b, a]) == [a, b]

    check(fn, _t(3), graphs=1, breaks=1)  # Dynamo: 2 break(s); kiln models it exactly


# ---- user classes (6) ---------------------------------------------------------------------------------------

def test_user_class_setitem_getitem_contains():
    def fn(x):
        g = Grid(4)
        g[1] = 5
        g[-1] = 2
        return x * g[1] + len(g), 5 in g, 3 in g, g.cells

    check(fn, _t(3), graphs=1, breaks=0)


def test_user_class_getattr_fallback_only_for_missing():
    def fn(x):
        o = Lazy()
        a = o.real
        b = o.abcd
        c = getattr(o, "xy")
        return x * (a + b + c), o.looked_up, hasattr(o, "anything")

    check(fn, _t(3), graphs=1, breaks=0)


def test_user_class_default_eq_is_identity():
    def fn(x):
        p = Plain(1)
        q = Plain(1)
        r = p
        out = x
        if p == q:
            out = out + 100
        if p == r and p != q:
            out = out + 1
        return out, p in [q], p in [q, r], [p, q].index(r)

    check(fn, _t(3), graphs=1, breaks=0)


def test_user_class_truthiness_len_and_bool():
    def fn(x):
        out = x
        if Empty([]):
            out = out + 100
        if Empty([1]):
            out = out + 1
        if Flagged(False) or not Flagged(True):
            out = out * 100
        return out, bool(Empty([])), bool(Flagged(True))

    check(fn, _t(3), graphs=1, breaks=0)




def test_classmethod_constructor_on_subclass_and_super():
    def fn(x):
        s = Shape3.square(2)
        t = Shape2.square(3)
        return x * s.area() + t.area(), type(s).__name__, s.d, isinstance(s, Shape2)

    check(fn, _t(3), graphs=1, breaks=0)


def test_super_chain_with_keyword_only_args():
    def fn(x):
        return A2().f(x, k=3), A1().f(x), A0().f(x, k=0)

    check(fn, _t(3), graphs=1, breaks=0)


# ---- closures and nonlocal (4) ------------------------------------------------------------------------------

def test_nonlocal_rebind_vs_mutate_list():
    def fn(x):
        items = []
        bound = []

        def add(v):
            items.append(v)

        def rebind(v):
            nonlocal bound
            bound = bound + [v]

        add(x)
        rebind(x * 2)
        rebind(x * 3)
        return len(items), len(bound), bound[-1] - items[0]

    check(fn, _t(3), graphs=1, breaks=0)


def test_two_closures_share_one_cell():
    def fn(x):
        count = 0

        def inc():
            nonlocal count
            count += 1

        def get():
            return count

        inc()
        inc()
        v = get()
        inc()
        return x * v, get()

    check(fn, _t(3), graphs=1, breaks=0)


def test_closure_factory_in_loop_captures_each_value():
    def fn(x):
        def make(k):
            def f(t):
                return t * k

            return f

        fs = [make(k) for k in range(1, 4)]
        late = [lambda t: t * k for k in range(1, 4)]
        return [f(x) for f in fs], [g(x) for g in late]

    check(fn, _t(3), graphs=1, breaks=0)


def test_closure_over_tensor_modified_after_definition():
    def fn(x):
        scale = x

        def apply(t):
            return t * scale

        first = apply(x)
        scale = x + 1
        second = apply(x)
        return first, second

    check(fn, _t(3), graphs=1, breaks=0)


# ---- generators (4) -----------------------------------------------------------------------------------------

def test_generator_send_running_sum_with_log():
    def fn(x):
        log = []
        g = _counting_gen(log)
        next(g)
        a = g.send(2)
        b = g.send(3)
        try:
            g.send(None)
            final = -1
        except StopIteration as e:
            final = e.value
        return x * a + b, final, log

    check(fn, _t(3), graphs=1, breaks=0)


@dynamo_bug("the value of `yield from` (the subgenerator's return) is None, so x * None raises")
def test_yield_from_return_value_forwarded():
    def fn(x):
        vals = list(_outer_gen(3))
        return x * vals[-1], vals

    check(fn, _t(3), graphs=1, breaks=0)


def test_generator_partly_consumed_then_for_loop():
    def fn(xs):
        def gen():
            for i, t in enumerate(xs):
                yield t * i

        g = gen()
        first = next(g)
        second = next(g)
        rest = [t for t in g]
        return first + second, len(rest), rest[-1]

    check(fn, [_t(2, seed=i) for i in range(5)], graphs=1, breaks=0)


def test_genexp_partly_consumed_by_next_and_sum():
    def fn(x):
        seen = []
        gen = (seen.append(i) or x * i for i in range(5))
        a = next(gen)
        b = next(gen)
        total = sum(gen)
        return a + b, total, seen

    check(fn, _t(3), graphs=1, breaks=0)




# ---- context managers (5) -----------------------------------------------------------------------------------

def test_contextmanager_handles_exception_inside():
    def fn(x):
        log = []
        with _guarded(log) as n:
            y = x * n
            raise ValueError("boom")
        return y, log

    check(fn, _t(3), graphs=1, breaks=0)


def test_exitstack_enter_context_and_callbacks_lifo():
    def fn(x):
        log = []
        with contextlib.ExitStack() as stack:
            a = stack.enter_context(Recorder("a", log))
            stack.callback(log.append, "cb")
            b = stack.enter_context(Recorder("b", log))
            y = x * len(a + b)
        return y, log

    check(fn, _t(3), graphs=1, breaks=0)


def test_suppress_multiple_exception_types():
    def fn(x):
        d = {}
        lst = []
        out = x
        with contextlib.suppress(KeyError, IndexError):
            out = out + d["missing"]
        with contextlib.suppress(KeyError, IndexError):
            out = out + lst[3]
        with contextlib.suppress(KeyError):
            out = out * 2
        return out

    check(fn, _t(3), graphs=1, breaks=0)


def test_nullcontext_enter_result_and_conditional_cm():
    def fn(x, use_no_grad):
        cm = torch.no_grad() if use_no_grad else contextlib.nullcontext(x)
        with cm as v:
            y = x * 2
        return y, v is x

    check(fn, _t(3), False, graphs=1, breaks=0)


def test_nested_user_cms_order_and_exception_propagation():
    def fn(x):
        log = []
        try:
            with Recorder("outer", log):
                with Recorder("inner", log) as name:
                    y = x + len(name)
                    raise KeyError(name)
        except KeyError as e:
            log.append("caught " + e.args[0])
        return y, log

    check(fn, _t(3), graphs=1, breaks=0)


# ---- exceptions (5) -----------------------------------------------------------------------------------------

def test_try_except_else_finally_both_paths():
    def fn(x, key):
        log = []
        d = {"a": 1}
        try:
            v = d[key]
        except KeyError:
            v = -1
            log.append("except")
        else:
            log.append("else")
        finally:
            log.append("finally")
        return x * v, log

    check(fn, _t(3), "a", graphs=1, breaks=0)
    check(fn, _t(3), "b", graphs=1, breaks=0)


def test_raise_from_none_suppresses_context():
    def fn(x):
        try:
            try:
                {}["k"]
            except KeyError:
                raise ValueError("clean") from None
        except ValueError as e:
            info = (e.__cause__ is None, e.__suppress_context__, type(e.__context__).__name__)
        return x + 1, info

    check(fn, _t(3), graphs=1, breaks=0)


def test_custom_exception_hierarchy_caught_by_base():
    def fn(x):
        try:
            raise ConfigError("lr")
        except AppError as e:
            return x * len(e.key), str(e), isinstance(e, ConfigError), e.args

    # Dynamo runs the frame eagerly: super().__init__ of an Exception subclass is not traceable.
    check(fn, _t(3), graphs=1, dynamo_graphs=0, breaks=0)  # kiln captures it; Dynamo runs the frame eagerly




def test_nested_finally_order_with_return():
    def fn(x):
        log = []

        def inner(t):
            try:
                try:
                    return t * 2
                finally:
                    log.append("inner")
            finally:
                log.append("outer")

        y = inner(x)
        return y, log

    check(fn, _t(3), graphs=1, breaks=0)


def test_exception_raised_in_helper_reraised_with_bare_raise():
    def fn(x):
        log = []

        def helper(t):
            try:
                raise IndexError("idx")
            except IndexError:
                log.append("helper")
                raise

        try:
            helper(x)
        except LookupError as e:
            log.append(str(e))
        return x - 1, log

    check(fn, _t(3), graphs=1, breaks=0)


# ---- match statements (4) -----------------------------------------------------------------------------------

def test_match_sequence_star_capture():
    def fn(x, spec):
        match spec:
            case [first, *middle, last] if len(middle) > 1:
                return x * first + last, middle
            case [only]:
                return x * only, []
            case [a, b]:
                return x * a - b, [a, b]
            case _:
                return x, None

    check(fn, _t(3), [1, 2, 3, 4], graphs=1, breaks=0)
    check(fn, _t(3), [5], graphs=1, breaks=0)
    check(fn, _t(3), [2, 3], graphs=1, breaks=0)


def test_match_mapping_with_rest_capture():
    def fn(x, cfg):
        match cfg:
            case {"kind": "lin", "k": k, **rest}:
                return x * k, sorted(rest)
            case {"kind": other}:
                return x + 1, [other]

    check(fn, _t(3), {"kind": "lin", "k": 2, "a": 1, "b": 0}, graphs=1, breaks=0)
    check(fn, _t(3), {"kind": "id"}, graphs=1, breaks=0)


def test_match_class_positional_patterns_with_guard():
    def fn(x, p):
        match p:
            case Pt(0, y):
                return x + y
            case Pt(px, py) if px == py:
                return x * px
            case Pt(x=px):
                return x - px

    check(fn, _t(3), Pt(0, 4), graphs=1, breaks=0)
    check(fn, _t(3), Pt(2, 2), graphs=1, breaks=0)
    check(fn, _t(3), Pt(5, 1), graphs=1, breaks=0)


def test_match_or_pattern_as_and_literal_types():
    def fn(x, v):
        match v:
            case 1 | 2 as small:
                return x * small
            case str() as s:
                return x * len(s)
            case (int(a), float(b)):
                return x * a + b
            case None:
                return -x

    check(fn, _t(3), 2, graphs=1, breaks=0)
    check(fn, _t(3), "abc", graphs=1, breaks=0)
    check(fn, _t(3), (3, 0.5), graphs=1, breaks=0)
    check(fn, _t(3), None, graphs=1, breaks=0)


# ---- tensor attributes and methods (5) ----------------------------------------------------------------------

def test_tensor_stride_contiguity_after_transpose():
    def fn(x):
        t = x.transpose(0, 1)
        c = t.contiguous()
        return t.stride(), t.is_contiguous(), c.stride(), c.is_contiguous(), c + 1, x.stride(-1)

    check(fn, _t(2, 3), graphs=1, breaks=0)


def test_torch_size_concat_repeat_and_slices():
    def fn(x):
        s = x.shape
        doubled = s + s
        rep = s * 2
        return x.reshape(s[::-1]), doubled, rep == doubled, s[1:], type(s[1:]).__name__, s.count(3)

    check(fn, _t(2, 3), graphs=1, breaks=0)


def test_tensor_new_full_new_empty_new_tensor():
    def fn(x):
        a = x.new_full((2,), 7.0)
        e = x.new_empty((3, 2))
        t = x.new_tensor([1.0, 2.0])
        o = x.new_ones(x.shape[0], dtype=torch.int64)
        return a, e.shape, e.dtype, t * 2, o, o.dtype

    check(fn, _t(4), graphs=1, breaks=0)


def test_tensor_dtype_properties_and_element_size():
    def fn(x):
        h = x.to(torch.float16)
        i = x.to(torch.int32)
        return (h.float() + i, x.dtype.is_floating_point, i.dtype.is_floating_point, h.element_size(),
                x.dtype.itemsize, torch.is_floating_point(i))

    check(fn, _t(3), graphs=1, breaks=0)




def test_tensor_device_type_layout_and_requires_grad():
    def fn(x):
        out = x * 2
        if x.device.type == "cpu" and x.layout == torch.strided:
            out = out + 1
        return out, x.is_cuda, x.requires_grad, x.is_leaf, str(x.device), x.device.index

    check(fn, _t(3), graphs=1, breaks=0)


# ---- NumPy inside the compiled function (5) -----------------------------------------------------------------

def test_numpy_ops_returns_ndarray():
    def fn(a):
        b = np.clip(a * 2.0 - 1.0, -1.5, 1.5)
        return np.maximum(b, 0.0) + np.mean(a)

    check(fn, np.linspace(-1.0, 1.0, 6).astype(np.float32), graphs=1, breaks=0)


def test_numpy_cumsum_argmax_astype():
    def fn(a):
        c = np.cumsum(a, axis=1)
        idx = c.argmax(axis=0)
        return c.astype(np.float64), idx, c.sum(axis=1, keepdims=True)

    check(fn, np.arange(12, dtype=np.int64).reshape(3, 4), graphs=1, breaks=0)


@dynamo_bug("np.dot of two 1-d arrays returns a 0-d ndarray, not np.float32")
def test_numpy_stack_concatenate_transpose():
    def fn(a, b):
        s = np.stack([a, b], axis=0)
        c = np.concatenate([a, b])
        return s.T, c.reshape(2, -1), np.dot(a, b)

    check(fn, np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32), graphs=1, breaks=0)


@dynamo_bug("int64 array / 2 gives float32 (torch's default dtype), NumPy gives float64")
def test_numpy_dtype_promotion_int_division():
    def fn(a):
        half = a / 2
        floor = a // 2
        return half, floor, half.dtype == np.float64, (a * 1.5).dtype == np.float64

    check(fn, np.arange(5, dtype=np.int64), graphs=1, breaks=0)


def test_tensor_numpy_then_numpy_math_back_to_tensor():
    def fn(x):
        a = x.numpy()
        b = np.exp(a) - np.tanh(a)
        return torch.from_numpy(b) * 2, b.shape

    check(fn, _t(2, 3), graphs=1, breaks=0)


# ---- nn.Modules (6) -----------------------------------------------------------------------------------------

class _HeadSum(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(3, 2), "b": nn.Linear(3, 2), "c": nn.Linear(3, 2)})

    def forward(self, x):
        outs = [h(x) for h in self.heads.values()]
        keys = list(self.heads.keys())
        return sum(outs), keys, "b" in self.heads, len(self.heads)


def test_moduledict_values_keys_contains():
    torch.manual_seed(0)
    check(_HeadSum(), _t(2, 3), graphs=1, breaks=0)


class _MixedSeq(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh())

    def forward(self, x):
        kinds = []
        for m in self.seq:
            if isinstance(m, nn.Linear):
                x = m(x) + 0.1
                kinds.append("lin")
            else:
                x = m(x)
                kinds.append(type(m).__name__)
        return x, kinds


def test_sequential_iteration_isinstance_dispatch():
    torch.manual_seed(0)
    check(_MixedSeq(), _t(2, 4), graphs=1, breaks=0)


def _double_input_hook(module, args):
    return (args[0] * 2,)


class _Hooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.lin.register_forward_pre_hook(_double_input_hook)

    def forward(self, x):
        return self.lin(x) - x


def test_forward_pre_hook_rewrites_input():
    torch.manual_seed(0)
    check(_Hooked(), _t(2, 3), graphs=1, breaks=0)


class _Buffered(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.full((3,), 2.0))
        self.register_buffer("step", torch.zeros(()), persistent=False)
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x):
        names = [n for n, _ in self.named_buffers()]
        nparams = sum(p.numel() for p in self.parameters())
        return x * self.scale * self.w + nparams, names


def test_named_buffers_and_parameters_count():
    check(_Buffered(), _t(3), graphs=1, breaks=0)


class _Tree(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
        self.dec = nn.ModuleList([nn.Linear(3, 3)])

    def forward(self, x):
        names = []
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear):
                names.append(name)
                x = m(x)
        return x, names


def test_named_modules_linear_filter_prefixes():
    torch.manual_seed(0)
    check(_Tree(), _t(2, 3), graphs=1, breaks=0)


class _TrainFlag(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        y = self.drop(self.lin(x))
        if self.training:
            y = y * 0
        return y, self.training, self.drop.training


def test_eval_mode_training_flags_and_dropout():
    torch.manual_seed(0)
    m = _TrainFlag().eval()
    check(m, _t(2, 3), graphs=1, breaks=0)


# ---- builtins (5) -------------------------------------------------------------------------------------------

def test_sorted_key_reverse_stability():
    def fn(x):
        recs = [("b", 2), ("a", 2), ("c", 1), ("d", 3)]
        by_val = sorted(recs, key=lambda r: r[1])
        by_val_rev = sorted(recs, key=lambda r: r[1], reverse=True)
        return x * by_val[0][1], [r[0] for r in by_val], [r[0] for r in by_val_rev]

    check(fn, _t(3), graphs=1, breaks=0)


def test_min_max_key_default_on_tensors():
    def fn(a, b, c):
        big = max([a, b, c], key=lambda t: t.shape[0])
        small = min((a, b, c), key=len)
        none = max([], default=None)
        return big * 2, small + 1, none, min(3, 1, 2), max("abc")

    check(fn, _t(2), _t(4, seed=1), _t(3, seed=2), graphs=1, breaks=0)  # Dynamo: 2 break(s); kiln models it exactly


def test_zip_strict_equal_lengths_and_enumerate_start():
    def fn(xs, ws):
        out = [t * w for t, w in zip(xs, ws, strict=True)]
        idx = [i for i, _ in enumerate(xs, start=10)]
        return sum(out), idx

    check(fn, [_t(2, seed=i) for i in range(3)], [1.0, 2.0, 3.0], graphs=1, breaks=0)


def test_any_all_isinstance_over_mixed():
    def fn(x, items):
        has_tensor = any(isinstance(v, torch.Tensor) for v in items)
        all_num = all(isinstance(v, (int, float)) for v in items if not isinstance(v, torch.Tensor))
        scal = sum(v for v in items if isinstance(v, (int, float)))
        return x * scal, has_tensor, all_num, any([]), all([])

    check(fn, _t(3), [1, 2.5, _t(3, seed=1)], graphs=1, breaks=0)


def test_getattr_hasattr_type_id_identity():
    def fn(x):
        p = Plain(3)
        same = id(p) == id(p)
        diff = id(p) != id(Plain(3))
        t = type(p)
        q = t(4)
        return x * getattr(q, "v") + getattr(p, "missing", 1), hasattr(p, "v"), same, diff, t is Plain

    check(fn, _t(3), graphs=1, breaks=0)

