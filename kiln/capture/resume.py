"""Resume functions: continue a function from the middle, after a graph break.

When the interpreter stops at an instruction it cannot trace, the transformed code runs the graph
captured so far, runs that instruction as ordinary Python, and then calls a resume function

    def resume_in_<fn>_at_<offset>(___stack0, ..., <live locals>):
        <push the stack back>; jump to <offset>; ...the rest of the original function...

Resume functions are ordinary Python functions, so the frame hook offers them to kiln like any
other: they get their own graphs, guards and cache entries (and, if needed, breaks of their own).
"""
from __future__ import annotations

import types

from kiln.capture import bytecode as bc
from kiln.capture.bytecode import Instruction

CO_VARARGS, CO_VARKEYWORDS = 0x04, 0x08
_LOADS = {"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "DELETE_FAST", "LOAD_CLOSURE",
          "LOAD_DEREF", "MAKE_CELL", "DELETE_DEREF"}
_STORES = {"STORE_FAST"}
_TERMINAL = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"}
_UNCONDITIONAL = {"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT"}


def live_locals(instructions: list[Instruction], start: Instruction, names: set[str]) -> set[str]:
    """Local (and cell) variables in `names` that may be read from `start` on before being written."""
    index = {id(inst): i for i, inst in enumerate(instructions)}
    n = len(instructions)
    successors: list[list[int]] = []
    for i, inst in enumerate(instructions):
        nxt = []
        if inst.opname not in _TERMINAL and inst.opname not in _UNCONDITIONAL and i + 1 < n:
            nxt.append(i + 1)
        if inst.target is not None:
            nxt.append(index[id(inst.target)])
        if inst.exn_tab_entry is not None:
            nxt.append(index[id(inst.exn_tab_entry.target)])
        successors.append(nxt)
    live_in: list[set[str]] = [set() for _ in range(n)]
    changed = True
    while changed:
        changed = False
        for i in range(n - 1, -1, -1):
            inst = instructions[i]
            out: set[str] = set()
            for j in successors[i]:
                out |= live_in[j]
            name = inst.argval if isinstance(inst.argval, str) else None
            if inst.opname in _STORES or inst.opname == "STORE_DEREF":
                out = out - {name}
            if inst.opname in _LOADS and name is not None:
                out = out | {name}
            if out != live_in[i]:
                live_in[i] = out
                changed = True
    return live_in[index[id(start)]] & names


_DEREFS = {"LOAD_DEREF", "STORE_DEREF", "DELETE_DEREF", "LOAD_CLOSURE", "LOAD_CLASSDEREF"}


def cells_used_from(instructions: list[Instruction], starts: list[Instruction], names: set[str]) -> set[str]:
    """Cell variables in `names` that code reachable from any of `starts` reads, writes or captures."""
    index = {id(inst): i for i, inst in enumerate(instructions)}
    pending = [index[id(inst)] for inst in starts]
    seen: set[int] = set()
    used: set[str] = set()
    while pending:
        i = pending.pop()
        if i in seen or i >= len(instructions):
            continue
        seen.add(i)
        inst = instructions[i]
        if inst.opname in _DEREFS and inst.argval in names:
            used.add(inst.argval)
        if inst.opname not in _TERMINAL and inst.opname not in _UNCONDITIONAL:
            pending.append(i + 1)
        if inst.target is not None:
            pending.append(index[id(inst.target)])
        if inst.exn_tab_entry is not None:
            pending.append(index[id(inst.exn_tab_entry.target)])
    return used


def make_resume_code(original: types.CodeType, resume_offset: int, stack: list[bool], live: list[str],
                     rebuilt: tuple = (), cells: tuple[str, ...] = ()) -> types.CodeType:
    """A code object continuing `original` at `resume_offset`.

    stack: for each stack slot at that point (bottom first), True if it holds a value (passed as an
    argument `___stack<i>`), False if it holds CPython's NULL (pushed again by the prologue), or
    ("autocast", (device_type, dtype, enabled, cache_enabled)) for the __exit__ of an autocast block
    the prologue enters again (`with torch.autocast(...)`: its __exit__ lands in that slot).
    live: local variable names passed in as arguments after the stack values; when live[0] is the
    original's first argument it comes first (before the stack values), as `super()` needs.
    rebuilt: (local, parts) pairs: the prologue stores `parts[0](*parts[1:])` into the local first (each
    part an argument name among `live`, or a code object loaded as a constant): a generator handed on
    as its state (generator_resume.py).
    cells: cell variables of `original` the resume function shares with the breaking frame: they become
    its first free variables, so the transformed code hands it the very cell objects (nested functions
    made before the break hold them too); the original's free variables follow.
    """
    # `super()` without arguments reads the first local: keep the original first argument first
    first = [live[0]] if live and original.co_argcount and live[0] == original.co_varnames[0] else []
    key = (original, resume_offset, tuple(stack), tuple(live), tuple(rebuilt), tuple(cells))
    found = _CACHE.get(key)
    if found is not None:
        return found
    body = bc.decode(original)
    target = next(inst for inst in body if inst.offset == resume_offset)
    stack_args = [f"___stack{i}" for i, present in enumerate(stack) if present is True]
    args = first + stack_args + [name for name in live if name not in first]
    cellvars = tuple(name for name in original.co_cellvars if name not in cells)
    freevars = tuple(cells) + tuple(original.co_freevars)
    prologue = bc.function_prologue(cellvars, len(freevars))
    for local, parts in rebuilt:
        prologue += bc.push_null()
        for part in parts:  # argument names, and code objects as constants
            prologue += bc.load_fast(part) if isinstance(part, str) else bc.load_const(part)
        prologue += bc.call(len(parts) - 1) + bc.store_fast(local)
    for i, present in enumerate(stack):
        if isinstance(present, tuple):
            prologue += _enter_autocast_again(present[1])
        else:
            prologue += bc.load_fast(f"___stack{i}") if present else bc.push_null()
    prologue += bc.jump(target)
    bc.inherit_positions(prologue, target)
    varnames = tuple(args) + tuple(v for v in original.co_varnames if v not in args and v not in cells)
    name = f"resume_in_{original.co_name}_at_{resume_offset}"
    code = bc.assemble(
        prologue + body, original,
        co_argcount=len(args), co_posonlyargcount=0, co_kwonlyargcount=0,
        co_varnames=varnames, co_cellvars=cellvars, co_freevars=freevars,
        co_flags=original.co_flags & ~(CO_VARARGS | CO_VARKEYWORDS),
        co_name=name, co_qualname=f"{original.co_qualname}.<{name}>",
    )
    _CACHE[key] = code
    return code


def _enter_autocast_again(args: tuple) -> list:
    """torch.autocast(*args).__enter__(), leaving the block's __exit__ on the stack (as BEFORE_WITH does)."""
    import torch

    insts = bc.push_null() + bc.load_const(torch.autocast)
    for arg in args:
        insts += bc.load_const(arg)
    return insts + bc.call(len(args)) + [bc.create_instruction("BEFORE_WITH")] + bc.pop_top()


_CACHE: dict[tuple, types.CodeType] = {}


def clear_cache() -> None:
    _CACHE.clear()
