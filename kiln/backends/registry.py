"""The backend registry.

A backend is what torch.compile calls one: ``backend(gm, example_inputs) -> callable``, where gm is a
``torch.fx.GraphModule`` captured from the user's bytecode and example_inputs are the real tensors
(and other values) of the call that triggered the compile. kiln's own backends also take the
``Options`` in force, by keyword; ``lookup_backend`` binds it so every backend looks the same to callers.
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable

from kiln.options import Options

BackendFn = Callable  # (gm: torch.fx.GraphModule, example_inputs: list) -> Callable

_REGISTRY: dict[str, BackendFn] = {}
_TAKES_OPTIONS: set[str] = set()
# names a user will reach for, with the name they stand for
_ALIASES = {"inductor": "kiln"}


def register_backend(fn: BackendFn | None = None, *, name: str | None = None):
    """Register a backend under ``name`` (default: the function's name). Usable as a decorator."""

    def register(f: BackendFn) -> BackendFn:
        if not callable(f):
            raise TypeError(f"register_backend expects a callable (gm, example_inputs) -> callable, got {f!r}")
        key = name or getattr(f, "__name__", None)
        if not key:
            raise ValueError("register_backend: give the backend a name=")
        _REGISTRY[key] = f
        if "options" in inspect.signature(f).parameters:
            _TAKES_OPTIONS.add(key)
        else:
            _TAKES_OPTIONS.discard(key)
        return f

    return register(fn) if fn is not None else register


def list_backends() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def lookup_backend(backend: str | BackendFn, options: Options) -> tuple[str, BackendFn]:
    """Return (name, fn(gm, example_inputs)) for a backend name or callable; ValueError lists choices."""
    _load_builtins()
    if callable(backend) and not isinstance(backend, str):
        return getattr(backend, "__name__", type(backend).__name__), backend
    if not isinstance(backend, str):
        raise TypeError(
            f"kiln.compile(backend=...) takes a backend name or a callable (gm, example_inputs), "
            f"not {type(backend).__name__}; backends: {list_backends()}"
        )
    name = _ALIASES.get(backend, backend)
    if name not in _REGISTRY:
        raise ValueError(f"kiln.compile: unknown backend {backend!r}; valid backends are {list_backends()}")
    fn = _REGISTRY[name]
    if name in _TAKES_OPTIONS:
        fn = functools.partial(fn, options=options)
    return name, fn


_loaded = False


def _load_builtins() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from kiln.backends import eager  # noqa: F401  (registers "eager")
    from kiln.backends import aot_eager  # noqa: F401  (registers "aot_eager")
    from kiln.backends import kiln  # noqa: F401  (registers "kiln")
