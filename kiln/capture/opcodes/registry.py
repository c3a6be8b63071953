"""The table of opcode handlers."""
from __future__ import annotations

from typing import Callable

OPCODE_HANDLERS: dict[str, Callable] = {}


def handles(*opnames: str):
    def register(fn: Callable) -> Callable:
        for name in opnames or (fn.__name__,):
            OPCODE_HANDLERS[name] = fn
        return fn

    return register
