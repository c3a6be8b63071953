"""A seventh batch of fresh, black-box Dynamo-style cases (written without reading kiln's capture code):
ordinary Python mixed with tensor code, in the style of TorchDynamo's own tests (test_misc, test_functions,
test_list, test_dicts, test_sets, test_iter, test_generators, test_itertools, test_functools,
test_ctx_manager, test_exceptions, test_modules, test_repros).

Graph and break counts are TorchDynamo's on torch 2.13 (``KILN_CORPUS_ENGINE=dynamo``; breaks from
``torch._dynamo.utils.counters["graph_break"]`` after one compiled call: ``explain`` misses breaks taken
before the first graph op or after the last). Cases kiln does not pass yet are marked ``kiln_gap`` (xfail
under kiln only); ``dynamo_bug`` marks the 4 cases TorchDynamo itself gets wrong (kiln must pass them).

First run under kiln (2026-11-27, as written, before any triage): 96 of 100 passed (same results, same graph
and break counts as TorchDynamo). The 4 others all capture MORE than TorchDynamo, with correct results: 1
with fewer graphs (sorted() of dict items whose values are tensors: kiln 1 graph, Dynamo 2) and 3 with fewer
breaks (deque.rotate, sorted() of defaultdict items, a walrus in a comprehension: kiln 0, Dynamo 1). No wrong
result, no crash, no extra break or graph, no frame run wholly eagerly. kiln also passes the 4 dynamo_bug
cases (tensor membership by identity, `yield from`'s value, user __eq__/__hash__ in a set, nested partials).
Triage: the 4 are exact models in kiln (deque, ordering proxies, cells made while tracing), not gaps; they now
expect kiln's counts (``dynamo_graphs=`` for the graph count; a comment gives Dynamo's break).
"""
import collections
import contextlib
import dataclasses
import enum
import functools
import itertools
import math
import operator
import typing

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

SCALE = 3
_STATE = {"calls": 0}
_COUNTER = 0
ACTS = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}


@functools.lru_cache(maxsize=None)
def _cached_width(n):
    return n * 2 + 1


def _fib(n):
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


class Color(enum.Enum):
    RED = 1
    GREEN = 2
    BLUE = 3


class Mode(enum.IntEnum):
    TRAIN = 0
    EVAL = 1


Point = collections.namedtuple("Point", ["x", "y"])


class Pair(typing.NamedTuple):
    left: torch.Tensor
    right: torch.Tensor
    tag: int = 0


@dataclasses.dataclass
class Config:
    hidden: int = 4
    scale: float = 2.0
    names: list = dataclasses.field(default_factory=lambda: ["a", "b"])


@dataclasses.dataclass(frozen=True)
class Key:
    name: str
    idx: int


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    loss: typing.Optional[torch.Tensor] = None


class Vec:
    def __init__(self, t):
        self.t = t

    def __add__(self, other):
        return Vec(self.t + other.t)

    def __mul__(self, k):
        return Vec(self.t * k)

    def __len__(self):
        return self.t.shape[0]


class Bag:
    def __init__(self, items):
        self.items = list(items)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def __iter__(self):
        return iter(self.items)

    def __contains__(self, x):
        return x in self.items


class Token:
    def __init__(self, name, idx):
        self.name = name
        self.idx = idx

    def __eq__(self, other):
        return isinstance(other, Token) and self.name == other.name and self.idx == other.idx

    def __hash__(self):
        return hash((self.name, self.idx))


class Scaler:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return x * self.k


class Temperature:
    def __init__(self):
        self._t = 1.0

    @property
    def t(self):
        return self._t

    @t.setter
    def t(self, value):
        self._t = max(value, 0.5)


class Base:
    def __init__(self, k):
        self.k = k

    def apply(self, x):
        return x * self.k

    def describe(self):
        return "base"


class Child(Base):
    def __init__(self, k, b):
        super().__init__(k)
        self.b = b

    def apply(self, x):
        return super().apply(x) + self.b

    def describe(self):
        return "child:" + super().describe()


class Registry:
    factor = 2

    @classmethod
    def make(cls, x):
        return x * cls.factor

    @staticmethod
    def shift(x, k):
        return x + k


class ShapeError(Exception):
    def __init__(self, msg, dim):
        self.msg = msg
        self.dim = dim


class Suppress:
    def __init__(self):
        self.entered = 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, exc_type, exc, tb):
        return exc_type is ValueError


@contextlib.contextmanager
def _scaled(log, k):
    log.append("enter")
    try:
        yield k * 2
    finally:
        log.append("exit")


def _double_output(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) * 2

    return wrapper


@_double_output
def _affine(x, w=1.0, b=0.0):
    """An affine helper."""
    return x * w + b


# ---- containers (15) ----------------------------------------------------------------------------------

def test_list_methods_mixed_with_tensors():
    def fn(x):
        lst = [1, 2, 3]
        lst.append(4)
        lst.extend([5, 6])
        lst.insert(0, 0)
        last = lst.pop()
        lst.remove(2)
        pos = lst.index(4)
        cnt = lst.count(3)
        return x * last + pos - cnt, lst

    check(fn, _t(3), graphs=1, breaks=0)


