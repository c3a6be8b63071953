"""`inspect.signature(fn).parameters` of a function kiln knows (interpreter.SignatureValue).

The real attribute is a mappingproxy of name -> inspect.Parameter. What is modelled is what depends only on
the parameter names, which the function's code fixes (guarded with the function): `len()`, `in`, iteration
(the names in order, as a mapping iterates its keys). Anything else (`params["x"]`, `.items()`, a
Parameter's default, which the function's `__defaults__` can change) breaks the graph, and the value is
rebuilt as the real object, `inspect.signature(fn).parameters` computed again after the graph (before, it
was a tuple of the names: `params["x"]` after a break raised TypeError, a crash eager does not have).
"""
from __future__ import annotations

import inspect
import types

from kiln.capture.values.base import ConstantValue, Value, unsupported


class SignatureParametersValue(Value):
    def __init__(self, fn: Value, names: tuple):
        self.fn, self.names = fn, names

    def python_type(self) -> type:
        return types.MappingProxyType

    def items(self, tx) -> list[Value]:
        return [ConstantValue(n) for n in self.names]

    def truth(self, tx) -> bool:
        return bool(self.names)

    def call_method(self, tx, name, args, kwargs) -> Value:
        if name == "__len__" and not args and not kwargs:
            return ConstantValue(len(self.names))
        if name == "__contains__" and len(args) == 1 and not kwargs and args[0].is_constant():
            return ConstantValue(args[0].as_constant() in self.names)
        unsupported(f"inspect.Signature.parameters.{name}() (kiln models len(), `in` and iteration of the names)")

    def getattr(self, tx, name: str) -> Value:
        unsupported(f"attribute {name!r} of inspect.Signature.parameters")

    def child_values(self) -> list[Value]:
        return [self.fn]

    def reconstruct(self, cg) -> None:
        cg.prepare_call(_parameters_of)
        cg.reconstruct(self.fn)
        cg.call(1)

    def __repr__(self) -> str:
        return f"SignatureParameters{self.names}"


def _parameters_of(fn):
    return inspect.signature(fn).parameters
