"""User generator objects, run one step at a time, with `send`, `throw` and `close`.

Calling a user generator function makes a `SteppedGeneratorValue`; nothing of its body runs until its
consumer asks, and then only up to its next `yield`, as CPython runs it. So its reads (closure cells,
globals, lists, tensors changed in place by the consumer in between) and its side effects (appends,
prints, in-place ops) happen in eager's order:

- `next()` / `send(v)` resume it up to its next `yield` (the yield expression evaluates to v);
- `throw(exc)` raises exc at the `yield` it is suspended at (or, not started yet, before its first line);
  its own try/except/finally handle it as in eager; a `return` there raises StopIteration(value);
- `close()` throws GeneratorExit: returning or letting GeneratorExit/StopIteration out ends it quietly,
  yielding again is CPython's RuntimeError("generator ignored GeneratorExit");
- a StopIteration leaving the body becomes PEP 479's RuntimeError; any exception leaving it ends it;
- resuming it from inside its own body is ValueError("generator already executing");
- the next() that finds it ended raises StopIteration(its return value), later ones StopIteration().

A generator left suspended where closing it would run its own code (inside a try/finally or a with
block) would run that code when CPython drops its last reference (a `break` out of the loop over it,
an exception leaving that loop, `del g`, the frame's end). kiln does not count references in general,
but one made in the `for` statement itself (`for v in gen(x):`, `mark_loop_only`) is held only by the
loop's iterator slot: leaving the loop closes it, traced at that point (`drop_loop_iterators`). Where a
graph ends with another such generator (`check_abandoned`), the whole frame runs as Python, unless the
frame returns there and only its local variables hold the generator: CPython closes it as it clears
them, and so does kiln (`close_at_frame_end`).

Its body's frame is linked to the consumer's at each resume (as CPython links the generator's frame to
its caller's), so exceptions raised in it take their __context__ from the consumer.

Kept after the graph (a graph break, the return value), a generator not started yet is made by calling
its function again and a finished one is an exhausted generator. One suspended half-way is a real
generator parked at the same yield where its frame holds nothing else (capture/generator_resume.py);
otherwise its function's code goes into `CALLED_AS_PYTHON` and the frame is traced again
(`RetraceFrame`); from then on each call of that function breaks the graph, so the generator is a real
one made by Python and the loop over it runs as Python.
"""
from __future__ import annotations

import types
import weakref

from kiln.capture.values.base import ConstantValue, Value, unsupported
from kiln.capture.values.iterators import IteratorValue

CALLED_AS_PYTHON: "weakref.WeakSet[types.CodeType]" = weakref.WeakSet()


class RetraceFrame(Exception):
    """Trace the frame again from its start: the first trace learned something that changes how a value
    must be modelled (here: a generator function whose objects must be real Python generators)."""


def refuse_if_called_as_python(code: types.CodeType, name: str) -> None:
    if code in CALLED_AS_PYTHON:
        unsupported(f"generator function {name}: its generator was suspended half-way at a graph break, "
                    f"where kiln cannot hand on its frame; its calls run as Python",
                    hint="consume the generator (list(...)) before the graph break, or avoid the break")


class _Yielded(Exception):
    """The stepped body reached a `yield`: tracing stops there, its frame kept, until resumed."""

    def __init__(self, value: Value):
        self.value = value


_CREATED, _SUSPENDED, _RUNNING, _CLOSED = "created", "suspended", "running", "closed"


def pep479(exc_value):
    """The exception a generator's consumer sees when `exc_value` leaves the body: a StopIteration as
    RuntimeError("generator raised StopIteration"), chained as CPython's gen_send_ex2 chains it."""
    if not issubclass(exc_value.cls, StopIteration):
        return exc_value
    from kiln.capture.values.exceptions import ExceptionValue

    converted = ExceptionValue(RuntimeError, [ConstantValue("generator raised StopIteration")])
    converted.cause = converted.context = exc_value
    converted.suppress_context = True
    return converted


