"""Run a function through kiln's lowering two ways -- the loop-IR reference evaluator and generated
C++ -- and compare both with eager. One graph (one C++ library) per call: group many checks per call."""
from __future__ import annotations

import torch
import torch.fx as fx

from kiln.aot import AtenRuntime, aot_trace
from kiln.backends.kiln import compile_graph
from kiln.decomp import decomposition_table
from kiln.lower.graph import lower_graph
from kiln.lower.reference import run_reference
from kiln.options import default_options


def trace(fn, args):
    graph = fx.Graph()
    placeholders = [graph.placeholder(f"t{i}") for i in range(len(args))]
    graph.output(graph.call_function(fn, tuple(placeholders)))
    gm = fx.GraphModule(torch.nn.Module(), graph)
    return aot_trace(gm, list(args), decompositions=decomposition_table())


def assert_same(got, expected, what):
    got_flat, _ = torch.utils._pytree.tree_flatten(got)
    exp_flat, _ = torch.utils._pytree.tree_flatten(expected)
    assert len(got_flat) == len(exp_flat), what
    for i, (g, e) in enumerate(zip(got_flat, exp_flat)):
        if isinstance(e, torch.Tensor):
            assert g.dtype == e.dtype, f"{what}: output {i} dtype {g.dtype} != {e.dtype}"
            assert g.shape == e.shape, f"{what}: output {i} shape {tuple(g.shape)} != {tuple(e.shape)}"
            torch.testing.assert_close(g, e, equal_nan=True, msg=lambda m: f"{what}: output {i}: {m}")
        else:
            assert g == e, what


def clone(t: torch.Tensor) -> torch.Tensor:
    """A copy with the same size, strides and storage offset (``Tensor.clone`` would make it dense)."""
    extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0
    storage = torch.zeros(t.storage_offset() + extent, dtype=t.dtype)
    return storage.as_strided(t.shape, t.stride(), t.storage_offset()).copy_(t)


def check(fn, *args, allow_fallbacks=(), kernels=None):
    """``fn(*args)`` through the reference evaluator and generated C++ equals eager.

    Fails when an op falls back to ATen unless its name contains one of ``allow_fallbacks``; returns
    the CompiledGraph for further checks."""
    expected = fn(*[clone(a) for a in args])
    ag = trace(fn, args)
    lg = lower_graph(ag.gm)
    unexpected = {op: why for op, why in lg.fallbacks.items() if not any(w in op for w in allow_fallbacks)}
    assert not unexpected, f"ops fell back to ATen: {unexpected}"
    reference = AtenRuntime(ag, run=lambda *a: run_reference(lg, a))
    assert_same(reference(*[clone(a) for a in args]), expected, "reference evaluator")
    cg = compile_graph(ag.gm, default_options())
    compiled = AtenRuntime(ag, run=cg.wrapper.compile())
    assert_same(compiled(*[clone(a) for a in args]), expected, "generated C++")
    if kernels is not None:
        assert len(cg.kernels) == kernels, cg.sched.format()
    return cg


def sample(shape, dtype, *, low=-4, high=4, seed=0):
    """Deterministic values of ``dtype``: small integers for integer types, with repeats (ties)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)
    return torch.randint(low, high, shape, generator=g).to(dtype)


def ties_nans_infs(shape, dtype=torch.float32, seed=0, specials=True):
    """Few distinct small integers (many ties) of ``dtype``; floats get NaN and both infinities at
    scattered places too (scans, sorts: ATen's NaN and tie rules)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-2, 3, shape, generator=g).to(dtype)
    if dtype.is_floating_point and specials:
        flat = x.view(-1)
        flat[3::11] = float("nan")
        flat[5::13] = float("inf")
        flat[7::17] = float("-inf")
    return x
