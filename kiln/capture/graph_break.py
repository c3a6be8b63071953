"""Turning an unsupported instruction of the root frame into a graph break.

The frame is traced again, stopping just before that instruction (tracing is deterministic). The graph
so far is compiled; the transformed code runs it, runs the instruction as ordinary Python, and calls
resume functions (resume.py) for the rest of the function.
"""
from __future__ import annotations

import sys
import types
from typing import Callable

from kiln.capture import bytecode as bc
from kiln.capture.codegen import break_code, cell_temp, collect_tensors
from kiln.capture.interpreter import BreakSignal, RootTracer
from kiln.capture.resume import cells_used_from, live_locals, make_resume_code
from kiln.capture.values.base import NULL, unsupported

_JUMPS = {
    "POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE",
    "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE",
}


def _generic_jump_name(opname: str) -> str:
    return opname.replace("_FORWARD", "").replace("_BACKWARD", "")


def _slot_kind(value):
    """How a stack value reaches a resume function: True (an argument), False (CPython's NULL, pushed
    again), or ("autocast", args): the __exit__ of an open autocast block, whose resume function enters
    the block again itself (so its graph records the enter and exit)."""
    from kiln.capture.values.contexts import AutocastValue, WithExitValue

    if value is NULL:
        return False
    if isinstance(value, WithExitValue) and isinstance(value.ctx, AutocastValue):
        return ("autocast", value.ctx.args)
    return True


def _close_open_autocasts(output, stack) -> None:
    from torch.amp import autocast_mode

    from kiln.capture.values.contexts import AutocastValue, WithExitValue

    for value in reversed(stack):
        if isinstance(value, WithExitValue) and isinstance(value.ctx, AutocastValue) and value.ctx.node is not None:
            node = output.graph.call_function(autocast_mode._exit_autocast, (value.ctx.node,))
            node.meta["example_value"] = None


def _resume_args(code, instructions, target) -> list[str]:
    """The locals a resume function starting at `target` takes, in order: the original first argument
    first (zero-argument super() reads the first local, even where liveness does not see it), then
    the other live locals by name. Cell variables are not among them: the resume function gets the
    cells themselves, as free variables (_shared_cells)."""
    live = sorted(live_locals(instructions, target, set(code.co_varnames) - set(code.co_cellvars)))
    first = code.co_varnames[0] if code.co_argcount else None
    if first is not None and (first in live or "__class__" in code.co_freevars):
        live = [first] + [name for name in live if name != first]
    return live


def _shared_cells(code, tracer, starts: list) -> dict:
    """The frame's cell variables that code after the break (from `starts`) uses, name -> cell value,
    each handed to the resume functions as the same cell object (their first free variables): nested
    functions made before the break hold these cells, and CPython's frame, closures and the code after
    the break all see one cell per variable. (A cell the rest never names is a fresh one there.) Not the
    first argument of a method using zero-argument super(): see _super_self_cell."""
    used = cells_used_from(tracer.instructions, starts, set(code.co_cellvars))
    used.discard(_super_self_cell(code))
    missing = [name for name in code.co_cellvars if name in used and name not in tracer.cells]
    if missing:
        unsupported(f"a graph break before the cell of {missing[0]!r} exists (internal inconsistency)")
    return {name: tracer.cells[name] for name in code.co_cellvars if name in used}


def _super_self_cell(code) -> str | None:
    """The first argument of a method using zero-argument super(), when a nested function shares it (a
    cell variable): super() reads the resume function's first local, so the resume function takes it as
    an argument (its value, in a cell of its own) rather than as the shared cell. Sound only while
    nothing assigns it (_cell_written_around_break; `self` is rarely assigned)."""
    if "__class__" in code.co_freevars and code.co_argcount and code.co_varnames[0] in code.co_cellvars:
        return code.co_varnames[0]
    return None


