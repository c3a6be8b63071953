"""The instruction node, exception-table entries, and the printout."""
from __future__ import annotations

import dataclasses
import dis
from typing import Any, Iterable

from kiln.capture.bytecode import versions as V
from kiln.errors import InternalError


class BytecodeError(InternalError):
    """Bytecode that kiln built or was asked to build is malformed (bad jump, stack
    depth mismatch, unknown name, ...). Always a bug in the code that made the list."""


@dataclasses.dataclass(eq=False)
class Instruction:
    """One instruction; lists of these are what decode() returns and assemble() takes.

    Identity semantics (eq=False): instructions are nodes, usable as dict keys and as
    jump targets. ``arg`` is the full oparg; set it to None on a new or edited
    instruction to let the assembler compute it from ``argval`` (and ``target`` for
    jumps, and the flag fields for LOAD_GLOBAL / LOAD_ATTR / LOAD_SUPER_ATTR).
    """

    opname: str
    opcode: int
    arg: int | None
    argval: Any
    offset: int | None = None
    starts_line: int | None = None
    positions: dis.Positions | None = None
    target: "Instruction | None" = None
    exn_tab_entry: "ExceptionTableEntry | None" = None
    push_null: bool = False  # LOAD_GLOBAL: push NULL before the global (oparg low bit)
    is_method: bool = False  # 3.12 LOAD_ATTR / LOAD_SUPER_ATTR: method load (low bit)
    super_two_args: bool = False  # 3.12 LOAD_SUPER_ATTR: super(cls, self) form (bit 1)

    @property
    def lineno(self) -> int | None:
        """The source line of this instruction, if known."""
        if self.positions is not None and self.positions.lineno is not None:
            return self.positions.lineno
        return self.starts_line

    def __repr__(self) -> str:  # short: targets and entries point around the whole list
        where = f"@{self.offset}" if self.offset is not None else "@new"
        extra = f" -> {_inst_ref(self.target)}" if self.target is not None else ""
        return f"Instruction({self.opname} {self.argval!r} {where}{extra})"


@dataclasses.dataclass(eq=False)
class ExceptionTableEntry:
    """A handler: instructions from ``start`` to ``end`` (both inclusive, as decoded)
    jump to ``target`` on an exception, with the stack cut to ``depth`` items, then the
    offset of the raising instruction pushed if ``lasti``, then the exception.

    The assembler does not read ``start``/``end``: it rebuilds the table from each
    instruction's ``exn_tab_entry`` (runs of adjacent instructions with the same
    handler become one entry). They describe the range as decoded.
    """

    start: Instruction
    end: Instruction
    target: Instruction
    depth: int
    lasti: bool

    def __repr__(self) -> str:
        return (f"ExceptionTableEntry({_inst_ref(self.start)}..{_inst_ref(self.end)} -> "
                f"{_inst_ref(self.target)} depth={self.depth}{' lasti' if self.lasti else ''})")


def _inst_ref(inst: Instruction | None) -> str:
    if inst is None:
        return "None"
    return f"{inst.opname}@{inst.offset if inst.offset is not None else 'new'}"


def is_jump(inst: Instruction) -> bool:
    """True for every instruction with a jump target (including FOR_ITER and SEND)."""
    return inst.opname in V.JUMP_FAMILY


def inherit_positions(instructions: list[Instruction], source: Instruction) -> list[Instruction]:
    """Give instructions that have no location the location of ``source`` (so that
    tracebacks through inserted code point at the user's line). Returns the list."""
    for inst in instructions:
        if inst.positions is None and inst.starts_line is None:
            inst.positions = source.positions
            if inst.positions is None and source.lineno is not None:
                inst.positions = dis.Positions(source.lineno, source.lineno, None, None)
    return instructions


def localsplus_names(varnames: Iterable[str], cellvars: Iterable[str],
                     freevars: Iterable[str]) -> list[str]:
    """Names of the frame's "fast locals plus" slots, in slot order, as CPython 3.11+
    lays them out: locals, then cells that are not also locals, then free variables.
    (A cell that is an argument shares the argument's slot.)"""
    varnames = list(varnames)
    known = set(varnames)
    return varnames + [c for c in cellvars if c not in known] + list(freevars)


