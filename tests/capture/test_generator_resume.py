"""Unit tests of handing on a generator suspended at a graph break (kiln/capture/generator_resume.py):
a real generator continuing the original at the same yield, with its locals, closure and names."""
import dis
import inspect

import pytest

from kiln.capture.generator_resume import is_parked, parked_generator, resume_generator_code


def _yield_offsets(fn):
    return [i.offset for i in dis.get_instructions(fn) if i.opname == "YIELD_VALUE"]


def _outer(k):
    def gen(a, b):
        c = a + b + k
        got = yield c
        yield (got, a, b, c, k)
        return "end"

    return gen


def test_a_parked_generator_continues_at_the_same_yield_with_its_locals_and_closure():
    gen = _outer(10)
    first = _yield_offsets(gen)[0]
    code = resume_generator_code(gen.__code__, first, ("a", "b", "c"))
    assert code is resume_generator_code(gen.__code__, first, ("a", "b", "c"))  # cached
    g = parked_generator(code, gen, 1, 2, 13)
    assert inspect.getgeneratorstate(g) == "GEN_SUSPENDED" and is_parked(g) and not is_parked(gen(1, 2))
    assert (g.__name__, g.__qualname__) == (gen.__name__, gen.__qualname__)
    assert g.send("sent") == ("sent", 1, 2, 13, 10)
    with pytest.raises(StopIteration) as stop:
        next(g)
    assert stop.value.value == "end"


def test_throw_and_close_act_at_the_parked_yield():
    gen = _outer(0)
    code = resume_generator_code(gen.__code__, _yield_offsets(gen)[0], ("a", "b", "c"))
    g = parked_generator(code, gen, 1, 2, 3)
    with pytest.raises(KeyError):
        g.throw(KeyError("k"))
    assert inspect.getgeneratorstate(g) == "GEN_CLOSED"
    g = parked_generator(code, gen, 1, 2, 3)
    g.close()
    assert list(g) == []


def test_only_a_yield_can_be_resumed():
    gen = _outer(0)
    with pytest.raises(Exception, match="no YIELD_VALUE"):
        resume_generator_code(gen.__code__, 0, ())


def test_a_closed_generator_of_a_function_has_its_names_and_code():
    from kiln.capture.generator_resume import closed_generator

    gen = _outer(1)
    g = closed_generator(gen)
    assert inspect.getgeneratorstate(g) == "GEN_CLOSED" and list(g) == []
    assert (g.__name__, g.__qualname__, g.gi_code) == (gen.__name__, gen.__qualname__, gen.__code__)


def test_a_resume_function_rebuilds_a_generator_held_by_a_local_only_and_traces_its_next_step():
    import torch

    import kiln

    def two(t):
        yield t + 1
        yield t + 2

    def fn(x):
        it = two(x)
        a = next(it)
        print("between")
        return a + next(it)

    kiln.reset()
    kiln.stats.reset()
    graphs = []
    compiled = kiln.compile(fn, backend=lambda gm, ex: (graphs.append(gm), gm.forward)[1])
    x = torch.randn(3)
    assert torch.equal(compiled(x), fn(x))
    # the second graph holds the generator's second step (t + 2), traced in the resume function
    assert len(graphs) == 2 and sum(n.op == "call_function" for n in graphs[1].graph.nodes) == 2
    assert sum(kiln.stats.graph_breaks.values()) == 1


def _looping(t):
    for k in (1, 2, 3):
        got = yield t * k
        t = t + (got or 0)


def test_a_generator_parked_inside_its_own_for_loop_gets_the_loop_iterator_back():
    first = _yield_offsets(_looping)[0]
    code = resume_generator_code(_looping.__code__, first, ("t", "k"), n_stack=1)
    it = iter((1, 2, 3))
    next(it)  # the loop took k = 1 and yielded
    g = parked_generator(code, _looping, it, 10, 1)
    assert g.send(5) == 30 and list(g) == [45]  # t = 15: 15 * 2, then 15 * 3
