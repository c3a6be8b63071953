"""User functions inlined into the caller's graph: defaults, varargs, closures, lambdas, recursion,
functools.partial, decorators, staticmethod/classmethod."""
import functools

import torch
import torch.nn.functional as F

from .harness import check


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def gelu_mlp(x, w1, w2, act=F.gelu):
    return act(x @ w1) @ w2


def scale_shift(x, scale=2.0, shift=0.0, *, clamp=None):
    y = x * scale + shift
    if clamp is not None:
        y = y.clamp(-clamp, clamp)
    return y


def add_all(*tensors):
    out = tensors[0]
    for t in tensors[1:]:
        out = out + t
    return out


def weighted(x, **weights):
    for name in sorted(weights):
        x = x * weights[name]
    return x


def test_inlined_module_level_function():
    def fn(x, w1, w2):
        return gelu_mlp(x, w1, w2) + x

    check(fn, _t(2, 4), _t(4, 8, seed=1), _t(8, 4, seed=2))


def test_default_arguments_and_keyword_calls():
    def fn(x):
        return scale_shift(x), scale_shift(x, 3.0), scale_shift(x, shift=1.0), scale_shift(x, 1.0, 2.0, clamp=0.5)

    check(fn, _t(5))


def test_keyword_only_arguments():
    def inner(x, *, eps=1e-5, dim=-1):
        return x / (x.norm(dim=dim, keepdim=True) + eps)

    def fn(x):
        return inner(x), inner(x, dim=0), inner(x, eps=1.0, dim=1)

    check(fn, _t(3, 4))


def test_star_args():
    def fn(a, b, c):
        parts = (a, b)
        return add_all(*parts, c), add_all(a), add_all(*[a, b])

    check(fn, _t(3), _t(3, seed=1), _t(3, seed=2))


def test_star_kwargs():
    def fn(x):
        cfg = {"b": 2.0, "a": 0.5}
        return weighted(x, **cfg), weighted(x, c=3.0, **cfg), weighted(x)

    check(fn, _t(3))


def test_args_kwargs_forwarding_wrapper():
    def inner(x, y, *, alpha=1.0):
        return x + alpha * y

    def forward(*args, **kwargs):
        return inner(*args, **kwargs)

    def fn(x, y):
        return forward(x, y), forward(x, y, alpha=-2.0), forward(y=x, x=y)

    check(fn, _t(3), _t(3, seed=1))


def test_caller_receives_star_args():
    def fn(*xs, scale=1.0):
        return torch.stack(xs).sum(0) * scale, len(xs)

    check(fn, _t(2), _t(2, seed=1), _t(2, seed=2), kwargs={"scale": 0.5})


def test_closure_reads_outer_variables():
    def make(scale, bias):
        def fn(x):
            return x * scale + bias

        return fn

    check(make(3.0, torch.ones(4)), _t(4))


def test_closure_over_tensor_in_compiled_frame():
    def fn(x):
        w = x.t()

        def project(v):
            return v @ w

        return project(x) + project(x * 2)

    check(fn, _t(3, 3))


def test_nested_def_returned_and_called():
    def fn(x):
        def make_act(kind):
            if kind == "relu":
                return lambda t: t.relu()

            def gelu(t):
                return F.gelu(t)

            return gelu

        return make_act("relu")(x) + make_act("gelu")(x)

    check(fn, _t(5))


def test_closure_nonlocal_counter():
    def fn(x):
        calls = 0

        def step(t):
            nonlocal calls
            calls += 1
            return t * 2

        y = step(step(x))
        return y, calls

    check(fn, _t(3))


def test_lambdas():
    def fn(x):
        sq = lambda t: t * t  # noqa: E731
        comb = lambda a, b=1.0: a + b  # noqa: E731
        return comb(sq(x)), comb(x, b=x), (lambda: x.sum())()

    check(fn, _t(3))


def test_recursion_with_python_depth():
    def tree(x, depth):
        if depth == 0:
            return x
        return tree(x * 0.5, depth - 1) + tree(x + 1, depth - 1)

    def fn(x):
        return tree(x, 3)

    check(fn, _t(2))


def test_functools_partial():
    def fn(x):
        act = functools.partial(F.leaky_relu, negative_slope=0.2)
        norm = functools.partial(scale_shift, scale=0.5)
        return act(x), norm(x, shift=1.0)

    check(fn, _t(4))


def test_partial_created_outside():
    softmax_last = functools.partial(torch.softmax, dim=-1)

    def fn(x):
        return softmax_last(x) * 2

    check(fn, _t(2, 3))


def _double_output(f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        return f(*args, **kwargs) * 2

    return wrapper


@_double_output
def decorated_block(x, w):
    return torch.tanh(x @ w)


def test_decorator_wrapping_function():
    def fn(x, w):
        return decorated_block(x, w) + 1

    check(fn, _t(2, 3), _t(3, 3, seed=1))


def test_compiling_a_decorated_function():
    check(decorated_block, _t(2, 3), _t(3, 3, seed=1))


def _repeat(n):
    def deco(f):
        def wrapper(x):
            for _ in range(n):
                x = f(x)
            return x

        return wrapper

    return deco


def test_decorator_with_arguments():
    @_repeat(3)
    def half(x):
        return x * 0.5 + 1

    def fn(x):
        return half(x)

    check(fn, _t(3))


class _Ops:
    factor = 3

    @staticmethod
    def swish(x):
        return x * torch.sigmoid(x)

    @classmethod
    def scaled(cls, x):
        return x * cls.factor


def test_staticmethod_and_classmethod():
    def fn(x):
        return _Ops.swish(x), _Ops.scaled(x), _Ops().swish(x)

    check(fn, _t(4))


def test_function_returning_multiple_values():
    def stats(x):
        return x.mean(-1, keepdim=True), x.var(-1, keepdim=True, unbiased=False)

    def fn(x):
        mean, var = stats(x)
        return (x - mean) / torch.sqrt(var + 1e-5)

    check(fn, _t(3, 6))


def test_function_as_argument():
    def apply_twice(f, x):
        return f(f(x))

    def fn(x):
        return apply_twice(torch.relu, x - 0.5), apply_twice(lambda t: t * 3, x), apply_twice(F.silu, x)

    check(fn, _t(4))


def test_deep_call_chain():
    def a(x):
        return b(x) + 1

    def b(x):
        return c(x) * 2

    def c(x):
        return x.sin()

    check(a, _t(3))


def test_default_argument_mutable_not_mutated():
    def inner(x, dims=(0, 1)):
        return x.permute(*reversed(dims))

    def fn(x):
        return inner(x), inner(x, dims=[1, 0])

    check(fn, _t(2, 3))


def test_function_attributes_and_name():
    def inner(x):
        return x + 1

    inner.scale = 4

    def fn(x):
        return inner(x) * inner.scale, inner.__name__

    check(fn, _t(2))


def test_a_returned_closure_over_a_tensor_of_the_graph():
    import kiln

    def fn(x):
        y = x * 2
        return lambda k: y + k

    kiln.reset()
    before = sum(kiln.stats.eager_fallbacks.values())
    x = torch.randn(3)
    got, want = kiln.compile(fn, backend="eager")(x), fn(x)
    assert torch.equal(got(1), want(1))
    assert sum(kiln.stats.eager_fallbacks.values()) == before
