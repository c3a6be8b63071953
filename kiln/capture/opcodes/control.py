"""Jumps, branches and loops. Branches on Python values are folded; loops over Python values unroll."""
from __future__ import annotations

from kiln.capture.opcodes.registry import handles
from kiln.capture.values.base import ConstantValue, unsupported
from kiln.capture.values.iterators import IteratorValue, make_iterator


@handles("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_ABSOLUTE", "JUMP")
def JUMP(tx, inst):
    tx.jump(inst)


def _branch(jump_if: bool | None, test):
    def handler(tx, inst):
        value = tx.pop()
        if test == "none":
            from kiln.capture.values.ops import is_op

            outcome = is_op(tx, value, ConstantValue(None))
        else:
            outcome = tx.truth(value)
        if outcome == jump_if:
            tx.jump(inst)
    return handler


for _prefix in ("POP_JUMP_IF_", "POP_JUMP_FORWARD_IF_", "POP_JUMP_BACKWARD_IF_"):
    handles(_prefix + "TRUE")(_branch(True, "truth"))
    handles(_prefix + "FALSE")(_branch(False, "truth"))
    handles(_prefix + "NONE")(_branch(True, "none"))
    handles(_prefix + "NOT_NONE")(_branch(False, "none"))


def _jump_or_pop(jump_if: bool):
    def handler(tx, inst):
        value = tx.stack[-1]
        if tx.truth(value) == jump_if:
            tx.jump(inst)
        else:
            tx.pop()
    return handler


handles("JUMP_IF_TRUE_OR_POP")(_jump_or_pop(True))
handles("JUMP_IF_FALSE_OR_POP")(_jump_or_pop(False))


@handles()
def GET_ITER(tx, inst):
    tx.push(make_iterator(tx, tx.pop()))


@handles()
def FOR_ITER(tx, inst):
    it = tx.stack[-1]
    if not isinstance(it, IteratorValue):
        unsupported(f"for loop over {it}")
    item = it.next_item(tx)
    if item is not None:
        tx.push(item)
        return
    import sys

    tx.pop()
    tx.jump(inst)
    if sys.version_info >= (3, 12) and tx.instructions[tx.ip].opname == "END_FOR":
        tx.ip += 1  # CPython skips END_FOR when the iterator is exhausted


@handles()
def RAISE_VARARGS(tx, inst):
    from kiln.capture.values.exceptions import TracedRaise, exception_to_raise

    if inst.arg == 1:
        raise TracedRaise(exception_to_raise(tx, tx.pop()).raised(tx))
    if inst.arg == 2:  # raise exc from cause (cause: an exception, a class, or None)
        cause = tx.pop()
        exc = exception_to_raise(tx, tx.pop())
        if not (cause.is_constant() and cause.as_constant() is None):
            cause = exception_to_raise(tx, cause)
        else:
            cause = None
        raise TracedRaise(exc.raised(tx, cause, with_cause=True))
    if inst.arg == 0 and tx.handled_exceptions:  # a bare `raise` inside an except block
        from kiln.capture.values.exceptions import ExceptionValue

        handled = tx.handled_exceptions[-1]
        if not isinstance(handled, ExceptionValue):  # a real exception object handed in (a resume function)
            unsupported("re-raising an exception caught before a graph break", hint="kiln runs the raise as Python")
        raise TracedRaise(handled)
    unsupported("raise with no exception being handled (RuntimeError)", hint="kiln runs the raise as Python")


# Exception handlers (Tracer.unwind jumps into them; see values/exceptions.py).
# Jumps into them come from Tracer.unwind; these run the handler bodies.

@handles()
def PUSH_EXC_INFO(tx, inst):
    exc = tx.pop()
    tx.push(_PreviousException())  # what POP_EXCEPT restores: kiln keeps that in handled_exceptions
    tx.push(exc)
    tx.handled_exceptions.append(exc)


