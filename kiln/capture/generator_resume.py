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

Handed on so only where nothing else is pending in the generator's frame: below the yield at most the
iterators of for loops over lists, tuples, ranges or strs (handed on as arguments, rebuilt at their
position), not inside an except or with block, not in a try block whose handler would run code
(values/lazy_generators.runs_code_when_closed), no cell variables of its own (a closure made in its
body would keep the old cell). Otherwise the old way: its
function's calls run as Python from then on (RetraceFrame).
"""
from __future__ import annotations

import types

from kiln.capture import bytecode as bc
from kiln.capture.values.base import Value

_CACHE: dict[tuple, types.CodeType] = {}


def resume_generator_code(original: types.CodeType, yield_offset: int, names: tuple[str, ...],
                          n_stack: int = 0) -> types.CodeType:
    """A generator code object taking `n_stack` values for its stack below the yield (`___stack<i>`, bottom
    first: a for loop's iterator) and `names` (locals of `original`), suspending at its yield at
    `yield_offset` when first stepped."""
    key = (original, yield_offset, names, n_stack)
    found = _CACHE.get(key)
    if found is not None:
        return found
    body = bc.decode(original)
    target = next(inst for inst in body if inst.offset == yield_offset)
    if target.opname != "YIELD_VALUE":
        raise bc.BytecodeError(f"no YIELD_VALUE at offset {yield_offset} of {original.co_qualname}")
    prologue = bc.copy_free_vars(len(original.co_freevars)) if original.co_freevars else []
    prologue += [bc.create_instruction("RETURN_GENERATOR")] + bc.pop_top() + bc.resume(0)
    stack = tuple(f"___stack{i}" for i in range(n_stack))
    for name in stack:
        prologue += bc.load_fast(name)
    prologue += bc.load_const(None) + bc.jump(target)  # the value the parking step yields
    bc.inherit_positions(prologue, target)
    names = stack + names
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


def closed_generator(fn):
    """A finished generator of `fn` (its code, names): made without running its body, then closed."""
    fn = getattr(fn, "__func__", fn)
    code = fn.__code__
    made = types.FunctionType(code, fn.__globals__, fn.__name__, None, fn.__closure__)
    kwonly = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
    gen = made(*[None] * code.co_argcount, **dict.fromkeys(kwonly))  # runs nothing: a generator function
    gen.__name__, gen.__qualname__ = fn.__name__, fn.__qualname__
    gen.close()
    return gen


def is_parked(obj) -> bool:
    """Whether `obj` is a generator kiln handed on at a graph break (for break reasons)."""
    code = getattr(obj, "gi_code", None)
    return code is not None and any(code is made for made in _CACHE.values())


def can_hand_on(gen) -> bool:
    """Whether a suspended SteppedGeneratorValue can be handed on as a parked generator."""
    tracer = gen.tracer
    code = tracer.code
    return (gen.yield_inst is not None and gen.yield_inst.opname == "YIELD_VALUE"
            and all(_stack_value_ok(v) for v in tracer.stack)
            and not code.co_cellvars and not gen.runs_code_when_closed()
            and not getattr(tracer, "handled_exceptions", None) and not getattr(tracer, "active_withs", None))


def _stack_value_ok(value) -> bool:
    """A value below the yield that can be handed on: the iterator of a for loop over a list, tuple,
    range or str (rebuilt at its position), unless it runs over a list from outside changed meanwhile."""
    from kiln.capture.values.iterators import SequenceIterator

    seq = getattr(value, "seq", None)
    return type(value) is SequenceIterator and not (
        getattr(seq, "created_here", True) is False and getattr(seq, "changed_during_trace", False))


def handed_on_values(gen) -> list:
    """The values a parked generator is made from: the function, its stack below the yield, its bound
    locals."""
    return [gen.fn_value, *gen.tracer.stack, *_bound_locals(gen).values()]


def _bound_locals(gen) -> dict:
    tracer = gen.tracer
    return {name: tracer.read_local(name) for name in tracer.code.co_varnames if name in tracer.locals}


def reconstruct(gen, cg) -> None:
    """Emit `parked_generator(<code>, <function>, *<locals>)`."""
    bound, stack = _bound_locals(gen), list(gen.tracer.stack)
    code = resume_generator_code(gen.tracer.code, gen.yield_inst.offset, tuple(bound), len(stack))
    cg.prepare_call(parked_generator)
    cg.load_const(code)
    cg.reconstruct(gen.fn_value)
    for value in stack + list(bound.values()):
        cg.reconstruct(value)
    cg.call(2 + len(stack) + len(bound))


# ---- handing it on as its state, rebuilt by the resume function ------------------------------------------
#
# Where the suspended generator is held only by local variables of the breaking frame (no stack value,
# container, object or side effect can reach it), the resume function gets its pieces instead (the
# function, its locals) and makes the parked generator in its prologue: run as Python that is
# `parked_generator(...)`; traced by kiln, the same call makes a stepped generator parked at that yield
# (`trace_parked_generator`), so the steps after the break are traced into the resume function's graph.
# No other code can tell: the generator object is new, but only this frame's locals ever held the old one.


class _Helper(Value):
    """parked_generator itself, handed to a resume function as an argument."""

    def reconstruct(self, cg) -> None:
        cg.load_const(parked_generator)


def split_generators(tracer, stack: list, locals_values: dict, continuations: list, side_effect_values) -> tuple:
    """Hand on as their state the suspended generators held only by plain locals (see above): replaces
    them in `locals_values` and in the continuations' live lists by their pieces. Returns (continuations,
    rebuilt) where rebuilt maps each such local to the parts make_resume_code's prologue calls."""
    from kiln.capture.graph_break import _reachable_iterators as _walk  # every value reachable from one
    from kiln.capture.values.lazy_generators import SteppedGeneratorValue

    code = tracer.code
    held: dict = {}  # id(generator) -> (generator, local names)
    for name, value in locals_values.items():
        if isinstance(value, SteppedGeneratorValue) and name in code.co_varnames and name not in code.co_cellvars \
                and value.state == "suspended" and can_hand_on(value):
            held.setdefault(id(value), (value, []))[1].append(name)
    if not held:
        return continuations, {}
    reachable: set = set()
    for value in [*stack, *side_effect_values, *[v for v in locals_values.values() if id(v) not in held]]:
        _walk(value, reachable)
    for gen, _ in held.values():
        for child in handed_on_values(gen):
            _walk(child, reachable)
    rebuilt, renamed = {}, {}
    for gen, names in held.values():
        if id(gen) in reachable or len(names) > 1:
            continue  # something else may hold it: it must be one real object (parked as it is)
        bound, stack = _bound_locals(gen), list(gen.tracer.stack)
        prefix = f"___gen_{names[0]}"
        pieces = {f"{prefix}_make": _Helper(), f"{prefix}_fn": gen.fn_value,
                  **{f"{prefix}_stack{i}": value for i, value in enumerate(stack)},
                  **{f"{prefix}_{local}": value for local, value in bound.items()}}
        locals_values.update(pieces)
        made = resume_generator_code(code_of(gen), gen.yield_inst.offset, tuple(bound), len(stack))
        names_of_pieces = list(pieces)
        parts = (names_of_pieces[0], made, *names_of_pieces[1:])
        for name in names:
            del locals_values[name]
            rebuilt[name] = parts
            renamed[name] = names_of_pieces
    new_continuations = []
    for target, live in continuations:
        out = []
        for name in live:
            out += [p for p in renamed[name] if p not in out] if name in renamed else [name]
        new_continuations.append((target, out))
    return new_continuations, rebuilt