def test_tuple_slicing_negative_step_and_concat():
    def fn(x, y):
        t = (x, y, x + y, x - y)
        rev = t[::-1]
        mid = t[1:-1]
        both = rev[:2] + mid
        return sum(both), len(both)

    check(fn, _t(2), _t(2, seed=1), graphs=1, breaks=0)


def test_dict_setdefault_get_pop_merge():
    def fn(x):
        d = {"a": x}
        d.setdefault("b", x * 2)
        d.setdefault("a", x * 100)
        c = d.get("c", x + 1)
        z = d.pop("zz", None)
        e = {"e": x - 1}
        merged = d | e
        d |= {"f": x * 3}
        return merged, sorted(d), c, z is None

    check(fn, _t(3), graphs=1, breaks=0)


def test_set_algebra_on_ints():
    def fn(x):
        a = {1, 2, 3, 4}
        b = {3, 4, 5}
        u = a | b
        i = a & b
        dif = a - b
        sym = a ^ b
        a.discard(1)
        a.add(10)
        return x * len(u) + sum(i), sorted(dif), sorted(sym), sorted(a)

    check(fn, _t(3), graphs=1, breaks=0)


def test_frozenset_keys_and_membership():
    def fn(x):
        table = {frozenset({"a", "b"}): 1.0, frozenset({"c"}): 2.0}
        k = frozenset(["b", "a"])
        w = table[k]
        ok = frozenset({"c"}) in table
        sub = frozenset({"a"}) <= k
        return x * w + (1 if ok else 0) + (2 if sub else 0)

    check(fn, _t(3), graphs=1, breaks=0)


def test_deque_rotate_maxlen_appendleft():
    def fn(x):
        d = collections.deque([x, x + 1, x + 2], maxlen=4)
        d.appendleft(x - 1)
        d.append(x * 10)
        d.rotate(1)
        first = d.popleft()
        return first, d[0], len(d), d.maxlen

    # Dynamo breaks once (no deque.rotate); kiln's deque is a real deque of symbolic values (exact).
    check(fn, _t(2), graphs=1, breaks=0)


def test_defaultdict_grouping_tensors():
    def fn(xs):
        groups = collections.defaultdict(list)
        for i, t in enumerate(xs):
            groups[i % 2].append(t)
        return {k: torch.stack(v).sum(0) for k, v in sorted(groups.items())}

    # Dynamo breaks once ("sort with non-constant keys": the items' values are lists of tensors); kiln sorts
    # proxies that compare the distinct int keys first and never reach the values (exact, values/ordering.py).
    check(fn, [_t(2, seed=i) for i in range(5)], graphs=1, breaks=0)


def test_ordereddict_move_to_end_popitem():
    def fn(x):
        od = collections.OrderedDict()
        od["a"] = x
        od["b"] = x * 2
        od["c"] = x * 3
        od.move_to_end("a")
        k, v = od.popitem(last=False)
        od.move_to_end("c", last=False)
        return k, v, list(od.keys()), od["a"] - od["c"]

    check(fn, _t(3), graphs=1, breaks=0)


def test_counter_update_most_common():
    def fn(x):
        c = collections.Counter("abracadabra")
        c.update(["a", "z", "z"])
        c.subtract("r")
        total = sum(c.values())
        both = c + collections.Counter("zz")
        return x * total + c["z"], sorted(c.items()), both["z"], c["missing"]

    check(fn, _t(3), graphs=1, breaks=0)


def test_nested_comprehensions_dict_and_set():
    def fn(x):
        grid = [[i * j for j in range(3) if j != 1] for i in range(4)]
        flat = [v for row in grid for v in row if v % 2 == 0]
        sq = {i: i * i for i in range(5) if i % 2}
        s = {v % 3 for v in flat}
        return x * sum(flat) + sum(sq.values()), sorted(s), grid

    check(fn, _t(3), graphs=1, breaks=0)


@dynamo_bug("`x in [x, y]` evaluates x == y as a tensor and raises 'Boolean value of Tensor ... ambiguous'; "
            "eager stops at the identity match")
def test_tensor_membership_in_list_and_tuple_by_identity():
    def fn(x, y):
        lst = [x, y]
        tup = (y,)
        out = x.clone()
        if x in lst:
            out = out + 1
        if y in tup:
            out = out * 2
        return out

    check(fn, _t(3), _t(3, seed=1), graphs=1, breaks=0)


def test_sorted_named_tensors_by_key_and_shape():
    def fn(a, b, c):
        named = [("c", c), ("a", a), ("b", b)]
        by_name = sorted(named, key=lambda p: p[0])
        by_len = sorted([a, b, c], key=lambda t: t.shape[0], reverse=True)
        return [t * 2 for _, t in by_name], [t.shape[0] for t in by_len], by_len[0] + 1

    check(fn, _t(2), _t(4, seed=1), _t(3, seed=2), graphs=1, breaks=0)


