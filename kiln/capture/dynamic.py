"""Which input dims are traced as symbols: ``dynamic=``, ``mark_dynamic``/``mark_static``, and
automatic dynamic (a dim whose size changed between compiles of the same code becomes a symbol).

- ``dynamic=False``: every size is a constant (``mark_dynamic`` is ignored too).
- ``dynamic=True``: every dim of every tensor input is a symbol from the first compile (except dims
  of size 0 or 1, and dims marked static).
- ``dynamic=None`` (the default): the first compile is static; when a later call brings the same input
  (by its place: ``L['x']``, ``L['self'].cache``) with a different size at some dims, those dims are
  symbols from then on, so one more compile serves every size. Dims marked dynamic are symbols at once.

Only backends that can run a graph for every size take dynamic graphs (``DYNAMIC_BACKENDS``, or a
backend callable with ``kiln_dynamic = True``); for others every symbol is specialized before the
backend sees the graph, so nothing changes for them.
"""
from __future__ import annotations

import dataclasses

import torch

from kiln.fake.symbolic import ShapeEnv

DYNAMIC_BACKENDS = {"eager", "aot_eager", "kiln"}
_MARK_DYNAMIC = "_kiln_dynamic_dims"
_MARK_STATIC = "_kiln_static_dims"


def mark_dynamic(t: torch.Tensor, dim, min: int | None = None, max: int | None = None) -> None:
    """Trace dim ``dim`` of ``t`` (an int or a list of ints) as a symbol from the first compile, with
    optional bounds. Code that then needs the size as a constant raises a clear error naming its line."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"kiln.mark_dynamic expects a tensor, got {type(t).__name__}")
    if min is not None and max is not None and min > max:
        raise ValueError(f"kiln.mark_dynamic(t, {dim}, min={min}, max={max}): min is greater than max")
    for d in ([dim] if isinstance(dim, int) else list(dim)):
        if not -t.dim() <= d < t.dim():
            raise IndexError(f"kiln.mark_dynamic: dim {d} is out of range for a tensor of {t.dim()} dims")
        size = t.shape[d]
        if (min is not None and size < min) or (max is not None and size > max):
            raise ValueError(f"kiln.mark_dynamic: dim {d} has size {size}, outside [{min}, {max}]")
        marks = t.__dict__.setdefault(_MARK_DYNAMIC, {})
        marks[d % t.dim()] = (min, max)


def mark_static(t: torch.Tensor, dim) -> None:
    """Keep dim ``dim`` of ``t`` (an int or a list of ints) a constant, whatever ``dynamic=`` says."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"kiln.mark_static expects a tensor, got {type(t).__name__}")
    for d in ([dim] if isinstance(dim, int) else list(dim)):
        if not -t.dim() <= d < t.dim():
            raise IndexError(f"kiln.mark_static: dim {d} is out of range for a tensor of {t.dim()} dims")
        t.__dict__.setdefault(_MARK_STATIC, set()).add(d % t.dim())


@dataclasses.dataclass
class FrameShapes:
    """What kiln saw of one code object's tensor inputs across its compiles."""

    sizes: dict = dataclasses.field(default_factory=dict)  # place -> sizes at the last compile
    dynamic: dict = dataclasses.field(default_factory=dict)  # place -> dims traced as symbols
    static_reason: str | None = None  # why this code is compiled with static sizes from now on
    no_unbacked: str | None = None  # why data-dependent sizes break the graph in this code from now on
    ints: dict = dataclasses.field(default_factory=dict)  # place -> int argument's value at the last compile
    dynamic_ints: set = dataclasses.field(default_factory=set)  # int places traced as symbols
    floats: dict = dataclasses.field(default_factory=dict)  # place -> float argument's value at the last compile
    dynamic_floats: set = dataclasses.field(default_factory=set)  # float places traced as graph inputs
    held: dict = dataclasses.field(default_factory=dict)  # buffer place -> id of its tensor at the last compile
    input_buffers: set = dataclasses.field(default_factory=set)  # buffer places read as graph inputs