def create_instruction(opname: str, *, arg: int | None = None, argval: Any = None,
                       target: Instruction | None = None, push_null: bool = False,
                       is_method: bool = False) -> Instruction:
    """A new instruction (returns one Instruction, not a list).

    ``opname`` is a real opname of the running version or a version-agnostic jump
    name: POP_JUMP_IF_{FALSE,TRUE,NONE,NOT_NONE} (3.11 names with FORWARD/BACKWARD are
    accepted on 3.12 and the other way round), JUMP / JUMP_FORWARD / JUMP_BACKWARD,
    JUMP_NO_INTERRUPT; the assembler picks the variant that fits the final layout.
    On 3.12, LOAD_METHOD becomes LOAD_ATTR with ``is_method``.

    Give ``argval`` (name, constant, local name, comparison string, BINARY_OP
    operator) for ops whose oparg indexes a table, ``arg`` or ``argval`` (an int) for
    plain integer opargs, and ``target`` for jumps.
    """
    if V.PY312 and opname == "LOAD_METHOD":
        opname, is_method = "LOAD_ATTR", True
    if opname not in V.OPMAP and opname not in V.JUMP_FAMILY:
        raise BytecodeError(f"unknown opname {opname!r} on this Python version")
    opcode = V.provisional_opcode(opname)
    if opname in V.JUMP_FAMILY:
        if not isinstance(target, Instruction):
            raise BytecodeError(f"{opname} needs target=<Instruction>")
        return Instruction(opname, opcode, None, None, target=target)
    if target is not None:
        raise BytecodeError(f"{opname} is not a jump; it takes no target")
    if opcode < V.HAVE_ARGUMENT:
        if arg not in (None, 0) or argval is not None:
            raise BytecodeError(f"{opname} takes no argument")
        return Instruction(opname, opcode, None, None)
    if argval is None and arg is not None:
        if _indexes_table(opname):
            raise BytecodeError(f"{opname}: give argval= (the name, constant or comparison); "
                                f"the assembler computes the index")
        argval = arg
    if argval is None and arg is None and opname not in V.HASCONST:
        raise BytecodeError(f"{opname} needs arg= or argval=")
    return Instruction(opname, opcode, arg, argval, push_null=push_null, is_method=is_method)


def _indexes_table(opname: str) -> bool:
    return (opname in V.HASCONST or opname in V.HASNAME or opname in V.HASLOCAL
            or opname in V.HASFREE or opname in V.HASCOMPARE)


# --- printout --------------------------------------------------------------------------

def format_instructions(instructions: list[Instruction]) -> str:
    """A listing for people: index, offset (``new`` for inserted instructions), line,
    opname, argument, jump target (by index) and exception handler (by index)."""
    index = {id(inst): i for i, inst in enumerate(instructions)}

    def ref(inst: Instruction) -> str:
        i = index.get(id(inst))
        at = f"@{inst.offset}" if inst.offset is not None else ""
        return f"#{i}{at}" if i is not None else f"<outside list>{at}"

    targets = {id(i.target) for i in instructions if i.target is not None}
    targets |= {id(i.exn_tab_entry.target) for i in instructions if i.exn_tab_entry}
    lines = []
    for i, inst in enumerate(instructions):
        mark = ">>" if id(inst) in targets else "  "
        off = "new" if inst.offset is None else str(inst.offset)
        line = "" if inst.starts_line is None else str(inst.starts_line)
        text = f"{line:>5} {mark} {i:>4} {off:>5} {inst.opname:<26} {_argrepr(inst)}"
        if inst.target is not None:
            text += f" (to {ref(inst.target)})"
        entry = inst.exn_tab_entry
        if entry is not None:
            text += (f"   [exc -> {ref(entry.target)} depth={entry.depth}"
                     f"{' lasti' if entry.lasti else ''}]")
        lines.append(text.rstrip())
    return "\n".join(lines)


def _argrepr(inst: Instruction) -> str:
    if inst.opname in V.JUMP_FAMILY:
        return "" if inst.arg is None else str(inst.arg)
    if inst.arg is None and inst.argval is None:
        return ""
    arg = "" if inst.arg is None else f"{inst.arg} "
    if inst.opname in V.HASNAME or inst.opname in V.HASLOCAL or inst.opname in V.HASFREE:
        flags = ""
        if inst.push_null:
            flags = "NULL + "
        elif inst.is_method:
            flags = "NULL|self + "
        return f"{arg}({flags}{inst.argval})"
    if inst.opname in V.HASCONST:
        text = repr(inst.argval)
        return f"{arg}({text if len(text) < 60 else text[:57] + '...'})"
    if inst.opname == "BINARY_OP" and isinstance(inst.argval, int) and inst.argval < len(V.NB_OPS):
        return f"{arg}({V.NB_OPS[inst.argval][1]})"
    if inst.opname in V.HASCOMPARE:
        return f"{arg}({inst.argval})"
    return arg.strip()
