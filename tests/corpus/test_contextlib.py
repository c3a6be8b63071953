"""@contextlib.contextmanager blocks and torch.inference_mode inside compiled code."""
import contextlib

import torch

from .harness import check


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def one_graph(fn, *args, **kwargs):
    """A case that must be one graph with no break (fullgraph=True), under kiln and dynamo alike."""
    return check(fn, *args, graphs=1, fullgraph=True, **kwargs)


_LOG = []


@contextlib.contextmanager
def _scaled(x, factor):
    yield x * factor


@contextlib.contextmanager
def _no_grad_region():
    prev = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    try:
        yield
    finally:
        torch.set_grad_enabled(prev)


@contextlib.contextmanager
def _suppressing(kind):
    try:
        yield "inside"
    except kind:
        pass


@contextlib.contextmanager
def _appending(items, tag):
    items.append(tag + ":enter")
    yield len(items)
    items.append(tag + ":exit")


def _inner_raises(x):
    with _suppressing(ValueError):
        raise ValueError("dropped")
    return x + 1


def _inner_finally(x, log):
    try:
        with _appending(log, "a"):
            raise KeyError("k")
    except KeyError:
        log.append("caught")
    return x * 2


def test_contextmanager_yields_value():
    def fn(x):
        with _scaled(x, 3) as y:
            z = y + 1
        return z

    one_graph(fn, _t(3))


def test_contextmanager_code_before_and_after_yield():
    def fn(x):
        log = []
        with _appending(log, "t") as n:
            y = x * n
        return y, log

    one_graph(fn, _t(3))


def test_contextmanager_grad_mode_try_finally():
    def fn(w, x):
        with _no_grad_region():
            frozen = w * x
        return frozen, frozen.requires_grad, w * x

    one_graph(fn, _t(3).requires_grad_(), _t(3, seed=1))


def test_contextmanager_defined_inside():
    def fn(x):
        @contextlib.contextmanager
        def offset(v):
            yield v + 10

        with offset(x) as y:
            out = y * 2
        return out

    one_graph(fn, _t(3))


def test_contextmanager_nested_blocks():
    def fn(x):
        log = []
        with _appending(log, "outer"):
            with _appending(log, "inner") as n:
                y = x + n
        return y, log

    one_graph(fn, _t(3))


def test_contextmanager_suppresses_exception_in_inlined_function():
    def fn(x):
        return _inner_raises(x) * 2

    one_graph(fn, _t(3))


def test_contextmanager_exception_passes_through_finally():
    def fn(x):
        log = []
        return _inner_finally(x, log), log

    one_graph(fn, _t(3))


def test_contextmanager_suppress_wrong_kind_propagates():
    def inner(x):
        with _suppressing(KeyError):
            raise ValueError("kept")

    def middle(x):
        try:
            inner(x)
        except ValueError:
            return x + 1

    def fn(x):
        return middle(x) * 2

    one_graph(fn, _t(3))


def test_contextlib_suppress_and_nullcontext_still_work():
    def fn(x):
        with contextlib.nullcontext(x) as y:
            return y * 2

    one_graph(fn, _t(3))


def test_contextmanager_with_break_inside_block():
    def fn(x):
        log = []
        with _appending(log, "b") as n:
            y = x * n
            print("inside")  # a graph break inside the block
            y = y + 1
        return y, log

    # kiln breaks at the `with` (the generator cannot be handed on half-run) and at the print
    check(fn, _t(3), graphs=2, dynamo_graphs=0)


def test_contextmanager_passed_mutable_state():
    def fn(x, log):
        with _appending(log, "arg"):
            y = x.exp()
        return y

    one_graph(fn, _t(3), [], inputs_mutated=True)


def test_contextmanager_as_generator_not_yielding_raises():
    @contextlib.contextmanager
    def empty():
        if False:
            yield

    def middle(x):
        try:
            with empty():
                pass
        except RuntimeError:
            return x + 1

    def fn(x):
        return middle(x) * 2

    one_graph(fn, _t(3))


@contextlib.contextmanager
def _delegating(x, log):
    log.append("enter")
    yield from [x * 2]  # the with block runs at the list's one item
    log.append("exit")


def test_contextmanager_yield_from():
    def fn(x):
        log = []
        with _delegating(x, log) as y:
            z = y + 1
        return z, log

    one_graph(fn, _t(3))


