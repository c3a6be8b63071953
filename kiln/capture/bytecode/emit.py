"""Version-agnostic instruction emitters for code generators. Each returns a list.

Calling convention (the same on 3.11 and 3.12; it changes in 3.13, unsupported):
``call(n)`` expects, bottom to top,

    NULL, callable, arg1 .. argn          (push_null() or load_global(f, push_null=True)
                                           or load_method()'s non-method outcome)
    or  callable, self, arg1 .. argn      (load_method()'s method outcome; self counts
                                           as the first argument but not in n)

and leaves the result. So: ``push_null() + <load callable> + <args> + call(n)``, or
``load_global(name, push_null=True) + <args> + call(n)``, or
``<load obj> + load_method(name) + <args> + call(n)``. On 3.11 call() is PRECALL n;
CALL n, on 3.12 CALL n.

``call_kw(n, kwnames)``: same stack, with the keyword values last, in the order of
``kwnames``; ``n`` counts all argument values, keyword ones included (like CALL's own
argc). Emits KW_NAMES kwnames; [PRECALL n (3.11)]; CALL n.

``call_function_ex(has_kwargs)``: NULL, callable, args_tuple[, kwargs_dict] -> result.
``make_function(flags)``: [defaults tuple (0x01)] [kwdefaults dict (0x02)]
[annotations tuple (0x04)] [closure tuple of cells (0x08)] code -> function; on both
3.11 and 3.12 the qualified name is not on the stack (it comes from co_qualname).
"""
from __future__ import annotations

from typing import Any

from kiln.capture.bytecode import versions as V
from kiln.capture.bytecode.instruction import Instruction, create_instruction

FN_DEFAULTS, FN_KWDEFAULTS, FN_ANNOTATIONS, FN_CLOSURE = 0x01, 0x02, 0x04, 0x08


def _one(opname: str, **kwargs: Any) -> list[Instruction]:
    return [create_instruction(opname, **kwargs)]


def load_global(name: str, push_null: bool = False) -> list[Instruction]:
    """LOAD_GLOBAL; with push_null, a NULL goes below the global (ready for call())."""
    return _one("LOAD_GLOBAL", argval=name, push_null=push_null)


def load_attr(name: str) -> list[Instruction]:
    return _one("LOAD_ATTR", argval=name)


def store_attr(name: str) -> list[Instruction]:
    return _one("STORE_ATTR", argval=name)


def load_method(name: str) -> list[Instruction]:
    """obj -> (method, obj) or (NULL, attribute): ready for call(). 3.11 LOAD_METHOD;
    3.12 LOAD_ATTR with the method bit."""
    if V.PY311:
        return _one("LOAD_METHOD", argval=name)
    return _one("LOAD_ATTR", argval=name, is_method=True)


def push_null() -> list[Instruction]:
    return _one("PUSH_NULL")


def call(nargs: int) -> list[Instruction]:
    if V.PY311:
        return _one("PRECALL", arg=nargs) + _one("CALL", arg=nargs)
    return _one("CALL", arg=nargs)


def call_kw(nargs: int, kwnames: tuple[str, ...]) -> list[Instruction]:
    kwnames = tuple(kwnames)
    if len(kwnames) > nargs or not all(isinstance(k, str) for k in kwnames):
        raise ValueError(f"call_kw: {nargs} argument values cannot carry keywords {kwnames}")
    if not kwnames:
        return call(nargs)
    return _one("KW_NAMES", argval=kwnames) + call(nargs)


def call_function_ex(has_kwargs: bool) -> list[Instruction]:
    return _one("CALL_FUNCTION_EX", arg=int(bool(has_kwargs)))


def rot_n(n: int) -> list[Instruction]:
    """Move the top of stack down to position n, lifting the n-1 items above it:
    [.., a, b, c] -> rot_n(3) -> [.., c, a, b]  (as the old ROT_N did)."""
    return [create_instruction("SWAP", arg=i) for i in range(n, 1, -1)]


def swap(n: int) -> list[Instruction]:
    return _one("SWAP", arg=n)


def copy(n: int) -> list[Instruction]:
    """Push a copy of the n-th item from the top (copy(1) duplicates the top)."""
    return _one("COPY", arg=n)


