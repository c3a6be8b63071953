"""A user generator suspended half-way at a graph break, handed on as a real generator.

kiln traces a user generator one step at a time (values/lazy_generators.SteppedGeneratorValue). Where a
graph breaks while one is suspended at a `yield` (`a = next(g); print(...); b = next(g)`), the code after
the break needs a real generator in exactly that state. CPython cannot make one from a frame, so kiln
makes a generator function continuing the original at that yield:

    def <name>(<its locals>):          # a generator: RETURN_GENERATOR, POP_TOP, RESUME first
        <push None>; jump to <the original YIELD_VALUE>; ...the rest of the original body...

`parked_generator` calls it and steps it once: the prologue stores nothing and runs no user code, the
original YIELD_VALUE yields None (dropped) and the generator is suspended at that very instruction, with
the generator's locals, its closure (the original function's cells) and its name. So next/send/throw/
close continue as they would have (same instruction, same exception handlers), and the loop after the
break runs it as Python. What differs: `gi_code` and `gi_frame.f_code` are the new code object.

Handed on so only where nothing else is pending in the generator's frame: its value stack below the
yield is empty (not inside a for loop over an iterator, an except block or a with block), it is not in a
try block whose handler would run code (values/lazy_generators.runs_code_when_closed), it has no cell
variables of its own (a closure made in its body would keep the old cell). Otherwise the old way: its
function's calls run as Python from then on (RetraceFrame).
"""
from __future__ import annotations

import types

from kiln.capture import bytecode as bc

_CACHE: dict[tuple, types.CodeType] = {}


def resume_generator_code(original: types.CodeType, yield_offset: int, names: tuple[str, ...]) -> types.CodeType:
    """A generator code object taking `names` (locals of `original`) and suspending at its yield at
    `yield_offset` when first stepped."""
    key = (original, yield_offset, names)
    found = _CACHE.get(key)
    if found is not None:
        return found
    body = bc.decode(original)
    target = next(inst for inst in body if inst.offset == yield_offset)
    if target.opname != "YIELD_VALUE":
        raise bc.BytecodeError(f"no YIELD_VALUE at offset {yield_offset} of {original.co_qualname}")
    prologue = bc.copy_free_vars(len(original.co_freevars)) if original.co_freevars else []
    prologue += [bc.create_instruction("RETURN_GENERATOR")] + bc.pop_top() + bc.resume(0)
    prologue += bc.load_const(None) + bc.jump(target)  # the value the parking step yields
    bc.inherit_positions(prologue, target)
    varnames = names + tuple(v for v in original.co_varnames if v not in names)
    name = f"{original.co_name}_resumed_at_{yield_offset}"
    code = bc.assemble(
        prologue + body, original,
        co_argcount=len(names), co_posonlyargcount=0, co_kwonlyargcount=0, co_varnames=varnames,
        co_flags=original.co_flags & ~(0x04 | 0x08), co_name=name,
        co_qualname=f"{original.co_qualname}.<{name}>",
    )
    _CACHE[key] = code
    return code


def parked_generator(code: types.CodeType, fn: types.FunctionType, *values):
    """A real generator of `code` (made by resume_generator_code) suspended at its yield: `fn` is the
    original generator function (its globals, closure and names)."""
    fn = getattr(fn, "__func__", fn)  # a bound method's function (its self is among the locals)
    resumed = types.FunctionType(code, fn.__globals__, fn.__name__, None, fn.__closure__)
    gen = resumed(*values)
    gen.__name__, gen.__qualname__ = fn.__name__, fn.__qualname__
    next(gen)  # runs the prologue and the original YIELD_VALUE only (it yields None)
    return gen


def is_parked(obj) -> bool:
    """Whether `obj` is a generator kiln handed on at a graph break (for break reasons)."""
    code = getattr(obj, "gi_code", None)
    return code is not None and any(code is made for made in _CACHE.values())


def can_hand_on(gen) -> bool:
    """Whether a suspended SteppedGeneratorValue can be handed on as a parked generator."""
    tracer = gen.tracer
    code = tracer.code
    return (gen.yield_inst is not None and gen.yield_inst.opname == "YIELD_VALUE" and not tracer.stack
            and not code.co_cellvars and not gen.runs_code_when_closed()
            and not getattr(tracer, "handled_exceptions", None) and not getattr(tracer, "active_withs", None))


def handed_on_values(gen) -> list:
    """The values a parked generator is made from: the function, then the bound locals."""
    return [gen.fn_value, *_bound_locals(gen).values()]


def _bound_locals(gen) -> dict:
    tracer = gen.tracer
    return {name: tracer.read_local(name) for name in tracer.code.co_varnames if name in tracer.locals}


def reconstruct(gen, cg) -> None:
    """Emit `parked_generator(<code>, <function>, *<locals>)`."""
    bound = _bound_locals(gen)
    code = resume_generator_code(gen.tracer.code, gen.yield_inst.offset, tuple(bound))
    cg.prepare_call(parked_generator)
    cg.load_const(code)
    cg.reconstruct(gen.fn_value)
    for value in bound.values():
        cg.reconstruct(value)
    cg.call(2 + len(bound))
