"""Bytecode generation for the transformed code of a captured frame.

The transformed function has the original's signature. It loads the graph's inputs through their
sources, calls the compiled graph (with the frame hook off), and rebuilds the frame's return value
from the graph's outputs and Python constants:

    def f(x, y):                      # original signature, same free variables
        __kiln_out = call_without_hook(compiled_graph, x, y.weight, ...)
        return (__kiln_out[0], 3, {"a": __kiln_out[1]})
"""
from __future__ import annotations

import dis
import types
from typing import Any

from kiln.capture import bytecode as bc
from kiln.capture.hook import call_without_hook
from kiln.capture.side_effects import (AttrDelete, AttrWrite, CellWrite, ContainerUpdate, DeferredCall, GlobalWrite,
                                       IteratorAdvance, run_deferred_call,
                                       replace_dict, replace_list, replace_set)
from kiln.capture.values.base import Value
from kiln.capture.values.functions import CellValue
from kiln.capture.values.tensors import TensorValue

OUT = "__kiln_graph_out"
RET = "__kiln_return"


def _new_contents(effect: ContainerUpdate) -> Value:
    from kiln.capture.values.containers import DictValue, ListValue, SetValue

    c = effect.container
    if hasattr(c, "new_contents"):  # e.g. a deque
        return c.new_contents()
    if isinstance(c, ListValue):
        return ListValue(c.elements)
    if isinstance(c, SetValue):
        return SetValue(list(c.members.values()))
    return DictValue(c.entries)


def _delete_attr(cg: "PyCodegen", effect, deleter) -> None:
    cg.prepare_call(deleter)
    effect.obj.source.emit(cg)
    cg.load_const(effect.name)
    cg.call(2)
    cg.extend(bc.pop_top())


def _apply(cg: "PyCodegen", effect, temp: str) -> None:
    if isinstance(effect, AttrWrite):
        if effect.deleted_before:  # deleted, then set again: the key moves to the end of __dict__
            _delete_attr(cg, effect, object.__delattr__)
        if effect.raw:  # reached through object.__setattr__ from a Python __setattr__
            cg.prepare_call(object.__setattr__)
            effect.obj.source.emit(cg)
            cg.load_const(effect.name)
            cg.load_fast(temp)
            cg.call(3)
            cg.extend(bc.pop_top())
        else:
            cg.load_fast(temp)
            effect.obj.source.emit(cg)
            cg.extend(bc.store_attr(effect.name))
    elif isinstance(effect, AttrDelete):
        _delete_attr(cg, effect, object.__delattr__ if effect.raw else delattr)
    elif isinstance(effect, GlobalWrite):
        cg.load_fast(temp)
        cg.extend([bc.create_instruction("STORE_GLOBAL", argval=effect.name)])
    elif isinstance(effect, CellWrite):
        cg.load_fast(temp)
        var_name = getattr(effect.cell, "var_name", None)
        if var_name is not None:  # the frame's own free variable
            cg.extend(bc.store_deref(var_name))
        else:  # a cell reached through a function's closure
            effect.cell.source.emit(cg)
            cg.extend(bc.store_attr("cell_contents"))
    elif isinstance(effect, IteratorAdvance):
        from kiln.capture.sources import advance_iterator

        cg.prepare_call(advance_iterator)
        cg.load_fast(temp)  # (iterator, count)
        cg.extend(bc.unpack_sequence(2) + bc.swap(2))
        cg.call(2)
        cg.extend(bc.pop_top())
    elif isinstance(effect, ContainerUpdate):
        from kiln.capture.values.containers import ListValue, SetValue

        replace = getattr(effect.container, "replace_function", None) or (
            replace_list if isinstance(effect.container, ListValue) else
            replace_set if isinstance(effect.container, SetValue) else replace_dict)
        cg.prepare_call(replace)
        effect.container.source.emit(cg)
        cg.load_fast(temp)
        cg.call(2)
        cg.extend(bc.pop_top())
    elif isinstance(effect, DeferredCall):
        cg.prepare_call(run_deferred_call)
        cg.load_fast(temp)
        cg.call(1)
        cg.extend(bc.pop_top())
    else:
        raise AssertionError(effect)