def test_star_unpacking_in_assignment_and_call():
    def fn(x):
        parts = [x, x + 1, x + 2, x + 3]
        first, *middle, last = parts
        (a, b), c = (x * 2, x * 3), x * 4
        return first + last, len(middle), torch.stack([*middle, a, b, c]).sum(0)

    check(fn, _t(3), graphs=1, breaks=0)


def test_list_slice_assignment_and_delete():
    def fn(x):
        lst = list(range(8))
        lst[1:3] = [10, 20, 30]
        del lst[::3]
        lst[-2:] = []
        return x * sum(lst), lst

    check(fn, _t(3), graphs=1, breaks=0)


def test_zip_into_dict_and_sorted_items():
    def fn(x):
        keys = ["w", "b", "a"]
        vals = [x, x * 2, x * 3]
        d = dict(zip(keys, vals))
        out = []
        for k, v in sorted(d.items()):
            out.append(v + len(k))
        return out, list(d)

    # Dynamo: 2 graphs, 1 break ("sort with non-constant keys": tensor values); kiln sorts proxies that compare
    # the distinct str keys and never the tensors (exact, values/ordering.py): one graph.
    check(fn, _t(3), graphs=1, dynamo_graphs=2, breaks=0)


# ---- iterators / generators (12) ---------------------------------------------------------------------

def test_generator_function_consumed_by_list():
    def gen(x, n):
        for i in range(n):
            yield x * i

    def fn(x):
        return list(gen(x, 4))

    check(fn, _t(3), graphs=1, breaks=0)


def test_generator_expression_into_sum_and_max():
    def fn(xs):
        total = sum(t.sum() for t in xs)
        biggest = max(t.shape[0] for t in xs)
        return total, biggest

    check(fn, [_t(2), _t(3, seed=1), _t(4, seed=2)], graphs=1, breaks=0)


def test_generator_send_running_average():
    def averager():
        total = 0.0
        count = 0
        avg = None
        while True:
            value = yield avg
            total = total + value
            count += 1
            avg = total / count

    def fn(x):
        g = averager()
        next(g)
        g.send(x)
        g.send(x * 3)
        return g.send(x * 5)

    check(fn, _t(3), graphs=1, breaks=0)


@dynamo_bug("the value of `yield from` (the sub-generator's return value) comes out None")
def test_yield_from_with_return_value():
    def inner(x):
        yield x
        yield x + 1
        return x * 10

    def outer(x):
        result = yield from inner(x)
        yield result

    def fn(x):
        return list(outer(x))

    check(fn, _t(2), graphs=1, breaks=0)


def test_zip_strict_and_map_two_iterables():
    def fn(xs, ys):
        pairs = list(zip(xs, ys, strict=True))
        sums = list(map(lambda a, b: a + b, xs, ys))
        return len(pairs), sums

    check(fn, [_t(2), _t(2, seed=1)], [_t(2, seed=2), _t(2, seed=3)], graphs=1, breaks=0)


def test_filter_none_and_filter_lambda():
    def fn(x):
        vals = [0, 1, None, 2, "", 3]
        truthy = list(filter(None, vals))
        odd = list(filter(lambda v: v % 2, range(7)))
        return x * sum(truthy) + len(odd), odd

    check(fn, _t(3), graphs=1, breaks=0)


def test_enumerate_start_and_reversed():
    def fn(xs):
        out = xs[0] * 0
        for i, t in enumerate(reversed(xs), start=1):
            out = out + t * i
        return out

    check(fn, [_t(3, seed=i) for i in range(3)], graphs=1, breaks=0)


def test_itertools_accumulate_islice_chain_product():
    def fn(x):
        acc = list(itertools.accumulate([1, 2, 3, 4], operator.mul))
        head = list(itertools.islice(itertools.count(5, 2), 3))
        ch = list(itertools.chain([1], (2, 3), range(4, 6)))
        prod = list(itertools.product([0, 1], repeat=2))
        return x * acc[-1] + sum(head), ch, prod

    check(fn, _t(3), graphs=1, breaks=0)


def test_itertools_groupby_sorted_words():
    def fn(x):
        words = ["apple", "avocado", "banana", "blueberry", "cherry"]
        out = {}
        for letter, grp in itertools.groupby(words, key=lambda w: w[0]):
            out[letter] = len(list(grp))
        return x * out["b"], out

    check(fn, _t(3), graphs=1, breaks=0)


def test_iter_next_default_and_stopiteration_caught():
    def fn(x):
        it = iter([x, x * 2])
        a = next(it)
        b = next(it)
        c = next(it, None)
        try:
            next(it)
            hit = False
        except StopIteration:
            hit = True
        return a + b, c is None, hit

    check(fn, _t(3), graphs=1, breaks=0)


