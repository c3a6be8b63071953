"""A generator made in a `for` statement (`for v in gen(x):`) is held only by the loop's iterator slot:
leaving the loop early (break, return, an exception) drops its last reference and CPython closes it
right there, running its finally / with-block exit. kiln traces that close at the same point
(values/lazy_generators.mark_loop_only). One held only by local variables is closed as the frame
returns and CPython clears them, in slot order (values/lazy_generators.close_at_frame_end); a generator
held anywhere else is still left to Python."""
import torch

from .harness import USE_DYNAMO, CountingBackend, check, compile_fn, dynamo_bug, reset

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


def _log_after_the_call(fn, *args, graphs: int):
    """LOG as the call leaves it, eager and compiled (a generator closed as the frame clears its locals
    logs after the result is computed, which check() cannot see); the compiled side makes `graphs` graphs."""
    fn(*args)
    eager = list(LOG)
    reset()
    backend = CountingBackend()
    compiled = compile_fn(fn, backend)
    for _ in range(2):
        compiled(*args)
        assert list(LOG) == eager
    if not USE_DYNAMO:
        assert len(backend.graphs) == graphs, f"{len(backend.graphs)} graphs, expected {graphs}"


@dynamo_bug("the generator's finally never runs (LOG stays empty; torch 2.13)", strict=False)
def test_a_generator_held_in_a_local_is_closed_when_the_frame_returns():
    def fn(x):
        LOG.clear()
        g = _logged(x)  # (a second reference: closed only when the frame ends)
        for v in g:
            break
        return v + len(LOG)

    check(fn, _t(3), graphs=1)
    _log_after_the_call(fn, _t(3), graphs=1)


def _tagged(x, tag):
    try:
        yield x
        yield x * 2
    finally:
        LOG.append(tag)


@dynamo_bug("the generators' finally blocks never run (torch 2.13)", strict=False)
def test_generators_in_locals_close_in_slot_order_not_creation_order():
    def fn(x):
        LOG.clear()
        first = None  # (the first local slot, though assigned last)
        second = _tagged(x, "second")
        first = _tagged(x, "first")
        also = second  # two locals hold it: closed when the later slot is cleared
        return next(first) + next(also) + len(LOG)

    check(fn, _t(3), graphs=1)
    _log_after_the_call(fn, _t(3), graphs=1)


@dynamo_bug("compiles again on the second call (torch 2.13)", strict=False)
def test_a_generator_in_a_local_left_inside_no_grad_restores_grad_mode_at_the_return():
    def fn(x):
        g = _in_no_grad(x)
        y = next(g)
        return y + x, torch.is_grad_enabled()  # (still inside the generator's no_grad block here)

    check(fn, _t(3).requires_grad_(), graphs=1)
    assert torch.is_grad_enabled()


def test_a_generator_also_held_by_a_list_is_left_to_python():
    def fn(x):
        LOG.clear()
        g = _logged(x)
        keep = [g]  # noqa: F841 (dropped with the list: kiln does not follow which goes last)
        next(g)
        return x + len(LOG)

    # (TorchDynamo makes one graph and never runs the generator's finally: LOG stays empty)
    check(fn, _t(3), graphs=0, dynamo_graphs=1)


def _passing_on(it):
    for v in it:
        yield v


@dynamo_bug("the generators' finally blocks never run (torch 2.13)", strict=False)
def test_a_generator_also_held_by_another_generators_frame_is_left_to_python():
    """`g` goes with `h`'s frame (a later slot than `mid`): CPython closes mid, then g. Looking for who
    holds `g` must not ask `h` to be handed on (that used to make `_passing_on` run as Python and gave the
    closes in the wrong order)."""
    def fn(x):
        LOG.clear()
        g = _tagged(x, "g")
        mid = _tagged(x, "mid")
        h = _passing_on(g)
        next(h)
        next(mid)
        return x + len(LOG)

    check(fn, _t(3), graphs=0, dynamo_graphs=1)
    _log_after_the_call(fn, _t(3), graphs=0)


def test_a_generator_whose_close_raises_at_the_frame_end_is_left_to_python():
    def failing(x):
        try:
            yield x
        finally:
            LOG.append("raising")
            raise ValueError("reported as unraisable")

    def fn(x):
        g = failing(x)
        return next(g) * 2

    # (TorchDynamo makes one graph and never runs the finally: no log entry, no unraisable report)
    check(fn, _t(3), graphs=0, dynamo_graphs=1)


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

    # exact would be CPython's unraisable report (sys.unraisablehook with this generator object, and a
    # traceback at the `break`) in its place among the frame's effects: kiln runs the frame as Python.
    # TorchDynamo makes one graph and reports nothing
    check(fn, _t(3), graphs=0, dynamo_graphs=1)
