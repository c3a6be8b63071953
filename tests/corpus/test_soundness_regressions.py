"""Wrong results found in library code, reduced to plain Python + torch.

Guards on constants must compare exactly. Triton's interpreter (`TRITON_INTERPRET=1`) patches
`tl.tensor.__add__`, `tl.arange`, ... with one lambda, `lambda *args, member=member, **kwargs:
member(*args, ...)`. kiln compiled that lambda for `tl.arange(0, 64)` and guarded `args` by
`type(args) is tuple and args == (0, 64)`. Called as `tensor.__add__(a, b)`, the guard compared
Triton tensors with `0` and `64`: their `__eq__` answers with a tensor, truthy, so the guard passed
and the entry's code called `member(0, 64)`, the constant it was traced with: `0 + 64` instead of
`a + b`. The kernel then stored through wrong pointers (nan or garbage instead of eager's values).
"""
import collections
import contextlib
import functools
import inspect
import io
import types
import warnings

import pytest
import torch

from .harness import CountingBackend, check, check_recompiles, compile_fn, dynamo_bug, reset


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


class TruthyTensor:
    """A tensor-like box whose `==` answers with a box (truthy), as Triton's interpreter tensors do."""

    def __init__(self, t):
        self.t = t

    def __eq__(self, other):
        return TruthyTensor(self.t == (other.t if isinstance(other, TruthyTensor) else other))

    def __add__(self, other):
        return TruthyTensor(self.t + other.t)

    __hash__ = object.__hash__


class TruthyEq:
    """Compares like an array: `==` gives an object (truthy), not False."""

    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return TruthyEq(self.v)

    __hash__ = object.__hash__


def test_tuple_guard_does_not_call_items_eq():
    # the reduction of Triton's interpreter: one lambda forwards *args to the function it wraps, which
    # breaks the graph (there: a call into Triton), so the lambda's own frame is compiled with a guard
    # on `args`
    log = io.StringIO()

    def add(a, b):
        print("add", file=log)  # a graph break in the wrapped function
        return a + b

    forward = (lambda member: lambda *args, member=member: member(*args))(add)

    def fn(x, a, b):
        return x * 2, forward(a, b)

    check_recompiles(fn, [(_t(3), 0, 64), (_t(3), TruthyTensor(_t(3, seed=1)), TruthyTensor(_t(3, seed=2)))],
                     graphs=3, dynamo_graphs=2)


def test_tuple_of_objects_with_truthy_eq_after_tuple_of_ints():
    def fn(x, t):
        return x + 1, t

    # dynamo does not guard a tuple it only hands back
    check_recompiles(fn, [(_t(2), (0, 64)), (_t(2), (TruthyEq(1), TruthyEq(2)))], graphs=2, dynamo_graphs=1)


def test_tuple_items_of_other_types_that_compare_equal():
    def fn(x, t):
        return x * t[0], [type(v).__name__ for v in t]

    check_recompiles(fn, [(_t(2), (1, 2)), (_t(2), (True, 2)), (_t(2), (1.0, 2))], graphs=3)


@dynamo_bug("a float guard passes -0.0 for 0.0: x / -0.0 gives inf")
def test_negative_zero_is_not_zero():
    def fn(x, s):
        return x / s

    check_recompiles(fn, [(_t(2).abs(), 0.0), (_t(2).abs(), -0.0)], graphs=2)


@dynamo_bug("a float guard passes -0.0 for 0.0: x / -0.0 gives inf")
def test_negative_zero_in_a_tuple():
    def fn(x, t):
        return x / t[0]

    check_recompiles(fn, [(_t(2).abs(), (0.0, 1)), (_t(2).abs(), (-0.0, 1))], graphs=2)


@dynamo_bug("frozenset({True}) passes the guard of frozenset({1})")
def test_frozenset_of_bools_is_not_frozenset_of_ints():
    def fn(x, s):
        return x + 1, sorted(type(v).__name__ for v in s)

    check_recompiles(fn, [(_t(2), frozenset({1})), (_t(2), frozenset({True}))], graphs=2)


def test_dict_keys_true_is_not_one():
    def fn(x, d):
        return x + 1, [type(k).__name__ for k in d]

    check_recompiles(fn, [(_t(2), {1: 2}), (_t(2), {True: 2})], graphs=2)


def test_empty_ranges_with_other_starts():
    def fn(x, r):
        return x + r.start

    check_recompiles(fn, [(_t(2), range(0)), (_t(2), range(5, 5))], graphs=2)