class SteppedGeneratorValue(IteratorValue):
    """A user generator object whose body is traced one step (to a yield, or to its end) at a time."""

    iter_type = types.GeneratorType
    has_identity = True

    def __init__(self, tracer, fn_value: Value, args: list[Value], kwargs: dict[str, Value]):
        self.tracer = tracer
        tracer.add_yielded = self._suspend
        self.fn_value, self.args, self.kwargs = fn_value, list(args), dict(kwargs)
        self.state = _CREATED
        self.yield_inst = None  # the `yield` it is suspended at
        self.return_value: Value = ConstantValue(None)  # what `yield from` it gives once finished
        self.stop_value: Value | None = None  # set by the step that returned: next()'s StopIteration(value)
        self.loop_only = False  # held only by a for loop's iterator slot (mark_loop_only)
        tracer.output.stepped_generators.append(self)  # checked when the graph ends (check_abandoned)

    def _suspend(self, value: Value):
        self.yield_inst = self.tracer.current
        raise _Yielded(value)

    # ---- running the body ------------------------------------------------------------------------
    def _resume(self, tx, sent: Value | None = None, thrown=None) -> Value | None:
        """Run the body to its next yield (its value) or its end (None). `sent` is what the suspended
        yield evaluates to; `thrown` an ExceptionValue raised at it instead."""
        from kiln.capture.values.exceptions import TracedRaise

        if self.state == _RUNNING:
            _raise(ValueError, "generator already executing")
        self.stop_value = None
        if self.state == _CLOSED:
            if thrown is not None:
                raise TracedRaise(thrown)
            return None
        if self.state == _CREATED and thrown is not None:  # raised before its first line runs
            self.state = _CLOSED
            raise TracedRaise(pep479(thrown))
        if self.state == _CREATED and sent is not None and not _is_none(sent):
            _raise(TypeError, "can't send non-None value to a just-started generator")
        self.tracer.parent = tx if tx is not None else self.tracer.parent  # the consumer's frame
        was_created, self.state = self.state == _CREATED, _RUNNING
        try:
            if thrown is not None:
                self._throw_at_yield(thrown)
            elif not was_created:
                self.tracer.push(sent if sent is not None else ConstantValue(None))
            returned = self.tracer.run()
        except _Yielded as signal:
            self.state = _SUSPENDED
            return signal.value
        except TracedRaise as raised:
            self.state = _CLOSED
            if raised.matches(StopIteration) or raised.matches(StopAsyncIteration):
                raise TracedRaise(pep479(raised.exc_value)) from None
            raise
        except BaseException:
            self.state = _CLOSED  # a graph break or a bug: this trace is abandoned anyway
            raise
        self.state = _CLOSED
        self.return_value = returned if returned is not None else ConstantValue(None)
        self.stop_value = self.return_value
        return None

    def _throw_at_yield(self, thrown) -> None:
        from kiln.capture.values.exceptions import TracedRaise

        tracer = self.tracer
        at = tracer.index_of[id(self.yield_inst)]
        if at > 0 and tracer.instructions[at - 1].opname == "SEND":
            # CPython throws it into the sub-iterator of `yield from` first, which kiln steps itself
            unsupported(f"an exception thrown into generator {tracer.function_name} at a `yield from`")
        raised = TracedRaise(thrown)
        if not tracer.unwind(raised, self.yield_inst):
            raise raised

    def _next(self, tx):
        return self._resume(tx)

    def resume(self, tx, sent: Value) -> Value | None:
        """One step of `yield from` this generator: `sent` goes on to its suspended yield."""
        from kiln.capture.values.base import note_mutation

        note_mutation(tx, self)
        return self._resume(tx, sent=sent)

    # ---- the generator's methods -----------------------------------------------------------------
    def getattr(self, tx, name: str) -> Value:
        if name in ("send", "throw", "close", "__next__", "__iter__"):
            from kiln.capture.values.base import BoundMethodValue

            return BoundMethodValue(self, name)
        unsupported(f"generator.{name} of a generator kiln traces step by step")

    def call_method(self, tx, name, args, kwargs):
        if kwargs:
            unsupported(f"generator.{name}() with keyword arguments")
        if name == "send" and len(args) == 1:
            return self._value_or_stop(self._resume(tx, sent=args[0]))
        if name == "throw" and 1 <= len(args) <= 3:
            return self._value_or_stop(self._resume(tx, thrown=_exception_to_throw(tx, args)))
        if name == "close" and not args:
            return self._close(tx)
        return super().call_method(tx, name, args, kwargs)

    def _value_or_stop(self, value: Value | None) -> Value:
        """send/throw give the next yielded value; a generator that ends raises StopIteration(value)."""
        if value is not None:
            return value
        self.raise_stop()

    def raise_stop(self):
        """The step that ended the generator raises StopIteration(its return value); later ones no value."""
        from kiln.capture.values.exceptions import ExceptionValue, TracedRaise

        returned, self.stop_value = self.stop_value, None
        args = [] if returned is None or _is_none(returned) else [returned]
        raise TracedRaise(ExceptionValue(StopIteration, args))

    def runs_code_when_closed(self) -> bool:
        """Suspended where close() would run its own code: inside a try/finally, a with block, or a
        `yield from` (the sub-iterator is closed first). 3.12's implicit handler around every generator
        body (CALL_INTRINSIC_1 STOPITERATION_ERROR) is not such code."""
        if self.state != _SUSPENDED:
            return False
        tracer = self.tracer
        at = tracer.index_of[id(self.yield_inst)]
        if at > 0 and tracer.instructions[at - 1].opname == "SEND":
            return True
        return _close_runs_code(tracer, self.yield_inst)

    def _close(self, tx) -> Value:
        from kiln.capture.values.exceptions import ExceptionValue, TracedRaise

        if self.state != _SUSPENDED:
            self.state = _CLOSED
            return ConstantValue(None)
        try:
            again = self._resume(tx, thrown=ExceptionValue(GeneratorExit, []))
        except TracedRaise as raised:
            if raised.matches(GeneratorExit) or raised.matches(StopIteration):
                return ConstantValue(None)
            if raised.matches(RuntimeError) and raised.exc_value.cause is not None and \
                    getattr(raised.exc_value.cause, "cls", None) is StopIteration:
                return ConstantValue(None)  # a StopIteration leaving the body: close() swallows it
            raise
        if again is not None:
            self.state = _CLOSED
            _raise(RuntimeError, "generator ignored GeneratorExit")
        return ConstantValue(None)

    # ---- after the graph -------------------------------------------------------------------------
    def children(self) -> list[Value]:
        """The values reconstruct emits; asked before the graph is compiled, so a generator that cannot
        be handed on stops the trace before the backend sees a graph that would be thrown away."""
        if self.state == _CREATED:
            return [self.fn_value, *self.args, *self.kwargs.values()]
        if self.state != _CLOSED:
            from kiln.capture import generator_resume

            if self.state == _SUSPENDED and generator_resume.can_hand_on(self):
                return generator_resume.handed_on_values(self)  # a real generator parked at its yield
            self._cannot_hand_on()
        return [self.fn_value]  # closed: rebuilt as a closed generator of its function

    def reconstruct(self, cg) -> None:
        from kiln.capture import bytecode as bc

        if self.state == _CLOSED:  # a closed generator of the same function (its gi_code, names)
            from kiln.capture.generator_resume import closed_generator

            cg.prepare_call(closed_generator)
            cg.reconstruct(self.fn_value)
            cg.call(1)
            return
        if self.state != _CREATED:
            from kiln.capture import generator_resume

            if self.state == _SUSPENDED and generator_resume.can_hand_on(self):
                generator_resume.reconstruct(self, cg)
                return
            self._cannot_hand_on()
        cg.extend(bc.push_null())
        cg.reconstruct(self.fn_value)
        for arg in self.args + list(self.kwargs.values()):
            cg.reconstruct(arg)
        cg.extend(bc.call_kw(len(self.args) + len(self.kwargs), tuple(self.kwargs)))

    def _cannot_hand_on(self):
        """Suspended half-way at a graph break: its frame cannot be handed on. Its function's calls run as
        Python from now on, and the frame is traced again; one suspended inside a try or with block runs
        the whole frame as Python instead (check_abandoned says why)."""
        if self.runs_code_when_closed():
            refuse_frame(f"generator {self.tracer.function_name} is suspended inside a try or with block at "
                         f"a graph break: kiln cannot hand it on, nor run its finally when eager would")
        code = self.tracer.code
        if code in CALLED_AS_PYTHON:
            unsupported(f"generator {self.tracer.function_name} suspended half-way, kept after the graph")
        CALLED_AS_PYTHON.add(code)
        raise RetraceFrame(f"generator {code.co_qualname} suspended at a graph break: its calls run as Python")

    def __repr__(self) -> str:
        return f"SteppedGenerator({self.tracer.function_name}, {self.state})"


