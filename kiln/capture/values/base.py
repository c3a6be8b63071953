"""The base of all symbolic values, plus Python constants and the NULL marker of the call protocol."""
from __future__ import annotations

import enum
import itertools
import operator
from typing import TYPE_CHECKING, Any, Callable, NoReturn

import torch

from kiln.capture.sources import Source
from kiln.errors import Unsupported

if TYPE_CHECKING:
    from kiln.capture.interpreter import Tracer


def unsupported(reason: str, hint: str = "") -> NoReturn:
    raise Unsupported(reason, hint=hint)


_SERIALS = itertools.count()


class Value:
    """A symbolic Python value. `source` says where it came from in the frame, if anywhere.
    `serial` orders values by creation (a pure call traced ahead, lru_cache's, may only change values it created)."""

    source: Source | None = None

    def __new__(cls, *args, **kwargs):
        obj = super().__new__(cls)
        obj.serial = next(_SERIALS)
        return obj

    def python_type(self) -> type:
        unsupported(f"type() of {self} is not known to kiln")

    def is_constant(self) -> bool:
        return False

    def as_constant(self) -> Any:
        unsupported(f"{self} is not a Python constant")

    def getattr(self, tx: "Tracer", name: str) -> "Value":
        unsupported(f"attribute {name!r} of {self}")

    def call(self, tx: "Tracer", args: list["Value"], kwargs: dict[str, "Value"]) -> "Value":
        unsupported(f"calling {self}")

    def call_method(self, tx: "Tracer", name: str, args: list["Value"], kwargs: dict[str, "Value"]) -> "Value":
        return self.getattr(tx, name).call(tx, args, kwargs)

    def items(self, tx: "Tracer") -> list["Value"]:
        """The elements of this value when iterated (materialized: loops over Python values unroll)."""
        unsupported(f"iterating over {self}")

    def truth(self, tx: "Tracer") -> bool:
        unsupported(f"truth value of {self}")

    def reconstruct(self, cg) -> None:
        """Emit bytecode that pushes this value in the transformed code."""
        if self.source is not None:
            self.source.emit(cg)
            return
        unsupported(f"kiln cannot rebuild {self} after the graph (it is returned, or used after a graph "
                    f"break, or stored where the caller sees it)")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class BoundMethodValue(Value):
    """`obj.name` for a method of a value that implements its methods in `call_method` (containers,
    constants): calling it calls `obj.call_method(name, ...)`."""

    def __init__(self, obj: Value, name: str):
        self.obj = obj
        self.name = name

    def call(self, tx, args, kwargs) -> Value:
        return self.obj.call_method(tx, self.name, args, kwargs)

    def reconstruct(self, cg) -> None:
        cg.reconstruct(self.obj)
        cg.load_attr(self.name)

    def __repr__(self) -> str:
        return f"BoundMethod({self.obj!r}.{self.name})"


def note_mutation(tx, value: "Value") -> None:
    """Called before a symbolic object changes. While a call that must be pure is traced (an lru_cache'd
    function, functools_values._call_purely), changing an object that existed before it started: refuse."""
    floor = tx.output.generator_floor if tx is not None else None
    if floor is not None and value.serial < floor:
        unsupported(f"a call that must be pure changes {value}, which its caller can see")


def method_or_unsupported(value: Value, name: str) -> Value:
    if callable(getattr(value.python_type(), name, None)):
        return BoundMethodValue(value, name)
    unsupported(f"{value.python_type().__name__!r} object has no attribute {name!r}")


class KnownFunctionValue(Value):
    """A function kiln knows by identity (a builtin, a torch function): a constant of the trace."""

    def __init__(self, fn: Callable, source=None):
        self.fn = fn
        self.source = source

    def python_type(self) -> type:
        return type(self.fn)

    def is_constant(self) -> bool:
        return True

    def as_constant(self):
        return self.fn

    def truth(self, tx) -> bool:
        return bool(self.fn)  # (a builtin function or type: True)

    def reconstruct(self, cg) -> None:
        cg.load_const(self.fn)


class NullValue(Value):
    """The NULL that CPython pushes below a callable in the call protocol."""

    def __repr__(self) -> str:
        return "NULL"


NULL = NullValue()

CONSTANT_TYPES = (
    type(None), bool, int, float, complex, str, bytes, type(Ellipsis), type(NotImplemented),
    torch.dtype, torch.device, torch.layout, torch.memory_format, torch.Size, range, slice,
)


