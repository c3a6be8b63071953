"""collections' containers inside compiled code (filled in below)."""
from __future__ import annotations

BUILTIN_HANDLERS: dict = {}
CLASS_HANDLERS: dict = {}


def wrap_collection(tx, value, source):
    return None