def _cell_written_around_break(code, instructions, break_index: int, name: str) -> bool:
    """Whether the closure cell `name` may be assigned once the frame is split at `break_index`: by a nested
    function (a `nonlocal` store), or by the frame itself after the break (a store at or after it, or
    anywhere in a loop around it)."""
    writes = ("STORE_DEREF", "DELETE_DEREF")
    pending = [c for c in code.co_consts if isinstance(c, types.CodeType)]
    while pending:
        nested = pending.pop()
        pending.extend(c for c in nested.co_consts if isinstance(c, types.CodeType))
        if name in nested.co_freevars and any(i.opname in writes and i.argval == name for i in bc.decode(nested)):
            return True
    position = {id(inst): index for index, inst in enumerate(instructions)}
    back_targets = [position.get(id(i.target), len(instructions)) for i in instructions[break_index:]
                    if i.target is not None]  # jumps from the break on back to it or before: a loop
    loop_start = min([t for t in back_targets if t <= break_index], default=break_index)
    return any(i.opname in writes and i.argval == name for i in instructions[loop_start:])


def _mark_loop_iterators(tracer, break_index: int, stack: list, locals_values: dict) -> None:
    """Iterators kiln computed ahead (ListIteratorValue: user generators, module iterators) are handed
    on as a ResumeIterator, which is exact only where no code can see the object: as (or wrapped by
    enumerate/zip/map/... into) the iterator of a for loop the break splits (the stack slot FOR_ITER
    reads), and held nowhere else (a live local, another stack value, a side effect, an item). Those are
    marked `loop_only`; any other rebuild of one refuses."""
    from kiln.capture.bytecode.stack import stack_depths
    from kiln.capture.values.iterators import IteratorValue, ListIteratorValue

    if not any(isinstance(v, IteratorValue) for v in stack):
        return
    instructions = tracer.instructions
    depths = stack_depths(instructions)
    position = {id(inst): index for index, inst in enumerate(instructions)}
    loop_slots = set()
    for index, inst in enumerate(instructions[:break_index]):
        if inst.opname == "FOR_ITER" and index < break_index < position[id(inst.target)]:
            loop_slots.add(depths[inst] - 1)  # FOR_ITER reads the iterator on top of the stack
    seen: set = set()  # ids of the values code can reach
    candidates = []
    for i, v in enumerate(stack):
        if i not in loop_slots or not isinstance(v, IteratorValue):
            _reachable_iterators(v, seen)
            continue
        chain = [v]  # the loop's iterator and the iterators it wraps
        while chain:
            it = chain.pop()
            if isinstance(it, ListIteratorValue):
                candidates.append(it)
                for item in it.children():  # what it will yield reaches the loop body
                    _reachable_iterators(item, seen)
                continue
            for child in it.children():
                if isinstance(child, IteratorValue) and child.source is None:
                    chain.append(child)
                else:
                    _reachable_iterators(child, seen)
    for v in locals_values.values():
        _reachable_iterators(v, seen)
    for v in tracer.output.side_effects.values():
        _reachable_iterators(v, seen)
    for v in candidates:
        if id(v) not in seen:
            v.loop_only = True


def _reachable_iterators(value, seen: set) -> None:
    """Add the ids of every value reachable from `value` (as codegen.collect_tensors walks them)."""
    from kiln.capture.codegen import child_values_of

    pending = [value]
    while pending:
        v = pending.pop()
        if v is None or id(v) in seen:
            continue
        seen.add(id(v))
        pending.extend(child_values_of(v))


def _popped(inst, tracer) -> tuple[int, int]:
    """(values the instruction pops, values it pushes) for the instructions kiln can break at."""
    name, arg = inst.opname, inst.arg
    if name == "CALL":
        return arg + 2, 1
    if name == "CALL_FUNCTION_EX":
        return 3 + (arg & 1), 1
    if name in _JUMPS:
        return 1, 0
    if name in ("BINARY_OP", "COMPARE_OP", "BINARY_SUBSCR", "CONTAINS_OP", "IS_OP"):
        return 2, 1
    if name in ("UNARY_NEGATIVE", "UNARY_NOT", "UNARY_INVERT", "UNARY_POSITIVE", "GET_ITER"):
        return 1, 1
    if name == "BEFORE_WITH":  # pops the context manager; pushes its __exit__ and what __enter__ returned
        return 1, 2
    if name == "STORE_ATTR":
        return 2, 0
    if name == "STORE_SUBSCR":
        return 3, 0
    if name == "DELETE_SUBSCR":
        return 2, 0
    if name == "STORE_GLOBAL":
        return 1, 0
    if name == "LOAD_ATTR" and not (sys.version_info >= (3, 12) and arg & 1):
        return 1, 1
    if name == "FORMAT_VALUE":
        return (2 if arg & 0x04 else 1), 1
    if name == "BUILD_STRING":
        return arg, 1
    unsupported(f"kiln cannot split the function at {_WHAT_INSTRUCTIONS_DO.get(name, name)}")