def test_slice_of_bools_is_not_slice_of_ints():
    def fn(x, s):
        return x + 1, type(s.start).__name__

    check_recompiles(fn, [(_t(2), slice(1, 2)), (_t(2), slice(True, 2))], graphs=2)


def test_device_guard_checks_the_type():
    class AlwaysEqual:
        def __eq__(self, other):
            return True

        __hash__ = object.__hash__

    def fn(x, d):
        return x + 1, type(d).__name__

    check_recompiles(fn, [(_t(2), torch.device("cpu")), (_t(2), AlwaysEqual())], graphs=2)


def test_same_constant_tuple_hits_the_cache():
    def fn(x, t):
        return x.reshape(t) * 2

    check(fn, _t(6), (2, 3))


# A nested function that calls itself holds, in its closure, the cell that holds it. Rebuilding it
# after the graph (returned, or live across a graph break) recursed without end: kiln hit a
# RecursionError and ran the whole frame eagerly (Triton's GridExecutor._init_args_hst, whose
# `_to_cpu` maps itself over tuples). The cell is now built empty first and filled once the
# function exists: one function object, whose cell holds that very object.


@contextlib.contextmanager
def no_internal_error():
    """kiln reports an internal error as a warning and runs the frame eagerly (the result is right,
    and the graph may have reached the backend already): the case must not warn."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    errors = [str(w.message) for w in caught if "internal error" in str(w.message)]
    assert not errors, errors


def test_recursive_nested_function_returned():
    def fn(x):
        def walk(v):
            return [walk(u) for u in v] if isinstance(v, tuple) else v * 2

        return x + 1, walk

    reset()
    counter = CountingBackend()
    x = _t(2)
    with no_internal_error():
        y, walk = compile_fn(fn, counter)(x)
    torch.testing.assert_close(y, x + 1)
    assert walk((1, (2,))) == [2, [4]]
    assert walk.__closure__[0].cell_contents is walk, "the cell must hold the function returned"
    assert counter.graph_count == 1


def test_recursive_nested_function_across_a_graph_break():
    log = io.StringIO()

    def fn(x):
        def walk(v):
            return [walk(u) for u in v] if isinstance(v, tuple) else v * 2

        y = x + 1
        print("break", file=log)
        return walk((y, (y,)))

    with no_internal_error():
        check(fn, _t(2), graphs=2)


def test_mutually_recursive_nested_functions_across_a_graph_break():
    log = io.StringIO()

    def fn(x):
        def even(n):
            return True if n == 0 else odd(n - 1)

        def odd(n):
            return False if n == 0 else even(n - 1)

        y = x + 1
        print("break", file=log)
        return y * 2, even(4), odd(3), even(6)

    with no_internal_error():
        check(fn, _t(2), graphs=2)


class _Counted:
    count = 0

    def __init__(self):
        _Counted.count += 1  # a class-attribute store: breaks the graph in the caller


def _make_counted(t):
    _Counted()
    return t


@dynamo_bug("compiles again on the second call (the class attribute it guards changed)", strict=False)
def test_nonlocal_cell_shared_with_a_closure_across_a_graph_break():
    """A closure made before a graph break changes a nonlocal the frame reads after it (found by the
    capture fuzzer): the resume function held a copy of the cell and returned the old value."""
    def fn(x):
        st = 1

        def bump(_t):
            nonlocal st
            st += 1

        bump(_make_counted(2))
        return x + st

    check(fn, torch.zeros(2), graphs=(0, 1, 2), dynamo_graphs=(0, 1, 2, 3))


def test_cell_read_by_a_closure_and_written_in_a_loop_around_a_break():
    log = io.StringIO()

    def fn(x):
        total = 0

        def current():
            return total

        seen = []
        for i in range(3):
            total += i
            print(i, file=log)  # a graph break inside the loop
            seen.append(current())
        return x + total, seen

    check(fn, _t(2), graphs=(0, 1, 2, 3, 4, 5), dynamo_graphs=(0, 1, 2, 3, 4, 5))




def _logging_gen(t):
    for e in [t]:
        yield e


def _collect(t):
    return [e * 2 for e in _logging_gen(t)]


def _plus_one_after_collect(t):
    _collect(t)
    print("", end="")  # a graph break
    return t + 1


def test_keyword_dict_display_split_by_a_break():
    """`f(**{'t': g(x)})` where g breaks the graph: the dict BUILD_MAP made before the break is handed to
    the resume function, which merges the keyword into it (found by the capture fuzzer: the merge was not
    recorded and the call got no argument)."""
    def fn(x):
        return _collect(**{"t": _plus_one_after_collect(x)})

    check(fn, _t(2), graphs=(1, 2, 3, 4, 5, 6), dynamo_graphs=(1, 2, 3, 4, 5, 6))


_SEEN = []


def test_enumerate_index_across_a_break_in_the_loop_body():
    """A graph break inside `for i, e in enumerate(lst)`: the transformed code stored the resume
    function's locals (the next i) into the frame before computing the side effects, which re-read i
    from the frame: the indices came out [1, 2, 2] (found by the capture fuzzer's long run)."""
    def fn(x, y, lst):
        _SEEN.clear()
        for i, e in enumerate(lst):
            if y.sum() > 0:  # data-dependent: a graph break in every iteration
                pass
            _SEEN.append(i)
        return x + len(_SEEN), list(_SEEN)

    check(fn, _t(2), _t(2), [5, 6, 7], graphs=(1, 2, 3, 4, 5, 6, 7, 8), dynamo_graphs=(0, 1, 2, 3, 4, 5, 6, 7, 8))


# ---- user generator functions that raise after some items (found by the fresh batch 3 probes) ----

def test_generator_raising_after_items_keeps_the_items():
    def fn(x):
        def g():
            yield x * 2
            raise ValueError("inner")
        out = []
        try:
            for v in g():
                out.append(v)
        except ValueError as e:
            out.append(str(e))
        return out

    check(fn, torch.randn(3))


def test_generator_raising_caught_by_consumer_after_partial_list():
    def fn(x):
        def g(n):
            for i in range(n):
                yield x * i
            raise KeyError(n)
        it = g(3)
        first = next(it)
        try:
            rest = list(it)
        except KeyError as e:
            rest = [e.args[0]]
        return first, rest, next(it, "finished")

    check(fn, torch.randn(3))


@dynamo_bug("the RuntimeError of PEP 479 has no __cause__")
def test_generator_raising_stop_iteration_is_runtime_error():
    def fn(x):
        def g():
            yield x + 1
            raise StopIteration
        try:
            out = list(g())
        except RuntimeError as e:
            out = [type(e.__cause__).__name__]
        return out, x * 2

    check(fn, torch.randn(3))


# ---- functools.cached_property (fresh batch 3) ----------------------------------------------------

class _CachedStats:
    def __init__(self, t):
        self.t = t
        self.computed = 0

    @functools.cached_property
    def total(self):
        self.computed += 1
        return self.t.sum() * 2


class _CachedWithSetattr(_CachedStats):
    def __setattr__(self, name, value):  # a cached value is written to __dict__ directly, not through here
        object.__setattr__(self, name, value)
        object.__setattr__(self, "log", getattr(self, "log", ()) + (name,))


def test_cached_property_of_an_object_made_inside():
    def fn(x):
        s = _CachedWithSetattr(x)
        a = s.total
        b = s.total
        return a + b, s.computed, sorted(vars(s)), s.log

    check(fn, torch.randn(3), dynamo_graphs=0)


def test_cached_property_of_an_object_passed_in_is_cached_on_it():
    def fn(x, s):
        first = s.total
        return x * first + s.total, s.computed, "total" in vars(s)

    check_recompiles(fn, [(torch.randn(3), _CachedStats(torch.ones(2)))] * 2, graphs=1,
                     dynamo_graphs=0)


def test_exception_object_made_inside_is_returned():
    def fn(x):
        e = ValueError("bad", 2)
        return x + 1, e, KeyError("k")

    check(fn, torch.randn(3))


def test_ordered_dict_popitem_gives_the_object_key_itself():
    class Key:
        pass

    def fn(x):
        k = Key()
        od = collections.OrderedDict([(k, 2), ("s", 3)])
        first, v = od.popitem(last=False)
        last, w = od.popitem()
        return x * v + w, first is k, last

    check(fn, torch.randn(3))


@dynamo_bug("the generator's finally runs after the frame, not at the break", strict=False)
def test_generator_closed_when_the_loop_breaks():
    def fn(x):
        log = []

        def gen():
            try:
                for i in range(5):
                    yield x * i
            finally:
                log.append("closed")

        out = []
        for v in gen():
            out.append(v)
            if len(out) == 2:
                break
        log.append("after")
        return out, log

    # abandoned inside its try/finally by the break: the loop's slot held its last reference, and kiln
    # traces its close there, as CPython runs it (lazy_generators.mark_loop_only)
    check(fn, torch.randn(3), graphs=1, dynamo_graphs=(0, 1, 2))


# ---- iterators kiln computes ahead, kept after a graph break (fresh batch 3 probes) ---------------------

def test_user_generator_kept_across_a_break_is_a_generator():
    def fn(x):
        def gen():
            yield x + 1
            yield x + 2

        g = gen()
        h = gen()
        a = next(g)
        print("", end="")  # a graph break: g (started) and h (not started) are handed on
        return a, type(h).__name__, isinstance(h, types.GeneratorType), list(h), list(g)

    check(fn, torch.randn(3), graphs=(0, 1, 2), dynamo_graphs=0)


def test_module_children_kept_across_a_break_is_a_generator():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(2, 2)
            self.b = torch.nn.ReLU()

        def forward(self, x):
            it = self.children()
            params = self.parameters()
            print("", end="")
            first = next(it)
            return first(x), type(it).__name__, type(params).__name__, [type(m).__name__ for m in it]

    check(M(), torch.randn(2), graphs=(1, 2), dynamo_graphs=0)


def test_loop_over_a_user_generator_split_by_breaks_keeps_its_graphs():
    def fn(x):
        def gen():
            for i in range(3):
                yield x * i

        out = x * 0
        for i, v in enumerate(gen()):
            out = out + v
            print("", end="")
        return out

    # the generator is suspended at the break: kiln cannot hand its frame on, so after one trace its call
    # runs as Python and the loop over the real generator resumes as Python (TorchDynamo: 0 graphs)
    check(fn, torch.randn(3), graphs=1, dynamo_graphs=0)


def test_iter_returning_a_non_iterator_raises_type_error():
    class Bad:
        def __iter__(self):
            return [1, 2]

    def fn(x):
        try:
            out = [v for v in Bad()]
        except TypeError as e:
            out = str(e)
        return out, x + 1

    check(fn, torch.randn(3))


@dynamo_bug("iter(deque) is a list_iterator")
def test_iterator_types_of_module_containers_deques_and_dict_subclasses():
    class D(dict):
        pass

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(2, 2)])
            self.seq = torch.nn.Sequential(torch.nn.ReLU())
            self.plist = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(2))])

        def forward(self, x):
            its = [iter(self.layers), iter(self.seq), iter(self.plist), iter(collections.deque([1])),
                   iter(D(a=1))]
            return x + 1, [type(it).__name__ for it in its]

    check(M(), torch.randn(2))


