"""`contextlib.ExitStack()` made inside compiled code: its callbacks recorded, run in LIFO order when
the `with` block (or `close()`) ends, as contextlib's `_BaseExitStack.__exit__` runs them.

Modelled: `ExitStack()`, `with stack:` (`__enter__` gives the stack itself), `stack.callback(fn, *args,
**kwargs)` (returns fn), `stack.enter_context(cm)` for context managers whose `__enter__`/`__exit__` are
Python kiln traces into (returns what `__enter__` gives), `stack.close()`. What breaks: an exception
leaving the block or raised by a callback (ExitStack then hands it to the remaining callbacks, which
may suppress it), a callback's non-constant return value (its truth is read), `push`, `pop_all` and
any other method, and keeping the stack after the graph once something was registered or the block
entered. As for @contextmanager blocks, a graph break inside the block moves to its `with` (the stack
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
        unsupported(f"ExitStack.{name}(...) inside compiled code")

    def unwind(self, tx) -> None:
        """__exit__(None, None, None): every callback, last registered first, each once."""
        from kiln.capture.values.exceptions import TracedRaise

        note_mutation(tx, self)
        none = ConstantValue(None)
        while self.callbacks:
            entry = self.callbacks.pop()
            try:
                if entry[0] == "call":
                    _, fn, args, kwargs = entry
                    fn.call(tx, args, kwargs)
                    continue
                result = entry[1].call(tx, [none, none, none], {})
            except TracedRaise:
                unsupported("an ExitStack callback raised: ExitStack hands the exception to the remaining "
                            "callbacks, which kiln does not model")
            if not result.is_constant():
                unsupported(f"an ExitStack __exit__ callback returned {result} (ExitStack reads its truth)")

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


class ExitStackExitValue(Value):
    """The `__exit__` of an entered ExitStack block."""

    with_index = None  # the BEFORE_WITH that entered the block

    def __init__(self, stack: ExitStackValue):
        self.stack = stack

    def call(self, tx, args, kwargs) -> Value:
        exc = args[1] if len(args) > 1 else ConstantValue(None)
        if not (exc.is_constant() and exc.as_constant() is None):
            unsupported("an exception leaving an ExitStack block (its callbacks may suppress or replace it)")
        self.stack.unwind(tx)
        if self.with_index in tx.open_generator_withs:
            tx.open_generator_withs.remove(self.with_index)  # the block is closed: breaks after it are fine
        return ConstantValue(False)

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
