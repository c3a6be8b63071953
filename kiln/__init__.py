"""kiln: a compiler for unmodified PyTorch programs.

    import kiln
    model = kiln.compile(model)
    out = model(x)
"""
from kiln.api import compile, disable, graph_break, reset
from kiln.artifact import load, save
from kiln.backends import list_backends, register_backend
from kiln.capture.dynamic import mark_dynamic, mark_static
from kiln.debug.explain import explain
from kiln.debug.stats import stats
from kiln.options import Options

__all__ = ["Options", "compile", "disable", "explain", "graph_break", "list_backends", "load", "mark_dynamic", "mark_static", "register_backend", "reset", "save", "stats"]