# ---- attributes of objects kiln does not look into (fresh batch 3 probes) -------------------------------

def test_missing_attribute_of_an_opaque_object_is_caught_where_eager_catches_it():
    def fn(x):
        try:
            r = ("ok", object().x)
        except AttributeError as e:
            r = ("caught", str(e))
        return r, x + 1

    check(fn, torch.randn(3), graphs=(0, 1, 2))



# A for loop over zip(model.parameters()) with a graph break in its body: at the second break the
# zip (handed to the resume function over a ResumeIterator) was handed on as the same object, whose
# ResumeIterator kiln had read ahead without advancing: the loop restarted at every break (an EMA update
# ran its body ~120 times, then kiln hit the recursion limit). Found by hand.
ZIP_LOOP_CALLS = []


def test_loop_over_zip_of_parameters_with_a_break_runs_each_item_once():
    model = torch.nn.Linear(4, 3)

    def fn(m, x):
        for (p,) in zip(m.parameters()):
            ZIP_LOOP_CALLS.append(tuple(p.shape))
            print(end="")  # a graph break, as in user code
        return x + 1

    ZIP_LOOP_CALLS.clear()
    fn(model, _t(2))
    eager = list(ZIP_LOOP_CALLS)
    ZIP_LOOP_CALLS.clear()
    reset()
    compile_fn(fn, CountingBackend())(model, _t(2))
    assert ZIP_LOOP_CALLS == eager == [(3, 4), (3,)]


