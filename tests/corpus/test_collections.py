"""collections' containers inside compiled code: defaultdict, OrderedDict, Counter, deque, dict.fromkeys,
sets, and sorted/min/max with key= over tensors."""
import collections

import torch

from .harness import check, dynamo_bug


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def one_graph(fn, *args, **kwargs):
    """A case that must be one graph with no break (fullgraph=True), under kiln and dynamo alike."""
    return check(fn, *args, graphs=1, fullgraph=True, **kwargs)


def _make_zero():
    return 0


# ---- defaultdict --------------------------------------------------------------------------------

def test_defaultdict_list_groups_tensors():
    def fn(xs):
        groups = collections.defaultdict(list)
        for i, x in enumerate(xs):
            groups[i % 2].append(x)
        return [torch.stack(v).sum(0) for v in groups.values()], sorted(groups)

    one_graph(fn, [_t(2), _t(2, seed=1), _t(2, seed=2)])


def test_defaultdict_int_counts():
    def fn(x):
        counts = collections.defaultdict(int)
        for word in ["a", "b", "a", "c", "a"]:
            counts[word] += 1
        return x * counts["a"], dict(counts)

    one_graph(fn, _t(3))


def test_defaultdict_lambda_and_user_factory():
    def fn(x):
        d = collections.defaultdict(lambda: x * 0)
        e = collections.defaultdict(_make_zero)
        d["a"] = d["a"] + x
        return d["a"], d["b"], e["z"], len(d), len(e)

    one_graph(fn, _t(3))


def test_defaultdict_get_and_in_do_not_insert():
    def fn(x):
        d = collections.defaultdict(list)
        missing = d.get("k")
        present = "k" in d
        d["k"]
        return x + 1, missing, present, "k" in d, len(d)

    one_graph(fn, _t(3))


def test_defaultdict_returned():
    def fn(x):
        d = collections.defaultdict(list)
        d["a"].append(x * 2)
        return d

    one_graph(fn, _t(3))


def test_defaultdict_default_factory_attribute():
    def fn(x):
        d = collections.defaultdict(float)
        return x * (d.default_factory is float), d["q"]

    one_graph(fn, _t(3))


def test_defaultdict_passed_in_read():
    def fn(d, x):
        return d["w"] * x, d["missing_reads_factory"] if False else 0

    one_graph(fn, collections.defaultdict(list, {"w": _t(3)}), _t(3, seed=1))


def test_defaultdict_passed_in_mutated():
    def fn(d, x):
        d["new"].append(x * 2)
        return x + 1

    one_graph(fn, collections.defaultdict(list, {"old": [1]}), _t(3), inputs_mutated=True)


def test_defaultdict_none_factory_keyerror_breaks():
    def fn(x):
        d = collections.defaultdict(None)
        try:
            return d["x"]
        except KeyError:
            return x + 1

    check(fn, _t(3), graphs=(0, 1), dynamo_graphs=(0, 1))


# ---- OrderedDict ------------------------------------------------------------------------------

def test_ordered_dict_built_and_returned():
    def fn(x):
        od = collections.OrderedDict()
        od["b"] = x
        od["a"] = x * 2
        return od, list(od.keys())

    one_graph(fn, _t(2))


def test_ordered_dict_move_to_end():
    def fn(x):
        od = collections.OrderedDict([("a", x), ("b", x + 1), ("c", x + 2)])
        od.move_to_end("a")
        od.move_to_end("c", last=False)
        return list(od), od["a"]

    one_graph(fn, _t(2))


def test_ordered_dict_popitem():
    def fn(x):
        od = collections.OrderedDict(a=1, b=2, c=3)
        last = od.popitem()
        first = od.popitem(last=False)
        return x * last[1] + first[1], od

    one_graph(fn, _t(2))


def test_ordered_dict_equality_is_order_sensitive():
    def fn(x):
        a = collections.OrderedDict([("x", 1), ("y", 2)])
        b = collections.OrderedDict([("y", 2), ("x", 1)])
        return x + 1, a == b, a == dict(b), dict(a) == dict(b), a != b

    one_graph(fn, _t(2))