class PyCodegen:
    def __init__(self, graph_outputs: dict[int, int] | None = None, built: dict | None = None):
        self.instructions: list[bc.Instruction] = []
        self.graph_outputs = graph_outputs or {}  # id(TensorValue.node) -> output index
        # objects created while tracing, already rebuilt: id(value) -> (value, temp local). Rebuilding
        # one twice would split one object into two (say, a local and the entry of a global dict).
        self.built = built if built is not None else {}
        self.building: set[int] = set()  # ids of objects whose rebuilding is under way (cycle detection)
        self.unfilled: list[tuple[str, Value]] = []  # (cell temp, contents being built): filled once built

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
        if getattr(value, "created_here", True) is False and value.source is not None:
            # an object that existed before the call: the very same object, not a copy
            value.source.emit(self)
            return
        if isinstance(value, TensorValue):
            index = self.graph_outputs.get(id(value.node))
            if index is not None:
                self.load_fast(OUT)
                self.load_const(index)
                self.binary_subscr()
                return
        if _has_identity(value):
            found = self.built.get(id(value))
            if found is not None:
                self.load_fast(found[1])
                return
            if id(value) in self.building:
                from kiln.capture.values.base import unsupported

                unsupported(f"{value!r} refers to itself through objects made while tracing",
                            hint="only a nested function's own closure cell may refer back to it")
            if _is_new_cell(value):
                self._rebuild_cell(value)
                return
            self.building.add(id(value))
            value.reconstruct(self)
            self.building.discard(id(value))
            self._remember(value)
            self._fill_cells()
            return
        value.reconstruct(self)

    def _remember(self, value: Value) -> str:
        """Keep the object on top of the stack in a temp: later uses load it (one object, not copies)."""
        temp = f"__kiln_obj_{len(self.built)}"
        self.built[id(value)] = (value, temp)
        self.extend(bc.copy(1))
        self.extend(bc.store_fast(temp))
        return temp

    def _rebuild_cell(self, cell: Value) -> None:
        """A closure cell made while tracing: an empty cell first, remembered, then its contents. A
        recursive nested function (`def walk(v): ... walk(u) ...`) holds the cell that holds it: its
        contents are set once the function is built (after _fill_cells)."""
        from kiln.capture.values.functions import set_cell_contents

        self.prepare_call(types.CellType)
        self.call(0)
        temp = self._remember(cell)
        if cell.contents is None:
            return
        if id(cell.contents) in self.building:
            self.unfilled.append((temp, cell.contents))
            return
        self.prepare_call(set_cell_contents)
        self.load_fast(temp)
        self.reconstruct(cell.contents)
        self.call(2)
        self.extend(bc.pop_top())

    def _fill_cells(self) -> None:
        from kiln.capture.values.functions import set_cell_contents

        ready = [(temp, v) for temp, v in self.unfilled if id(v) in self.built]
        self.unfilled = [(temp, v) for temp, v in self.unfilled if id(v) not in self.built]
        for temp, contents in ready:
            self.prepare_call(set_cell_contents)
            self.load_fast(temp)
            self.load_fast(self.built[id(contents)][1])
            self.call(2)
            self.extend(bc.pop_top())

    def temps(self) -> list[str]:
        return [temp for _, temp in self.built.values()]


def _is_new_cell(value: Value) -> bool:
    from kiln.capture.values.functions import CellValue

    return isinstance(value, CellValue) and value.created_here and value.source is None


def _has_identity(value: Value) -> bool:
    """Mutable objects created while tracing: one object, however many places hold it."""
    from kiln.capture.values.containers import DictValue, ListValue, SetValue
    from kiln.capture.values.functions import CellValue, NestedFunctionValue
    from kiln.capture.values.objects import NewObjectValue

    if isinstance(value, (NewObjectValue, NestedFunctionValue)):
        return True
    if getattr(value, "kiln_identity", None) is not None and value.kiln_identity():  # NumPy arrays
        return True
    if isinstance(value, CellValue):
        return value.created_here and value.source is None
    from kiln.capture.values.namedtuples import NamedTupleValue

    if isinstance(value, NamedTupleValue) and value.has_dict():  # a namedtuple subclass with a __dict__
        return value.created_here
    from kiln.capture.values.dict_views import DictViewValue
    from kiln.capture.values.iterators import IteratorValue

    if isinstance(value, (IteratorValue, DictViewValue)):
        return value.created_here and value.source is None  # iterators have identity (and state)
    if getattr(value, "has_identity", False):  # e.g. collections' containers made while tracing
        return True
    return isinstance(value, (ListValue, DictValue, SetValue)) and value.created_here


def collect_tensors(value: Value, out: list[TensorValue], seen: set[int]) -> None:
    """The tensors (graph values) inside a value the transformed code must rebuild, in a stable order."""
    if isinstance(value, TensorValue):
        if id(value.node) not in seen:
            seen.add(id(value.node))
            out.append(value)
        return
    if isinstance(value, CellValue):  # a recursive function's closure holds the function itself
        if id(value) in seen:
            return
        seen.add(id(value))  # (cells live as long as the trace: their ids are not reused meanwhile)
    for child in child_values_of(value):
        collect_tensors(child, out, seen)


