"""User generators, traced one step at a time (values/lazy_generators.py): send / throw / close, and
reads and writes that must happen when the consumer takes an item, not when the generator is made.

Each case is compared with eager (results, types, side effects); graph counts are TorchDynamo's unless a
case says otherwise. The cases under "wrong results before" gave wrong results when kiln ran a generator
function's body to its end at its call.
"""
import pytest
import torch

from .harness import check, dynamo_bug


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def test_throw_handled_by_the_generator_gives_its_next_yield():
    def fn(x):
        def g():
            try:
                yield 1
            except KeyError:
                yield 99
        it = g()
        next(it)
        return x * it.throw(KeyError("k"))

    check(fn, _t(3))


def test_send_values_into_an_accumulator():
    def fn(x):
        def acc():
            total = 0
            while True:
                v = yield total
                total = total + v
        g = acc()
        next(g)
        g.send(2)
        g.send(3)
        return x * g.send(4)

    check(fn, _t(3))


def test_send_tensors_into_a_running_mean():
    def fn(x, y):
        def mean():
            total, n = None, 0
            while True:
                v = yield (None if n == 0 else total / n)
                total = v if total is None else total + v
                n += 1
        m = mean()
        next(m)
        m.send(x)
        return m.send(y)

    check(fn, _t(4), _t(4, seed=1))


@dynamo_bug("a generator that an uncaught throw() ended still yields (torch 2.13)", strict=False)
def test_throw_uncaught_propagates_to_the_consumer():
    def fn(x):
        def g():
            yield 1
            yield 2
        it = g()
        next(it)
        try:
            it.throw(ValueError("boom"))
        except ValueError as e:
            return x + len(e.args[0]), next(it, "done")

    check(fn, _t(3))


def test_throw_into_a_generator_that_returns_raises_stop_iteration_with_its_value():
    def fn(x):
        def g():
            try:
                yield 1
            except KeyError:
                return 7
        it = g()
        next(it)
        try:
            it.throw(KeyError)
        except StopIteration as stop:
            return x * stop.value

    check(fn, _t(3), dynamo_graphs=0)


@dynamo_bug("a generator thrown into before it started still yields (torch 2.13)", strict=False)
def test_throw_into_a_generator_not_started_raises_before_its_first_line():
    def fn(x):
        log = []

        def g():
            log.append("started")
            try:
                yield 1
            except KeyError:
                yield 2
        it = g()
        try:
            it.throw(KeyError("early"))
        except KeyError:
            pass
        return x + len(log), next(it, "exhausted")

    check(fn, _t(3))


def test_finally_runs_on_close():
    def fn(x):
        log = []

        def g():
            try:
                yield 1
                yield 2
            finally:
                log.append("closed")
        it = g()
        next(it)
        it.close()
        return x * len(log), next(it, None), list(log)

    check(fn, _t(3))


@dynamo_bug("close() of a generator that yields again raises no RuntimeError (torch 2.13)", strict=False)
def test_close_of_a_generator_that_yields_again_is_a_runtime_error():
    def fn(x):
        def g():
            try:
                yield 1
            except GeneratorExit:
                yield 2  # ignores it (the finalizer's close() then ends it at this yield)
        it = g()
        next(it)
        try:
            it.close()
        except RuntimeError as e:
            return x + 1, str(e)

    check(fn, _t(3))


def test_close_before_start_and_after_end_is_a_no_op():
    def fn(x):
        def g():
            yield x
        a = g()
        a.close()
        b = g()
        list(b)
        b.close()
        return next(a, "nothing"), x * 2

    check(fn, _t(3))


@dynamo_bug("send(5) to a just-started generator raises no TypeError (torch 2.13)", strict=False)
def test_send_non_none_to_a_just_started_generator_is_a_type_error():
    def fn(x):
        def g():
            yield 1
        it = g()
        try:
            it.send(5)
        except TypeError as e:
            return x - 1, str(e)

    check(fn, _t(3))


def test_side_effects_interleave_with_the_consumer_as_in_eager():
    def fn(x):
        log = []

        def g():
            for i in range(3):
                log.append(("gen", i))
                got = yield i
                log.append(("got", got))
        it = g()
        next(it)
        log.append("consumer")
        it.send("a")
        it.send("b")
        return x + len(log), list(log)

    check(fn, _t(3))


