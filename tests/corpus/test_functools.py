"""functools inside compiled code: reduce, partial, wraps/update_wrapper, lru_cache/cache, cmp_to_key."""
import functools
import operator

import torch
import torch.nn as nn

from . import harness
from .harness import check, dynamo_bug


def one_graph(fn, *args, **kwargs):
    """A case that must be one graph with no break (fullgraph=True), under kiln and dynamo alike."""
    return check(fn, *args, graphs=1, fullgraph=True, **kwargs)


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


# ---- reduce --------------------------------------------------------------------------------------

def test_reduce_list_of_tensors():
    def fn(xs):
        return functools.reduce(operator.add, xs)

    one_graph(fn, [_t(3), _t(3, seed=1), _t(3, seed=2)])


def test_reduce_with_initial():
    def fn(xs, x):
        return functools.reduce(lambda acc, t: acc * t, xs, x)

    one_graph(fn, (_t(3), _t(3, seed=1)), _t(3, seed=2))


def test_reduce_generator():
    def fn(x):
        return functools.reduce(torch.add, (x * i for i in range(1, 4)))

    one_graph(fn, _t(3))


def test_reduce_constants_and_tensor():
    def fn(x):
        n = functools.reduce(operator.mul, x.shape, 1)
        return x.reshape(n)

    one_graph(fn, _t(2, 3, 4))


def test_reduce_user_function_and_matmul():
    def combine(a, b):
        return a @ b

    def fn(ms):
        return functools.reduce(combine, ms)

    one_graph(fn, [_t(3, 3), _t(3, 3, seed=1), _t(3, 3, seed=2)])


def test_reduce_empty_with_initial():
    def fn(x):
        return x + functools.reduce(operator.add, [], 7)

    one_graph(fn, _t(2))


def test_reduce_single_item_no_call():
    def fn(x):
        return functools.reduce(operator.add, [x]) * 2

    one_graph(fn, _t(2))


# ---- partial ------------------------------------------------------------------------------------

def _scale(x, factor, bias=0.0):
    return x * factor + bias


def test_partial_made_in_frame():
    def fn(x):
        f = functools.partial(_scale, factor=3.0)
        return f(x), f(x, bias=1.0)

    one_graph(fn, _t(3))


def test_partial_of_torch_function():
    def fn(x):
        s = functools.partial(torch.sum, dim=1)
        return s(x), s(x, keepdim=True)

    one_graph(fn, _t(2, 3))


def test_partial_positional_and_nested():
    def fn(x, y):
        add = functools.partial(torch.add, x)
        add2 = functools.partial(add, alpha=2)
        return add2(y), add(y)

    one_graph(fn, _t(3), _t(3, seed=1))


def test_partial_of_module():
    lin = nn.Linear(3, 2)

    def fn(x):
        p = functools.partial(lin)
        return p(x)

    one_graph(fn, _t(4, 3))


_HALF = functools.partial(_scale, factor=0.5)


def test_partial_passed_in():
    def fn(x):
        return _HALF(x) + _HALF(x, bias=2.0), _HALF.keywords

    one_graph(fn, _t(3))


def test_partial_attributes():
    def fn(x):
        f = functools.partial(_scale, 2.0, bias=1.0)
        return f.func(x, *f.args, **f.keywords), len(f.args)

    one_graph(fn, _t(3))


def test_partial_returned():
    def fn(x):
        p = functools.partial(_scale, factor=4.0)
        return x + 1, p.func, p.keywords

    one_graph(fn, _t(3))


def test_partial_of_lambda_closure():
    def fn(x, y):
        f = functools.partial(lambda a, b, c: a * b + c, x)
        return f(y, 1.0)

    one_graph(fn, _t(3), _t(3, seed=1))


def test_partial_in_map():
    def fn(xs):
        f = functools.partial(torch.mul, other=2.0)
        return [f(x) for x in xs]

    one_graph(fn, [_t(2), _t(2, seed=1)])


# ---- wraps / update_wrapper ---------------------------------------------------------------------

def _logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) + 1
    return wrapper


@_logged
def _outer_decorated(x):
    """doc"""
    return x * 2


def test_wraps_decorator_defined_and_applied_outside():
    def fn(x):
        return _outer_decorated(x), _outer_decorated.__name__

    one_graph(fn, _t(3))


def test_wraps_decorator_applied_inside():
    def fn(x):
        def inner(y):
            return y.sin()
        g = _logged(inner)
        return g(x), g.__name__, g.__wrapped__ is inner

    one_graph(fn, _t(3))


def test_wraps_decorator_defined_inside():
    def fn(x):
        def deco(f):
            @functools.wraps(f)
            def wrapper(y):
                return f(y) * 3
            return wrapper

        @deco
        def body(y):
            return y + 1

        return body(x), body.__qualname__.endswith("body")

    one_graph(fn, _t(3))


def test_update_wrapper_inside():
    def fn(x):
        def inner(y):
            return y.cos()

        def wrapper(y):
            return inner(y) - 1

        functools.update_wrapper(wrapper, inner)
        return wrapper(x), wrapper.__name__

    one_graph(fn, _t(3))


def test_wraps_returned_function():
    def fn(x):
        def inner(y):
            return y.tan()
        g = _logged(inner)
        return x + 1, g.__name__, g.__doc__, g.__module__

    one_graph(fn, _t(3))


# ---- lru_cache / cache ------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _num_heads(dim, head_dim):
    return dim // head_dim


@functools.cache
def _pattern(n):
    return tuple(i % 2 for i in range(n))


