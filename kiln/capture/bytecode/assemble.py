"""list[Instruction] + a template code object -> a new code object."""
from __future__ import annotations

import copy
import dis
import struct
import types
from typing import Any

from kiln.capture.bytecode import versions as V
from kiln.capture.bytecode.instruction import (
    BytecodeError, ExceptionTableEntry, Instruction, is_jump, localsplus_names)
from kiln.capture.bytecode.stack import max_stack_depth
from kiln.capture.bytecode.tables import (
    RawExceptionEntry, encode_exception_table, encode_line_table)

# Fields a caller may override; co_code, co_linetable, co_exceptiontable and co_nlocals
# are always computed.
_FIELDS = frozenset((
    "co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_stacksize", "co_flags",
    "co_firstlineno", "co_consts", "co_names", "co_varnames", "co_freevars", "co_cellvars",
    "co_filename", "co_name", "co_qualname",
))


def assemble(instructions: list[Instruction], code_template: types.CodeType,
             **code_fields: Any) -> types.CodeType:
    """Build a code object from ``instructions``, taking every field not computed here
    from ``code_fields`` (``co_*`` keyword arguments) or else from ``code_template``.

    - args: jumps always from ``target``; other ops keep ``arg`` when it still agrees
      with ``argval`` in the final tables, else (and when None) compute it from
      ``argval`` and the flag fields. co_consts / co_names / co_varnames start from the
      given or template tables; constants, names and locals that are missing are
      appended. Cell and free variables must already be in co_cellvars / co_freevars.
    - jumps: the variant (forward/backward) follows the final order; on 3.12 a backward
      POP_JUMP_IF_X becomes POP_JUMP_IF_<not X> over a JUMP_BACKWARD.
    - EXTENDED_ARG prefixes are sized to a fixed point; CACHE entries are zeros.
    - co_exceptiontable from each instruction's ``exn_tab_entry``; co_linetable from
      ``positions`` (or ``starts_line`` alone, or "no location"); co_stacksize by flow
      analysis (a given co_stacksize only raises it).

    The caller's instructions are not modified (the work is done on copies).
    """
    unknown = set(code_fields) - _FIELDS
    if unknown:
        raise BytecodeError(f"assemble: cannot set {sorted(unknown)}; allowed: {sorted(_FIELDS)}")
    if not instructions:
        raise BytecodeError("assemble: empty instruction list")
    work = _normalize(_clone(instructions))
    tables = _Tables(code_template, code_fields)
    for inst in work:
        if inst.opname in V.HASLOCAL:
            tables.need_local(inst.argval)
    tables.freeze_locals()
    for inst in work:
        _compute_arg(inst, tables)
    _check_pairs(work)
    starts, sizes = _layout(work)

    code = bytearray()
    for inst, size in zip(work, sizes):
        code += _encode(inst, size)
    firstlineno = code_fields.get("co_firstlineno", code_template.co_firstlineno)
    linetable = encode_line_table([(_location(i), s) for i, s in zip(work, sizes)], firstlineno)
    stacksize = max(max_stack_depth(work), code_fields.get("co_stacksize", 0))

    fields = dict(code_fields)
    fields.update(
        co_code=bytes(code), co_consts=tuple(tables.consts), co_names=tuple(tables.names),
        co_varnames=tuple(tables.varnames), co_nlocals=len(tables.varnames),
        co_stacksize=stacksize, co_linetable=linetable,
        co_exceptiontable=_exception_table(work, starts, len(code)))
    return code_template.replace(**fields)


# --- copies and jump variants ------------------------------------------------------------

def _clone(instructions: list[Instruction]) -> list[Instruction]:
    mapping = {id(inst): copy.copy(inst) for inst in instructions}
    if len(mapping) != len(instructions):
        raise BytecodeError("assemble: the same Instruction object appears twice in the list")

    def mapped(inst: Instruction, what: str) -> Instruction:
        new = mapping.get(id(inst))
        if new is None:
            raise BytecodeError(f"assemble: {what} {inst!r} is not in the instruction list")
        return new

    entries: dict[int, ExceptionTableEntry] = {}
    for new in mapping.values():
        if new.target is not None:
            new.target = mapped(new.target, f"jump target of {new!r},")
        old = new.exn_tab_entry
        if old is not None:
            if id(old) not in entries:
                entries[id(old)] = ExceptionTableEntry(
                    mapping.get(id(old.start), old.start), mapping.get(id(old.end), old.end),
                    mapped(old.target, "exception handler"), old.depth, old.lasti)
            new.exn_tab_entry = entries[id(old)]
    return [mapping[id(inst)] for inst in instructions]


