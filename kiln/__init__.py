"""kiln: a compiler for unmodified PyTorch programs.

    import kiln
    model = kiln.compile(model)
    out = model(x)
"""
from kiln.backends import list_backends, register_backend
from kiln.debug.stats import stats
from kiln.options import Options

__all__ = ["Options", "list_backends", "register_backend", "stats"]
