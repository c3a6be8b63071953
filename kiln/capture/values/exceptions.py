"""Python exceptions raised and caught inside traced (inlined) code.

An exception that traced code raises (`raise IndexError(...)`, an attribute kiln knows is missing) is a
`TracedRaise` carrying an `ExceptionValue`. It unwinds the tracers like CPython unwinds frames: an
inlined frame whose exception table covers the running instruction jumps to the handler (stack cut to
the entry's depth, `lasti` and the exception pushed), and `except E:` / `finally:` run as traced code
(PUSH_EXC_INFO, CHECK_EXC_MATCH, POP_EXCEPT, RERAISE). `getattr(obj, name, default)` and `hasattr`
catch an AttributeError.

TracedRaise is an `Unsupported`: when it reaches the root frame (or any kiln code that gives up on
Unsupported), the graph breaks before the root instruction that led to it, and that instruction runs
as Python, raising the real exception. So the root frame never catches a traced exception: only
inlined frames, whose handlers run entirely while tracing, do.

Only exceptions whose meaning is known exactly are raised this way: a missing attribute of an object
made while tracing (all its attributes are known) or of an existing object (its instance dict is
guarded not to hold the name), and exceptions traced code constructs and raises itself.
"""
from __future__ import annotations

from kiln.capture.values.base import ConstantValue, Value, unsupported
from kiln.errors import Unsupported


class ExceptionValue(Value):
    """An exception object made while tracing: its class and constructor arguments."""

    def __init__(self, cls: type, args: list[Value]):
        self.cls = cls
        self.args = list(args)
        self.cause: Value | None = None  # raise ... from cause
        self.context: Value | None = None  # the exception being handled where this one was raised
        self.suppress_context = False

    def python_type(self) -> type:
        return self.cls

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.containers import TupleValue
        from kiln.capture.values.objects import ClassValue

        if name == "args":
            return TupleValue(self.args)
        if name == "__class__":
            return ClassValue(self.cls)
        if name in ("__cause__", "__context__"):
            found = self.cause if name == "__cause__" else self.context
            return found if found is not None else ConstantValue(None)
        if name == "__suppress_context__":
            return ConstantValue(self.suppress_context)
        unsupported(f"attribute {name!r} of a {self.cls.__name__} raised while tracing")

    def truth(self, tx) -> bool:
        return True

    def reconstruct(self, cg) -> None:
        if self.cause is not None or self.context is not None or self.suppress_context:
            from kiln.capture.values.containers import TupleValue

            cg.prepare_call(rebuild_chained_exception)
            cg.load_const(self.cls)
            cg.reconstruct(TupleValue(self.args))
            cg.reconstruct(self.cause if self.cause is not None else ConstantValue(None))
            cg.reconstruct(self.context if self.context is not None else ConstantValue(None))
            cg.load_const(self.suppress_context)
            cg.call(5)
            return
        cg.load_const(self.cls)
        for arg in self.args:
            cg.reconstruct(arg)
        cg.call(len(self.args))

    def raised(self, tx, cause: "Value | None" = None, with_cause: bool = False) -> "ExceptionValue":
        """Record what CPython sets when this exception is raised: __context__ (the exception being
        handled, if another one) and, for `raise ... from cause`, __cause__ and __suppress_context__."""
        frame = tx  # the exception being handled is per thread: the innermost frame handling one
        while frame is not None and not getattr(frame, "handled_exceptions", None):
            frame = getattr(frame, "parent", None)
        if frame is not None and frame.handled_exceptions[-1] is not self:
            self.context = frame.handled_exceptions[-1]
        if with_cause:
            self.cause = cause
            self.suppress_context = True
        return self

    def __repr__(self) -> str:
        return f"Exception({self.cls.__name__})"


def rebuild_chained_exception(cls, args, cause, context, suppress_context):
    """An exception made while tracing, with the chaining attributes the trace gave it."""
    exc = cls(*args)
    exc.__cause__, exc.__context__, exc.__suppress_context__ = cause, context, suppress_context
    return exc