def test_zip_longest_takewhile_dropwhile():
    def fn(x):
        zl = list(itertools.zip_longest([1, 2, 3], "ab", fillvalue="-"))
        tw = list(itertools.takewhile(lambda v: v < 3, [1, 2, 3, 1]))
        dw = list(itertools.dropwhile(lambda v: v < 3, [1, 2, 3, 1]))
        return x * (sum(tw) + sum(dw)), zl

    check(fn, _t(3), graphs=1, breaks=0)


def test_iter_with_callable_sentinel():
    def fn(x):
        vals = [3, 2, 1, 0, 5]
        it = iter(vals)
        out = list(iter(lambda: next(it), 0))
        return x * sum(out), out

    check(fn, _t(3), graphs=1, breaks=0)


# ---- functools / operator (10) ------------------------------------------------------------------------

def test_partial_with_kwargs_on_tensor_fn():
    def fn(x):
        clamp01 = functools.partial(torch.clamp, min=0.0, max=1.0)
        shifted = functools.partial(torch.add, other=0.5)
        return clamp01(shifted(x))

    check(fn, _t(4), graphs=1, breaks=0)


def test_reduce_operator_add_over_tensors():
    def fn(xs):
        return functools.reduce(operator.add, xs), functools.reduce(operator.mul, [2, 3, 4], 1)

    check(fn, [_t(3, seed=i) for i in range(4)], graphs=1, breaks=0)


def test_reduce_lambda_with_initializer():
    def fn(x):
        return functools.reduce(lambda acc, k: acc * 0.5 + k, [1.0, 2.0, 3.0], x)

    check(fn, _t(3), graphs=1, breaks=0)


def test_lru_cached_pure_helper():
    def fn(x):
        w = _cached_width(x.shape[0])
        return x.repeat(w)

    check(fn, _t(3), graphs=1, breaks=0)


def test_wraps_decorator_keeps_name_and_doc():
    def fn(x):
        y = _affine(x, w=2.0, b=1.0)
        return y, _affine.__name__, _affine.__doc__

    check(fn, _t(3), graphs=1, breaks=0)


def test_itemgetter_on_tuples_and_dicts():
    def fn(x):
        rows = [(3, x), (1, x * 2), (2, x * 3)]
        rows.sort(key=operator.itemgetter(0))
        get = operator.itemgetter("a", "c")
        a, c = get({"a": x, "b": 0, "c": x + 1})
        return [r[1] for r in rows], a + c

    check(fn, _t(3), graphs=1, breaks=0)


def test_attrgetter_dotted():
    def fn(x):
        cfg = Config(hidden=3, scale=1.5)
        box = Base(cfg)
        get = operator.attrgetter("k.scale", "k.hidden")
        s, h = get(box)
        return x * s + h

    check(fn, _t(3), graphs=1, breaks=0)


def test_methodcaller_on_tensors():
    def fn(x):
        summer = operator.methodcaller("sum", dim=0)
        viewer = operator.methodcaller("view", -1)
        return summer(x), viewer(x)

    check(fn, _t(2, 3), graphs=1, breaks=0)


def test_operator_functions_on_tensors():
    def fn(x, y):
        a = operator.mul(x, y)
        b = operator.neg(a)
        c = operator.truediv(b, 2)
        d = operator.getitem(c, 0)
        e = operator.iadd(x.clone(), y)
        return a, b, c, d, e, operator.lt(1, 2)

    check(fn, _t(3), _t(3, seed=1), graphs=1, breaks=0)


@dynamo_bug("a partial of a partial: CPython flattens it (func torch.add, keywords {'alpha': 2}); "
            "dynamo's keywords come out empty")
def test_nested_partial_introspection():
    def fn(x):
        base = functools.partial(torch.add, alpha=2)
        inner = functools.partial(base, x)
        y = inner(torch.ones(3))
        return y, inner.args[0] is x, sorted(inner.keywords), inner.func is torch.add

    check(fn, _t(3), graphs=1, breaks=0)


# ---- classes (10) -------------------------------------------------------------------------------------

@dynamo_bug("a set of user objects with __eq__/__hash__ keeps equal duplicates (len 3, eager 2)")
def test_user_eq_hash_in_sets_and_frozen_dataclass_keys():
    def fn(x):
        toks = {Token("a", 0), Token("a", 0), Token("b", 1)}
        d = {Key("a", 0): x, Key("b", 1): x * 2}
        v = d[Key("b", 1)]
        present = Key("a", 0) in d
        same = Token("a", 0) == Token("a", 0)
        return v + (1 if present else 0) + len(toks), same, Token("a", 0) != Token("a", 1)

    check(fn, _t(3), graphs=1, breaks=0)


def test_container_class_len_getitem_iter():
    def fn(x):
        bag = Bag([x, x + 1, x + 2])
        total = x * 0
        for t in bag:
            total = total + t
        return total, len(bag), bag[-1]

    check(fn, _t(3), graphs=1, breaks=0)


def test_container_class_contains():
    def fn(x):
        bag = Bag([1, 2, 3])
        out = x
        if 2 in bag:
            out = out + 1
        if 7 not in bag:
            out = out * 2
        return out

    check(fn, _t(3), graphs=1, breaks=0)