@dynamo_bug("a StopIteration leaving the body is not PEP 479's RuntimeError (torch 2.13)", strict=False)
def test_stop_iteration_inside_the_body_is_pep_479_runtime_error():
    def fn(x):
        def g():
            yield 1
            raise StopIteration("inner")
        it = g()
        next(it)
        try:
            it.send(None)
        except RuntimeError as e:
            return x * 3, str(e), type(e.__cause__).__name__

    check(fn, _t(3))


def test_the_generator_object_is_returned_after_being_stepped_to_its_end():
    import kiln

    def fn(x):
        def g():
            v = yield 1
            yield v * 2
        it = g()
        next(it)
        got = it.send(5)
        next(it, None)
        return x * got, it

    kiln.reset()
    x = _t(3)
    got = kiln.compile(fn, backend="eager")(x)
    want = fn(x)
    assert torch.equal(got[0], want[0])
    assert type(got[1]) is type(want[1]) and next(got[1], "end") == "end"
    assert kiln.stats.graphs_compiled == 1 if hasattr(kiln.stats, "graphs_compiled") else True


@dynamo_bug("AttributeError: 'tuple_iterator' object has no attribute 'send' (torch 2.13)", strict=False)
def test_a_generator_suspended_half_way_at_a_graph_break_runs_the_frame_as_python():
    def fn(x):
        def g():
            v = yield 1
            yield v
        it = g()
        next(it)
        print("", end="")  # a graph break while `it` is suspended: kiln cannot hand it on
        return x * it.send(4)

    check(fn, _t(3), graphs=(0, 1, 2), dynamo_graphs=(1, 2))


# ---- wrong results before (the body ran at the generator's call) -----------------------------------------

def test_a_closure_cell_assigned_after_the_call_is_read_when_the_item_is_taken():
    def fn(x):
        scale = 1

        def g():
            yield x * scale
        it = g()
        scale = 2
        return next(it)

    check(fn, _t(3))


G_SCALE = 1


def test_a_global_changed_after_the_call_is_read_when_the_item_is_taken():
    def fn(x):
        global G_SCALE

        def g():
            yield x * G_SCALE
        it = g()
        G_SCALE = G_SCALE + 1
        try:
            return next(it)
        finally:
            G_SCALE = 1

    check(fn, _t(3))


def test_a_list_the_consumer_extends_is_read_by_each_step():
    def fn(x):
        seen = [x]

        def g():
            for _ in range(3):
                yield seen[-1] * 2
        for v in g():
            seen.append(v)
        return seen

    check(fn, _t(3))


def test_a_tensor_changed_in_place_after_the_call_is_read_by_the_step():
    def fn(x):
        def g(t):
            yield t * 2
        y = x.clone()
        it = g(y)
        y.add_(1)
        return next(it)

    check(fn, _t(3))


def test_a_generator_with_side_effects_in_a_for_loop_runs_in_eager_order():
    def fn(x):
        log = []

        def g():
            for i in range(3):
                log.append(("made", i))
                yield x * i
        total = 0
        for v in g():
            log.append("used")
            total = total + v
        return total, log

    check(fn, _t(3))


def test_an_infinite_generator_consumed_by_zip():
    def fn(x):
        def count():
            i = 0
            while True:
                yield i
                i += 1
        return [x * i for i, _ in zip(count(), range(4))]

    check(fn, _t(3))


def test_a_for_loop_over_a_generator_with_a_graph_break_in_its_body():
    def fn(x):
        def g():
            for i in range(3):
                yield x * i
        total = x
        for v in g():
            total = total + v
            print("", end="")  # graph break while the generator is suspended
        return total

    check(fn, _t(3), graphs=(0, 1, 2, 3, 4, 5), dynamo_graphs=(0, 1, 2, 3, 4, 5))


def test_already_executing():
    def fn(x):
        def g():
            yield next(me)
        me = g()
        try:
            next(me)
        except ValueError as e:
            return x + 1, str(e)

    check(fn, _t(3), graphs=(0, 1), dynamo_graphs=(0, 1))