def _normalize(work: list[Instruction]) -> list[Instruction]:
    """Real opcodes everywhere; jump variants chosen by direction (target index)."""
    position = {id(inst): i for i, inst in enumerate(work)}
    out: list[Instruction] = []
    for i, inst in enumerate(work):
        if inst.opname not in V.JUMP_FAMILY:
            if inst.opname not in V.OPMAP:
                raise BytecodeError(f"assemble: unknown opname {inst.opname!r} in {inst!r}")
            inst.opcode = V.OPMAP[inst.opname]
            out.append(inst)
            continue
        if inst.target is None:
            raise BytecodeError(f"assemble: jump {inst!r} has no target")
        forward = position[id(inst.target)] > i
        real = V.real_jump_opname(inst.opname, forward)
        if real is None:
            family, cond = V.JUMP_FAMILY[inst.opname]
            if family != "cond" or i + 1 >= len(work):
                raise BytecodeError(f"assemble: {inst!r} (#{i}) cannot jump backward; "
                                    f"it only jumps forward on this Python version")
            # 3.12: POP_JUMP_IF_X back  ==>  POP_JUMP_IF_<not X> next; JUMP_BACKWARD back
            back = Instruction("JUMP_BACKWARD", V.OPMAP["JUMP_BACKWARD"], None, None,
                               positions=inst.positions, target=inst.target,
                               exn_tab_entry=inst.exn_tab_entry)
            real = f"POP_JUMP_IF_{V.INVERSE_COND[cond]}"
            inst.target = work[i + 1]
            out += [_set_op(inst, real), back]
            continue
        out.append(_set_op(inst, real))
    return out


def _check_pairs(work: list[Instruction]) -> None:
    """Adjacency the interpreter relies on without checking: KW_NAMES right before the
    call; 3.11 PRECALL n right before CALL n (its specialized forms skip the CALL); 3.12
    FOR_ITER jumping to END_FOR (when exhausted it jumps to the instruction after it)."""
    for i, inst in enumerate(work):
        following = work[i + 1] if i + 1 < len(work) else None
        nxt = following.opname if following is not None else None
        if inst.opname == "KW_NAMES" and nxt != ("PRECALL" if V.PY311 else "CALL"):
            raise BytecodeError(f"assemble: KW_NAMES (#{i}) must come right before "
                                f"{'PRECALL' if V.PY311 else 'CALL'}, not {nxt}")
        if inst.opname == "PRECALL" and (nxt != "CALL" or following.arg != inst.arg):
            raise BytecodeError(f"assemble: PRECALL {inst.arg} (#{i}) must come right before "
                                f"CALL {inst.arg}")
        if V.PY312 and inst.opname == "FOR_ITER" and inst.target.opname != "END_FOR":
            raise BytecodeError(f"assemble: FOR_ITER (#{i}) must jump to an END_FOR on 3.12, "
                                f"not to {inst.target!r}")


def _set_op(inst: Instruction, opname: str) -> Instruction:
    inst.opname, inst.opcode, inst.arg = opname, V.OPMAP[opname], None
    return inst


# --- tables and args ---------------------------------------------------------------------

def _const_key(value: Any) -> Any:
    """Key under which two constants are interchangeable (like CPython's
    _PyCode_ConstantKey): 0, 0.0, -0.0, False and 0j all differ; unknown or mutable
    objects are only interchangeable with themselves."""
    t = type(value)
    if t is float:
        return (t, struct.pack("<d", value))
    if t is complex:
        return (t, struct.pack("<dd", value.real, value.imag))
    if t is tuple:
        return (t, tuple(_const_key(v) for v in value))
    if t is frozenset:
        return (t, frozenset(_const_key(v) for v in value))
    if t in (int, bool, str, bytes, type(None), type(Ellipsis)):
        return (t, value)
    return ("id", id(value))