def test_callable_object_and_list_of_callables():
    def fn(x):
        fns = [Scaler(2), Scaler(3), torch.neg]
        out = x
        for f in fns:
            out = f(out)
        return out, callable(fns[0])

    check(fn, _t(3), graphs=1, breaks=0)


def test_property_setter_clamps():
    def fn(x):
        temp = Temperature()
        temp.t = 0.1
        low = temp.t
        temp.t = 3.0
        return x / temp.t + low

    check(fn, _t(3), graphs=1, breaks=0)


def test_dataclass_default_factory_and_replace():
    def fn(x):
        cfg = Config()
        cfg2 = dataclasses.replace(cfg, scale=4.0)
        cfg2.names.append("c")
        return x * cfg2.scale + cfg.hidden, cfg.names, dataclasses.asdict(cfg2)["names"]

    check(fn, _t(3), graphs=1, breaks=0)


def test_namedtuple_replace_asdict_fields():
    def fn(x):
        p = Point(x, x * 2)
        q = p._replace(y=x * 5)
        d = q._asdict()
        pr = Pair(x, x + 1)
        return q, d["y"] - d["x"], Point._fields, pr.tag, pr._replace(tag=3)

    check(fn, _t(3), graphs=1, breaks=0)


def test_enum_members_value_and_iteration():
    def fn(x, color):
        out = x
        if color is Color.GREEN:
            out = out + 1
        if color == Color.RED:
            out = out - 1
        vals = [c.value for c in Color]
        return out * color.value, vals, color.name, Mode.EVAL + 1

    check(fn, _t(3), Color.GREEN, graphs=1, breaks=0)


def test_inheritance_super_calls():
    def fn(x):
        c = Child(2.0, 1.0)
        b = Base(3.0)
        return c.apply(x), b.apply(x), c.describe(), isinstance(c, Base)

    check(fn, _t(3), graphs=1, breaks=0)


def test_classmethod_staticmethod_and_operator_overload():
    def fn(x):
        y = Registry.make(x)
        z = Registry.shift(y, 1)
        v = (Vec(x) + Vec(z)) * 2
        return v.t, len(v)

    check(fn, _t(3), graphs=1, breaks=0)


# ---- exceptions / context managers (10) ---------------------------------------------------------------

def test_try_except_else_finally_inside():
    def fn(x):
        log = []
        try:
            if x.shape[0] > 2:
                raise ValueError("too long")
            y = x + 1
        except ValueError:
            y = x - 1
            log.append("except")
        else:
            log.append("else")
        finally:
            log.append("finally")
        return y, log

    check(fn, _t(3), graphs=1, breaks=0)


def test_raise_from_cause_inspected():
    def fn(x):
        try:
            try:
                {}["missing"]
            except KeyError as e:
                raise RuntimeError("wrapped") from e
        except RuntimeError as err:
            cause = type(err.__cause__).__name__
            return x * 2, cause, str(err)

    check(fn, _t(3), graphs=1, breaks=0)


def test_custom_exception_with_attribute():
    def fn(x):
        try:
            if x.dim() == 2:
                raise ShapeError("bad rank", x.dim())
            return x
        except ShapeError as e:
            return x.sum(e.dim - 1), e.dim, e.msg

    check(fn, _t(2, 3), graphs=1, breaks=0)


def test_contextmanager_decorated_function():
    def fn(x):
        log = []
        with _scaled(log, 3) as k:
            y = x * k
        return y, log

    check(fn, _t(3), graphs=1, breaks=0)


def test_exitstack_callbacks_order():
    def fn(x):
        log = []
        with contextlib.ExitStack() as stack:
            stack.callback(log.append, "first")
            stack.callback(log.append, "second")
            y = x + 1
        return y, log

    check(fn, _t(3), graphs=1, breaks=0)


def test_nullcontext_conditional():
    def fn(x, use_grad):
        ctx = contextlib.nullcontext() if use_grad else torch.no_grad()
        with ctx:
            y = x * 2
        return y, y.requires_grad

    check(fn, torch.randn(3, requires_grad=True), False, graphs=1, breaks=0)


def test_no_grad_enable_grad_nesting():
    def fn(x):
        with torch.no_grad():
            a = x * 2
            with torch.enable_grad():
                b = x * 3
            c = x * 4
        return a.requires_grad, b.requires_grad, c.requires_grad, (a + b + c).detach()

    check(fn, torch.randn(3, requires_grad=True), graphs=1, breaks=0)


def test_set_grad_enabled_as_context():
    def fn(x):
        with torch.set_grad_enabled(False):
            a = x * 2
        with torch.set_grad_enabled(True):
            b = x * 3
        return a, b.detach(), torch.is_grad_enabled(), b.requires_grad

    check(fn, torch.randn(3, requires_grad=True), graphs=1, breaks=0)


