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
from kiln.capture.side_effects import AttrWrite, CellWrite, ContainerUpdate, GlobalWrite, replace_dict, replace_list
from kiln.capture.values.base import Value
from kiln.capture.values.tensors import TensorValue

OUT = "__kiln_graph_out"
RET = "__kiln_return"


def _new_contents(effect: ContainerUpdate) -> Value:
    from kiln.capture.values.containers import DictValue, ListValue

    c = effect.container
    if isinstance(c, ListValue):
        return ListValue(c.elements)
    return DictValue(c.entries)


def _apply(cg: "PyCodegen", effect, temp: str) -> None:
    if isinstance(effect, AttrWrite):
        cg.load_fast(temp)
        effect.obj.source.emit(cg)
        cg.extend(bc.store_attr(effect.name))
    elif isinstance(effect, GlobalWrite):
        cg.load_fast(temp)
        cg.extend([bc.create_instruction("STORE_GLOBAL", argval=effect.name)])
    elif isinstance(effect, CellWrite):
        cg.load_fast(temp)
        cg.extend(bc.store_deref(effect.var_name))
    elif isinstance(effect, ContainerUpdate):
        from kiln.capture.values.containers import ListValue

        cg.prepare_call(replace_list if isinstance(effect.container, ListValue) else replace_dict)
        effect.container.source.emit(cg)
        cg.load_fast(temp)
        cg.call(2)
        cg.extend(bc.pop_top())
    else:
        raise AssertionError(effect)


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
                     graph_outputs: dict[int, int], side_effects) -> types.CodeType:
    """Build the code object that replaces `original` for one cache entry.

    graph_call: (compiled callable, sources of its inputs) or None when no graph is needed.
    Every value (the result, and what each side effect writes) is computed into a temporary before
    any side effect is applied, so no value is read from a place an earlier write changed.
    """
    cg = PyCodegen(graph_outputs)
    temps = [OUT, RET]
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
    cg.extend(bc.store_fast(RET))
    effects = list(side_effects)
    for i, effect in enumerate(effects):
        temps.append(f"__kiln_effect_{i}")
        cg.reconstruct(_new_contents(effect) if isinstance(effect, ContainerUpdate) else effect.value)
        cg.extend(bc.store_fast(temps[-1]))
    for i, effect in enumerate(effects):
        _apply(cg, effect, f"__kiln_effect_{i}")
    cg.load_fast(RET)
    cg.extend(bc.return_value())
    varnames = tuple(original.co_varnames) + tuple(t for t in temps if t not in original.co_varnames)
    return bc.assemble(
        cg.instructions, original,
        co_varnames=varnames, co_cellvars=(), co_consts=(None,), co_names=(),
        co_flags=original.co_flags & ~0x20 & ~0x80 & ~0x100 & ~0x200,
    )