class _Tables:
    def __init__(self, template: types.CodeType, fields: dict[str, Any]):
        self.consts = list(fields.get("co_consts", template.co_consts))
        self.names = list(fields.get("co_names", template.co_names))
        self.varnames = list(fields.get("co_varnames", template.co_varnames))
        self.cellvars = tuple(fields.get("co_cellvars", template.co_cellvars))
        self.freevars = tuple(fields.get("co_freevars", template.co_freevars))
        self._consts: dict[Any, int] = {}
        for i, c in enumerate(self.consts):
            self._consts.setdefault(_const_key(c), i)
        self._names = {n: i for i, n in reversed(list(enumerate(self.names)))}
        self.localsplus: list[str] = []
        self._locals: dict[str, int] = {}

    def const(self, value: Any, hint: int | None) -> int:
        key = _const_key(value)
        if hint is not None and 0 <= hint < len(self.consts) and (
                self.consts[hint] is value or _const_key(self.consts[hint]) == key):
            return hint
        if key not in self._consts:
            self._consts[key] = len(self.consts)
            self.consts.append(value)
        return self._consts[key]

    def name(self, name: Any, hint: int | None) -> int:
        if not isinstance(name, str):
            raise BytecodeError(f"name {name!r} is not a string")
        if hint is not None and 0 <= hint < len(self.names) and self.names[hint] == name:
            return hint
        if name not in self._names:
            self._names[name] = len(self.names)
            self.names.append(name)
        return self._names[name]

    def need_local(self, name: Any) -> None:
        if not isinstance(name, str):
            raise BytecodeError(f"local variable name {name!r} is not a string")
        if name not in self.varnames and name not in self.cellvars and name not in self.freevars:
            self.varnames.append(name)

    def freeze_locals(self) -> None:
        self.localsplus = localsplus_names(self.varnames, self.cellvars, self.freevars)
        self._locals = {n: i for i, n in reversed(list(enumerate(self.localsplus)))}

    def local(self, name: Any, hint: int | None) -> int:
        if hint is not None and 0 <= hint < len(self.localsplus) and self.localsplus[hint] == name:
            return hint
        return self._locals[name]


def _compute_arg(inst: Instruction, t: _Tables) -> None:
    name, arg, argval = inst.opname, inst.arg, inst.argval
    if inst.opcode < V.HAVE_ARGUMENT:
        inst.arg = None
    elif name in V.JUMP_FAMILY:
        pass  # from the layout
    elif name in V.HASCONST:
        inst.arg = t.const(argval, arg)
    elif name in V.HASNAME:
        shift = V.NAME_SHIFT.get(name, 0)
        index = t.name(argval, None if arg is None else arg >> shift)
        if name == "LOAD_GLOBAL":
            flags = int(inst.push_null)
        else:
            flags = int(inst.is_method) | (int(inst.super_two_args) << 1) if shift else 0
        inst.arg = (index << shift) | flags
    elif name in V.HASLOCAL:
        inst.arg = t.local(argval, arg)
    elif name in V.HASFREE:
        if argval not in t.cellvars and argval not in t.freevars:
            raise BytecodeError(f"{inst!r}: {argval!r} is neither a cell nor a free variable "
                                f"(co_cellvars={t.cellvars}, co_freevars={t.freevars})")
        inst.arg = t.local(argval, arg)
    elif name in V.HASCOMPARE:
        if arg is None or V.compare_str(arg) != argval:
            if argval not in V.CMP_OP:
                raise BytecodeError(f"{inst!r}: unknown comparison {argval!r}")
            inst.arg = V.compare_arg(argval)
    elif name == "FORMAT_VALUE" and isinstance(argval, tuple):
        if arg is None:
            convert, has_spec = argval
            kinds = [c for c, _ in dis.FORMAT_VALUE_CONVERTERS]
            inst.arg = kinds.index(convert) | (4 if has_spec else 0)
    elif isinstance(argval, str):
        inst.arg = _named_int_arg(inst)
    elif isinstance(argval, int):
        inst.arg = int(argval)
    elif arg is None:
        raise BytecodeError(f"{inst!r}: no arg and no integer argval")


