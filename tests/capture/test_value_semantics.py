"""Unit tests of single value kinds at the capture stage: what a construct gives while tracing (one graph,
no break) and where it refuses (the break reason)."""
import collections
import contextlib
import dataclasses
import enum
import functools
import operator
import typing

import pytest
import torch

import kiln
from kiln.capture.values.objects import ClassValue


def setup_function():
    kiln.reset()


def _explain(fn, *args):
    report = kiln.explain(fn, backend="eager")(*args)
    return report.graph_count, [str(r) for r in report.break_reasons]


class _LenMeta(type):
    def __len__(cls):
        return 0


class _Empty(metaclass=_LenMeta):
    pass


def test_class_truth_is_true_unless_its_metaclass_says():
    assert ClassValue(ValueError).truth(None) is True

    def fn(x, cls=ValueError):
        return x + 1 if cls else x

    assert _explain(fn, torch.ones(2)) == (1, [])

    def fn_meta(x, cls=_Empty):
        return x + 1 if cls else x - 1  # bool(_Empty) is False: len() of its metaclass

    graphs, reasons = _explain(fn_meta, torch.ones(2))
    assert any("metaclass defines __bool__ or __len__" in r for r in reasons), reasons
    assert torch.equal(kiln.compile(fn_meta, backend="eager")(torch.ones(2)), torch.zeros(2))


@contextlib.contextmanager
def _logged(log, name):
    log.append("enter " + name)
    try:
        yield name
    finally:
        log.append("exit " + name)


def test_exit_stack_enters_contextmanager_objects_suppress_and_stacks():
    def fn(x):
        log = []
        with contextlib.ExitStack() as stack:
            a = stack.enter_context(_logged(log, "a"))
            inner = stack.enter_context(contextlib.ExitStack())
            inner.callback(log.append, "inner callback")
            b = stack.enter_context(_logged(log, "b"))
            none = stack.enter_context(contextlib.suppress(KeyError))
            y = x * len(a + b)
        return y, log, none

    assert _explain(fn, torch.ones(2)) == (1, [])
    expected = fn(torch.ones(2))
    assert expected[1] == ["enter a", "enter b", "exit b", "inner callback", "exit a"]
    out = kiln.compile(fn, backend="eager")(torch.ones(2))
    assert torch.equal(out[0], expected[0]) and out[1:] == expected[1:]


def test_closure_of_a_nested_function_is_its_cells_one_tuple():
    def fn(x, y):
        def make(b):
            def apply(t):
                return t + b
            return apply

        f = make(y)
        cells = f.__closure__
        return (f(x) + cells[0].cell_contents, cells is f.__closure__, (lambda t: t).__closure__ is None,
                type(cells[0]).__name__, f, cells)

    assert _explain(fn, torch.ones(2), torch.ones(2)) == (1, [])
    out = kiln.compile(fn, backend="eager")(torch.ones(2), torch.ones(2))
    assert torch.equal(out[0], torch.full((2,), 3.0)) and out[1:4] == (True, True, "cell")
    f, cells = out[4:]
    assert f.__closure__ is cells  # rebuilt as the function's own tuple, not a copy
    cells[0].cell_contents = torch.zeros(2)
    assert torch.equal(f(torch.ones(2)), torch.ones(2))


def test_defaults_of_a_nested_function_are_its_own_tuple():
    def fn(x):
        scale = lambda t, k=x * 2: t * k  # noqa: E731
        defaults = scale.__defaults__
        return scale(x), defaults is scale.__defaults__, (lambda: 1).__defaults__, scale, defaults

    assert _explain(fn, torch.ones(1)) == (1, [])
    out = kiln.compile(fn, backend="eager")(torch.ones(1))
    assert out[1:3] == (True, None) and out[3].__defaults__ is out[4]