def child_values_of(value: Value) -> list:
    """The values a value holds that are rebuilt with it (container items, attributes, bound selves)."""
    from kiln.capture.values.base import BoundMethodValue
    from kiln.capture.values.container_keys import ObjectKey
    from kiln.capture.values.containers import DictValue, SequenceValue, SetValue
    from kiln.capture.values.dict_views import DictViewValue
    from kiln.capture.values.functions import UserMethodValue
    from kiln.capture.values.iterators import IteratorValue
    from kiln.capture.values.objects import NewObjectValue
    from kiln.capture.values.tensors import TensorMethodValue

    if isinstance(value, SequenceValue):
        children = value.elements
    elif isinstance(value, DictValue):  # object keys (tensors) are rebuilt too
        children = [k.value for k in value.entries if isinstance(k, ObjectKey) and k.value is not None] + \
            list(value.entries.values())
    elif isinstance(value, SetValue):
        children = list(value.members.values())
    elif isinstance(value, NewObjectValue):
        children = list(value.attrs.values())
    elif isinstance(value, IteratorValue):
        children = value.children() if value.source is None else []  # from outside: handed on as it is
    elif isinstance(value, DictViewValue):
        children = [getattr(value.dict_value, "view_owner", None) or value.dict_value]
    elif isinstance(value, TensorMethodValue):
        children = [value.tensor]
    elif isinstance(value, BoundMethodValue):
        children = [value.obj]
    elif isinstance(value, UserMethodValue):
        children = [value.self_value]
    elif hasattr(value, "graph_tensors"):  # NumPy arrays: the graph tensor (or base) they are rebuilt from
        children = value.graph_tensors()
    elif hasattr(value, "child_values"):  # e.g. functools.partial, collections' containers
        children = value.child_values()
    else:
        children = []
    return list(children)


def _prologue_and_graph_call(original: types.CodeType, graph_call, graph_outputs) -> "PyCodegen":
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
    return cg


def _compute_and_apply_effects(cg: "PyCodegen", side_effects, temps: list[str]) -> None:
    effects = list(side_effects)
    for i, effect in enumerate(effects):
        temps.append(f"__kiln_effect_{i}")
        cg.reconstruct(_new_contents(effect) if isinstance(effect, ContainerUpdate) else effect.value)
        cg.extend(bc.store_fast(temps[-1]))
    for i, effect in enumerate(effects):
        _apply(cg, effect, f"__kiln_effect_{i}")


def _assemble(cg: "PyCodegen", original: types.CodeType, temps: list[str]) -> types.CodeType:
    # generated instructions report the function's first line (tracebacks need a line number)
    first = bc.create_instruction("NOP")
    first.positions = dis.Positions(original.co_firstlineno, original.co_firstlineno, None, None)
    bc.inherit_positions(cg.instructions, first)
    temps = temps + cg.temps()
    varnames = tuple(original.co_varnames) + tuple(t for t in temps if t not in original.co_varnames)
    return bc.assemble(
        cg.instructions, original,
        co_varnames=varnames, co_cellvars=(), co_consts=(None,), co_names=(),
        co_flags=original.co_flags & ~0x20 & ~0x80 & ~0x100 & ~0x200,
    )


def transformed_code(original: types.CodeType, graph_call: tuple[Any, list] | None, return_value: Value,
                     graph_outputs: dict[int, int], side_effects) -> types.CodeType:
    """Build the code object that replaces `original` for one cache entry (the whole frame captured).

    graph_call: (compiled callable, sources of its inputs) or None when no graph is needed.
    Every value (the result, and what each side effect writes) is computed into a temporary before
    any side effect is applied, so no value is read from a place an earlier write changed.
    """
    cg = _prologue_and_graph_call(original, graph_call, graph_outputs)
    temps = [OUT, RET]
    cg.reconstruct(return_value)
    cg.extend(bc.store_fast(RET))
    _compute_and_apply_effects(cg, side_effects, temps)
    cg.load_fast(RET)
    cg.extend(bc.return_value())
    return _assemble(cg, original, temps)


def cell_temp(name: str) -> str:
    """The temp holding the rebuilt cell of the frame's cell variable `name` (break_code)."""
    return f"__kiln_cell_{name}"


