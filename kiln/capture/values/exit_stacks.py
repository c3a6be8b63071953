"""`contextlib.ExitStack()` made inside compiled code: its callbacks recorded, run in LIFO order when
the `with` block (or `close()`) ends, as contextlib's `_BaseExitStack.__exit__` runs them.

Modelled: `ExitStack()`, `with stack:` (`__enter__` gives the stack itself), `stack.callback(fn, *args,
**kwargs)` (returns fn), `stack.enter_context(cm)` for context managers whose `__enter__`/`__exit__` are
Python kiln traces into (returns what `__enter__` gives), `stack.close()`, and `__exit__` as contextlib's
`_BaseExitStack.__exit__` runs it: the exception leaving the block handed to each callback, last first;
a true result suppresses it; an exception a callback raises is chained to the pending one (its
`__context__`, as `_fix_exception_context` sets it) and handed on; the last pending one is raised. What
breaks: `push`, `pop_all` and any other method, a callback result whose truth depends on data, and
keeping the stack after the graph once something was registered or the block entered. As for @contextmanager blocks, a graph break inside the block moves to its `with` (the stack
is then made again, empty, by `contextlib.ExitStack()`).
"""
from __future__ import annotations

import builtins
import contextlib

from kiln.capture.values.base import BoundMethodValue, ConstantValue, Value, note_mutation, unsupported


class ExitStackValue(Value):
    """An ExitStack made while tracing: its callbacks, last registered last."""

    has_identity = True  # one object however many places hold it

    def __init__(self):
        self.callbacks: list[tuple] = []  # ("call", fn, args, kwargs) or ("exit", bound __exit__)
        self.entered = False

    def python_type(self) -> type:
        return contextlib.ExitStack

    def enter_with(self, tx) -> tuple[Value, Value]:
        """BEFORE_WITH: (the exit callable left below the block, what `as` binds: the stack)."""
        self.entered = True
        return ExitStackExitValue(self), self

    def getattr(self, tx, name: str) -> Value:
        if name in ("callback", "enter_context", "close", "__enter__", "__exit__"):
            return BoundMethodValue(self, name)
        unsupported(f"ExitStack.{name} inside compiled code", hint="kiln models callback, enter_context and close")

    def call_method(self, tx, name: str, args, kwargs) -> Value:
        if name == "callback":
            if not args:
                unsupported("ExitStack.callback() without a callback (TypeError)")
            note_mutation(tx, self)
            self.callbacks.append(("call", args[0], list(args[1:]), dict(kwargs)))
            return args[0]
        if name == "enter_context" and len(args) == 1 and not kwargs:
            from kiln.capture.values.contexts import user_context_methods

            if hasattr(args[0], "enter_with"):  # @contextmanager objects, suppress, a nested ExitStack
                exit_, result = args[0].enter_with(tx)
                note_mutation(tx, self)
                self.callbacks.append(("exit", exit_))
                return result
            methods = user_context_methods(tx, args[0])
            if methods is None:
                unsupported(f"ExitStack.enter_context({args[0]}): kiln models context managers written in "
                            f"Python only here")
            enter, exit_ = methods
            result = enter.call(tx, [], {})
            note_mutation(tx, self)
            self.callbacks.append(("exit", exit_))
            return result
        if name == "close" and not args and not kwargs:
            self.unwind(tx)
            return ConstantValue(None)
        if name == "__enter__" and not args and not kwargs:
            self.entered = True
            return self
        if name == "__exit__" and len(args) == 3 and not kwargs:
            return ExitStackExitValue(self).call(tx, args, {})
        unsupported(f"ExitStack.{name}(...) inside compiled code")

    def unwind(self, tx, exc: Value | None = None) -> bool:
        """`_BaseExitStack.__exit__`: every callback, last registered first, each once, with the exception
        leaving the block (`exc`, or None). A callback's true result suppresses it; a traced exception a
        callback raises is chained to the one before it (contextlib's _fix_exception_context) and handed
        to the rest; the last one pending is raised with that context. True: the block's exception
        was suppressed."""
        from kiln.capture.values.exceptions import TracedRaise

        note_mutation(tx, self)
        received, suppressed, pending = exc is not None, False, False
        frame_exc = _handled_exception(tx)
        while self.callbacks:
            entry = self.callbacks.pop()
            try:
                if entry[0] == "call":  # contextlib's _exit_wrapper: calls it, returns None
                    _, fn, args, kwargs = entry
                    fn.call(tx, args, kwargs)
                    continue
                if tx.truth(entry[1].call(tx, _exc_details(exc), {})):
                    suppressed, pending, exc = True, False, None
            except TracedRaise as raised:
                new = raised.exc_value
                _fix_exception_context(new, exc, frame_exc)
                pending, exc = True, new
        if pending:
            raise TracedRaise(exc)  # `raise exc` then its context put back: the context set above
        return received and suppressed

    def child_values(self) -> list[Value]:
        out = []
        for entry in self.callbacks:
            if entry[0] == "call":
                out += [entry[1], *entry[2], *entry[3].values()]
            else:
                out.append(entry[1])
        return out

    def reconstruct(self, cg) -> None:
        if self.callbacks or self.entered:
            unsupported("handing on an ExitStack with callbacks registered or entered")
        cg.prepare_call(contextlib.ExitStack)
        cg.call(0)

    def __repr__(self) -> str:
        return f"ExitStack({len(self.callbacks)} callbacks)"


