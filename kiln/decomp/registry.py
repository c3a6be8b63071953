"""The decomposition registry: ``@decomposition(aten.op.overload)``, one Python function per op.

A decomposition takes the op's arguments (fake tensors while tracing, real tensors in tests) and
computes its result with other ATen ops, ideally core ones (``core_ops.py``). It may return
``NotImplemented`` to leave a particular call whole. The tracer applies the table while tracing, so the
ops a decomposition calls are decomposed in turn.
"""
from __future__ import annotations

import importlib
from typing import Callable, Iterable

import torch

_TABLE: dict = {}
_FAMILIES = (
    "activation", "attention", "backward", "backward_loss", "linalg", "loss", "norm", "pointwise", "pooling", "random",
    "reduction", "sampling", "shape", "transformer",
    "factory", "special_math", "bessel", "layout", "coverage", "selection", "adaptive_max", "bessel_special", "bessel_jy", "windows", "metric", "bicubic",
    "backward_windows", "backward_more", "grid_sampler", "histogram", "embedding_bag",
)
_loaded = False


def decomposition(*ops) -> Callable:
    """Register the decorated function as the decomposition of each ATen op overload in ``ops``."""

    def register(fn: Callable) -> Callable:
        for op in ops:
            if isinstance(op, torch._ops.OpOverloadPacket):
                raise TypeError(f"@decomposition wants op overloads (aten.x.default), got the packet {op}")
            if op in _TABLE:
                raise ValueError(f"{op} has two decompositions: {_TABLE[op].__name__} and {fn.__name__}")
            _TABLE[op] = fn
        return fn

    return register


def _load_families() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for family in _FAMILIES:
            importlib.import_module(f"kiln.decomp.{family}")


def decomposition_table(ops: Iterable | None = None, exclude: Iterable = ()) -> dict:
    """A copy of the registry: all decompositions, or those of ``ops``, minus ``exclude``."""
    _load_families()
    excluded = set(exclude)
    if ops is None:
        return {op: fn for op, fn in _TABLE.items() if op not in excluded}
    return {op: _TABLE[op] for op in ops if op in _TABLE and op not in excluded}