@functools.lru_cache
def _make_mask(n):
    return torch.ones(n)


def test_lru_cache_constant_arguments():
    def fn(x):
        h = _num_heads(x.shape[-1], 2)
        return x.reshape(x.shape[0], h, 2)

    one_graph(fn, _t(2, 6))


def test_cache_decorator_tuple_result():
    def fn(x):
        p = _pattern(x.shape[0])
        return x * torch.tensor(p, dtype=x.dtype)

    one_graph(fn, _t(4))


def test_lru_cache_tensor_result_breaks():
    def fn(x):
        return x + _make_mask(x.shape[0])

    check(fn, _t(3), graphs=1, dynamo_graphs=1)


def test_lru_cache_tensor_argument():
    @functools.lru_cache
    def double(t):
        return t * 2

    def fn(x):
        return double(x) + 1

    check(fn, _t(3), graphs=2, dynamo_graphs=1)


_SCALE = [3]
_CALLS = []


@functools.lru_cache
def _scaled(n):
    return n * _SCALE[0]


@functools.lru_cache
def _counted(n):
    _CALLS.append(n)
    return n + 1


@functools.lru_cache
def _with_math(n):
    import math

    return math.ceil(math.log2(n))


def test_lru_cache_reading_a_global_breaks():
    # eager's cache would keep an old result after _SCALE changes: kiln runs the call as Python
    def fn(x):
        return x * _scaled(2)

    check(fn, _t(3), graphs=1)


@dynamo_bug("dynamo ignores the cache: the append repeats on every traced call and recompiles")
def test_lru_cache_with_side_effect_breaks():
    def fn(x):
        return x * _counted(5)

    check(fn, _t(3), graphs=1)


def test_lru_cache_calling_math():
    def fn(x):
        return x.reshape(-1)[: _with_math(x.numel())]

    one_graph(fn, _t(3, 4))


@functools.lru_cache(maxsize=None)
def _tri(n):
    return n if n < 2 else n + _tri(n - 1)


@functools.lru_cache(maxsize=None)
def _tri_plus_pattern(n):
    return _tri(n) + sum(_pattern(n))


@functools.lru_cache(maxsize=None)
def _tri_scaled(n):
    return n * _SCALE[0] if n < 2 else n + _tri_scaled(n - 1)


def test_lru_cache_recursive_through_its_global_name():
    # the recursive call reads G['_tri'] (the wrapper itself) and its __wrapped__: both checked calls
    def fn(x):
        return x * _tri(6)

    one_graph(fn, _t(3))


def test_lru_cache_calling_other_lru_cache_functions():
    def fn(x):
        return x + _tri_plus_pattern(5)

    one_graph(fn, _t(3))


def test_lru_cache_recursive_reading_a_global_still_breaks():
    # the innermost level reads _SCALE: eager's cache would keep the old result once it changes
    def fn(x):
        return x * _tri_scaled(4)

    check(fn, _t(3), graphs=1, breaks=1)


def test_wrapped_function_handed_back_keeps_attributes():
    def fn(x):
        def inner(y):
            """inner doc"""
            return y.tan()
        return x + 1, _logged(inner)

    harness.reset()
    compiled = harness.compile_fn(fn, harness.CountingBackend())
    out, g = compiled(_t(3))
    assert g.__name__ == "inner" and g.__doc__ == "inner doc" and g.__wrapped__.__name__ == "inner"
    torch.testing.assert_close(g(_t(3)), _t(3).tan() + 1)


def test_partial_handed_back_is_a_partial():
    def fn(x):
        return x * 2, functools.partial(torch.add, x, alpha=3)

    harness.reset()
    compiled = harness.compile_fn(fn, harness.CountingBackend())
    out, p = compiled(_t(3))
    assert type(p) is functools.partial and p.keywords == {"alpha": 3}
    torch.testing.assert_close(p(_t(3, seed=1)), torch.add(_t(3), _t(3, seed=1), alpha=3))


# ---- cmp_to_key ---------------------------------------------------------------------------------

@dynamo_bug("TorchDynamo does not trace functools.cmp_to_key (it breaks the graph)")
def test_cmp_to_key_sorted_constants():
    def cmp(a, b):
        return (a[1] > b[1]) - (a[1] < b[1])

    def fn(x):
        order = sorted([("a", 3), ("b", 1), ("c", 2)], key=functools.cmp_to_key(cmp))
        return x * order[0][1], order

    one_graph(fn, _t(3))


@dynamo_bug("TorchDynamo does not trace functools.cmp_to_key (it breaks the graph)")
def test_cmp_to_key_sorted_tensors_by_shape():
    def cmp(a, b):
        return a.shape[0] - b.shape[0]

    def fn(xs):
        ordered = sorted(xs, key=functools.cmp_to_key(cmp))
        return torch.cat(ordered)

    one_graph(fn, [_t(3), _t(1, seed=1), _t(2, seed=2)])


def test_lru_cache_reading_a_global_read_before_breaks():
    # the frame reads _SCALE first (its guard exists already); the cached call still depends on it
    def fn(x):
        return x * _SCALE[0] + _scaled(3)

    check(fn, _t(3), graphs=2, dynamo_graphs=1)


def test_partial_held_twice_is_one_object():
    def fn(x):
        p = functools.partial(torch.mul, other=2)
        return x + 1, [p, p]

    harness.reset()
    compiled = harness.compile_fn(fn, harness.CountingBackend())
    _, (a, b) = compiled(_t(3))
    assert a is b
