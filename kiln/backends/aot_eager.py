"""Backend "aot_eager": capture -> ATen tracing with decompositions and functionalization -> run the
core-op ATen graph with eager ATen kernels.

Inputs that require grad work as in eager: the ATen graph runs op by op under autograd, and ATen ops
are differentiable. (A joint forward/backward graph comes with training support.)
"""
from __future__ import annotations

from kiln.aot import AtenGraph, AtenRuntime, aot_trace
from kiln.backends.registry import register_backend
from kiln.debug.stats import stats
from kiln.decomp import count_by_kind, decomposition_table, non_core_ops
from kiln.fake import UnsupportedFakeOp


def explain_aten_graph(ag: AtenGraph) -> str:
    """The ATen graph's printout, then how many ops of each kind it calls."""
    counts = count_by_kind(ag.gm.graph)
    lines = ["ATen graph (after decompositions and functionalization):", ag.format(), "", "ops by kind:"]
    lines += [f"  {kind:10s} {n}" for kind, n in counts.items()]
    leftovers = non_core_ops(ag.gm.graph)
    if leftovers:
        lines.append("non-core ops (run by their ATen kernel): " + ", ".join(f"{k} x{v}" for k, v in sorted(leftovers.items())))
    if ag.mutated_inputs:
        names = [ag.inputs[i].name for i in ag.mutated_inputs]
        lines.append("inputs written back after the graph: " + ", ".join(names))
    return "\n".join(lines)


def compile_aot_eager(gm, example_inputs, options=None, *, fallback: bool = True):
    """Trace ``gm`` to a core-op ATen graph and return a callable running it with eager ATen.

    With ``fallback`` (the default), a graph kiln cannot trace (``UnsupportedFakeOp``) runs as the
    captured FX graph instead, and ``kiln.stats.eager_fallbacks`` records why.
    """
    try:
        with stats.timed("aot"):
            ag = aot_trace(gm, example_inputs, decompositions=decomposition_table(), options=options)
    except UnsupportedFakeOp as exc:
        if not fallback:
            raise
        stats.eager_fallbacks[f"aot_eager: {exc.reason}"] += 1
        reason = str(exc)

        def eager_fallback(*args):
            return gm(*args)

        eager_fallback.kiln_explain = lambda: f"aot_eager ran this graph eagerly: {reason}"
        return eager_fallback
    runtime = AtenRuntime(ag)
    runtime.kiln_explain = lambda: explain_aten_graph(ag)
    runtime.aten_graph = ag
    return runtime


@register_backend(name="aot_eager")
def aot_eager(gm, example_inputs, options=None):
    return compile_aot_eager(gm, example_inputs, options)