def test_ema_update_through_data():
    model, ema = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def fn(m, e, decay):
        with torch.no_grad():
            for p, q in zip(m.parameters(), e.parameters()):
                q.data.mul_(decay).add_(p.data, alpha=1 - decay)
        return None

    check(fn, model, ema, 0.9, graphs=(1, 2, 3, 4, 5), inputs_mutated=True)


def test_inplace_set_and_dict_operators_keep_the_object():
    # `s |= t`, `s -= t`, `d |= e` change the object itself: an alias and a set passed in see the change
    # (kiln rebound the name to a new set or dict: the alias kept the old members, the caller's set too)
    def fn(x, given):
        s = {1}
        alias = s
        s |= {2, 3}
        s -= {1}
        d = {"a": 1}
        d_alias = d
        d |= {"b": 2}
        given |= {7}
        given ^= {1}
        return x + len(alias), sorted(alias), d_alias, s is alias

    check(fn, torch.ones(2), {1, 2}, inputs_mutated=True, breaks=0)


def test_containers_passed_twice_are_one_object():
    # a set, deque or defaultdict passed in two arguments is one object: a change through one is seen
    # through the other (kiln made two values: the second saw the old members)
    def fn(x, a, b):
        a.add(3)
        return x + len(b), sorted(b), a is b

    check_recompiles(fn, [(torch.ones(2), {1, 2}, {1, 2}), (torch.ones(2), *[{1}] * 2)], graphs=(2,))

    def fn_deque(x, a, b):
        a.append(3)
        return x + len(b), list(b)

    shared = collections.deque([1])
    check(fn_deque, torch.ones(2), shared, shared, inputs_mutated=True)