class DynamicPolicy:
    """Answers, for one trace, which dims of an input become symbols."""

    def __init__(self, mode: bool | None, shapes: FrameShapes | None, enabled: bool, ints: bool = False,
                 floats: bool = False):
        self.mode = mode
        self.floats = floats  # Options.dynamic_floats: float arguments may become graph inputs
        self.shapes = shapes
        self.enabled = enabled and mode is not False and (shapes is None or shapes.static_reason is None)
        self.ints = ints  # Options.dynamic_ints: int arguments may become symbols too
        # data-dependent sizes (nonzero, x[mask], .item()) as unbacked symbols in one graph (fake/unbacked.py)
        self.unbacked = enabled and (shapes is None or shapes.no_unbacked is None)

    def dims_for(self, place: str, real: torch.Tensor) -> tuple[set, dict]:
        """(dims to trace as symbols, {dim: (min, max)} of those marked dynamic)."""
        if self.shapes is not None:
            previous = self.shapes.sizes.get(place)
            self.shapes.sizes[place] = tuple(real.shape)
        else:
            previous = None
        if not self.enabled:
            return set(), {}
        marked = dict(real.__dict__.get(_MARK_DYNAMIC, {}))
        static = real.__dict__.get(_MARK_STATIC, set())
        if self.mode is True:
            dims = set(range(real.dim()))
        else:
            dims = set(marked)
            if self.shapes is not None:
                dims |= self.shapes.dynamic.get(place, set())
                if previous is not None and len(previous) == real.dim():
                    dims |= {d for d, (a, b) in enumerate(zip(previous, real.shape)) if a != b}
        dims -= static
        dims = {d for d in dims if d < real.dim()}
        if self.shapes is not None and dims:
            self.shapes.dynamic[place] = self.shapes.dynamic.get(place, set()) | dims
        return dims, {d: marked[d] for d in dims if d in marked}

    def buffer_is_input(self, place: str, tensor: torch.Tensor) -> bool:
        """Whether the module buffer at ``place`` (``L['self']._buffers['k']``) is read as a graph input
        (guarded by its properties, read again at each call) rather than held by the graph (guarded to be
        the same object): once an earlier compile of this code held another tensor there, a buffer the
        program assigns anew at each call (``self.k = torch.cat([self.k, x])``, a growing cache), which
        would otherwise recompile every call. Its sizes at that compile are remembered, so dims that
        changed are symbols at once (automatic dynamic)."""
        if self.shapes is None:
            return False
        if place in self.shapes.input_buffers:
            return True
        previous = self.shapes.held.get(place)
        self.shapes.held[place] = id(tensor)  # (an id reused by a new tensor: one more recompile)
        if previous is not None and previous != id(tensor):
            self.shapes.input_buffers.add(place)
            return True
        self.shapes.sizes[place] = tuple(tensor.shape)
        return False

    def int_is_dynamic(self, place: str, value: int) -> bool:
        """Whether the int argument at ``place`` (``L['n']``) is traced as a symbol: under ``dynamic=True``
        always, under automatic dynamic once an earlier compile saw another value there. Values below
        ``ShapeEnv.MIN_SYMBOLIC_HINT`` (0, 1, negatives) stay constants, as sizes 0 and 1 do."""
        if not self.ints:
            return False
        previous = None
        if self.shapes is not None:
            previous = self.shapes.ints.get(place)
            self.shapes.ints[place] = value
        if not self.enabled:
            return False
        if self.mode is True:
            dynamic = True
        else:
            dynamic = self.shapes is not None and (
                place in self.shapes.dynamic_ints or (previous is not None and previous != value))
        if dynamic and self.shapes is not None:
            self.shapes.dynamic_ints.add(place)
        return dynamic and value >= ShapeEnv.MIN_SYMBOLIC_HINT

    def float_is_dynamic(self, place: str, value: float) -> bool:
        """Whether the float argument at ``place`` is a graph input (values/symbolic_float.py): under
        ``dynamic=True`` always, under automatic dynamic once an earlier compile saw another value there,
        never under ``dynamic=False``. Any backend takes it (it is a tensor input)."""
        if not self.floats or self.mode is False:
            return False
        previous = None
        if self.shapes is not None:
            previous = self.shapes.floats.get(place)
            self.shapes.floats[place] = value
        if self.mode is True:
            return True
        dynamic = self.shapes is not None and (
            place in self.shapes.dynamic_floats or (previous is not None and _float_changed(previous, value)))
        if dynamic:
            self.shapes.dynamic_floats.add(place)
        return dynamic


def _float_changed(a: float, b: float) -> bool:
    return repr(a) != repr(b)  # (-0.0 and 0.0 differ, nan is nan)
