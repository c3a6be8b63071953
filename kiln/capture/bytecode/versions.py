"""Per-version opcode facts for CPython 3.11 and 3.12, gathered in one place.

Everything else in the package asks this module ("is this a jump?", "how many CACHE
entries follow this opcode?", "how is the name index packed into the oparg?") instead
of branching on ``sys.version_info`` itself.
"""
from __future__ import annotations

import dis
import sys

PY311 = sys.version_info[:2] == (3, 11)
PY312 = sys.version_info[:2] == (3, 12)

if not (PY311 or PY312):
    raise ImportError(
        "kiln.capture.bytecode supports CPython 3.11 and 3.12 bytecode only; this is "
        f"CPython {sys.version_info.major}.{sys.version_info.minor}. "
        "Use Python 3.11 or 3.12 to run kiln."
    )

OPMAP: dict[str, int] = {name: op for name, op in dis.opmap.items() if op < 256}
OPNAME: list[str] = dis.opname
HAVE_ARGUMENT: int = dis.HAVE_ARGUMENT
EXTENDED_ARG: int = dis.EXTENDED_ARG
CACHE: int = dis.opmap["CACHE"]

HASCONST = frozenset(OPNAME[op] for op in dis.hasconst if op < 256)
HASNAME = frozenset(OPNAME[op] for op in dis.hasname if op < 256)
HASLOCAL = frozenset(OPNAME[op] for op in dis.haslocal if op < 256)
HASFREE = frozenset(OPNAME[op] for op in dis.hasfree if op < 256)
HASJREL = frozenset(OPNAME[op] for op in dis.hasjrel if op < 256)
HASCOMPARE = frozenset(OPNAME[op] for op in dis.hascompare if op < 256)
CMP_OP: tuple[str, ...] = tuple(dis.cmp_op)
NB_OPS: list[tuple[str, str]] = list(dis._nb_ops)  # (NB_ADD, "+"), ..., index == BINARY_OP arg

# 3.12 COMPARE_OP: oparg = (index into cmp_op) << 4 | mask of the outcomes that make it true
# (Include/internal/pycore_code.h: UNORDERED=1, LESS_THAN=2, GREATER_THAN=4, EQUALS=8).
_CMP_MASKS_312 = {"<": 2, "<=": 2 | 8, "==": 8, "!=": 1 | 2 | 4, ">": 4, ">=": 4 | 8}


def cache_entries(opcode: int) -> int:
    """Number of 2-byte CACHE units that follow an instruction with this opcode."""
    return dis._inline_cache_entries[opcode] if opcode < 256 else 0


def is_backward_jump_opname(opname: str) -> bool:
    return "JUMP_BACKWARD" in opname


# name ops whose oparg packs flag bits below the co_names index: opname -> shift
if PY311:
    NAME_SHIFT = {"LOAD_GLOBAL": 1}
else:
    NAME_SHIFT = {"LOAD_GLOBAL": 1, "LOAD_ATTR": 1, "LOAD_SUPER_ATTR": 2}


def compare_arg(op: str) -> int:
    """The COMPARE_OP oparg for a comparison string like '<='."""
    idx = CMP_OP.index(op)
    return (idx << 4) | _CMP_MASKS_312[op] if PY312 else idx


def compare_str(arg: int) -> str:
    return CMP_OP[arg >> 4] if PY312 else CMP_OP[arg]


# --- jumps -----------------------------------------------------------------------------
# Every jump opname (real or generic) maps to a "family"; the assembler picks the real
# opcode of the family from the jump's direction in the final instruction order.
_CONDS = ("FALSE", "TRUE", "NONE", "NOT_NONE")
INVERSE_COND = {"FALSE": "TRUE", "TRUE": "FALSE", "NONE": "NOT_NONE", "NOT_NONE": "NONE"}

JUMP_FAMILY: dict[str, tuple[str, str | None]] = {}
for _c in _CONDS:
    for _name in (f"POP_JUMP_IF_{_c}", f"POP_JUMP_FORWARD_IF_{_c}", f"POP_JUMP_BACKWARD_IF_{_c}"):
        JUMP_FAMILY[_name] = ("cond", _c)
for _name in ("JUMP", "JUMP_FORWARD", "JUMP_BACKWARD"):
    JUMP_FAMILY[_name] = ("jump", None)
for _name in ("JUMP_NO_INTERRUPT", "JUMP_BACKWARD_NO_INTERRUPT"):
    JUMP_FAMILY[_name] = ("jump_no_interrupt", None)
for _name in ("FOR_ITER", "SEND", "JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP"):
    if _name in OPMAP:
        JUMP_FAMILY[_name] = ("forward_only", _name)


def real_jump_opname(opname: str, forward: bool) -> str | None:
    """The real opname for a jump of this family in this direction, or None if the
    family cannot jump that way on this version (3.12 backward POP_JUMP_IF_*, which the
    assembler rewrites, and FOR_ITER/SEND/JUMP_IF_*_OR_POP, which only jump forward)."""
    family, detail = JUMP_FAMILY[opname]
    if family == "cond":
        if PY311:
            return f"POP_JUMP_{'FORWARD' if forward else 'BACKWARD'}_IF_{detail}"
        return f"POP_JUMP_IF_{detail}" if forward else None
    if family == "jump":
        return "JUMP_FORWARD" if forward else "JUMP_BACKWARD"
    if family == "jump_no_interrupt":
        return "JUMP_FORWARD" if forward else "JUMP_BACKWARD_NO_INTERRUPT"
    return detail if forward else None


def provisional_opcode(opname: str) -> int:
    """Opcode for an opname that may be generic (e.g. 3.11 'POP_JUMP_IF_FALSE'): the real
    opcode if it exists, else that of the forward (or only) variant."""
    if opname in OPMAP:
        return OPMAP[opname]
    if opname in JUMP_FAMILY:
        real = real_jump_opname(opname, forward=True)
        if real is not None:
            return OPMAP[real]
    raise KeyError(opname)


# Instructions after which control never falls through to the next one.
TERMINATORS = frozenset(
    n for n in ("RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE", "JUMP_FORWARD",
                "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT")
)
UNCONDITIONAL_JUMPS = frozenset(
    ("JUMP", "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_NO_INTERRUPT", "JUMP_BACKWARD_NO_INTERRUPT")
)
