"""`@contextlib.contextmanager` functions used in `with` inside compiled code.

The generator is traced in steps, as contextlib's _GeneratorContextManager runs it: `__enter__` runs
its body up to the first `yield` (the yielded value is what `as` binds), and `__exit__` resumes it:
sending None when the block ended normally (it must then return), or throwing the block's exception
in at the `yield` (WITH_EXCEPT_START), where its own try/except/finally handle it as in eager:

- the generator returns: the exception is suppressed (`__exit__` returns True);
- the same exception leaves the generator: not suppressed (False), the with statement re-raises it;
- another exception leaves it: that one propagates;
- it yields again: RuntimeError ("generator didn't stop"), as contextlib raises.

The generator's tracer keeps its frame (stack, locals, instruction) between the two steps. A graph
break inside such a block in the root frame cannot hand a half-run generator to a resume function:
the break moves to the `with` statement itself (its BEFORE_WITH runs as Python, the block continues
in a resume function), which is what happened before these were traced.
"""
from __future__ import annotations

import contextlib
import types

from kiln.capture.values.base import ConstantValue, Value, unsupported


class _Suspended(Exception):
    """The stepped generator reached a `yield` (not an error: tracing stops there until resumed)."""


def _stepping_tracer_class():
    from kiln.capture.interpreter import GeneratorTracer

    class SteppingGeneratorTracer(GeneratorTracer):
        """A generator function's tracer that stops at each `yield` and can be resumed later."""

        yield_inst = None

        def add_yielded(self, value: Value) -> None:
            self.yielded_value = value
            self.yield_inst = self.current
            raise _Suspended()

    return SteppingGeneratorTracer


_TRACER_CLASS = None


class SteppedGenerator:
    """A generator function's body traced one step (up to a yield, or to its end) at a time."""

    def __init__(self, tx, func: Value, args, kwargs, name: str):
        global _TRACER_CLASS
        from kiln.capture.skipfiles import is_inlinable
        from kiln.capture.values.functions import NestedFunctionValue, UserFunctionValue

        if _TRACER_CLASS is None:
            _TRACER_CLASS = _stepping_tracer_class()
        if not isinstance(func, (UserFunctionValue, NestedFunctionValue)):
            unsupported(f"@contextmanager of {func}, which kiln does not trace")
        code = func.get_code()
        if not code.co_flags & 0x20 or code.co_flags & (0x80 | 0x100 | 0x200):
            unsupported(f"@contextmanager function {name} is not a plain generator function")
        if not is_inlinable(code):
            unsupported(f"@contextmanager function {name} is library code kiln does not trace")
        if tx.depth >= tx.options.inline_depth:
            unsupported(f"inlining deeper than {tx.options.inline_depth} calls (at {name})")
        f_globals = func.fn.__globals__ if isinstance(func, UserFunctionValue) else func.f_globals
        self.tracer = _TRACER_CLASS(code, f_globals, tx.f_builtins, tx.output, tx, tx.options, name)
        self.tracer.bind_arguments(func, list(args), dict(kwargs))
        self.name = name

    def step(self) -> Value | None:
        """Run to the next yield: its value, or None when the generator returned."""
        try:
            self.tracer.run()
        except _Suspended:
            return self.tracer.yielded_value
        return None

    def send_none(self) -> Value | None:
        self.tracer.push(ConstantValue(None))
        return self.step()

    def throw(self, exc) -> Value | None:
        """Raise `exc` at the yield the generator stopped at (TracedRaise leaves if nothing catches it)."""
        from kiln.capture.values.exceptions import TracedRaise

        at = self.tracer.index_of[id(self.tracer.yield_inst)]
        if at > 0 and self.tracer.instructions[at - 1].opname == "SEND":
            # CPython throws it into the sub-generator first (its own handlers), which kiln ran ahead
            unsupported(f"an exception thrown into @contextmanager function {self.name} at a `yield from`")
        raised = TracedRaise(exc)
        if not self.tracer.unwind(raised, self.tracer.yield_inst):
            raise raised
        return self.step()


def _raise(cls, message: str):
    from kiln.capture.values.exceptions import raise_traced

    raise_traced(cls, message)


