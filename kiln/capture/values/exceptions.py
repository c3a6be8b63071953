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

from kiln.capture.class_guards import note_class
from kiln.capture.values.base import ConstantValue, Value, unsupported
from kiln.errors import Unsupported


class ExceptionValue(Value):
    """An exception object made while tracing: its class and constructor arguments."""

    def __init__(self, cls: type, args: list[Value]):
        self.cls = cls
        note_class(cls)
        self.args = list(args)
        self.cause: Value | None = None  # raise ... from cause
        self.context: Value | None = None  # the exception being handled where this one was raised
        self.suppress_context = False
        self.attrs: dict[str, Value] = {}  # instance attributes (a Python __init__'s `self.x = ...`)
        self.init_ran = False  # a Python __init__ ran: rebuilt without calling it again

    def python_type(self) -> type:
        return self.cls

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.containers import TupleValue
        from kiln.capture.values.objects import ClassValue

        if name == "args":
            return TupleValue(self.args)
        if name == "__class__":
            return ClassValue(self.cls)
        if name == "value" and issubclass(self.cls, StopIteration) and name not in self.attrs:
            return self.args[0] if self.args else ConstantValue(None)  # StopIteration_init's rule
        if name in ("__cause__", "__context__"):
            found = self.cause if name == "__cause__" else self.context
            return found if found is not None else ConstantValue(None)
        if name == "__suppress_context__":
            return ConstantValue(self.suppress_context)
        if name in self.attrs:
            return self.attrs[name]
        for klass in self.cls.__mro__:
            if klass.__module__ == "builtins":
                break
            if name in vars(klass):  # a method or class attribute of a Python exception class
                from kiln.capture.values.objects import class_attribute

                return class_attribute(tx, self.cls, name, self)
        unsupported(f"attribute {name!r} of a {self.cls.__name__} made while tracing")

    def setattr(self, tx, name: str, value: Value) -> None:
        """An attribute store on an exception made while tracing: its state is all known here."""
        if name == "args":  # BaseException's args setter takes any iterable, as a tuple
            self.args = list(tx.items(value))
            return
        from kiln.capture.values.objects import data_descriptor_of

        if name.startswith("__") or data_descriptor_of(self.cls, name) is not None or \
                self.cls.__setattr__ is not BaseException.__setattr__:
            unsupported(f"assigning {name!r} of a {self.cls.__name__}")
        self.attrs[name] = value

    def truth(self, tx) -> bool:
        return True

    def reconstruct(self, cg) -> None:
        if self.attrs or self.init_ran:
            from kiln.capture.values.containers import TupleValue

            cg.prepare_call(rebuild_exception_state)
            cg.load_const(self.cls)
            cg.reconstruct(TupleValue(self.args))
            cg.load_const(tuple(self.attrs))
            cg.reconstruct(TupleValue(list(self.attrs.values())))
            cg.reconstruct(self.cause if self.cause is not None else ConstantValue(None))
            cg.reconstruct(self.context if self.context is not None else ConstantValue(None))
            cg.load_const(self.suppress_context)
            cg.call(7)
            return
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
        cg.prepare_call(self.cls)
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


def rebuild_exception_state(cls, args, names, values, cause, context, suppress_context):
    """An exception whose Python __init__ ran while tracing: made without running it again (as
    BaseException.__new__ does), with the args and attributes the trace left it."""
    exc = cls.__new__(cls)
    exc.args = args
    for name, value in zip(names, values):
        setattr(exc, name, value)
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


# builtin exception classes whose objects are only their args: BaseException's __init__, __str__ (KeyError's
# repr of its one argument aside) and __repr__, no other fields
SIMPLE_BUILTIN_EXCEPTIONS = frozenset({
    BaseException, Exception, ArithmeticError, AssertionError, IndexError, KeyError, LookupError,
    NotImplementedError, OverflowError, RuntimeError, TypeError, ValueError, ZeroDivisionError,
})
# builtin classes with extra fields (name, obj, value) whose str()/repr() are still BaseException's
_STR_LIKE_BASE_EXCEPTION = SIMPLE_BUILTIN_EXCEPTIONS | {AttributeError, NameError, StopIteration}


def builtin_base(cls: type) -> type:
    """The first builtin class in an exception class's MRO."""
    return next(k for k in cls.__mro__ if k.__module__ == "builtins")


def has_python_init_only(cls) -> bool:
    """A Python exception class over a simple builtin one (SIMPLE_BUILTIN_EXCEPTIONS) whose Python classes
    define __init__ (and plain methods) but nothing that changes how objects are made or read."""
    if not isinstance(cls, type) or not issubclass(cls, BaseException) or type(cls) is not type:
        return False
    if builtin_base(cls) not in SIMPLE_BUILTIN_EXCEPTIONS:
        return False
    for klass in cls.__mro__:
        if klass.__module__ == "builtins":
            break
        if any(name in vars(klass) for name in ("__new__", "__getattr__", "__setattr__", "__getattribute__",
                                                 "__init_subclass__", "__delattr__", "__slots__")):
            return False
    return True