def _handled_exception(tx) -> Value | None:
    """sys.exc_info()[1] where the stack's __exit__ runs: the exception the innermost frame handles."""
    frame = tx
    while frame is not None and not getattr(frame, "handled_exceptions", None):
        frame = getattr(frame, "parent", None)
    return frame.handled_exceptions[-1] if frame is not None else None


def _exc_details(exc: Value | None) -> list[Value]:
    """What a callback is called with: (type, exception, traceback); kiln passes None as the traceback,
    as WITH_EXCEPT_START does for a user __exit__."""
    from kiln.capture.values.objects import ClassValue

    if exc is None:
        return [ConstantValue(None)] * 3
    return [ClassValue(exc.cls), exc, ConstantValue(None)]


def _fix_exception_context(new: Value, old: Value | None, frame_exc: Value | None) -> None:
    """contextlib's _fix_exception_context(new_exc, old_exc): the end of new's context chain that points
    at the exception the frame handles (frame_exc) points at `old` instead."""
    from kiln.capture.values.exceptions import ExceptionValue

    seen = set()
    while True:
        if not isinstance(new, ExceptionValue) or id(new) in seen:
            unsupported("an ExitStack callback raised an exception whose context chain kiln does not know")
        seen.add(id(new))
        context = new.context
        if context is None and frame_exc is not None:
            # raised while frame_exc was handled: CPython set it as the context (kiln's builtin errors
            # do not record it)
            context = frame_exc
        if context is None or context is old:
            return
        if context is frame_exc:
            break
        new = context
    new.context = old


class ExitStackExitValue(Value):
    """The `__exit__` of an entered ExitStack block."""

    with_index = None  # the BEFORE_WITH that entered the block

    def __init__(self, stack: ExitStackValue):
        self.stack = stack

    def call(self, tx, args, kwargs) -> Value:
        from kiln.capture.values.exceptions import ExceptionValue

        exc = args[1] if len(args) > 1 else ConstantValue(None)
        if exc.is_constant() and exc.as_constant() is None:
            exc = None
        elif not isinstance(exc, ExceptionValue):
            unsupported(f"{exc} leaving an ExitStack block")
        if self.with_index in tx.open_generator_withs:
            tx.open_generator_withs.remove(self.with_index)  # the block is closed: breaks after it are fine
        return ConstantValue(self.stack.unwind(tx, exc))

    def reconstruct(self, cg) -> None:
        unsupported("handing on the exit of an ExitStack block")


def make_exit_stack(tx, args, kwargs) -> Value:
    if args or kwargs:
        unsupported("ExitStack() takes no arguments (TypeError)")
    return ExitStackValue()


class SuppressValue(Value):
    """`contextlib.suppress(*exceptions)`: a block whose exception of one of those classes is swallowed
    (contextlib's `issubclass(exctype, self._exceptions)`). Stateless, so its `__exit__` kept by a graph
    break inside the block is a new suppress object's."""

    def __init__(self, exceptions: tuple):
        self.exceptions = exceptions

    def python_type(self) -> type:
        return contextlib.suppress

    def enter_with(self, tx) -> tuple[Value, Value]:
        return SuppressExitValue(self.exceptions), ConstantValue(None)

    def reconstruct(self, cg) -> None:
        cg.prepare_call(contextlib.suppress)
        for cls in self.exceptions:
            cg.load_const(cls)
        cg.call(len(self.exceptions))

    def __repr__(self) -> str:
        return f"suppress({', '.join(c.__name__ for c in self.exceptions)})"


class SuppressExitValue(Value):
    def __init__(self, exceptions: tuple):
        self.exceptions = exceptions

    def call(self, tx, args, kwargs) -> Value:
        exc_type = args[0] if args else ConstantValue(None)
        if exc_type.is_constant() and exc_type.as_constant() is None:
            return ConstantValue(False)
        cls = exc_type.as_constant() if exc_type.is_constant() else getattr(exc_type, "cls", None)
        if not isinstance(cls, type):
            unsupported(f"contextlib.suppress leaving with {exc_type}")
        group = getattr(builtins, "BaseExceptionGroup", None)
        if group is not None and issubclass(cls, group):
            unsupported("an exception group leaving contextlib.suppress (it splits the group)")
        return ConstantValue(issubclass(cls, self.exceptions))

    def reconstruct(self, cg) -> None:
        cg.prepare_call(_suppress_exit)
        for cls in self.exceptions:
            cg.load_const(cls)
        cg.call(len(self.exceptions))


def _suppress_exit(*exceptions):
    return contextlib.suppress(*exceptions).__exit__


def make_suppress(tx, args, kwargs) -> Value:
    classes = [a.as_constant() if a.is_constant() else None for a in args]
    if kwargs or not all(isinstance(c, type) and issubclass(c, BaseException) for c in classes):
        unsupported("contextlib.suppress() of values that are not exception classes")
    return SuppressValue(tuple(classes))