def _named_int_arg(inst: Instruction) -> int:
    """BINARY_OP '+' / 'NB_ADD' / '+='; CALL_INTRINSIC_* by name."""
    if inst.opname == "BINARY_OP":
        for i, (nb_name, symbol) in enumerate(V.NB_OPS):
            if inst.argval in (nb_name, symbol):
                return i
    descs = {"CALL_INTRINSIC_1": "_intrinsic_1_descs", "CALL_INTRINSIC_2": "_intrinsic_2_descs"}
    if inst.opname in descs and inst.argval in getattr(dis, descs[inst.opname]):
        return getattr(dis, descs[inst.opname]).index(inst.argval)
    raise BytecodeError(f"{inst!r}: cannot turn {inst.argval!r} into an oparg")


# --- layout and encoding -----------------------------------------------------------------

def _ext_count(arg: int | None) -> int:
    if arg is None or arg < 0x100:
        return 0
    if arg >= 1 << 32:
        raise BytecodeError(f"oparg {arg} does not fit in 32 bits")
    return 1 if arg < 0x10000 else 2 if arg < 0x1000000 else 3


def _layout(work: list[Instruction]) -> tuple[list[int], list[int]]:
    """Set jump args and offsets. Returns the start offset (of the EXTENDED_ARG prefix)
    and size in code units of each instruction. Prefix counts only grow, starting from
    none on jumps, so this ends at the smallest fixed point (as CPython's does)."""
    position = {id(inst): i for i, inst in enumerate(work)}
    ext = [0 if is_jump(inst) else _ext_count(inst.arg) for inst in work]
    base = [1 + V.cache_entries(inst.opcode) for inst in work]
    jumps = [(i, position[id(inst.target)], V.is_backward_jump_opname(inst.opname))
             for i, inst in enumerate(work) if is_jump(inst)]
    while True:
        starts, offset = [], 0
        for e, b in zip(ext, base):
            starts.append(offset)
            offset += 2 * (e + b)
        changed = False
        for i, t, backward in jumps:
            end = starts[i] + 2 * (ext[i] + base[i])
            distance = end - starts[t] if backward else starts[t] - end
            assert distance >= 0, (work[i], distance)
            work[i].arg = distance // 2
            need = _ext_count(work[i].arg)
            if need > ext[i]:
                ext[i], changed = need, True
        if not changed:
            break
    for inst, start, e in zip(work, starts, ext):
        inst.offset = start + 2 * e
    for inst in work:
        if inst.target is not None:
            inst.argval = inst.target.offset
    return starts, [e + b for e, b in zip(ext, base)]


def _encode(inst: Instruction, size: int) -> bytes:
    caches = V.cache_entries(inst.opcode)
    n_ext = size - 1 - caches
    arg = inst.arg or 0
    out = bytearray()
    for k in range(n_ext, 0, -1):
        out += bytes((V.EXTENDED_ARG, (arg >> (8 * k)) & 0xFF))
    out += bytes((inst.opcode, arg & 0xFF))
    out += bytes(2 * caches)
    return bytes(out)


def _exception_table(work: list[Instruction], starts: list[int], total: int) -> bytes:
    position = {id(inst): i for i, inst in enumerate(work)}
    entries: list[RawExceptionEntry] = []
    run_key, run_start, run_entry = None, 0, None
    for inst, start in zip(work + [None], starts + [total]):
        entry = inst.exn_tab_entry if inst is not None else None
        key = None if entry is None else (id(entry.target), entry.depth, bool(entry.lasti))
        if key == run_key and inst is not None:
            continue
        if run_entry is not None:
            entries.append(RawExceptionEntry(run_start, start, starts[position[id(run_entry.target)]],
                                             run_entry.depth, bool(run_entry.lasti)))
        run_key, run_start, run_entry = key, start, entry
    return encode_exception_table(entries)


def _location(inst: Instruction) -> tuple | None:
    p = inst.positions
    if p is not None and p.lineno is not None:
        end = p.lineno if p.end_lineno is None else p.end_lineno
        return (p.lineno, end, p.col_offset, p.end_col_offset)
    if inst.starts_line is not None:
        return (inst.starts_line, inst.starts_line, None, None)
    return None