def make_exception(cls: type, args: list[Value], kwargs: dict[str, Value], tx=None) -> ExceptionValue:
    """cls(*args, **kwargs): BaseException.__new__ keeps args; a Python __init__ runs traced (its
    super().__init__(...) sets args again, see BaseExceptionInit)."""
    if not kwargs and is_plain_exception_class(cls):
        return ExceptionValue(cls, args)
    if tx is None or not has_python_init_only(cls):
        unsupported(f"creating exception {cls.__name__}")
    from kiln.capture.values.objects import class_attribute, python_slot

    exc = ExceptionValue(cls, args)
    if python_slot(cls, "__init__") is None:
        unsupported(f"creating exception {cls.__name__} with keyword arguments")
    exc.init_ran = True
    class_attribute(tx, cls, "__init__", exc).call(tx, args, kwargs)
    return exc


class BaseExceptionInit(Value):
    """`super().__init__(*args)` of a simple builtin exception class on an exception made while tracing."""

    def __init__(self, exc: ExceptionValue):
        self.exc = exc

    def call(self, tx, args, kwargs) -> Value:
        if kwargs:
            raise_traced(TypeError, f"{builtin_base(self.exc.cls).__name__}() takes no keyword arguments")
        self.exc.args = list(args)
        return ConstantValue(None)


def format_exception(tx, exc: ExceptionValue, conversion: int, spec: str) -> Value:
    """f"{exc}", f"{exc!s}", f"{exc!r}" (FORMAT_VALUE): str()/repr() as exception_str, then format();
    without a conversion, object.__format__ (an empty spec only) unless the class has its own."""
    if conversion == 3 or (conversion == 0 and (spec or exc.cls.__format__ is not object.__format__)):
        unsupported(f"formatting a {exc.cls.__name__} with conversion {conversion} and spec {spec!r}")
    text = exception_str(tx, exc, use_repr=conversion == 2)
    if not text.is_constant() or not isinstance(text.as_constant(), str):
        unsupported(f"formatting a {exc.cls.__name__}: its str() is not a known string")
    return ConstantValue(format(text.as_constant(), spec))


def exception_str(tx, exc: ExceptionValue, use_repr: bool = False) -> Value:
    """str(exc) / repr(exc): a Python __str__/__repr__ traced, else BaseException's (KeyError's str)."""
    from kiln.capture.values.objects import class_attribute, python_slot

    name = "__repr__" if use_repr else "__str__"
    for klass in exc.cls.__mro__:
        if klass.__module__ == "builtins":
            break
        if name in vars(klass):
            if python_slot(exc.cls, name) is None:
                unsupported(f"{exc.cls.__name__}.{name} is not a Python function")
            return class_attribute(tx, exc.cls, name, exc).call(tx, [], {})
    base = builtin_base(exc.cls)
    if base not in _STR_LIKE_BASE_EXCEPTION or not all(a.is_constant() for a in exc.args):
        unsupported(f"{'repr' if use_repr else 'str'}() of a {exc.cls.__name__} with arguments {exc.args}")
    args = tuple(a.as_constant() for a in exc.args)
    if use_repr:
        return ConstantValue(f"{exc.cls.__name__}({args[0]!r})" if len(args) == 1 else exc.cls.__name__ + repr(args))
    if base is KeyError and len(args) == 1:
        return ConstantValue(repr(args[0]))
    return ConstantValue("" if not args else str(args[0]) if len(args) == 1 else str(args))


def _type_name(cls: type) -> str:
    """CPython's tp_name: a class written in Python gives its __name__, a C type its module-qualified name
    (types.SimpleNamespace) unless it is a builtin."""
    if cls.__flags__ & (1 << 9) or cls.__module__ == "builtins":  # (1 << 9): a heap type
        return cls.__name__
    return f"{cls.__module__}.{cls.__qualname__}"


def raise_attribute_error(cls: type, name: str):
    """`obj.name` is missing (the caller has checked, and guarded, that it is)."""
    if hasattr(cls, "__getattr__"):
        unsupported(f"{cls.__name__}.__getattr__ for attribute {name!r}")
    message = f"{_type_name(cls)!r} object has no attribute {name!r}"
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
    real = not isinstance(exc, ExceptionValue) and isinstance(getattr(exc, "obj", None), BaseException) and \
        getattr(exc, "source", None) is not None  # an exception object from the frame (Opaque, Object)
    if not isinstance(exc, ExceptionValue) and not real:
        unsupported(f"except clause on {exc}")
    kinds = match.as_constant() if match.is_constant() else tuple(v.as_constant() for v in tx.items(match))
    if not isinstance(kinds, tuple):
        kinds = (kinds,)
    if not all(isinstance(k, type) and issubclass(k, BaseException) for k in kinds):
        unsupported(f"except clause with {kinds}")
    if real:  # an exception handed in (a resume function starting at a handler): matched by its type
        tx.output.guards.type(exc.source, exc.obj)
        return issubclass(type(exc.obj), kinds)
    return issubclass(exc.cls, kinds)