_CLEANUP_OPS = {"PUSH_EXC_INFO", "COPY", "POP_EXCEPT", "SWAP", "POP_TOP", "NOP", "RESUME"}


def _close_runs_code(tracer, inst) -> bool:
    """Whether GeneratorExit raised at `inst` runs code of the generator's own before it leaves the frame:
    a finally body, a with block's __exit__, an except clause that matches it. The handlers it passes
    through are followed: cleanups (restoring the handled exception), except clauses for other classes
    (compared by what their names hold now), 3.12's implicit STOPITERATION_ERROR wrapper and RERAISE
    count as no code; anything else does (conservative)."""
    for _ in range(200):
        entry = inst.exn_tab_entry
        if entry is None:
            return False
        inst, stack = entry.target, []
        while True:
            op = inst.opname
            if op == "RERAISE":
                break  # on to the handler around the RERAISE
            if op == "CALL_INTRINSIC_1" and inst.arg == 3:  # 3.12: StopIteration -> RuntimeError only
                inst = tracer.instructions[tracer.index_of[id(inst)] + 1]
                continue
            if op in ("LOAD_GLOBAL", "LOAD_NAME"):
                name = inst.argval
                found = tracer.f_globals.get(name, tracer.f_builtins.get(name, stack))
                stack.append(found)
            elif op == "BUILD_TUPLE":
                items = stack[len(stack) - inst.arg:]
                del stack[len(stack) - inst.arg:]
                stack.append(tuple(items))
            elif op == "CHECK_EXC_MATCH":
                cls = stack.pop() if stack else None
                classes = cls if isinstance(cls, tuple) else (cls,)
                if not all(isinstance(c, type) and issubclass(c, BaseException) for c in classes):
                    return True  # a class kiln cannot tell: conservative
                if any(issubclass(GeneratorExit, c) for c in classes):
                    return True  # the except clause catches it: its body runs
                nxt = tracer.instructions[tracer.index_of[id(inst)] + 1]
                if not nxt.opname.startswith("POP_JUMP") or "FALSE" not in nxt.opname:
                    return True
                inst = nxt.target  # no match: on to the next clause
                continue
            elif op not in _CLEANUP_OPS:
                return True
            inst = tracer.instructions[tracer.index_of[id(inst)] + 1]
    return True


