"""Opcode handlers, one function per opcode (named after it), grouped by family.

Each handler takes (tracer, instruction). `OPCODE_HANDLERS` maps opcode names to handlers; a
name missing from it is an unsupported opcode.
"""
from kiln.capture.opcodes import calls, containers, control, load_store, matching, operators, stack
from kiln.capture.opcodes.registry import OPCODE_HANDLERS

__all__ = ["OPCODE_HANDLERS"]