class GeneratorContextValue(Value):
    """What calling a @contextmanager function returns: entering it starts the generator."""

    def __init__(self, func: Value, args, kwargs, name: str):
        self.func, self.args, self.kwargs, self.name = func, list(args), dict(kwargs), name
        self.generator: SteppedGenerator | None = None

    has_identity = True  # one object however many places hold it (codegen.reconstruct)

    def python_type(self) -> type:
        return contextlib._GeneratorContextManager

    def enter_with(self, tx) -> tuple[Value, Value]:
        """BEFORE_WITH: (the exit callable left below the block, what `as` binds)."""
        if self.generator is not None:
            _raise(RuntimeError, "generator context manager entered twice")
        self.generator = SteppedGenerator(tx, self.func, self.args, self.kwargs, self.name)
        value = self.generator.step()
        if value is None:
            _raise(RuntimeError, "generator didn't yield")
        return GeneratorExitValue(self), value

    def getattr(self, tx, name: str) -> Value:
        unsupported(f"attribute {name!r} of a @contextmanager object")

    def child_values(self) -> list[Value]:
        return [self.func, *self.args, *self.kwargs.values()]

    def reconstruct(self, cg) -> None:
        """Not entered yet (e.g. a break at its `with`): the object contextlib's helper would make."""
        if self.generator is not None:
            unsupported(f"handing on @contextmanager object {self.name} after its generator started")
        from kiln.capture.values.containers import DictValue, TupleValue

        cg.prepare_call(contextlib._GeneratorContextManager)
        cg.reconstruct(self.func)
        cg.reconstruct(TupleValue(list(self.args)))
        cg.reconstruct(DictValue(dict(self.kwargs)))
        cg.call(3)

    def __repr__(self) -> str:
        return f"GeneratorContext({self.name})"


class GeneratorExitValue(Value):
    """The `__exit__` of an entered @contextmanager block."""

    def __init__(self, ctx: GeneratorContextValue):
        self.ctx = ctx

    with_index = None  # the BEFORE_WITH that entered the block

    def call(self, tx, args, kwargs) -> Value:
        result = self._exit(tx, args)
        if self.with_index in tx.open_generator_withs:
            tx.open_generator_withs.remove(self.with_index)  # the block is closed: breaks after it are fine
        return result

    def _exit(self, tx, args) -> Value:
        from kiln.capture.values.exceptions import ExceptionValue, TracedRaise

        gen = self.ctx.generator
        exc_type = args[0] if args else ConstantValue(None)
        if exc_type.is_constant() and exc_type.as_constant() is None:
            if gen.send_none() is not None:
                _raise(RuntimeError, "generator didn't stop")
            return ConstantValue(False)
        exc = args[1] if len(args) > 1 else None
        if not isinstance(exc, ExceptionValue):
            unsupported(f"throwing {exc} into @contextmanager function {self.ctx.name}")
        try:
            again = gen.throw(exc)
        except TracedRaise as raised:
            if raised.exc_value is exc:
                return ConstantValue(False)  # the block's own exception: not suppressed
            raise
        if again is not None:
            _raise(RuntimeError, "generator didn't stop after throw()")
        return ConstantValue(True)  # the generator handled it: suppressed

    def reconstruct(self, cg) -> None:
        unsupported("handing on the exit of a @contextmanager block (its generator is half-run)")


class ContextManagerFunctionValue(Value):
    """A @contextmanager function: calling it makes a GeneratorContextValue (nothing runs yet)."""

    def __init__(self, func: Value, source=None, name: str | None = None):
        self.func = func
        self.source = source
        self.name = name or getattr(func, "qualname", None) or getattr(getattr(func, "fn", None), "__qualname__", "?")

    @property
    def has_identity(self) -> bool:
        return self.source is None

    def python_type(self) -> type:
        return types.FunctionType

    def call(self, tx, args, kwargs) -> Value:
        return GeneratorContextValue(self.func, args, kwargs, self.name)

    def reconstruct(self, cg) -> None:
        if self.source is not None:
            self.source.emit(cg)
            return
        cg.prepare_call(contextlib.contextmanager)
        cg.reconstruct(self.func)
        cg.call(1)


def contextmanager_handler(tx, args, kwargs) -> Value:
    """contextlib.contextmanager(func) called while tracing (a decorator applied inside the frame)."""
    if len(args) != 1 or kwargs:
        unsupported("contextlib.contextmanager() takes one function")
    return ContextManagerFunctionValue(args[0])


def _helper_code():
    for const in contextlib.contextmanager.__code__.co_consts:
        if getattr(const, "co_name", None) == "helper":
            return const
    return None


HELPER_CODE = _helper_code()  # the wrapper @contextmanager puts around a generator function


def call_contextmanager_helper(tx, fn_value, args, kwargs) -> Value:
    """A @contextmanager function defined outside the frame (contextlib's `helper`, whose closure holds
    the generator function): the call makes the context manager object."""
    func = fn_value.bind_closure(tx)["func"].get()
    return GeneratorContextValue(func, args, kwargs, fn_value.fn.__qualname__)