def test_keyerror_fallback_and_index_error():
    def fn(x):
        d = {"a": 1}
        try:
            v = d["b"]
        except KeyError:
            v = 5
        lst = [1]
        try:
            w = lst[3]
        except (IndexError, TypeError) as e:
            w = len(type(e).__name__)
        return x * v + w

    check(fn, _t(3), graphs=1, breaks=0)


def test_user_context_manager_suppresses_valueerror():
    def fn(x):
        s = Suppress()
        y = x
        with s:
            y = x + 1
            raise ValueError("ignored")
        return y * 2, s.entered

    check(fn, _t(3), graphs=1, breaks=0)


# ---- closures / scoping / globals (10) ----------------------------------------------------------------

def test_nonlocal_counter_in_nested_function():
    def fn(x):
        count = 0

        def bump(t):
            nonlocal count
            count += 1
            return t + count

        y = bump(bump(x))
        return y, count

    check(fn, _t(3), graphs=1, breaks=0)


def test_global_constant_read():
    def fn(x):
        return x * SCALE + len(ACTS)

    check(fn, _t(3), graphs=1, breaks=0)


def test_global_dict_write_reset_each_call():
    def fn(x):
        _STATE["calls"] = 0
        _STATE["calls"] += 1
        _STATE["last"] = "fn"
        return x + _STATE["calls"]

    check(fn, _t(3), graphs=1, breaks=0)


def test_global_statement_rebinding():
    def fn(x):
        global _COUNTER
        _COUNTER = 10
        _COUNTER += 5
        return x * _COUNTER

    check(fn, _t(3), graphs=1, breaks=0)


def test_closures_created_in_loop_with_default_capture():
    def fn(x):
        fns = []
        for i in range(3):
            fns.append(lambda t, i=i: t * i)
        late = [lambda t: t * i for i in range(3)]
        return [f(x) for f in fns], [f(x) for f in late]

    check(fn, _t(3), graphs=1, breaks=0)


def test_lambda_with_defaults_and_kwargs():
    def fn(x):
        f = lambda t, a=2, *, b=1: t * a + b  # noqa: E731
        return f(x), f(x, 3), f(x, b=5)

    check(fn, _t(3), graphs=1, breaks=0)


def test_recursion_on_python_ints_and_tensors():
    def power(t, n):
        if n == 0:
            return torch.ones_like(t)
        return t * power(t, n - 1)

    def fn(x):
        return power(x, 3), _fib(7)

    check(fn, _t(3), graphs=1, breaks=0)


def test_function_dispatch_dict_global():
    def fn(x, name):
        return ACTS[name](x), ACTS.get("gelu", torch.abs)(x)

    check(fn, _t(3), "tanh", graphs=1, breaks=0)


def test_decorator_defined_inside():
    def fn(x):
        def add_bias(b):
            def deco(f):
                def inner(t):
                    return f(t) + b

                return inner

            return deco

        @add_bias(2.0)
        def body(t):
            return t * 3

        return body(x)

    check(fn, _t(3), graphs=1, breaks=0)


def test_closure_late_binding_after_rebind():
    def fn(x):
        k = 1

        def get():
            return x * k

        first = get()
        k = 10
        second = get()
        return first, second

    check(fn, _t(3), graphs=1, breaks=0)


# ---- nn.Module (10) -----------------------------------------------------------------------------------

class ResidualStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            if i % 2 == 0:
                x = x + layer(x)
            else:
                x = torch.relu(layer(x))
        return x


class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"cls": nn.Linear(4, 2), "reg": nn.Linear(4, 1)})

    def forward(self, x):
        return {name: head(x) for name, head in self.heads.items()}


class Normalizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.arange(4.0))
        self.register_buffer("std", torch.full((4,), 2.0))

    def forward(self, x):
        return (x - self.mean) / self.std


class ConfigBlock(nn.Module):
    def __init__(self, use_bias, act):
        super().__init__()
        self.use_bias = use_bias
        self.act = act
        self.proj = nn.Linear(4, 4, bias=False)
        self.bias = nn.Parameter(torch.ones(4))

    def forward(self, x):
        y = self.proj(x)
        if self.use_bias:
            y = y + self.bias
        if self.act == "relu":
            y = torch.relu(y)
        elif self.act == "gelu":
            y = nn.functional.gelu(y)
        return y


class TrainEval(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        if self.training:
            return y * 0.5
        return y + 1


class WeightPenalty(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 2)

    def forward(self, x):
        penalty = sum(p.pow(2).sum() for p in self.parameters())
        return self.b(self.a(x)), penalty


class DataclassOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x, target=None):
        logits = self.lin(x)
        loss = None
        if target is not None:
            loss = ((logits - target) ** 2).mean()
        return Output(logits=logits, loss=loss)