@pytest.mark.parametrize("exc", [KeyError, IndexError])
def test_throw_picks_the_matching_handler(exc):
    def fn(x):
        def g():
            while True:
                try:
                    yield "ok"
                except KeyError:
                    yield "key"
                except IndexError:
                    yield "index"
        it = g()
        next(it)
        a = it.throw(exc)
        b = next(it)
        return x + len(a), a, b

    check(fn, _t(3))


# ---- found by the new-user trial (2026-11-27) ---------------------------------------------------------

def _gen_returning(x):
    yield x
    return x * 7


def test_next_that_ends_a_generator_raises_stop_iteration_with_its_return_value():
    def fn(x):
        g = _gen_returning(x)
        next(g)
        try:
            next(g)
        except StopIteration as e:
            first = e.value
        try:
            g.__next__()
        except StopIteration as e:  # an ended generator's next StopIteration has no value
            return first, e.value, len(e.args)

    check(fn, _t(3))


def test_a_for_loop_that_ends_a_generator_drops_its_return_value():
    def fn(x):
        g = _gen_returning(x)
        out = [v * 2 for v in g]
        try:
            next(g)
        except StopIteration as e:
            return out, e.value

    check(fn, _t(3))


_FIN_LOG = []


def _gen_with_finally(x):
    try:
        for i in range(10):
            yield x + i
    finally:
        _FIN_LOG.append("closed")


def _gen_in_no_grad(x):
    with torch.no_grad():
        yield x * 2
        yield x * 3


@dynamo_bug("the generator's no_grad block is never exited: the result has no grad (torch 2.13)", strict=False)
def test_a_generator_abandoned_inside_no_grad_leaves_grad_mode_as_eager():
    def fn(x):
        for v in _gen_in_no_grad(x):
            break
        return x * 5, torch.is_grad_enabled()

    # eager closes the generator at the break (its with block exits): the loop's slot held its last
    # reference; kiln traces that close there (lazy_generators.mark_loop_only)
    check(fn, _t(3).requires_grad_(), graphs=1)
    assert torch.is_grad_enabled()


@dynamo_bug("the generator's finally does not run before the except body (torch 2.13)", strict=False)
def test_an_exception_leaving_the_loop_closes_the_generator_first():
    def fn(x):
        _FIN_LOG.clear()
        try:
            for v in _gen_with_finally(x):
                raise ValueError
        except ValueError:
            pass
        return x + len(_FIN_LOG)

    check(fn, _t(3), graphs=1)  # (the unwinding closes the generator the loop alone held, traced)


def test_a_data_dependent_break_out_of_a_loop_over_a_generator_with_finally():
    def fn(x):
        _FIN_LOG.clear()
        out = x * 0
        for v in _gen_with_finally(x):
            out = out + v
            if (v - x).sum() >= 2:  # data-dependent: a graph break inside the loop
                break
        return out, len(_FIN_LOG)

    check(fn, torch.tensor([1.0]), graphs=0, dynamo_graphs=(0, 1, 2, 3))


def test_a_generator_with_finally_consumed_to_its_end_stays_in_one_graph():
    def fn(x):
        _FIN_LOG.clear()
        total = sum(_gen_with_finally(x))
        return total, len(_FIN_LOG)

    check(fn, _t(3))


def test_a_generator_returned_before_it_starts_closes_over_a_tensor_of_the_graph():
    import kiln

    def fn(x):
        y = x * 2

        def gen():
            for i in range(3):
                yield y + i
        return gen()

    kiln.reset()
    before = sum(kiln.stats.eager_fallbacks.values())
    x = _t(3)
    got, want = list(kiln.compile(fn, backend="eager")(x)), list(fn(x))
    assert len(got) == len(want) == 3 and all(torch.equal(a, b) for a, b in zip(got, want))
    assert sum(kiln.stats.eager_fallbacks.values()) == before


def test_send_through_yield_from_into_a_generator_expression():
    def fn(x):
        def g(seq):
            yield from (e + 1 for e in seq)
            yield x * 0

        it = g([x, x * 2])
        first = next(it)
        second = it.send(x * 5)  # passed on to the generator expression, whose yield discards it
        return first, second, next(it)

    check(fn, _t(3))
