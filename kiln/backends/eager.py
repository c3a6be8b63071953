"""Backend "eager": run the captured FX graph as it is. Backend "kiln" runs as "eager" until code generation exists."""
from __future__ import annotations

from kiln.backends.registry import register_backend


@register_backend(name="eager")
def eager(gm, example_inputs):
    return gm.forward


@register_backend(name="kiln")
def kiln_backend(gm, example_inputs, options=None):
    # The full pipeline (ATen tracing, decompositions, code generation) lands in later stages;
    # until then the default backend runs the captured graph with eager PyTorch. explain() says so.
    return gm.forward


kiln_backend.runs_as = "eager"