class NamedParamFilter(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(3, 3)
        self.dec = nn.Linear(3, 3)

    def forward(self, x):
        decay = [p for n, p in self.named_parameters() if n.endswith("weight")]
        names = [n for n, _ in self.named_modules() if n]
        return self.dec(self.enc(x)), sum(p.sum() for p in decay), names


class SeqSlice(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh())

    def forward(self, x):
        head = self.seq[:2](x)
        return self.seq[-2](head), len(self.seq), type(self.seq[1]).__name__


class Children(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.act = nn.ReLU()
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        for m in self.children():
            if isinstance(m, nn.Linear):
                x = m(x)
            else:
                x = m(x) * 2
        return x


def test_module_list_residual_loop():
    check(ResidualStack(), _t(2, 4), graphs=1, breaks=0)


def test_module_dict_heads_return_dict():
    check(Heads(), _t(2, 4), graphs=1, breaks=0)


def test_module_buffers():
    check(Normalizer(), _t(2, 4), graphs=1, breaks=0)


def test_module_python_config_attributes():
    check(ConfigBlock(True, "gelu"), _t(2, 4), graphs=1, breaks=0)


def test_module_eval_branch():
    m = TrainEval()
    m.eval()
    check(m, _t(2, 4), graphs=1, breaks=0)


def test_module_parameters_iteration_penalty():
    check(WeightPenalty(), _t(2, 3), graphs=1, breaks=0)


def test_module_returns_dataclass_with_optional_loss():
    check(DataclassOut(), _t(2, 4), _t(2, 3, seed=1), graphs=1, breaks=0)


def test_module_named_parameters_filter():
    check(NamedParamFilter(), _t(2, 3), graphs=1, breaks=0)


def test_module_sequential_slice_and_index():
    check(SeqSlice(), _t(2, 4), graphs=1, breaks=0)


def test_module_children_isinstance_dispatch():
    check(Children(), _t(2, 4), graphs=1, breaks=0)


# ---- tensor-Python boundary (10) ----------------------------------------------------------------------

def test_shape_arithmetic_view():
    def fn(x):
        b, t, c = x.shape
        y = x.view(b * t, c)
        return y.reshape(-1, c // 2, 2), (b * t) // 2

    check(fn, _t(2, 3, 4), graphs=1, breaks=0)


def test_torch_size_ops():
    def fn(x):
        s = x.size()
        s2 = s[:1] + torch.Size([5])
        return x.new_zeros(s2), s.numel(), s2, isinstance(s2, torch.Size), s[-1]

    check(fn, _t(2, 3), graphs=1, breaks=0)


def test_item_used_in_python_arithmetic():
    def fn(x):
        m = x.max().item()
        scale = 1.0 / (abs(m) + 1.0)
        return x * scale

    check(fn, _t(4), graphs=2, breaks=1)


def test_tolist_used_in_python():
    def fn(x):
        vals = x.tolist()
        return x + len(vals), [round(v, 3) for v in vals]

    check(fn, torch.tensor([1.5, 2.25, 3.0]), graphs=1, breaks=1)


def test_dtype_comparisons():
    def fn(x):
        out = x
        if x.dtype == torch.float32:
            out = out * 2
        if x.dtype in (torch.float16, torch.bfloat16):
            out = out - 100
        if x.is_floating_point() and not x.is_complex():
            out = out + 1
        return out.to(torch.float64), x.dtype.is_floating_point, str(x.dtype)

    check(fn, _t(3), graphs=1, breaks=0)


def test_device_comparisons():
    def fn(x):
        dev = x.device
        y = x + 1 if dev.type == "cpu" else x - 1
        same = dev == torch.device("cpu")
        return torch.zeros(2, device=dev), y, same, dev.index is None

    check(fn, _t(3), graphs=1, breaks=0)


def test_isinstance_tensor_and_parameter():
    def fn(x, p):
        out = x
        if isinstance(p, nn.Parameter):
            out = out + p
        if isinstance(x, nn.Parameter):
            out = out * 100
        if isinstance(x, torch.Tensor):
            out = out * 2
        return out.detach()

    check(fn, _t(3), nn.Parameter(_t(3, seed=1)), graphs=1, breaks=0)


def test_is_tensor_on_mixed_list():
    def fn(items):
        acc = 0
        ts = []
        for v in items:
            if torch.is_tensor(v):
                ts.append(v)
            else:
                acc += v
        return torch.stack(ts).sum(0) + acc

    check(fn, [_t(3), 2, _t(3, seed=1), 5], graphs=1, breaks=0)


def test_tensor_attribute_reads():
    def fn(x):
        y = x.T
        return y, x.ndim, x.requires_grad, y.is_contiguous(), x.is_leaf, x.shape[-1] * x.dim()

    check(fn, _t(2, 3), graphs=1, breaks=0)


def test_size_dim_len_numel():
    def fn(x):
        n = x.size(-1) + x.dim() + len(x) + x.numel()
        return x.flatten()[: n % x.numel()], n

    check(fn, _t(3, 4), graphs=1, breaks=0)


# ---- misc builtins (13) -------------------------------------------------------------------------------

def test_min_max_over_shapes_and_default():
    def fn(xs):
        longest = max(t.shape[0] for t in xs)
        shortest = min([t.shape[0] for t in xs])
        empty = max([], default=-1)
        return xs[0] * longest - shortest, empty, min(3, 1, 2), max("abc"), max(1.5, 2, key=None)

    check(fn, [_t(2), _t(5, seed=1), _t(3, seed=2)], graphs=1, breaks=0)


def test_sum_with_start_and_any_all():
    def fn(xs):
        total = sum(xs, torch.zeros(3))
        all_three = all(t.shape[0] == 3 for t in xs)
        some_big = any(t.dim() > 1 for t in xs)
        return total, all_three, some_big, sum([[1], [2]], [])

    check(fn, [_t(3, seed=i) for i in range(3)], graphs=1, breaks=0)


def test_sorted_dict_items_by_value():
    def fn(x):
        scores = {"a": 3, "b": 1, "c": 2}
        order = [k for k, _ in sorted(scores.items(), key=lambda kv: kv[1], reverse=True)]
        return x * scores[order[0]], order

    check(fn, _t(3), graphs=1, breaks=0)


def test_isinstance_issubclass_with_tuples():
    def fn(x, v):
        out = x
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out = out + v
        if issubclass(Child, (Base, dict)):
            out = out * 2
        return out, issubclass(bool, int), isinstance(v, (str, bytes))

    check(fn, _t(3), 3, graphs=1, breaks=0)


def test_getattr_setattr_hasattr():
    def fn(x):
        obj = Base(2.0)
        setattr(obj, "extra", 5)
        has = hasattr(obj, "extra"), hasattr(obj, "missing")
        k = getattr(obj, "k")
        m = getattr(obj, "missing", 7)
        return x * k + obj.extra + m, has

    check(fn, _t(3), graphs=1, breaks=0)


def test_type_checks_and_identity():
    def fn(x, opt):
        out = x
        if type(x) is torch.Tensor:
            out = out + 1
        if opt is None:
            out = out * 2
        if type(3) == int and type(out).__name__ == "Tensor":
            out = out - 1
        marker = object()
        other = marker
        return out, other is marker, opt is not None

    check(fn, _t(3), None, graphs=1, breaks=1)


def test_string_formatting_and_join():
    def fn(x):
        b, c = x.shape
        label = f"{b}x{c}"
        parts = "-".join(str(d) for d in x.shape)
        msg = "shape=%s size=%d" % (label, x.numel())
        return x * len(label), label, parts, msg, "{:>5}|{:.2f}".format("ab", 3.14159)

    check(fn, _t(2, 3), graphs=1, breaks=0)


def test_math_module_on_python_numbers():
    def fn(x):
        d = x.shape[-1]
        scale = 1.0 / math.sqrt(d)
        return x * scale + math.floor(2.7) + math.pi, math.ceil(d / 3), math.log2(8), math.isclose(scale, 0.5)

    check(fn, _t(2, 4), graphs=1, breaks=0)


def test_match_statement_patterns():
    def fn(x, spec):
        match spec:
            case {"op": "scale", "k": k}:
                return x * k
            case ("shift", amount):
                return x + amount
            case Point(x=px, y=py):
                return x * px + py
            case _:
                return x

    check(fn, _t(3), {"op": "scale", "k": 3}, graphs=1, breaks=0)
    check(fn, _t(3), ("shift", 2), graphs=1, breaks=0)
    check(fn, _t(3), Point(2, 1), graphs=1, breaks=0)


def test_walrus_in_loop_and_comprehension():
    def fn(x):
        out = []
        n = 0
        while (n := n + 1) < 4:
            out.append(x * n)
        sq = [y for v in range(5) if (y := v * v) > 3]
        return out, sq

    # Dynamo breaks once ("Read uninitialized cell": y is a cell of fn, bound by the comprehension's walrus);
    # kiln models the empty cell made while tracing (exact).
    check(fn, _t(3), graphs=1, breaks=0)


def test_star_args_kwargs_forwarding():
    def target(a, b, *rest, scale=1.0, **extra):
        return (a + b + sum(rest)) * scale, sorted(extra)

    def forward(*args, **kwargs):
        return target(*args, **kwargs)

    def fn(x, y):
        args = (x, y, 1, 2)
        kw = {"scale": 2.0, "tag": "t"}
        return forward(*args, **kw)

    check(fn, _t(3), _t(3, seed=1), graphs=1, breaks=0)


def test_chained_comparisons():
    def fn(x):
        n = x.shape[0]
        out = x
        if 0 < n <= 4 < 10:
            out = out + 1
        if 1 < n < 2:
            out = out * 100
        a, b, c = 1, 2, 2
        return out, a < b == c, a == b < c

    check(fn, _t(3), graphs=1, breaks=0)


def test_inplace_operators_on_python_values():
    def fn(x):
        n = 3
        n += 2
        n *= 3
        n //= 2
        n **= 2
        n %= 50
        lst = [1]
        lst += [2, 3]
        lst *= 2
        s = {1}
        s |= {2, 3}
        s -= {1}
        return x * n, lst, sorted(s), divmod(17, 5), round(2.675, 2), abs(-3), pow(2, 5, 7)

    check(fn, _t(3), graphs=1, breaks=0)