def mark_loop_only(tx, fn: Value, made: Value) -> None:
    """``for v in gen(...)``: a generator made by calling its generator function directly (the CALL's own
    result; not a wrapper's, which may keep it) and taken by GET_ITER and FOR_ITER right after is held by
    nothing but the loop's iterator slot, which Python code cannot reach. Leaving the loop (``break``,
    ``return``: a POP_TOP of the slot; an exception: the unwinding) drops its last reference, and CPython
    closes it there (``dropped``): kiln traces that close at the same point."""
    from kiln.capture.values.functions import NestedFunctionValue, UserFunctionValue, UserMethodValue

    if not isinstance(made, SteppedGeneratorValue) or made.state != _CREATED:
        return
    direct = fn.fn if isinstance(fn, UserMethodValue) else fn
    if type(direct) not in (UserFunctionValue, NestedFunctionValue) or direct.get_code() is not made.tracer.code:
        return
    following = tx.instructions[tx.ip: tx.ip + 2]
    if [inst.opname for inst in following] == ["GET_ITER", "FOR_ITER"]:
        made.loop_only = True


def drop_loop_iterators(tx, values) -> None:
    """``values`` leave the stack (top first): a generator only the loop held is closed now, as CPython
    closes it when its last reference goes away (an exception its close raises would be unraisable)."""
    from kiln.capture.values.exceptions import TracedRaise

    for value in values:
        if isinstance(value, SteppedGeneratorValue) and value.loop_only:
            value.loop_only = False
            try:
                value.call_method(tx, "close", [], {})
            except TracedRaise:
                unsupported("closing a generator dropped by its loop raised (CPython reports it as unraisable)")