def test_ordered_dict_passed_in():
    def fn(od, x):
        return [v * x for v in od.values()], list(od)

    one_graph(fn, collections.OrderedDict([("q", 1.0), ("p", 2.0)]), _t(2))


def test_ordered_dict_passed_in_mutated():
    def fn(od, x):
        od["z"] = 3
        od.move_to_end("a")
        return x * 2

    one_graph(fn, collections.OrderedDict([("a", 1), ("b", 2)]), _t(2), inputs_mutated=True)


@dynamo_bug('dynamo cannot hand back an OrderedDict made by fromkeys (graph break)')
def test_ordered_dict_fromkeys():
    def fn(x):
        od = collections.OrderedDict.fromkeys(["k", "j"], 0)
        od["j"] += 2
        return x * od["j"], od

    one_graph(fn, _t(2))


def test_ordered_dict_or():
    def fn(x):
        od = collections.OrderedDict(a=1)
        merged = od | {"b": 2}
        return x * len(merged), merged, type(merged).__name__

    one_graph(fn, _t(2))


# ---- Counter -----------------------------------------------------------------------------------

@dynamo_bug('dynamo does not trace heapq.heapify in Counter.most_common(n) (graph break)')
def test_counter_from_iterable_most_common():
    def fn(x):
        c = collections.Counter("abracadabra")
        return x * c["a"], c.most_common(2), c["zzz"]

    one_graph(fn, _t(2))


def test_counter_from_list_and_update():
    def fn(x):
        c = collections.Counter([1, 2, 2, 3])
        c.update([2, 3, 3])
        c.subtract({1: 1})
        return x * c[2], c, c.total()

    one_graph(fn, _t(2))


def test_counter_arithmetic():
    def fn(x):
        a = collections.Counter(a=3, b=1)
        b = collections.Counter(a=1, b=2)
        return x + 1, a + b, a - b, a | b, a & b

    one_graph(fn, _t(2))


def test_counter_missing_key_is_zero_no_insert():
    def fn(x):
        c = collections.Counter()
        z = c["nope"]
        return x + z, len(c)

    one_graph(fn, _t(2))


def test_counter_of_shapes():
    def fn(xs):
        c = collections.Counter(t.dim() for t in xs)
        return [t * c[t.dim()] for t in xs], sorted(c.elements())

    one_graph(fn, [_t(2), _t(2, 2, seed=1), _t(3, seed=2)])


@dynamo_bug('dynamo does not trace object() in Counter.most_common (graph break)')
def test_counter_passed_in():
    def fn(c, x):
        return x * c["a"], c.most_common(1)

    one_graph(fn, collections.Counter({"a": 2, "b": 5}), _t(2))


def test_counter_inplace_add():
    def fn(x):
        c = collections.Counter(a=1)
        c += collections.Counter(a=2, b=1)
        return x * c["a"], c

    one_graph(fn, _t(2))


# ---- deque -------------------------------------------------------------------------------------

def test_deque_append_pop_both_ends():
    def fn(x):
        d = collections.deque([x])
        d.append(x + 1)
        d.appendleft(x - 1)
        right = d.pop()
        left = d.popleft()
        return right - left, len(d), d[0]

    one_graph(fn, _t(3))


def test_deque_maxlen_window():
    def fn(xs):
        window = collections.deque(maxlen=2)
        outs = []
        for x in xs:
            window.append(x)
            outs.append(sum(window))
        return outs, window.maxlen, len(window)

    one_graph(fn, [_t(2), _t(2, seed=1), _t(2, seed=2), _t(2, seed=3)])


@dynamo_bug('dynamo does not trace deque.rotate (graph break)')
def test_deque_rotate_and_extend():
    def fn(x):
        d = collections.deque([1, 2, 3])
        d.extend([4, 5])
        d.extendleft([0])
        d.rotate(2)
        d.rotate(-1)
        return x * d[0], list(d), d

    one_graph(fn, _t(2))