class TracedRaise(Unsupported):
    """Traced code raised `exc_value`; unwinds to the nearest handler in an inlined frame."""

    def __init__(self, exc_value: ExceptionValue, detail: str = ""):
        what = f"{exc_value.cls.__name__}{': ' + detail if detail else ''}"
        super().__init__(f"{what} raised inside traced code and not caught there",
                         hint="kiln runs the statement that raises it as Python")
        self.exc_value = exc_value

    def matches(self, cls: type) -> bool:
        return issubclass(self.exc_value.cls, cls)


def is_plain_exception_class(cls) -> bool:
    """An exception class whose objects are just (class, args): builtin ones, and Python subclasses
    that keep the builtin __new__/__init__ and define no other state-changing dunder."""
    if not isinstance(cls, type) or not issubclass(cls, BaseException) or type(cls) is not type:
        return False
    for klass in cls.__mro__:
        if klass.__module__ == "builtins":
            return True
        if any(name in vars(klass) for name in ("__new__", "__init__", "__getattr__", "__setattr__",
                                                 "__getattribute__", "__init_subclass__")):
            return False
    return True


def raise_traced(cls: type, message: str):
    """Raise `cls(message)` as the program's own exception (a builtin's error CPython would raise)."""
    raise TracedRaise(ExceptionValue(cls, [ConstantValue(message)]), message)


def raise_as_traced(exc: BaseException, what: str):
    """Re-raise `exc`, which a builtin raised on constant arguments exactly as the program would have
    (`len(5)`, `1 / 0`, `int("x")`), as a TracedRaise of the same class and arguments, so a traced
    `except` catches it and, uncaught, the statement runs as Python and raises it there."""
    from kiln.capture.values.base import ConstantValue, is_constant_literal

    cls = type(exc)
    if not is_plain_exception_class(cls) or not all(is_constant_literal(a) for a in exc.args):
        unsupported(f"{what} raised {cls.__name__}: {exc}")
    raise TracedRaise(ExceptionValue(cls, [ConstantValue(a) for a in exc.args]), str(exc)) from None


def make_exception(cls: type, args: list[Value], kwargs: dict[str, Value]) -> ExceptionValue:
    if kwargs or not is_plain_exception_class(cls):
        unsupported(f"creating exception {cls.__name__}")
    return ExceptionValue(cls, args)


def raise_attribute_error(cls: type, name: str):
    """`obj.name` is missing (the caller has checked, and guarded, that it is)."""
    if hasattr(cls, "__getattr__"):
        unsupported(f"{cls.__name__}.__getattr__ for attribute {name!r}")
    message = f"{cls.__name__!r} object has no attribute {name!r}"
    raise TracedRaise(ExceptionValue(AttributeError, [ConstantValue(message)]), message)


def exception_to_raise(tx, value: Value) -> ExceptionValue:
    """The exception `raise value` raises: an instance, or a class called without arguments."""
    from kiln.capture.values.objects import ClassValue

    if isinstance(value, ClassValue):
        value = make_exception(value.cls, [], {})
    if not isinstance(value, ExceptionValue):
        unsupported(f"raise of {value}")
    return value


def exception_matches(tx, exc: Value, match: Value) -> bool:
    """CHECK_EXC_MATCH: issubclass(type(exc), match) with match a class or a tuple of classes."""
    if not isinstance(exc, ExceptionValue):
        unsupported(f"except clause on {exc}")
    kinds = match.as_constant() if match.is_constant() else tuple(v.as_constant() for v in tx.items(match))
    if not isinstance(kinds, tuple):
        kinds = (kinds,)
    if not all(isinstance(k, type) and issubclass(k, BaseException) for k in kinds):
        unsupported(f"except clause with {kinds}")
    return issubclass(exc.cls, kinds)
