"""The lowering registry: ``@lowering(aten.op.overload)``, one function per core op.

A lowering gets the ``GraphLowering`` (``g``), the FX node it lowers, and the node's arguments with
each FX value replaced by its ``TensorValue`` (or Python value). It returns the node's value: a
``TensorValue``, or a tuple/list of them for multi-output ops. A lowering that cannot handle a
particular call raises ``Unlowerable(reason)``; the op then runs through its ATen kernel
(``fallback.py``), and ``explain`` reports the reason.
"""
from __future__ import annotations

import importlib
from typing import Callable

import torch

_LOWERINGS: dict = {}
_FAMILIES = ("pointwise", "reduction", "views", "misc", "shape", "indexing", "scatter", "extern", "scan", "sort",
             "pool_backward")
_loaded = False


class Unlowerable(Exception):
    """This call of the op has no loop-IR lowering; run it through ATen instead."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def lowering(*ops) -> Callable:
    def register(fn: Callable) -> Callable:
        for op in ops:
            if isinstance(op, torch._ops.OpOverloadPacket):
                raise TypeError(f"@lowering wants op overloads (aten.x.default), got the packet {op}")
            if op in _LOWERINGS:
                raise ValueError(f"{op} has two lowerings: {_LOWERINGS[op].__name__} and {fn.__name__}")
            _LOWERINGS[op] = fn
        return fn

    return register


def lowerings() -> dict:
    global _loaded
    if not _loaded:
        _loaded = True
        for family in _FAMILIES:
            importlib.import_module(f"kiln.lower.{family}")
    return _LOWERINGS
