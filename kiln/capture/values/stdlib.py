"""Standard-library callables kiln models, by identity: the tables the generic lookups consult.

- `BUILTIN_CALLS`: C functions (functools.reduce, ...) called through `BuiltinValue`.
- `CLASS_CALLS`: classes whose construction kiln models (functools.partial, collections types).
- `LIBRARY_CALLS`: Python functions of skipped files (functools.wraps, ...) kiln answers itself.
Each handler takes (tx, args, kwargs) except BUILTIN_CALLS' (tx, *args, **kwargs), as builtins' own.
"""
from __future__ import annotations

import contextlib

from kiln.capture import generator_resume, polyfills, refuse
from kiln.capture.values import (collections_values, dataclass_calls, exit_stacks, functools_values, generator_contexts,
                                 module_getattr, namespaces)

BUILTIN_CALLS: dict = {**functools_values.BUILTIN_HANDLERS, **collections_values.BUILTIN_HANDLERS}
CLASS_CALLS: dict = {**collections_values.CLASS_HANDLERS, **namespaces.CLASS_HANDLERS,
                     __import__("functools").partial: functools_values.make_partial,
                     contextlib.ExitStack: exit_stacks.make_exit_stack,
                     contextlib.suppress: exit_stacks.make_suppress}
LIBRARY_CALLS: dict = {**functools_values.LIBRARY_FUNCTION_HANDLERS, **dataclass_calls.LIBRARY_HANDLERS,
                       **module_getattr.LIBRARY_HANDLERS,
                       contextlib.contextmanager: generator_contexts.contextmanager_handler}


def _polyfill_handler(polyfill):
    def call(tx, args, kwargs):
        from kiln.capture.sources import ConstantSource
        from kiln.capture.values.functions import UserFunctionValue

        return tx.inline_user_function(UserFunctionValue(polyfill, ConstantSource(polyfill.__qualname__, polyfill)),
                                       list(args), dict(kwargs))
    return call


def _refuse(tx, args, kwargs):
    from kiln.capture.values.base import unsupported

    unsupported(args[0].as_constant(), hint="the library's own function runs at a graph break")


# library functions kiln traces its own Python version of (capture/polyfills.py)
LIBRARY_CALLS.update({fn: _polyfill_handler(polyfill) for fn, polyfill in polyfills.POLYFILLS.items()})
LIBRARY_CALLS[refuse.refuse] = _refuse
LIBRARY_CALLS[generator_resume.parked_generator] = generator_resume.trace_parked_generator  # resume functions


def _typing_cast(tx, args, kwargs):
    """typing.cast(typ, val) returns val unchanged (it checks nothing)."""
    from kiln.capture.values.base import unsupported

    bound = dict(zip(("typ", "val"), args), **kwargs)
    if len(args) > 2 or set(bound) != {"typ", "val"}:
        unsupported("typing.cast() with other arguments than (typ, val) (TypeError)")
    return bound["val"]


LIBRARY_CALLS[__import__("typing").cast] = _typing_cast
LIBRARY_CALLS.update(__import__("kiln.capture.values.lru_in_frame", fromlist=["x"]).LIBRARY_HANDLERS)
# Python functions of skipped files recognized by code object (a new function per decoration), called
# with (tx, fn_value, args, kwargs)
LIBRARY_CODES: dict = {generator_contexts.HELPER_CODE: generator_contexts.call_contextmanager_helper}


def register_builtin_handlers(handlers: dict) -> None:
    handlers.update(BUILTIN_CALLS)
