"""Stack depth by flow analysis over an instruction list."""
from __future__ import annotations

import dis

from kiln.capture.bytecode import versions as V
from kiln.capture.bytecode.instruction import BytecodeError, Instruction, is_jump


def _effect_arg(inst: Instruction) -> int | None:
    """An oparg with the right stack effect, for instructions whose arg is not yet known."""
    if inst.opcode < V.HAVE_ARGUMENT:
        return None
    if inst.arg is not None:
        return inst.arg
    if inst.opname == "LOAD_GLOBAL":
        return int(inst.push_null)
    if inst.opname in ("LOAD_ATTR", "LOAD_SUPER_ATTR") and V.PY312:
        return int(inst.is_method)
    if isinstance(inst.argval, int) and not isinstance(inst.argval, bool) \
            and inst.opname not in V.HASCONST:
        return inst.argval
    return 0  # table index or jump distance: the effect does not depend on it


def stack_effect(inst: Instruction, jump: bool) -> int:
    """Net stack effect of ``inst`` when it jumps (``jump=True``) or falls through."""
    if inst.opname == "RETURN_GENERATOR":
        # dis says 0, but when the generator first resumes, the value sent in (None)
        # is on the stack; the POP_TOP after RETURN_GENERATOR removes it.
        return 1
    return dis.stack_effect(inst.opcode, _effect_arg(inst), jump=jump)


def stack_depths(instructions: list[Instruction]) -> dict[Instruction, int]:
    """Stack depth before each reachable instruction (the first instruction starts at 0;
    handlers start at ``entry.depth + lasti + 1``). Unreachable instructions are absent.
    Raises BytecodeError when two paths reach an instruction with different depths or
    the stack would go negative."""
    depths, _ = _analyze(instructions)
    return depths


def max_stack_depth(instructions: list[Instruction]) -> int:
    return _analyze(instructions)[1]


def _analyze(instructions: list[Instruction]) -> tuple[dict[Instruction, int], int]:
    index = {id(inst): i for i, inst in enumerate(instructions)}
    depths: dict[Instruction, int] = {}
    max_depth = 0
    work: list[tuple[int, int, Instruction | None]] = [(0, 0, None)] if instructions else []

    def reach(target: Instruction, depth: int, source: Instruction) -> None:
        i = index.get(id(target))
        if i is None:
            raise BytecodeError(f"{source!r} jumps to an instruction that is not in the list")
        work.append((i, depth, source))

    while work:
        i, depth, source = work.pop()
        while i < len(instructions):
            inst = instructions[i]
            seen = depths.get(inst)
            if seen is not None:
                if seen != depth:
                    raise BytecodeError(
                        f"inconsistent stack depth at #{i} {inst!r}: {seen} on one path, "
                        f"{depth} on another (coming from {source!r})")
                break
            if depth < 0:
                raise BytecodeError(f"negative stack depth {depth} at #{i} {inst!r}")
            depths[inst] = depth
            max_depth = max(max_depth, depth)
            entry = inst.exn_tab_entry
            if entry is not None:
                handler_depth = entry.depth + int(entry.lasti) + 1
                max_depth = max(max_depth, handler_depth)
                reach(entry.target, handler_depth, inst)
            if is_jump(inst):
                if inst.target is None:
                    raise BytecodeError(f"jump #{i} {inst!r} has no target")
                target_depth = depth + stack_effect(inst, jump=True)
                max_depth = max(max_depth, target_depth)
                reach(inst.target, target_depth, inst)
            if inst.opname in V.TERMINATORS:
                break
            depth += stack_effect(inst, jump=False)
            max_depth = max(max_depth, depth)
            source = inst
            i += 1
        else:
            raise BytecodeError(f"control falls off the end of the instruction list "
                                f"(after {source!r})")
    return depths, max_depth