def test_contextmanager_yield_from_exception_thrown_in():
    def inner(x, log):
        with _delegating(x, log):
            raise ValueError("thrown in at the yield from")

    def fn(x):
        log = []
        try:
            inner(x, log)
        except ValueError:
            log.append("caught")
        return x + 1, log

    # CPython throws the exception into the sub-iterator first, which kiln ran ahead: inner's `with` runs
    # as Python, so fn breaks at the call of inner, inside a try whose except clause then gets the real
    # exception, matched by its guarded type in the resume function (inner runs eagerly: its with breaks,
    # then the raise)
    check(fn, _t(3), graphs=1, dynamo_graphs=(1, 2))


# ---- inference_mode -----------------------------------------------------------------------------

def test_inference_mode_block_results():
    def fn(x):
        with torch.inference_mode():
            y = x * 2
        return y, y.requires_grad

    check(fn, _t(3).requires_grad_(), graphs=1)


def test_inference_mode_is_inference():
    def fn(x):
        with torch.inference_mode():
            y = x * 2
            inside = torch.is_inference_mode_enabled()
        return y.is_inference(), inside, torch.is_inference_mode_enabled(), (x + 1).is_inference()

    # kiln traces the block and answers is_inference() of tensors the graph computes from the flags it
    # follows (dynamo breaks at each is_inference())
    check(fn, _t(3), graphs=1, dynamo_graphs=3)


def test_inference_mode_input_flag():
    def fn(x):
        return x * 2, x.is_inference()

    with torch.inference_mode():
        made_inside = _t(3)
    check(fn, made_inside, graphs=1)


def test_inference_mode_query_is_guarded():
    from . import harness

    def fn(x):
        return x + 1, torch.is_inference_mode_enabled()

    harness.reset()
    compiled = harness.compile_fn(fn, harness.CountingBackend())
    with torch.inference_mode():
        assert compiled(_t(3))[1] is True
    with torch.no_grad():  # grad mode is the same; the inference-mode answer must not be reused
        assert compiled(_t(3))[1] is False
    assert compiled(_t(3))[1] is False


def test_inference_mode_decorated_helper():
    @torch.inference_mode()
    def helper(x):
        return x * 3

    def fn(x):
        y = helper(x)
        return y, y.is_inference(), y.requires_grad

    check(fn, _t(3).requires_grad_(), graphs=1, dynamo_graphs=1)


# ---- contextlib.ExitStack made inside (values/exit_stacks.py) ----------------------------------------

class _LoggingCM:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def __enter__(self):
        self.log.append("enter " + self.name)
        return self.name

    def __exit__(self, *exc):
        self.log.append("exit " + self.name)


def test_exit_stack_runs_callbacks_and_contexts_last_first():
    def fn(x):
        order = []
        with contextlib.ExitStack() as stack:
            stack.callback(order.append, "first")
            name = stack.enter_context(_LoggingCM(order, "cm"))
            stack.callback(order.append, "second")
            order.append("body")
            y = x + 1
        return y, order, name

    one_graph(fn, _t(3))


def test_exit_stack_in_a_helper_and_close_twice():
    def helper(x, order):
        with contextlib.ExitStack() as s:
            s.callback(order.append, len(order))
            return x * 2

    def fn(x):
        order = []
        st = contextlib.ExitStack()
        st.callback(order.append, "closed")
        y = helper(helper(x, order), order)
        st.close()
        st.close()
        return y, order

    one_graph(fn, _t(3))


def test_exit_stack_with_an_exception_in_the_block():
    def fn(x):
        order = []
        try:
            with contextlib.ExitStack() as stack:
                stack.callback(order.append, "cb")
                y = x + 1
                raise ValueError("boom")
        except ValueError:
            y = x * 3
        return y, order

    check(fn, _t(3), breaks=0)  # more cases: test_exit_stack_exceptions.py


def test_contextlib_suppress_swallows_only_its_classes():
    def fn(x):
        with contextlib.suppress(KeyError):
            {}["a"]
        with contextlib.suppress(KeyError, ZeroDivisionError):
            y = x + 1
            1 / 0
        try:
            with contextlib.suppress(KeyError):
                [][1]
        except IndexError:
            y = y * 2
        with contextlib.suppress(LookupError):  # a base class of KeyError
            {}["b"]
        return x + 1, y

    check(fn, torch.randn(2))


def test_contextlib_suppress_with_a_graph_break_inside():
    def fn(x):
        with contextlib.suppress(ValueError):
            y = x + 1
            print("", end="")  # a graph break inside the block: its __exit__ is handed on
            raise ValueError("swallowed")
        return x * 2

    check(fn, torch.randn(2), graphs=(1, 2), dynamo_graphs=0)
