"""Backend "eager": run the captured FX graph as it is."""
from __future__ import annotations

from kiln.backends.registry import register_backend


@register_backend(name="eager")
def eager(gm, example_inputs):
    return gm.forward