def test_deque_of_tensors_returned():
    def fn(x):
        d = collections.deque([x, x * 2], maxlen=3)
        d.append(x * 3)
        d.append(x * 4)
        return list(d), d.maxlen

    one_graph(fn, _t(2))


def test_deque_passed_in_mutated():
    def fn(d, x):
        d.append(x.shape[0])
        first = d.popleft()
        return first + x

    one_graph(fn, collections.deque([1.5, 2.5], maxlen=4), _t(2), inputs_mutated=True)


def test_deque_count_and_in():
    def fn(x):
        d = collections.deque(["a", "b", "a"])
        return x * d.count("a"), "b" in d, d.index("b")

    one_graph(fn, _t(2))


# ---- dict.fromkeys, sorted items ---------------------------------------------------------------

def test_dict_fromkeys():
    def fn(x):
        d = dict.fromkeys(["a", "b"], 0)
        e = dict.fromkeys("xy")
        d["a"] = 5
        return x * (d["a"] + d["b"]), d, e

    one_graph(fn, _t(2))


def test_dict_fromkeys_shares_the_value():
    def fn(x):
        d = dict.fromkeys(["a", "b"], [])
        d["a"].append(x)
        return len(d["b"]), d["b"][0] * 2

    one_graph(fn, _t(2))


@dynamo_bug('dynamo cannot sort tuples holding tensors (graph break)')
def test_sorted_dict_items_with_tensor_values():
    def fn(d):
        return [k for k, _ in sorted(d.items())], [v * 2 for _, v in sorted(d.items(), reverse=True)]

    one_graph(fn, {"b": _t(2), "a": _t(2, seed=1), "c": _t(2, seed=2)})


# ---- sorted / min / max with key= -------------------------------------------------------------

def test_sorted_tensors_by_numel():
    def fn(xs):
        return torch.cat(sorted(xs, key=lambda t: t.numel()))

    one_graph(fn, [_t(3), _t(1, seed=1), _t(2, seed=2)])


@dynamo_bug('dynamo cannot take max/min of tensors by key= (graph break)')
def test_max_min_tensors_by_key():
    def fn(xs):
        big = max(xs, key=lambda t: t.shape[0])
        small = min(xs, key=lambda t: t.shape[0])
        return big.sum() - small.sum()

    one_graph(fn, [_t(3), _t(1, seed=1), _t(4, seed=2)])


@dynamo_bug('dynamo cannot take max/min of tensors by key= (graph break)')
def test_max_key_ties_keep_first():
    def fn(xs):
        return max(xs, key=lambda t: t.dim()) * 2, min(xs, key=len) * 3

    one_graph(fn, [_t(2), _t(3, seed=1), _t(2, seed=2)])


def test_min_max_default():
    def fn(x):
        return x + max([], default=2) + min((), key=abs, default=1)

    one_graph(fn, _t(2))


@dynamo_bug('dynamo cannot take max of a dict_items by key= (graph break)')
def test_max_of_dict_items_by_value():
    def fn(x):
        counts = {"a": 3, "b": 7, "c": 5}
        best = max(counts.items(), key=lambda kv: kv[1])
        return x * best[1], best[0]

    one_graph(fn, _t(2))


@dynamo_bug('dynamo cannot take min of tuples holding tensors (graph break)')
def test_min_over_tuples_with_tensors():
    def fn(x, y):
        return min([(2, x), (1, y)])[1] * 2

    one_graph(fn, _t(2), _t(2, seed=1))


# ---- sets -----------------------------------------------------------------------------------------

def test_set_and_frozenset_operations():
    def fn(x):
        a = {1, 2, 3}
        b = frozenset({2, 3, 4})
        return x * len(a & b), a | b, a - b, a ^ b, 2 in b, b.issubset({1, 2, 3, 4})

    one_graph(fn, _t(2))


