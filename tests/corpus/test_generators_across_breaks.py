"""A user generator suspended half-way where the graph breaks: handed on as a real generator parked at
the same `yield` (kiln/capture/generator_resume.py), so the code after the break runs it on."""
import inspect

import pytest
import torch

from .harness import USE_DYNAMO, CountingBackend, check, compile_fn, dynamo_bug, reset


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


_LOG = []


def _make(scale):
    def gen(t):
        _LOG.append("start")
        got = yield t + scale
        _LOG.append(("got", got))
        yield t * scale
        _LOG.append("end")
        return "done"

    return gen


def _two(t):
    yield t + 1
    yield t + 2


def test_next_print_next():
    def fn(x):
        it = _two(x)
        a = next(it)
        print("between")  # a graph break with the generator suspended
        b = next(it)
        return a + b

    check(fn, _t(3), graphs=2, breaks=1)  # as TorchDynamo (which runs the rest of the generator early)


def test_send_and_return_value_after_the_break():
    def fn(x):
        _LOG.clear()
        it = _make(2)(x)
        a = next(it)
        print("between")
        b = it.send(5)
        try:
            next(it)
        except StopIteration as e:
            r = e.value
        return a + b, r, inspect.getgeneratorstate(it), it.__name__, it.__qualname__, list(_LOG)

    check(fn, _t(3), graphs=2, dynamo_graphs=0)


@pytest.mark.parametrize("how", ["throw", "close"])
def test_throw_and_close_after_the_break(how):
    def fn(x):
        _LOG.clear()
        it = _make(3)(x)
        a = next(it)
        print("between")
        try:
            it.throw(KeyError("k")) if how == "throw" else it.close()
            r = None
        except KeyError as e:
            r = str(e)
        return a, r, inspect.getgeneratorstate(it), list(it), list(_LOG)

    check(fn, _t(3), graphs=1, dynamo_graphs=0)


def test_the_generator_sees_a_change_made_after_the_break():
    def fn(x):
        _LOG.clear()
        it = _make(4)(x)
        a = next(it)
        print("between")
        x.add_(1)  # the generator's t is x itself: its next step reads the new values
        return a, list(it), list(_LOG)

    check(fn, _t(3), graphs=2, inputs_mutated=True, dynamo_graphs=0)


def test_a_generator_that_breaks_inside_its_own_step():
    def gen(t):
        yield t + 1
        print("inside")  # the step that runs this breaks at the root's next(): it runs as Python
        yield t * 2

    def fn(x):
        it = gen(x)
        a = next(it)
        b = next(it)
        return a + b

    check(fn, _t(3), graphs=2, dynamo_graphs=0)


class _Stepper:
    def __init__(self):
        self.seen = []

    def steps(self, t):
        for k in (1, 2):
            self.seen.append(k)
            yield t * k


def test_a_generator_suspended_inside_a_for_loop_of_its_own():
    def fn(x, s):
        it = s.steps(x)  # suspended with its loop's iterator on its stack (handed on too, at its position)
        a = next(it)
        print("between")
        b = next(it)
        return a + b, list(s.seen), list(it)

    check(fn, _t(3), _Stepper(), graphs=2, breaks=1, inputs_mutated=True, dynamo_graphs=0)


def _over_a_list(t, items):
    for k in items:
        yield t * k


def test_a_generator_suspended_in_a_loop_over_a_list_the_caller_extends_after_the_break():
    def fn(x):
        items = [1, 2]
        it = _over_a_list(x, items)
        a = next(it)
        print("between")
        items.append(3)  # the generator's list iterator sees it (the same list object)
        return a, list(it)

    check(fn, _t(3), graphs=2, dynamo_graphs=0)


@pytest.mark.skipif(USE_DYNAMO, reason="TorchDynamo runs this frame eagerly (no graph)")
def test_a_suspended_generator_returned_is_parked_at_its_yield():
    def fn(x):
        _LOG.clear()
        it = _make(5)(x)
        a = next(it)
        print("between")
        return a, it

    reset()
    counter = CountingBackend()
    compiled = compile_fn(fn, counter)
    for run in (fn, compiled, compiled):
        x = _t(3)
        a, it = run(x)
        assert inspect.getgeneratorstate(it) == "GEN_SUSPENDED" and it.__name__ == "gen"
        assert torch.equal(it.send("v"), x * 5) and _LOG[-1] == ("got", "v")
        with pytest.raises(StopIteration):
            next(it)
    assert counter.graph_count == 1


def test_a_generator_also_held_by_a_list_stays_one_object():
    def fn(x):
        it = _two(x)
        held = [it]  # another holder: the generator is handed on as one real object (parked), not rebuilt
        a = next(it)
        print("between")
        b = next(it)
        return a + b, held[0] is it

    check(fn, _t(3), graphs=2, breaks=2, dynamo_graphs=2)


@dynamo_bug("hands on a tuple_iterator in place of the generator (no __name__, another type)")
def test_a_generator_closed_after_the_break_keeps_its_names():
    def fn(x):
        it = _two(x)
        a = next(it)
        print("between")
        rest = list(it)
        return a, rest, it.__name__, it.__qualname__, inspect.getgeneratorstate(it)

    check(fn, _t(3), graphs=2)
