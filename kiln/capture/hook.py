"""kiln's PEP 523 frame hook, Python side: a thin wrapper over the C extension
``kiln.capture._eval_frame``.

How it works
------------
The first time a thread sets a callback, the C extension installs its frame-evaluation
function interpreter-wide (and keeps it installed).  Threads without a callback go
straight to CPython's default evaluator.  In a thread with a callback, every plain Python
function frame that is about to start (not generator/coroutine code, not a frame being
traced with ``sys.settrace``, not code marked with :func:`mark_skip`) is offered as::

    answer = callback(code, f_locals, f_globals, f_builtins, closure)

* ``f_locals`` is a new dict of the frame's arguments at entry (positional, defaults
  filled in, ``*args`` tuple, keyword-only, ``**kwargs`` dict), keyed by
  ``code.co_varnames[:nargs]``;
* ``closure`` is the function's ``__closure__`` (a tuple of cells) or None.

The callback runs with this thread's callback unset, so kiln's own analysis is not
hooked.  It answers:

* ``None``: the original frame runs normally (the callback stays active for the frames
  it calls);
* a code object with the same signature and the same ``co_freevars``: a function is
  built from it with the frame's globals and closure and called with the original
  arguments; its result is the call's result and the original frame never runs.  The
  substitute's own frame is not offered back, but the frames it calls are.

If the callback (or the substitute) raises, the exception propagates to the caller.

All state is per thread: setting a callback in one thread does not affect another.

If the C extension was not built, this module still imports; :func:`available` returns
False and every other function raises :class:`kiln.errors.KilnError`.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from kiln.errors import KilnError

try:
    from kiln.capture import _eval_frame as _C
except ImportError:  # the extension was not built (or not for this interpreter)
    _C = None

__all__ = [
    "available",
    "set_callback",
    "get_callback",
    "mark_skip",
    "unmark",
    "is_skipped",
    "call_without_hook",
    "callback_active",
    "set_saved_hooks_probe",
    "fast_hits",
    "set_tensor_guard",
    "tensor_guard_reads",
    "call_with_callback",
    "HookedCall",
]

# The callback's signature: (code, f_locals, f_globals, f_builtins, closure) -> code | None
FrameCallback = Callable[[Any, dict, dict, dict, Optional[tuple]], Any]

_MISSING = (
    "kiln's C extension kiln.capture._eval_frame is missing, so kiln cannot hook Python "
    "frames. Build it by running `pip install -e .` in the kiln checkout "
    "(it needs a C compiler and the Python development headers)."
)


def available() -> bool:
    """True when the C extension ``kiln.capture._eval_frame`` is importable."""
    return _C is not None


def _missing(*args: Any, **kwargs: Any) -> Any:
    raise KilnError(_MISSING)


# set_callback(cb_or_None) -> previous   this thread's callback; returns the previous one
# get_callback() -> cb or None
# mark_skip(code)                        frames of `code` are not offered (their callees are)
# unmark(code)                           undo mark_skip
# is_skipped(code) -> bool
# call_without_hook(fn, *args, **kw)     call fn with this thread's callback unset, restoring
#                                        it afterwards (also on exceptions)
# (cache tables)                         a callback with an attribute `_kiln_tables`, a dict
#                                        {id(code): [(check, code), ...]}: a frame of that code
#                                        runs entries[i][1] for the first i whose check
#                                        entries[i][0](L, G, C, B) is True, without calling the
#                                        callback (which is called when none passes)
# set_saved_hooks_probe(fn)              tables are not read while fn(False) is not None
# fast_hits() -> int                     hits found through tables (kiln.stats.cache_hits)
# set_tensor_guard(capsule_or_None)      tensor guards read the TensorImpl (tensor_guard_build.py)
# tensor_guard_reads() -> int            tensors whose guard fields that library decided
# call_with_callback(cb, fn, *a, **kw)   call fn with cb as this thread's callback (restored after)
# HookedCall(fn, cb)                     an object whose calls are call_with_callback(cb, fn, ...),
#                                        with no Python frame of its own (a base class)
if _C is not None:
    # The C functions are bound directly: no Python frame in between (they run on every
    # compiled call, and a Python frame here would itself be offered to the callback).
    set_callback = _C.set_callback
    get_callback = _C.get_callback
    mark_skip = _C.mark_skip
    unmark = _C.unmark
    is_skipped = _C.is_skipped
    call_without_hook = _C.call_without_hook
    set_saved_hooks_probe = _C.set_saved_hooks_probe
    fast_hits = _C.fast_hits
    set_tensor_guard = _C.set_tensor_guard
    tensor_guard_reads = _C.tensor_guard_reads
    call_with_callback = _C.call_with_callback
    HookedCall = _C.HookedCall
else:
    set_callback = get_callback = mark_skip = unmark = is_skipped = _missing
    call_without_hook = set_saved_hooks_probe = set_tensor_guard = tensor_guard_reads = _missing
    call_with_callback = _missing

    class HookedCall:  # (what kiln.compile's functions derive from: calling one says the extension is missing)
        def __init__(self, fn, callback):
            self.hooked_fn, self.hooked_callback = fn, callback

        def __call__(self, *args, **kwargs):
            _missing()

    def fast_hits() -> int:
        return 0

class callback_active:
    """Context manager: ``with callback_active(cb): ...`` runs the block with ``cb`` as this
    thread's callback and restores the previous one on exit (also on exceptions).

    ``callback_active(None)`` runs the block with no callback.
    """

    __slots__ = ("_cb", "_prev")

    def __init__(self, cb: Optional[FrameCallback]):
        self._cb = cb
        self._prev = None

    def __enter__(self) -> "callback_active":
        self._prev = set_callback(self._cb)
        return self

    def __exit__(self, *exc_info: Any) -> bool:
        set_callback(self._prev)
        self._prev = None
        return False


if _C is not None:
    # These frames may start while a callback is set (__exit__ always; __init__ and
    # __enter__ when nested inside another callback_active): kiln's code, not the user's.
    for _method in (callback_active.__init__, callback_active.__enter__, callback_active.__exit__):
        mark_skip(_method.__code__)
    del _method
