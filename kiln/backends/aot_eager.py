"""Backend "aot_eager": capture -> ATen tracing with decompositions and functionalization -> run the
core-op ATen graphs with eager ATen kernels.

Inference runs one ATen graph. Training (grad mode on, something requires grad) goes through
``aot_compile``'s joint graph: a forward and a backward graph, partitioned by a min-cut, run inside
a ``torch.autograd.Function``. Where only the joint graph is out of reach (an input that requires
grad is mutated), the forward ATen graph runs op by op under autograd instead (ATen ops are
differentiable), and ``kiln.stats.eager_fallbacks`` says so.
"""
from __future__ import annotations

from kiln.aot import AtenGraph
from kiln.aot.compile import aot_compile
from kiln.aot.joint import JointUnsupported
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


def run_graph_module(gm, example_inputs):
    """aot_eager's graph compiler: the graph module runs as it is, op by op."""
    return gm


def compile_aot_eager(gm, example_inputs, options=None, *, fallback: bool = True, training: bool | None = None):
    """Trace ``gm`` to core-op ATen graph(s) and return a callable running them with eager ATen.

    With ``fallback`` (the default), a graph kiln cannot trace (``UnsupportedFakeOp``) runs as the
    captured FX graph instead, and ``kiln.stats.eager_fallbacks`` records why.
    """
    table = decomposition_table()
    try:
        try:
            runtime = aot_compile(gm, example_inputs, run_graph_module, run_graph_module, options=options,
                                  decompositions=table, training=training)
        except JointUnsupported as exc:
            stats.eager_fallbacks[f"aot_eager joint graph: {exc.reason}"] += 1
            runtime = aot_compile(gm, example_inputs, run_graph_module, options=options, decompositions=table,
                                  training=False)
    except UnsupportedFakeOp as exc:
        if not fallback:
            raise
        stats.eager_fallbacks[f"aot_eager: {exc.reason}"] += 1
        reason = str(exc)

        def eager_fallback(*args):
            return gm(*args)

        eager_fallback.kiln_explain = lambda: f"aot_eager ran this graph eagerly: {reason}"
        return eager_fallback
    plan = getattr(runtime, "plan", None)
    if plan is not None:
        runtime.kiln_explain = plan.explain
    else:
        runtime.kiln_explain = lambda: explain_aten_graph(runtime.aten_graph)
    return runtime


@register_backend(name="aot_eager")
def aot_eager(gm, example_inputs, options=None):
    return compile_aot_eager(gm, example_inputs, options)
