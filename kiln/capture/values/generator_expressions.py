"""Generator expressions, run lazily: one item per next(), by resuming their tracer up to the next yield."""
from __future__ import annotations

from kiln.capture.values.base import ConstantValue, Value, unsupported
from kiln.capture.values.iterators import IteratorValue, stop_iteration_raised


class YieldSignal(Exception):
    """A lazily run generator expression reached `yield value`: its tracer stops there, state kept."""

    def __init__(self, value: Value):
        self.value = value


def exhausted_generator():
    gen = (x for x in ())
    for _ in gen:
        pass
    return gen


class GeneratorExpressionValue(IteratorValue):
    """A generator expression, run one item at a time: each next_item resumes its tracer until the next
    yield, so its body (calls with side effects, reads of names bound later) runs exactly when CPython
    runs it, and a consumer that stops early (any, next, zip) leaves the rest unrun. Before it starts it
    is rebuilt as the generator function called again on its (rebuilt) argument; an exhausted one as an
    exhausted generator; one stopped half-way cannot be rebuilt."""

    iter_type = type(x for x in ())

    def __init__(self, tracer, fn_value: Value, args: list[Value]):
        self.tracer = tracer
        tracer.add_yielded = self._suspend
        self.fn_value = fn_value
        self.args = list(args)
        self.started = False
        self.finished = False

    @staticmethod
    def _suspend(value: Value):
        raise YieldSignal(value)

    def _next(self, tx):
        if self.finished:
            return None
        if self.started:
            self.tracer.push(ConstantValue(None))  # the value `yield` evaluates to
        self.started = True
        try:
            self.tracer.run()
        except YieldSignal as signal:
            return signal.value
        except Exception as exc:
            self.finished = True
            if stop_iteration_raised(exc):  # PEP 479: a RuntimeError in CPython
                unsupported("StopIteration raised inside a generator expression")
            raise
        self.finished = True
        return None

    def children(self) -> list[Value]:
        return [] if self.started else [self.fn_value, *self.args]

    def reconstruct(self, cg) -> None:
        from kiln.capture import bytecode as bc

        if self.finished:
            cg.prepare_call(exhausted_generator)
            cg.call(0)
            return
        if self.started:
            unsupported("a generator expression stopped half-way, kept after the graph",
                        hint="consume it (list(...)) before the graph break or return")
        cg.extend(bc.push_null())
        cg.reconstruct(self.fn_value)
        for arg in self.args:
            cg.reconstruct(arg)
        cg.call(len(self.args))
