"""A generator made in a `for` statement (`for v in gen(x):`) is held only by the loop's iterator slot:
leaving the loop early (break, return, an exception) drops its last reference and CPython closes it
right there, running its finally / with-block exit. kiln traces that close at the same point
(values/lazy_generators.mark_loop_only); a generator held anywhere else is still left to Python."""
import torch

from .harness import check, dynamo_bug

_DYNAMO_LATE_CLOSE = "the generator's finally / with exit runs after the frame, not where the loop is left (torch 2.13)"
from .test_stepped_generators import _FIN_LOG as LOG, _gen_in_no_grad as _in_no_grad, _gen_with_finally as _logged, _t


@dynamo_bug(_DYNAMO_LATE_CLOSE, strict=False)
def test_break_closes_the_generator_before_the_next_statement():
    def fn(x):
        LOG.clear()
        for v in _logged(x):
            if len(LOG) == 0:
                break
        return v + len(LOG)

    check(fn, _t(3))


@dynamo_bug(_DYNAMO_LATE_CLOSE, strict=False)
def test_return_inside_the_loop_closes_the_generator():
    def inner(x):
        for v in _in_no_grad(x):
            return v  # (the generator is closed before the frame returns: grad mode is back)
        return x

    def fn(x):
        return inner(x) * x, torch.is_grad_enabled()

    check(fn, _t(3).requires_grad_())
    assert torch.is_grad_enabled()


def test_a_nested_generator_function_with_a_with_block():
    def fn(x):
        def gen():
            with torch.no_grad():
                yield x + 1
        for v in gen():
            break
        return x * v, torch.is_grad_enabled()

    check(fn, _t(3).requires_grad_())


@dynamo_bug(_DYNAMO_LATE_CLOSE, strict=False)
def test_a_generator_method_of_an_object():
    class Source:
        def items(self, x):
            try:
                yield x
                yield x * 2
            finally:
                LOG.append("method closed")

    src = Source()

    def fn(x):
        LOG.clear()
        for v in src.items(x):
            break
        return v - len(LOG)

    check(fn, _t(3))


def test_a_generator_held_in_a_local_is_left_to_python():
    def fn(x):
        LOG.clear()
        g = _logged(x)  # (a second reference: closed only when the frame ends)
        for v in g:
            break
        return v + len(LOG)

    check(fn, _t(3), graphs=0)


@dynamo_bug(_DYNAMO_LATE_CLOSE, strict=False)
def test_a_generator_from_a_wrapper_is_left_to_python():
    def make(x):
        return _logged(x)  # (kiln does not follow who else may hold what a call returns)

    def fn(x):
        LOG.clear()
        for v in make(x):
            break
        return v + len(LOG)

    check(fn, _t(3), graphs=0)


def test_a_generator_that_ignores_generator_exit_is_left_to_python():
    def stubborn(x):
        while True:
            try:
                yield x
            except GeneratorExit:
                pass  # yields again: close() raises RuntimeError, which CPython reports as unraisable

    def fn(x):
        for v in stubborn(x):
            break
        return v * 2

    check(fn, _t(3), graphs=0, dynamo_graphs=1)