def is_constant_literal(value: Any) -> bool:
    if isinstance(value, (tuple, frozenset)) and type(value) in (tuple, frozenset):
        return all(is_constant_literal(v) for v in value)
    return type(value) in CONSTANT_TYPES or isinstance(value, torch.Size)


SYMBOLIC_SCALARS = (torch.SymInt, torch.SymBool, torch.SymFloat)


def _has_symbolic(value) -> bool:
    return any(type(v) in SYMBOLIC_SCALARS for v in value)


def _concrete(value):
    from kiln.capture.values.symbolic import concrete

    return concrete(value)


class ConstantValue(Value):
    """A Python value known at trace time: None, numbers, strings, dtypes, devices, sizes, ..."""

    def __init__(self, value: Any, source: Source | None = None):
        if type(value) in SYMBOLIC_SCALARS or (type(value) in (tuple, torch.Size) and _has_symbolic(value)):
            value = _concrete(value)  # a size symbol held as a constant: guarded to keep this value
        self.value = value
        self.source = source

    def python_type(self) -> type:
        return type(self.value)

    def is_constant(self) -> bool:
        return True

    def as_constant(self) -> Any:
        return self.value

    def truth(self, tx) -> bool:
        return bool(self.value)

    def items(self, tx) -> list[Value]:
        try:
            return [ConstantValue(v) for v in self.value]
        except TypeError:
            unsupported(f"{type(self.value).__name__} object is not iterable")

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.builder import wrap_constant_result

        if isinstance(self.value, enum.Enum):
            from kiln.capture.values.enums import enum_member_method

            method = enum_member_method(tx, self, name)  # a Python method of an Enum class: traced
            if method is not None:
                return method
        try:
            attr = getattr(self.value, name)
        except AttributeError:
            unsupported(f"{type(self.value).__name__!r} object has no attribute {name!r}")
        if callable(attr) and not isinstance(attr, type):
            return BoundMethodValue(self, name)
        return wrap_constant_result(attr)

    def call_method(self, tx, name, args, kwargs):
        from kiln.capture.values.builder import wrap_constant_result

        if name == "join" and isinstance(self.value, str) and len(args) == 1 and not kwargs and \
                not args[0].is_constant():  # ", ".join(str(v) for v in xs): the items, taken one by one
            args = [ConstantValue(tuple(v.as_constant() if v.is_constant() else unsupported(f"str.join of {v}")
                                        for v in tx.items(args[0])))]
        if all(a.is_constant() for a in args) and all(v.is_constant() for v in kwargs.values()):
            method = getattr(self.value, name, None)
            if method is None:
                unsupported(f"{type(self.value).__name__!r} object has no attribute {name!r}")
            immutable = (str, bytes, int, float, complex, tuple, torch.Size, range, frozenset, slice)
            if isinstance(self.value, immutable) or self.value is None or \
                    isinstance(self.value, (torch.dtype, torch.device)):
                try:
                    result = method(*[a.as_constant() for a in args], **{k: v.as_constant() for k, v in kwargs.items()})
                except Exception as exc:
                    unsupported(f"{type(self.value).__name__}.{name}(...) raised {type(exc).__name__}: {exc}")
                return wrap_constant_result(result)
        unsupported(f"{type(self.value).__name__}.{name}() with arguments {args}")

    def reconstruct(self, cg) -> None:
        cg.load_const(self.value)

    def __repr__(self) -> str:
        return f"Constant({self.value!r})"


# Python's binary operators by the name BINARY_OP's argrepr uses
BINARY_OPERATORS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "@": operator.matmul,
    "<<": operator.lshift, ">>": operator.rshift, "&": operator.and_, "|": operator.or_,
    "^": operator.xor,
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "@=": operator.imatmul,
    "<<=": operator.ilshift, ">>=": operator.irshift, "&=": operator.iand, "|=": operator.ior,
    "^=": operator.ixor,
}
COMPARE_OPERATORS = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
    ">": operator.gt, ">=": operator.ge,
}
INPLACE_TO_PLAIN = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv, operator.imod: operator.mod,
    operator.ipow: operator.pow, operator.imatmul: operator.matmul, operator.ilshift: operator.lshift,
    operator.irshift: operator.rshift, operator.iand: operator.and_, operator.ior: operator.or_,
    operator.ixor: operator.xor,
}
