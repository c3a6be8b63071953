"""Bytecode decoding and assembly for CPython 3.11 and 3.12.

    insts = decode(fn.__code__)              # list[Instruction]: no CACHEs, no EXTENDED_ARGs,
                                             # jump targets / handlers as Instruction objects
    ...edit the list (insert emit.* lists, create_instruction(...))...
    code = assemble(insts, fn.__code__)      # relayout, EXTENDED_ARGs, CACHEs, exception
                                             # table, line table, stack size
    print(format_instructions(insts))

Importing this package on another Python version raises ImportError.
"""
from kiln.capture.bytecode.assemble import assemble
from kiln.capture.bytecode.decode import decode
from kiln.capture.bytecode.emit import (
    FN_ANNOTATIONS, FN_CLOSURE, FN_DEFAULTS, FN_KWDEFAULTS, binary_op, binary_subscr,
    build_list, build_map, build_tuple, call, call_function_ex, call_kw, compare_op, copy,
    copy_free_vars, delete_fast, function_prologue, jump, jump_forward, load_attr,
    load_closure, load_const, load_deref, load_fast, load_global, load_method, make_cell,
    make_function, pop_jump_if_false, pop_jump_if_none, pop_jump_if_not_none,
    pop_jump_if_true, pop_top, push_null, resume, return_const, return_value, rot_n,
    store_attr, store_deref, store_fast, swap, unpack_sequence)
from kiln.capture.bytecode.instruction import (
    BytecodeError, ExceptionTableEntry, Instruction, create_instruction, format_instructions,
    inherit_positions, is_jump, localsplus_names)
from kiln.capture.bytecode.stack import stack_depths, stack_effect
from kiln.capture.bytecode.versions import PY311, PY312

__all__ = [
    "BytecodeError", "ExceptionTableEntry", "FN_ANNOTATIONS", "FN_CLOSURE", "FN_DEFAULTS",
    "FN_KWDEFAULTS", "Instruction", "PY311", "PY312", "assemble", "binary_op",
    "binary_subscr", "build_list", "build_map", "build_tuple", "call", "call_function_ex",
    "call_kw", "compare_op", "copy", "copy_free_vars", "create_instruction", "decode",
    "delete_fast", "format_instructions", "function_prologue", "inherit_positions", "is_jump", "jump",
    "jump_forward", "load_attr", "load_closure", "load_const", "load_deref", "load_fast",
    "load_global", "load_method", "localsplus_names", "make_cell", "make_function",
    "pop_jump_if_false", "pop_jump_if_none", "pop_jump_if_not_none", "pop_jump_if_true",
    "pop_top", "push_null", "resume", "return_const", "return_value", "rot_n",
    "stack_depths", "stack_effect", "store_attr", "store_deref", "store_fast", "swap",
    "unpack_sequence",
]