@dynamo_bug("dynamo iterates this set in another order than CPython's (a wrong result)", strict=False)
def test_set_of_strings_iterates_in_cpython_order():
    def fn(x):
        names = set(["weight", "bias", "running_mean", "gamma", "beta"])
        names.add("scale")
        names.discard("bias")
        return x * len(names), list(names), [n.upper() for n in names]

    one_graph(fn, _t(2))


@dynamo_bug("dynamo iterates this set in another order than CPython's (a wrong result)", strict=False)
def test_set_operations_keep_cpython_order():
    def fn(x):
        a = {"q", "w", "e", "r", "t", "y"}
        b = set("asdfwer")
        return x + 1, list(a | b), list(a & b), list(a - b), list(a ^ b), list(a.union(["z", "x"]))

    one_graph(fn, _t(2))


def test_frozenset_made_in_frame_returned():
    def fn(x):
        f = frozenset(["a", "b", "c"])
        return x + 1, f, type(f).__name__, sorted(f | {"d"})

    one_graph(fn, _t(2))


def test_set_passed_in_iterated():
    def fn(s, x):
        return [x * len(k) for k in s], list(s)

    one_graph(fn, {"alpha", "be", "c", "delta"}, _t(2))


@dynamo_bug("dynamo iterates this set in another order than CPython's (a wrong result)", strict=False)
def test_set_comprehension_and_update_from_dict():
    def fn(x):
        s = {k * 2 for k in ["a", "b", "c"]}
        s.update({"zz": 1, "yy": 2})
        return x * len(s), list(s)

    one_graph(fn, _t(2))


@dynamo_bug("dynamo iterates this set in another order than CPython's (a wrong result)", strict=False)
def test_set_built_from_dict_keys():
    def fn(d, x):
        keys = set(d)
        return x * len(keys), list(keys), "a" in keys

    one_graph(fn, {"a": 1, "b": 2, "c": 3, "dd": 4}, _t(2))


def test_set_of_tensors_membership_by_identity():
    def fn(x, y):
        seen = {x}
        z = x.add_(1)  # the same tensor object as x
        w = x.clone()
        seen.add(y)
        return len(seen), z in seen, w in seen, y in seen, (x, y) == (z, y)

    check(fn, _t(3), _t(3, seed=1), graphs=1, inputs_mutated=True)


def test_tensor_is_after_inplace_and_noop_conversions():
    def fn(x):
        y = x.mul_(2)
        return y is x, x.contiguous() is x, x.float() is x, x.view(3) is x, x.clone() is x

    check(fn, _t(3), graphs=1, inputs_mutated=True)


@dynamo_bug("dynamo compares tensors in set operations by value (data-dependent branching)")
def test_set_of_tensors_operations():
    def fn(x, y):
        a = {x, y}
        b = set([y])
        return x + len(a | b), len(a - b), x in (a - b), y in (a & b)

    one_graph(fn, _t(3), _t(3, seed=1))


class _Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        return x * self.w, x is self.w


def test_tensor_is_between_input_and_parameter_breaks():
    m = _Scale()

    def fn(x):
        return m(x)




def test_list_sort_tensors_by_key_in_place():
    def fn(xs, x):
        xs.sort(key=lambda t: -t.shape[0])
        order = [x[: t.shape[0]] for t in xs]
        names = ["b", "c", "a"]
        names.sort(reverse=True)
        return order, names

    one_graph(fn, [_t(1), _t(3, seed=1), _t(2, seed=2)], _t(4), inputs_mutated=True)



def test_sorted_set_changed_after_a_graph_break():
    def fn(x):
        s = {3, 2, 7}
        names = {"b", "a"}
        y = x * 2
        print("", end="")  # a graph break: the resume function gets the sets from its frame
        s.add(10)
        s.discard(2)
        names.add("zeta")
        a = y + 1
        ordered = sorted(s)  # no break: the order of distinct ints does not depend on the set's
        return a * len(ordered), ordered, sorted(names, reverse=True), sorted({2.5, 1, -3})

    check(fn, torch.randn(2), graphs=2, dynamo_graphs=(1, 2))
