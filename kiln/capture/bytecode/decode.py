"""code object -> list[Instruction]."""
from __future__ import annotations

import bisect
import dis
import types

from kiln.capture.bytecode import versions as V
from kiln.capture.bytecode.instruction import (
    BytecodeError, ExceptionTableEntry, Instruction, localsplus_names)
from kiln.capture.bytecode.tables import parse_exception_table


def decode(code: types.CodeType) -> list[Instruction]:
    """Decode ``code.co_code`` (the deoptimized bytes) into instructions.

    No CACHE entries; EXTENDED_ARG folded into the instruction it prefixes (its
    ``offset`` is that of the real opcode, as dis reports it; jumps and handlers that
    land on the prefix resolve to the instruction). ``target`` is set on every jump and
    ``argval`` of a jump is ``target.offset``; every instruction covered by a handler
    gets its ``exn_tab_entry``; ``starts_line`` and ``positions`` are kept.
    """
    raw = code.co_code
    positions = list(code.co_positions())
    linestarts = dict(dis.findlinestarts(code))
    localsplus = localsplus_names(code.co_varnames, code.co_cellvars, code.co_freevars)

    insts: list[Instruction] = []
    starts: list[int] = []  # offset of each instruction's first unit (its EXTENDED_ARGs)
    jump_dest: dict[int, int] = {}  # index of a jump -> destination byte offset
    i, ext, prefix_start = 0, 0, None
    while i < len(raw):
        op, oparg = raw[i], raw[i + 1]
        if op == V.EXTENDED_ARG:
            ext = (ext | oparg) << 8
            prefix_start = i if prefix_start is None else prefix_start
            i += 2
            continue
        start = i if prefix_start is None else prefix_start
        arg = (oparg | ext) if op >= V.HAVE_ARGUMENT else None
        ext, prefix_start = 0, None
        opname = V.OPNAME[op]
        caches = V.cache_entries(op)
        inst = Instruction(opname, op, arg, None, offset=i,
                           starts_line=linestarts.get(start, linestarts.get(i)),
                           positions=dis.Positions(*positions[i // 2]))
        if opname in V.JUMP_FAMILY:
            after = i + 2 + 2 * caches
            jump_dest[len(insts)] = after - 2 * arg if V.is_backward_jump_opname(opname) else after + 2 * arg
        else:
            _set_argval(inst, code, localsplus)
        insts.append(inst)
        starts.append(start)
        i += 2 + 2 * caches

    by_start = {s: inst for s, inst in zip(starts, insts)}
    for idx, dest in jump_dest.items():
        if dest not in by_start:
            raise BytecodeError(f"{code.co_name}: jump at offset {insts[idx].offset} lands "
                                f"inside an instruction (offset {dest})")
        insts[idx].target = by_start[dest]
        insts[idx].argval = by_start[dest].offset
    _attach_exception_table(code, insts, starts, by_start)
    return insts


def _set_argval(inst: Instruction, code: types.CodeType, localsplus: list[str]) -> None:
    name, arg = inst.opname, inst.arg
    if arg is None:
        return
    if name in V.HASCONST:
        inst.argval = code.co_consts[arg]
    elif name in V.HASNAME:
        shift = V.NAME_SHIFT.get(name, 0)
        inst.argval = code.co_names[arg >> shift]
        if name == "LOAD_GLOBAL":
            inst.push_null = bool(arg & 1)
        elif shift:
            inst.is_method = bool(arg & 1)
            inst.super_two_args = name == "LOAD_SUPER_ATTR" and bool(arg & 2)
    elif name in V.HASLOCAL or name in V.HASFREE:
        inst.argval = localsplus[arg]
    elif name in V.HASCOMPARE:
        inst.argval = V.compare_str(arg)
    elif name == "FORMAT_VALUE":  # as dis: (conversion function or None, has format spec)
        inst.argval = (dis.FORMAT_VALUE_CONVERTERS[arg & 3][0], bool(arg & 4))
    else:
        inst.argval = arg


def _attach_exception_table(code: types.CodeType, insts: list[Instruction],
                            starts: list[int], by_start: dict[int, Instruction]) -> None:
    for raw in parse_exception_table(code.co_exceptiontable):
        covered = insts[bisect.bisect_left(starts, raw.start):bisect.bisect_left(starts, raw.end)]
        if not covered or raw.target not in by_start:
            raise BytecodeError(f"{code.co_name}: bad exception table entry {raw}")
        entry = ExceptionTableEntry(covered[0], covered[-1], by_start[raw.target],
                                    raw.depth, raw.lasti)
        for inst in covered:
            inst.exn_tab_entry = entry