def break_code(original: types.CodeType, graph_call, graph_outputs: dict[int, int], side_effects,
               stack: list, consumed: int, pushed: int, locals_: dict[str, Value], break_insts: list,
               continuations: list, make_resume_fn,
               exception_continuation: tuple | None = None, cells: dict | None = None) -> types.CodeType:
    """The code that replaces `original` when tracing stopped at an instruction it cannot trace.

    It runs the graph, computes the stack and the live locals into temporaries, applies the side
    effects, puts back only the `consumed` top stack slots, runs `break_insts` as ordinary Python (the
    last may be a conditional jump), keeps its `pushed` results, and then for each continuation
    (stack shape, live local names, resume code) calls the resume function with the non-NULL stack
    values and those locals, returning its result. A conditional jump's target is the second
    continuation. When the instruction sits in a try or with block, `exception_continuation` (handler
    depth, lasti or None, live locals, resume code) takes over if it raises: the original handler (an
    except/finally clause, or the with block's cleanup calling its __exit__) runs in a resume function
    that starts there. Stack slots of kind ("autocast", args) hold the exit of an autocast block the
    transformed code entered again: it is left before each resume function, which re-enters it.
    `cells` (name -> cell value): the frame's cell variables, rebuilt once into temps (cell_temp) that
    make_resume_fn hands to the resume functions as their closure.
    """
    from kiln.capture.values.base import NULL

    cg = _prologue_and_graph_call(original, graph_call, graph_outputs)
    temps = [OUT]
    stack_temps: list[str | None] = []
    for i, value in enumerate(stack):
        if value is NULL:
            stack_temps.append(None)
            continue
        cg.reconstruct(value)
        stack_temps.append(f"__kiln_stack_{i}")
        temps.append(stack_temps[-1])
        cg.extend(bc.store_fast(stack_temps[-1]))
    names = list(locals_)
    for name in names:
        cg.reconstruct(locals_[name])
    # into temporaries first: a side effect's value may be read from a local's place in the frame (an
    # argument's unchanged value), which must still hold it when the effects are computed
    local_temps = [f"__kiln_local_{name}" for name in names]
    temps.extend(local_temps)
    for temp in reversed(local_temps):
        cg.extend(bc.store_fast(temp))
    for name, cell in (cells or {}).items():  # the same cell objects the rebuilt closures hold
        cg.reconstruct(cell)
        temps.append(cell_temp(name))
        cg.extend(bc.store_fast(cell_temp(name)))
    _compute_and_apply_effects(cg, side_effects, temps)
    for name, temp in zip(names, local_temps):
        cg.load_fast(temp)
        cg.extend(bc.store_fast(name))
    survivors = stack_temps[: len(stack_temps) - consumed]
    for temp in stack_temps[len(stack_temps) - consumed:]:
        if temp is None:
            cg.extend(bc.push_null())
        else:
            cg.load_fast(temp)
    handler = None
    if exception_continuation is not None:
        # the instruction is inside a try block: if it raises, continue in the original handler, in a
        # resume function that starts there with the stack the handler expects and the exception
        depth, lasti, live, resume_code = exception_continuation
        block = PyCodegen(graph_outputs, cg.built)
        block.extend(bc.store_fast("__kiln_exception"))
        temps.append("__kiln_exception")
        block.extend(bc.push_null())
        make_resume_fn(block, resume_code)
        first = [live[0]] if live and original.co_argcount and live[0] == original.co_varnames[0] else []
        args = first + [t for t in stack_temps[:depth] if t is not None]
        for name in args:
            block.load_fast(name)
        n = len(args)
        if lasti is not None:
            block.load_const(lasti)
            n += 1
        block.load_fast("__kiln_exception")
        n += 1
        for name in live:
            if name not in first:
                block.load_fast(name)
                n += 1
        block.call(n)
        block.extend(bc.return_value())
        handler = block.instructions
        entry = bc.ExceptionTableEntry(break_insts[0], break_insts[-1], handler[0], 0, False)
        for inst in break_insts:
            inst.exn_tab_entry = entry
    cg.extend(break_insts)
    results = [f"__kiln_result_{i}" for i in range(pushed)]
    temps.extend(results)
    for name in reversed(results):
        cg.extend(bc.store_fast(name))
    blocks = []
    for shape, live, resume_code in continuations:
        values = [t for t, kind in zip(survivors, shape) if kind is True] + \
            (results if len(shape) > len(survivors) else [])
        first = [live[0]] if live and original.co_argcount and live[0] == original.co_varnames[0] else []
        block = PyCodegen(graph_outputs, cg.built)
        # autocast blocks entered again for the breaking instruction are left here: the resume
        # function's prologue enters them once more
        for temp, kind in reversed(list(zip(survivors, shape))):
            if isinstance(kind, tuple):
                block.extend(bc.push_null())
                block.load_fast(temp)
                for _ in range(3):
                    block.load_const(None)
                block.call(3)
                block.extend(bc.pop_top())
        block.extend(bc.push_null())
        make_resume_fn(block, resume_code)
        for name in first + values + [n for n in live if n not in first]:
            block.load_fast(name)
        block.call(len(first) + len(values) + len(live) - len(first))
        block.extend(bc.return_value())
        blocks.append(block.instructions)
    if len(blocks) == 2:
        break_insts[-1].target = blocks[1][0]
    for block in blocks:
        cg.extend(block)
    if handler is not None:
        cg.extend(handler)
    return _assemble(cg, original, temps)