def pop_top() -> list[Instruction]:
    return _one("POP_TOP")


def load_const(value: Any) -> list[Instruction]:
    return _one("LOAD_CONST", argval=value)


def load_fast(name: str) -> list[Instruction]:
    return _one("LOAD_FAST", argval=name)


def store_fast(name: str) -> list[Instruction]:
    return _one("STORE_FAST", argval=name)


def delete_fast(name: str) -> list[Instruction]:
    return _one("DELETE_FAST", argval=name)


def load_deref(name: str) -> list[Instruction]:
    return _one("LOAD_DEREF", argval=name)


def store_deref(name: str) -> list[Instruction]:
    return _one("STORE_DEREF", argval=name)


def load_closure(name: str) -> list[Instruction]:
    """Push the cell of a cell or free variable (for a closure tuple)."""
    return _one("LOAD_CLOSURE", argval=name)


def build_tuple(n: int) -> list[Instruction]:
    return _one("BUILD_TUPLE", arg=n)


def build_list(n: int) -> list[Instruction]:
    return _one("BUILD_LIST", arg=n)


def build_map(n: int) -> list[Instruction]:
    return _one("BUILD_MAP", arg=n)


def unpack_sequence(n: int) -> list[Instruction]:
    return _one("UNPACK_SEQUENCE", arg=n)


def binary_subscr() -> list[Instruction]:
    return _one("BINARY_SUBSCR")


def binary_op(op: str) -> list[Instruction]:
    """BINARY_OP by operator: '+', '+=', 'NB_ADD', ..."""
    return _one("BINARY_OP", argval=op)


def compare_op(op: str) -> list[Instruction]:
    return _one("COMPARE_OP", argval=op)


def jump(target: Instruction) -> list[Instruction]:
    """Unconditional jump either way (JUMP_FORWARD or JUMP_BACKWARD, chosen at assembly)."""
    return _one("JUMP", target=target)


def jump_forward(target: Instruction) -> list[Instruction]:
    """Same as jump(): the direction is fixed up by the assembler if the target is behind."""
    return _one("JUMP_FORWARD", target=target)


def pop_jump_if_false(target: Instruction) -> list[Instruction]:
    return _one("POP_JUMP_IF_FALSE", target=target)


def pop_jump_if_true(target: Instruction) -> list[Instruction]:
    return _one("POP_JUMP_IF_TRUE", target=target)


def pop_jump_if_none(target: Instruction) -> list[Instruction]:
    return _one("POP_JUMP_IF_NONE", target=target)


def pop_jump_if_not_none(target: Instruction) -> list[Instruction]:
    return _one("POP_JUMP_IF_NOT_NONE", target=target)


def return_value() -> list[Instruction]:
    return _one("RETURN_VALUE")


def return_const(value: Any) -> list[Instruction]:
    """LOAD_CONST + RETURN_VALUE (3.12's RETURN_CONST is not needed)."""
    return load_const(value) + return_value()


def make_function(flags: int = 0) -> list[Instruction]:
    """See the module docstring for the stack; flags are FN_* bits."""
    return _one("MAKE_FUNCTION", arg=flags)


def copy_free_vars(n: int) -> list[Instruction]:
    """First instruction of a code object with n free variables (3.11+)."""
    return _one("COPY_FREE_VARS", arg=n)


def make_cell(name: str) -> list[Instruction]:
    """Turn local slot ``name`` into a cell; one per co_cellvars entry, before RESUME."""
    return _one("MAKE_CELL", argval=name)


def resume(kind: int = 0) -> list[Instruction]:
    """RESUME kind; kind 0 is the start of a function (after MAKE_CELL/COPY_FREE_VARS)."""
    return _one("RESUME", arg=kind)


def function_prologue(cellvars: tuple[str, ...] = (), n_freevars: int = 0) -> list[Instruction]:
    """The prefix every 3.11+ function starts with (CPython's order): COPY_FREE_VARS
    when there are free variables, MAKE_CELL per cell variable, RESUME 0. (Generators
    also need RETURN_GENERATOR; POP_TOP before RESUME.)"""
    out = copy_free_vars(n_freevars) if n_freevars else []
    out += [i for name in cellvars for i in make_cell(name)]
    return out + resume(0)