_WHAT_INSTRUCTIONS_DO = {  # the words for an instruction kiln cannot break the graph at
    "LOAD_FAST": "reading a local variable", "LOAD_DEREF": "reading a variable of an enclosing function",
    "LOAD_GLOBAL": "reading a global variable", "LOAD_NAME": "reading a variable",
    "LOAD_CLOSURE": "reading a variable of an enclosing function", "FOR_ITER": "the header of a for loop",
    "RETURN_VALUE": "the return statement", "RETURN_CONST": "the return statement",
    "UNPACK_SEQUENCE": "an unpacking assignment", "UNPACK_EX": "an unpacking assignment",
    "BUILD_LIST": "building a list", "BUILD_TUPLE": "building a tuple", "BUILD_MAP": "building a dict",
    "BUILD_SET": "building a set", "YIELD_VALUE": "a yield", "SEND": "a yield from",
    "MAKE_FUNCTION": "defining a function", "IMPORT_NAME": "an import", "RAISE_VARARGS": "a raise statement",
    "STORE_FAST": "an assignment", "STORE_DEREF": "an assignment to an enclosing function's variable",
    "DELETE_FAST": "a del statement", "LIST_APPEND": "a list comprehension", "DICT_MERGE": "a call with **kwargs",
    "CALL_FUNCTION_EX": "a call with *args or **kwargs", "WITH_EXCEPT_START": "the end of a with block",
}


def _copy_instructions(inst, tracer) -> list:
    """The instruction(s) to run as ordinary Python in the transformed code."""
    if inst.opname == "CALL":
        if tracer.kw_names:
            return bc.call_kw(inst.arg, tuple(tracer.kw_names))
        return bc.call(inst.arg)
    if inst.opname in _JUMPS:
        return [bc.create_instruction(_generic_jump_name(inst.opname), target=inst)]  # target fixed later
    copy = bc.create_instruction(inst.opname, arg=inst.arg, argval=inst.argval)
    copy.arg = inst.arg
    return [copy]