def close_at_frame_end(tx, result: Value) -> None:
    """The root frame returns `result`: CPython then clears its local variables, slot by slot, and a
    generator whose last reference goes with them is closed right there, before the caller gets the
    result (`g = gen(x); for v in g: break; return v`: its finally runs at the return). kiln closes, in
    that order, the suspended generators (ones whose close runs code) that only locals of the frame hold:
    held by no other value (the result, a side effect, a container, an object, a cell, another
    generator's frame or pending call, itself). Any other generator is left to check_abandoned; a close
    that raises (CPython reports it as unraisable) runs the frame as Python."""
    from kiln.capture.values.exceptions import TracedRaise
    from kiln.errors import Unsupported

    pending = {id(g): g for g in tx.output.stepped_generators if g.runs_code_when_closed()}
    if not pending:
        return
    slots = {name: i for i, name in enumerate(tx.code.co_varnames)}
    last_slot: dict[int, int] = {}  # id(generator) -> the local slot whose clearing drops its last reference
    roots = [result, *tx.output.side_effects.values(), *tx.cells.values()]
    for name, value in tx.locals.items():
        if id(value) in pending and name in slots:
            last_slot[id(value)] = max(last_slot.get(id(value), -1), slots[name])
        else:
            roots.append(value)
    for gen in tx.output.stepped_generators:  # what each generator's frame (or pending call) holds
        roots.extend(_held_by_generator(gen))
    try:
        reachable = _reachable(roots)
    except Unsupported:  # a value kiln cannot look inside: leave the generators to check_abandoned
        return
    for _, gen_id in sorted((slot, gen_id) for gen_id, slot in last_slot.items() if gen_id not in reachable):
        try:
            pending[gen_id].call_method(tx, "close", [], {})
        except TracedRaise:
            refuse_frame(f"closing generator {pending[gen_id].tracer.function_name} at the end of the frame "
                         f"raised (CPython reports that as unraisable)")


def _held_by_generator(gen) -> list:
    if gen.state == _SUSPENDED:
        from kiln.capture.generator_resume import handed_on_values

        return handed_on_values(gen)
    if gen.state == _CREATED:
        return [gen.fn_value, *gen.args, *gen.kwargs.values()]
    return []


def _reachable(roots: list) -> set:
    """The ids of every value reachable from `roots` (as codegen.child_values_of walks them), looking
    into generators without asking them to be handed on (their children() would decide that)."""
    from kiln.capture.codegen import child_values_of

    seen: set = set()
    pending = list(roots)
    while pending:
        value = pending.pop()
        if value is None or id(value) in seen:
            continue
        seen.add(id(value))
        pending.extend(_held_by_generator(value) if isinstance(value, SteppedGeneratorValue)
                       else child_values_of(value))
    return seen


def check_abandoned(output) -> None:
    """Where the graph ends (a return, a break): a generator left suspended where closing it runs its
    own code (a finally, a with block's exit) runs that code when CPython drops its last reference (a
    `break` out of the loop over it, an exception leaving the loop, `del g`, the frame's end). kiln does
    not count references, and a resume function would keep the generator alive longer (PEP 523 keeps
    call arguments alive until the call returns): the whole frame runs as Python."""
    for gen in output.stepped_generators:
        if gen.runs_code_when_closed():
            refuse_frame(f"generator {gen.tracer.function_name} is left suspended inside a try or with block, "
                         f"whose finally/__exit__ CPython runs when the generator's last reference goes away")


def refuse_frame(reason: str):
    """No graph and no graph break for this frame: it runs as Python (eager semantics exactly)."""
    from kiln.errors import Unsupported

    exc = Unsupported(reason, hint="kiln runs the function eagerly; consume or close() the generator "
                                   "inside the function to keep it compiled")
    exc.root_index = -1
    raise exc


def _is_none(value: Value) -> bool:
    return value.is_constant() and value.as_constant() is None


def _exception_to_throw(tx, args: list[Value]):
    """gen.throw(exc) / gen.throw(cls) / gen.throw(cls, value[, tb]) as an ExceptionValue."""
    from kiln.capture.values.exceptions import ExceptionValue, is_plain_exception_class

    first = args[0]
    if isinstance(first, ExceptionValue) and len(args) == 1:
        return first
    cls = first.as_constant() if first.is_constant() else None
    if is_plain_exception_class(cls):
        value = args[1] if len(args) > 1 else ConstantValue(None)
        if isinstance(value, ExceptionValue):
            return value
        if len(args) > 2 and not _is_none(args[2]):
            unsupported("generator.throw() with a traceback")
        if value.is_constant() and isinstance(value.as_constant(), tuple):
            unsupported("generator.throw(cls, tuple_of_args)")
        items = [] if _is_none(value) else [value]
        return ExceptionValue(cls, items)
    unsupported(f"generator.throw({first})")


def _raise(cls, message: str):
    from kiln.capture.values.exceptions import raise_traced

    raise_traced(cls, message)