def code_of(gen):
    return gen.tracer.code


def rebuilt_for(live: list, rebuilt: dict) -> tuple:
    """The (local, parts) pairs a resume function taking `live` rebuilds in its prologue."""
    return tuple((name, parts) for name, parts in rebuilt.items() if parts[0] in live)


def trace_parked_generator(tx, args, kwargs):
    """`parked_generator(code, fn, *locals)` met while tracing (a resume function's prologue): a stepped
    generator of `code` with fn's globals, closure and names, stepped once to the yield it is parked at."""
    from kiln.capture.interpreter import GeneratorTracer
    from kiln.capture.values.base import unsupported
    from kiln.capture.values.lazy_generators import SteppedGeneratorValue

    if kwargs or len(args) < 2 or not args[0].is_constant() or not isinstance(args[0].as_constant(), types.CodeType):
        unsupported("parked_generator() with unexpected arguments")
    code, fn_value, values = args[0].as_constant(), args[1], list(args[2:])
    fn = getattr(fn_value, "fn", None)
    f_globals = fn.__globals__ if fn is not None else getattr(fn_value, "f_globals", None)
    if f_globals is None or len(values) != code.co_argcount:
        unsupported("parked_generator() of a function kiln cannot read")
    name = fn.__qualname__ if fn is not None else fn_value.qualname
    from kiln.capture.values.lazy_generators import refuse_if_called_as_python

    refuse_if_called_as_python(code, name)  # its generators are real ones from now on (lazy_generators.py)
    child = GeneratorTracer(code, f_globals, tx.f_builtins, tx.output, tx, tx.options, name)
    child.locals = dict(zip(code.co_varnames[:code.co_argcount], values))
    child.cells.update(fn_value.bind_closure(child))
    gen = SteppedGeneratorValue(child, fn_value, values, {})
    if gen._resume(tx) is None or gen.state != "suspended":
        unsupported("a parked generator did not stop at its yield (internal inconsistency)")
    return gen