def compile_with_break(code, f_locals, f_globals, f_builtins, closure, options, break_index: int,
                       finish_graph: Callable, dynamic=None):
    """Trace `code` up to instruction `break_index` and build the code that breaks the graph there.

    finish_graph(output, tensors) compiles the graph with those tensors as outputs and returns
    (graph_call or None, graph_outputs, gm). Returns (new code, gm, reason-free description).
    """
    tracer = RootTracer(code, f_locals, f_globals, f_builtins, closure, options, break_at=break_index,
                        dynamic=dynamic)
    try:
        tracer.run()
    except BreakSignal:
        pass
    else:
        unsupported("the frame ran to its end when traced again (internal inconsistency)")
    inst = tracer.instructions[break_index]
    # inside a try or with block: if the instruction raises, the original handler (an except/finally
    # clause, or a with block's cleanup, which calls the context manager's __exit__) takes over
    in_try = inst.exn_tab_entry is not None
    popped, pushed = _popped(inst, tracer)
    stack = list(tracer.stack)
    survivors = stack[: len(stack) - popped]

    # where execution continues: the next instruction, and a conditional jump's target
    instructions = tracer.instructions
    targets = [instructions[break_index + 1]]
    if inst.opname in _JUMPS:
        targets.append(inst.target)
    continuations = [(target, _resume_args(code, instructions, target)) for target in targets]
    handler_live = _resume_args(code, instructions, inst.exn_tab_entry.target) if in_try else []
    needed_locals = set(handler_live).union(*(live for _, live in continuations))

    cells = _shared_cells(code, tracer, [t for t, _ in continuations] + ([inst.exn_tab_entry.target] if in_try else []))
    locals_values = {}
    for name in sorted(needed_locals):
        if name in tracer.locals:
            locals_values[name] = tracer.read_local(name)
        elif name == _super_self_cell(code) and name in tracer.cells:
            cell = tracer.cells[name]
            if getattr(cell, "captured", False) and _cell_written_around_break(code, instructions, break_index, name):
                unsupported(f"a graph break in a method using super() whose first argument {name!r} is shared "
                            f"with a nested function and assigned", hint="kiln runs the function eagerly")
            if cell.contents is not None:
                locals_values[name] = cell.contents
    # a local that is live but unbound here stays unbound in the resume function: drop it from its args
    continuations = [(t, [n for n in live if n in locals_values]) for t, live in continuations]
    handler_live = [n for n in handler_live if n in locals_values]

    rebuilt: dict = {}
    if not in_try:  # suspended generators held by locals only: handed on as their state (generator_resume.py)
        from kiln.capture.generator_resume import split_generators

        continuations, rebuilt = split_generators(tracer, stack, locals_values, continuations,
                                                  list(tracer.output.side_effects.values()))
    _mark_loop_iterators(tracer, break_index, stack, locals_values)
    from kiln.capture.values.lazy_generators import check_abandoned

    check_abandoned(tracer.output)
    tensors: list = []
    seen: set = set()
    for v in stack:
        if v is not NULL:
            collect_tensors(v, tensors, seen)
    for v in locals_values.values():
        collect_tensors(v, tensors, seen)
    for v in tracer.output.side_effects.values():
        collect_tensors(v, tensors, seen)
    for v in cells.values():
        collect_tensors(v, tensors, seen)
    # autocast blocks open at the break end with the graph; the transformed code enters them again as
    # Python around the breaking instruction, and each resume function re-enters them in its prologue
    _close_open_autocasts(tracer.output, stack)
    graph_call, graph_outputs, gm = finish_graph(tracer.output, tensors)

    def make_resume_fn(cg, resume_code):
        if resume_code.co_freevars:  # the frame's cells (rebuilt into temps by break_code), its free variables
            for name in resume_code.co_freevars:
                if name in cells:
                    cg.load_fast(cell_temp(name))
                else:
                    cg.extend(bc.load_closure(name))
            cg.extend(bc.build_tuple(len(resume_code.co_freevars)))
            cg.load_const(resume_code)
            cg.extend(bc.make_function(bc.FN_CLOSURE))
        else:
            cg.load_const(types.FunctionType(resume_code, f_globals, resume_code.co_name))

    survivor_shape = [_slot_kind(v) for v in survivors]
    built = []
    for i, (target, live) in enumerate(continuations):
        shape = survivor_shape + [True] * pushed
        from kiln.capture.generator_resume import rebuilt_for

        resume_code = make_resume_code(code, target.offset, shape, live, rebuilt_for(live, rebuilt), tuple(cells))
        built.append((shape, live, resume_code))
    exception_continuation = None
    if in_try:
        entry = inst.exn_tab_entry
        below = stack[: entry.depth]
        shape = [v is not NULL for v in below] + ([True] if entry.lasti else []) + [True]
        lasti = inst.offset // 2 if entry.lasti else None  # in code units, as CPython pushes it
        handler_code = make_resume_code(code, entry.target.offset, shape, handler_live, cells=tuple(cells))
        exception_continuation = (entry.depth, lasti, handler_live, handler_code)
    copied = bc.inherit_positions(_copy_instructions(inst, tracer), inst)  # errors point at the user's line
    new_code = break_code(code, graph_call, graph_outputs, tracer.output.side_effects, stack, popped, pushed,
                          locals_values, copied, built, make_resume_fn,
                          exception_continuation, cells)
    return new_code, gm, tracer
