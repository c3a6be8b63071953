"""Backends: callables (gm, example_inputs) -> callable, by name in a registry."""
from kiln.backends.registry import list_backends, lookup_backend, register_backend

__all__ = ["list_backends", "lookup_backend", "register_backend"]
