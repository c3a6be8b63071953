"""Bytecode generation for the transformed code of a captured frame.

The transformed function has the original's signature. It loads the graph's inputs through their
sources, calls the compiled graph (with the frame hook off), and rebuilds the frame's return value
from the graph's outputs and Python constants:

    def f(x, y):                      # original signature, same free variables
        __kiln_out = call_without_hook(compiled_graph, x, y.weight, ...)
        return (__kiln_out[0], 3, {"a": __kiln_out[1]})
"""
from __future__ import annotations

import types
from typing import Any

from kiln.capture import bytecode as bc
from kiln.capture.hook import call_without_hook
from kiln.capture.values.base import Value
from kiln.capture.values.tensors import TensorValue

OUT = "__kiln_graph_out"


class PyCodegen:
    def __init__(self, graph_outputs: dict[int, int] | None = None):
        self.instructions: list[bc.Instruction] = []
        self.graph_outputs = graph_outputs or {}  # id(TensorValue.node) -> output index

    def extend(self, insts: list[bc.Instruction]) -> None:
        self.instructions.extend(insts)

    # the primitives sources and values use
    def load_fast(self, name: str) -> None:
        self.extend(bc.load_fast(name))

    def load_global(self, name: str) -> None:
        self.extend(bc.load_global(name))

    def load_deref(self, name: str) -> None:
        self.extend(bc.load_deref(name))

    def load_attr(self, name: str) -> None:
        self.extend(bc.load_attr(name))

    def load_const(self, value: Any) -> None:
        self.extend(bc.load_const(value))

    def binary_subscr(self) -> None:
        self.extend(bc.binary_subscr())

    def prepare_call(self, fn: Any) -> None:
        """Push NULL and a callable held as a constant; then push args and `call(n)`."""
        self.extend(bc.push_null())
        self.load_const(fn)

    def call(self, n: int) -> None:
        self.extend(bc.call(n))

    def build(self, kind: type, n: int) -> None:
        if kind is tuple:
            self.extend(bc.build_tuple(n))
        elif kind is list:
            self.extend(bc.build_list(n))
        elif kind is dict:
            self.extend(bc.build_map(n))
        elif kind is set:
            self.extend([bc.create_instruction("BUILD_SET", arg=n)])
        elif kind is slice:
            self.extend([bc.create_instruction("BUILD_SLICE", arg=n)])
        else:
            raise AssertionError(kind)

    def reconstruct(self, value: Value) -> None:
        if isinstance(value, TensorValue):
            index = self.graph_outputs.get(id(value.node))
            if index is not None:
                self.load_fast(OUT)
                self.load_const(index)
                self.binary_subscr()
                return
        value.reconstruct(self)


def collect_tensors(value: Value, out: list[TensorValue], seen: set[int]) -> None:
    """The tensors (graph values) inside a return value, in a stable order."""
    from kiln.capture.values.containers import DictValue, SequenceValue, SetValue
    from kiln.capture.values.objects import NewObjectValue

    if isinstance(value, TensorValue):
        if id(value.node) not in seen:
            seen.add(id(value.node))
            out.append(value)
    elif isinstance(value, SequenceValue):
        for v in value.elements:
            collect_tensors(v, out, seen)
    elif isinstance(value, DictValue):
        for v in value.entries.values():
            collect_tensors(v, out, seen)
    elif isinstance(value, NewObjectValue):
        for v in value.attrs.values():
            collect_tensors(v, out, seen)


def transformed_code(original: types.CodeType, graph_call: tuple[Any, list] | None, return_value: Value,
                     graph_outputs: dict[int, int]) -> types.CodeType:
    """Build the code object that replaces `original` for one cache entry.

    graph_call: (compiled callable, sources of its inputs) or None when no graph is needed.
    """
    cg = PyCodegen(graph_outputs)
    cg.extend(bc.function_prologue((), len(original.co_freevars)))
    if graph_call is not None:
        compiled, input_sources = graph_call
        cg.prepare_call(call_without_hook)
        cg.load_const(compiled)
        for source in input_sources:
            source.emit(cg)
        cg.call(len(input_sources) + 1)
        cg.extend(bc.store_fast(OUT))
    cg.reconstruct(return_value)
    cg.extend(bc.return_value())
    varnames = tuple(original.co_varnames)
    if OUT not in varnames:
        varnames = varnames + (OUT,)
    return bc.assemble(
        cg.instructions, original,
        co_varnames=varnames, co_cellvars=(), co_consts=(None,), co_names=(),
        co_flags=original.co_flags & ~0x20 & ~0x80 & ~0x100 & ~0x200,
    )