@handles()
def POP_EXCEPT(tx, inst):
    if not isinstance(tx.pop(), _PreviousException) or not tx.handled_exceptions:
        unsupported("POP_EXCEPT without a handled exception")
    tx.handled_exceptions.pop()


@handles()
def CHECK_EXC_MATCH(tx, inst):
    from kiln.capture.values.exceptions import exception_matches

    match = tx.pop()
    tx.push(ConstantValue(exception_matches(tx, tx.stack[-1], match)))


@handles()
def RERAISE(tx, inst):
    from kiln.capture.values.exceptions import ExceptionValue, TracedRaise

    exc = tx.pop()
    if not isinstance(exc, ExceptionValue):
        unsupported(f"re-raising {exc}")
    raise TracedRaise(exc)


@handles()
def WITH_EXCEPT_START(tx, inst):
    """An exception leaves a with block: call the block's exit with it (stack: exit, lasti, previous
    exception, exception; 3.11 and 3.12). Grad-mode and autocast blocks restore their state and do not
    suppress it; a user context manager's __exit__ would also see the traceback, which kiln does not
    model, so that breaks."""
    from kiln.capture.values.contexts import WithExitValue
    from kiln.capture.values.exceptions import ExceptionValue

    exc, exit_ = tx.stack[-1], tx.stack[-4]
    if not isinstance(exc, ExceptionValue) or not isinstance(exit_, WithExitValue):
        unsupported(f"an exception leaving a `with` block on {exit_}")
    tx.push(exit_.call(tx, [], {}))


class _PreviousException(ConstantValue):
    """The exception that was being handled before a handler started (PUSH_EXC_INFO's first push)."""

    def __init__(self):
        super().__init__(None)

    def reconstruct(self, cg) -> None:
        unsupported("an exception handler's saved state across a graph break")


@handles()
def BEFORE_WITH(tx, inst):
    from kiln.capture.values.contexts import AutocastValue, GradModeValue, WithExitValue, user_context_methods
    from kiln.capture.values.inference import InferenceModeValue

    ctx = tx.pop()
    if hasattr(ctx, "enter_with"):  # e.g. a @contextmanager object (values/generator_contexts.py)
        index = tx.ip - 1
        exit_, result = ctx.enter_with(tx)
        exit_.with_index = index
        tx.open_generator_withs.append(index)
        tx.push(exit_)
        tx.push(result)
        return
    if isinstance(ctx, (GradModeValue, AutocastValue)):
        tx.active_withs.append(ctx)
        tx.push(WithExitValue(ctx))
        tx.push(ctx.enter(tx))
        return
    if isinstance(ctx, InferenceModeValue):  # a break inside the block moves to this `with` (values/inference.py)
        exit_ = WithExitValue(ctx)
        result = ctx.enter(tx)
        if ctx.mode:
            exit_.with_index = tx.ip - 1
            tx.open_generator_withs.append(exit_.with_index)
        tx.push(exit_)
        tx.push(result)
        return
    methods = user_context_methods(tx, ctx)
    if methods is None:
        # a context manager kiln does not trace (written in C, or in a library): the graph breaks at
        # the `with`, which runs as Python; the block continues in a resume function
        unsupported(f"`with` on {ctx}: kiln does not trace this context manager",
                    hint="kiln breaks the graph at the with statement and resumes inside the block")
    enter, exit_ = methods
    result = enter.call(tx, [], {})
    tx.push(exit_)
    tx.push(result)


@handles()
def WITH_EXCEPT_START(tx, inst):
    """An exception left a with block (of an inlined frame): call its __exit__(type, exc, None), which
    sits below the saved lasti and previous exception; push what it returns (true: suppressed)."""
    from kiln.capture.values.exceptions import ExceptionValue
    from kiln.capture.values.objects import ClassValue

    exc = tx.stack[-1]
    if not isinstance(exc, ExceptionValue):
        unsupported(f"a with block left by {exc}")
    exit_ = tx.stack[-4]
    tx.push(exit_.call(tx, [ClassValue(exc.cls), exc, ConstantValue(None)], {}))