@dynamo_bug("`a is b` traced False for two lists is reused when one list is passed twice")
def test_is_between_lists_guarded_when_distinct():
    # `a is b` decided False for two different lists must not be reused when one list is passed twice
    def fn(x, a, b):
        return x + 1, a is b

    shared = [1]
    check_recompiles(fn, [(torch.ones(2), [1], [1]), (torch.ones(2), shared, shared)], graphs=(2,))


def test_parameter_of_a_module_is_a_parameter():
    # a module's parameter read in the frame is an nn.Parameter (kiln's get_attr value said torch.Tensor:
    # isinstance(w, nn.Parameter) was False, type(w).__name__ 'Tensor')
    def fn(m, x):
        w = m.weight
        return x @ w.t(), isinstance(w, torch.nn.Parameter), type(w).__name__, type(m.bias) is torch.nn.Parameter

    check(fn, torch.nn.Linear(3, 2), torch.ones(2, 3), breaks=0)


def test_nested_function_rebuilt_after_a_break_keeps_its_annotations():
    # functools.singledispatch's register() reads the annotations of a function made in the frame; kiln
    # rebuilt it without them after the graph: TypeError "Invalid first argument to `register()`"
    def fn(x):
        @functools.singledispatch
        def describe(v):
            return "object"

        @describe.register
        def _(v: int):
            return "int"

        def typed(a: int, b: "str" = "z") -> torch.Tensor:
            return x

        return x + 1, describe(1), describe("s"), typed.__annotations__ == {"a": int, "b": "str", "return": torch.Tensor}

    check(fn, torch.ones(2), graphs=1, dynamo_graphs=0)


def _signature_helper(a, b=2, *, c=3):
    return a


def test_signature_parameters_is_the_real_mapping_after_a_break():
    # kiln modelled inspect.signature(f).parameters as a tuple of the names: `params["b"]`, run as Python at
    # the graph break, raised TypeError (tuple indices must be integers)
    def fn(x):
        params = inspect.signature(_signature_helper).parameters
        return x * len(params), "c" in params, list(params), params["b"].default, type(params).__name__

    check(fn, torch.ones(2), graphs=1)


def test_parameter_is_a_leaf():
    # kiln answered `m.weight.is_leaf` by the rule for graph values (a leaf iff it needs no grad): False
    def fn(m, x):
        w = m.weight
        return x + 1, w.is_leaf, w.grad_fn is None, (w * 2).is_leaf

    check(fn, torch.nn.Linear(2, 2), torch.ones(2), breaks=0)


class _PlainObject:
    pass


class _CallableObject:
    def __call__(self):
        return 1


def test_callable_of_an_instance_asks_its_type_for_call():
    # kiln answered callable(obj) by hasattr(type(obj), "__call__"), True for every class (through the
    # metaclass): an instance of a class without __call__ was "callable", silently (a new user's case)
    def fn(x, plain, calls):
        made = _PlainObject()
        return x + 1, callable(plain), callable(calls), callable(made), callable(_PlainObject), callable(len)

    check(fn, torch.ones(2), _PlainObject(), _CallableObject(), breaks=0)