class _Mode(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"
    ALSO_TRAIN = "train"  # an alias: not iterated


class _Perm(enum.Flag):
    R = 1
    W = 2


def test_enum_class_call_looks_members_up_by_value_and_iterates():
    def fn(x, name="eval"):
        mode = _Mode(name)
        same = _Mode(_Mode.TRAIN)
        return x * len(list(_Mode)), mode, same, [m.name for m in _Mode], _Perm(1)

    assert _explain(fn, torch.ones(2)) == (1, [])
    out = kiln.compile(fn, backend="eager")(torch.ones(2))
    assert out[1:] == (_Mode.EVAL, _Mode.TRAIN, ["TRAIN", "EVAL"], _Perm.R)


def test_enum_class_call_of_an_unknown_value_breaks_and_raises_as_eager():
    def fn(x, name="test"):
        return x + 1, _Mode(name)

    with pytest.raises(ValueError, match="'test' is not a valid _Mode"):
        kiln.compile(fn, backend="eager")(torch.ones(2))
    assert any("is not a value of its members" in r for r in kiln.stats.graph_breaks), kiln.stats.graph_breaks


def test_inplace_set_and_dict_operators_change_the_object_itself():
    def fn(x, given):
        s = {1, 2}
        alias = s
        s |= {3, 4}
        s -= {1}
        s &= {2, 3, 4, 9}
        s ^= {4, 7}
        d = {"a": 1}
        d_alias = d
        d |= [("b", 2)]  # dict |= takes what update takes
        given |= {5}
        return x + len(alias), alias, s is alias, d_alias, d is d_alias

    graphs, reasons = _explain(fn, torch.ones(1), {1})
    assert graphs == 1 and reasons == []
    given_eager, given_compiled = {1}, {1}
    expected = fn(torch.ones(1), given_eager)
    out = kiln.compile(fn, backend="eager")(torch.ones(1), given_compiled)
    assert out[1:] == expected[1:] and torch.equal(out[0], expected[0])
    assert given_compiled == given_eager == {1, 5}


def test_set_update_methods_and_comparisons():
    def fn(x):
        a = {1, 2, 3, 4}
        a.difference_update({1}, [2])
        a.intersection_update(range(10))
        a.symmetric_difference_update([4, 5])
        return x * len(a), sorted(a), a <= {3, 5, 6}, a < {3, 5}, {3} < a, a >= frozenset({5}), a == {5, 3}

    assert _explain(fn, torch.ones(1)) == (1, [])
    out = kiln.compile(fn, backend="eager")(torch.ones(1))
    assert out[1:] == fn(torch.ones(1))[1:]


def test_deque_operators_follow_cpython():
    def fn(x, given):
        q = collections.deque([x], maxlen=4)
        alias = q
        q += [x * 2, x * 3]  # extend, in place
        q *= 2  # in place, the maxlen keeps the last four
        joined = q + collections.deque([x * 9])  # a new deque of q's maxlen
        given += (5,)
        return sum(alias), q is alias, joined.maxlen, len(joined), 2 * collections.deque([1]), given is not None

    given = collections.deque([1])
    assert _explain(fn, torch.ones(1), collections.deque([1])) == (1, [])
    expected = fn(torch.ones(1), collections.deque([1]))
    out = kiln.compile(fn, backend="eager")(torch.ones(1), given)
    assert torch.equal(out[0], expected[0]) and out[1:] == expected[1:] and given == collections.deque([1, 5])


def test_held_parameter_value_has_the_parameter_type():
    from kiln.capture.values.tensors import TensorValue

    def fn(m, x):
        return x + 1, isinstance(m.weight, torch.nn.Parameter), isinstance(m.running_mean, torch.nn.Parameter)

    bn = torch.nn.BatchNorm1d(2)
    assert kiln.compile(fn, backend="eager")(bn, torch.ones(2))[1:] == (True, False)
    assert _explain(fn, bn, torch.ones(2)) == (1, [])
    assert TensorValue(None, torch.ones(1), tensor_type=torch.nn.Parameter).python_type() is torch.nn.Parameter


@dataclasses.dataclass(order=True)
class _Version:
    major: int
    minor: int = 0


class _OnlyLess:
    calls = []

    def __init__(self, v):
        self.v = v

    def __lt__(self, other):
        _OnlyLess.calls.append((self.v, other.v))
        return self.v < other.v


def test_sorted_min_max_trace_python_comparison_methods():
    def fn(x):
        _OnlyLess.calls.clear()
        versions = sorted([_Version(2), _Version(1, 5), _Version(1, 2)])
        top = max([_OnlyLess(3), _OnlyLess(7), _OnlyLess(2)])  # item > best: the reflected __lt__
        return x * versions[0].minor, [(v.major, v.minor) for v in versions], top.v, list(_OnlyLess.calls)

    assert _explain(fn, torch.ones(1)) == (1, [])
    expected = fn(torch.ones(1))
    out = kiln.compile(fn, backend="eager")(torch.ones(1))
    assert torch.equal(out[0], expected[0]) and out[1:] == expected[1:]


def test_names_of_builtin_functions_and_the_class_of_a_tensor():
    def fn(x):
        ops = [operator.add, operator.mul, len]
        return (x + 1, [op.__name__ for op in ops], operator.add.__module__, x.__class__ is torch.Tensor,
                x.__class__.__name__)

    assert _explain(fn, torch.ones(1)) == (1, [])
    assert kiln.compile(fn, backend="eager")(torch.ones(1))[1:] == fn(torch.ones(1))[1:]


def test_typing_cast_returns_its_value():
    def fn(x):
        y = typing.cast(torch.Tensor, x)
        return y + 1, typing.cast("int", 3), typing.cast(typ=list, val=[x])[0] is x

    assert _explain(fn, torch.ones(1)) == (1, [])
    out = kiln.compile(fn, backend="eager")(torch.ones(1))
    assert torch.equal(out[0], torch.full((1,), 2.0)) and out[1:] == (3, True)


class _Reduction(enum.Enum):
    SUM = "sum"
    MEAN = "mean"

    def apply(self, t):
        return t.sum() if self is _Reduction.SUM else t.mean()


def test_enum_member_methods_are_traced_with_tensor_arguments():
    def fn(x, how=_Reduction.MEAN):
        return how.apply(x), _Reduction.SUM.apply(x), how.name

    assert _explain(fn, torch.ones(3)) == (1, [])
    out = kiln.compile(fn, backend="eager")(torch.arange(3.0))
    assert out[0].item() == 1.0 and out[1].item() == 3.0 and out[2] == "MEAN"


class _Evens:
    steps = []

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            _Evens.steps.append(i)
            yield i * 2


def test_in_steps_the_iterator_of_an_object_without_contains():
    def fn(x):
        _Evens.steps.clear()
        return x + 1, 4 in _Evens(5), 3 in _Evens(2), list(_Evens.steps)  # stops at the first match

    assert _explain(fn, torch.ones(1)) == (1, [])
    assert kiln.compile(fn, backend="eager")(torch.ones(1))[1:] == (True, False, [0, 1, 2, 0, 1])


class _Second:
    def __index__(self):
        return 1


class _Magnitude:
    def __init__(self, v):
        self.v = v

    def __abs__(self):
        return self.v.abs()


def test_index_and_abs_dunders_of_python_classes():
    def fn(x):
        return [x, x * 2][_Second()], (5, 6)[_Second()], "ab"[_Second()], abs(_Magnitude(x - 3))

    assert _explain(fn, torch.ones(2)) == (1, [])
    out = kiln.compile(fn, backend="eager")(torch.ones(2))
    assert torch.equal(out[0], torch.full((2,), 2.0)) and out[1:3] == (6, "b") and torch.equal(out[3], torch.full((2,), 2.0))


def test_make_function_sets_the_annotations_of_a_rebuilt_function():
    from kiln.capture.values.functions import make_function

    def typed(a: int, b: "str" = "z") -> None:
        return None

    rebuilt = make_function(typed.__code__, globals(), "typed", ("z",), {}, (), ("a", int, "b", "str", "return", None))
    assert rebuilt.__annotations__ == typed.__annotations__ and rebuilt.__defaults__ == ("z",)


def test_lru_cache_made_in_the_frame_models_its_cache():
    def fn(x):
        runs = []

        @functools.lru_cache(maxsize=2)
        def square(n):
            runs.append(n)
            return [n * n]  # a mutable result: a hit hands back the same list

        a, _, again, _, _, evicted = square(1), square(2), square(1), square(3), square(2), square(1)

        @functools.cache
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        return x * fib(15), a is again, a is evicted, runs

    assert _explain(fn, torch.ones(1)) == (1, [])
    out = kiln.compile(fn, backend="eager")(torch.ones(1))
    assert out[0].item() == 610 and out[1:] == (True, False, [1, 2, 3, 2, 1])


def test_lru_cache_made_in_the_frame_with_entries_is_not_handed_on():
    def fn(x):
        @functools.lru_cache(maxsize=None)
        def double(n):
            return n * 2

        double(3)
        return x + double(3), double

    out = kiln.compile(fn, backend="eager")(torch.ones(1))
    assert out[1](3) == 6 and out[1].cache_info().currsize == 1  # eager's wrapper, with its entry


def _three_parameters(a, b=2, *, c=3):
    return a


def test_signature_parameters_models_names_and_rebuilds_the_real_mapping():
    import inspect

    def fn(x):
        params = inspect.signature(_three_parameters).parameters
        return x * len(params), "c" in params, [n for n in params], params

    assert _explain(fn, torch.ones(1)) == (1, [])
    out = kiln.compile(fn, backend="eager")(torch.ones(1))
    assert out[1:3] == (True, ["a", "b", "c"]) and out[3] == inspect.signature(_three_parameters).parameters
    assert type(out[3]).__name__ == "mappingproxy"


def test_grad_mode_objects_are_handed_on_and_read_from_the_frame():
    def fn(x, outer):
        inner = torch.no_grad()
        with inner:
            y = x * 2
        print(end="")  # a graph break: `inner` is handed on (rebuilt with the mode its __enter__ saved)
        with inner, outer:
            z = x * 3
        return y, z, type(inner).__name__, inner

    given = torch.enable_grad()
    out = kiln.compile(fn, backend="eager")(torch.ones(2, requires_grad=True), given)
    assert out[2] == "no_grad" and not out[0].requires_grad and out[1].requires_grad
    assert out[3].prev is True and given.prev is False  # what each __enter__ saved, as in eager
    graphs, reasons = _explain(fn, torch.ones(2, requires_grad=True), torch.enable_grad())
    assert graphs == 2 and len(reasons) == 1 and "print" in reasons[0], reasons  # (the frame ran eagerly)


def test_list_iadd_of_any_iterable_and_dict_pop_of_a_missing_key():
    def fn(x):
        items = [1]
        alias = items
        items += (2, 3)
        items += "ab"
        items += range(2)
        items += {"k": 0}
        d = {"a": 1}
        try:
            d.pop("missing")
        except KeyError as e:
            caught = e.args
        return x + 1, alias, caught

    assert _explain(fn, torch.ones(1)) == (1, [])
    assert kiln.compile(fn, backend="eager")(torch.ones(1))[1:] == fn(torch.ones(1))[1:]


def test_is_leaf_and_grad_fn_of_inputs_parameters_and_graph_values():
    lin = torch.nn.Linear(2, 2)

    def fn(m, x):
        y = x * 2
        with torch.no_grad():
            z = x * 3
        return y, m.bias.is_leaf, m.bias.grad_fn is None, x.grad_fn is None, z.is_leaf, z.grad_fn is None

    assert _explain(fn, lin, torch.ones(2, requires_grad=True)) == (1, [])
    out = kiln.compile(fn, backend="eager")(lin, torch.ones(2, requires_grad=True))
    assert out[1:] == (True, True, True, True, True)

    def non_leaf(x):
        return (x * 2).grad_fn is None

    graphs, reasons = _explain(non_leaf, torch.ones(2, requires_grad=True))
    assert any("grad_fn" in r for r in reasons), reasons


def test_slice_value_attributes_are_its_parts():
    from kiln.capture.values.base import ConstantValue
    from kiln.capture.values.containers import SliceValue

    start, stop, step = ConstantValue(1), ConstantValue(None), ConstantValue(2)
    sl = SliceValue(start, stop, step)
    assert sl.getattr(None, "start") is start and sl.getattr(None, "stop") is stop
    assert sl.getattr(None, "step") is step
    assert sl.getattr(None, "indices").call(None, [ConstantValue(7)], {}).as_constant() == (1, 7, 2)
