"""Backend "aot_eager": capture -> ATen tracing with decompositions and functionalization -> run the
core-op ATen graphs with eager ATen kernels.

Inference runs one ATen graph. Training (grad mode on, something requires grad) goes through
``aot_compile``'s joint graph: a forward and a backward graph, partitioned by a min-cut, run inside
a ``torch.autograd.Function``. Where only the joint graph is out of reach (an input that requires
grad is mutated, no partition), the captured graph runs op by op under autograd instead, and
``kiln.stats.eager_fallbacks`` says so. Not the functionalized ATen forward: its mutations are
rewritten as new values, which autograd would differentiate through where eager does not (a write
under ``no_grad`` or through ``x.detach()``/``x.data`` is invisible to eager's autograd).
"""
from __future__ import annotations

from kiln.aot import AtenGraph
from kiln.aot.compile import aot_compile
from kiln.aot.joint import JointUnsupported
from kiln.aot.symbols import shape_env_of
from kiln.backends.registry import register_backend
from kiln.debug.stats import stats
from kiln.decomp import count_by_kind, decomposition_table, non_core_ops
from kiln.fake import UnsupportedFakeOp
from kiln.fake.symbolic import SpecializationError


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
    """aot_eager's graph compiler: the graph module runs as it is, op by op (its forward: calling the
    module itself would run the user's global nn.Module hooks on kiln's graph module)."""
    return gm.forward


def compile_aot_eager(gm, example_inputs, options=None, *, fallback: bool = True, training: bool | None = None):
    """Trace ``gm`` to core-op ATen graph(s) and return a callable running them with eager ATen.

    A dynamic graph (``gm.meta["kiln_shape_env"]``) traces with symbolic sizes: the ATen graphs run
    on inputs of any size the guards allow. Where that fails, the sizes are specialized and the graph
    traced statically (``compile_dynamic_or_static``).

    With ``fallback`` (the default), a graph kiln cannot trace (``UnsupportedFakeOp``) runs as the
    captured FX graph instead, and ``kiln.stats.eager_fallbacks`` records why.
    """
    return compile_dynamic_or_static(
        "aot_eager", gm, lambda: _compile_aot_eager(gm, example_inputs, options, fallback=fallback, training=training),
        lambda: _compile_aot_eager(gm, example_inputs, options, fallback=False, training=training))


def compile_dynamic_or_static(name: str, gm, compile_static, compile_dynamic=None):
    """``compile_dynamic()`` where ``gm`` is a dynamic graph, else ``compile_static()``. Any failure
    of the dynamic compile specializes every size (``env.specialize_all()``: the guards then check
    them) and compiles statically; ``kiln.stats.dynamic_fallbacks`` and explain say why."""
    env = shape_env_of(gm)
    if env is None:
        return compile_static()
    try:
        fn = (compile_dynamic or compile_static)()
    except SpecializationError:
        raise  # a size the user marked dynamic had to be a constant: that is the user's error to see
    except Exception as exc:  # noqa: BLE001 - any failure: compile statically (never a wrong result)
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        stats.dynamic_fallbacks[f"{name}: {reason}"] += 1
        env.specialize_all()
        fn = compile_static()
        note = f"{name}: compiled with static sizes (symbolic sizes failed: {reason})\n"
    else:
        stats.dynamic_graphs += 1
        note = f"{name}: compiled with symbolic sizes\n{env.describe()}\n"
    _prepend_explain(fn, note)
    return fn


def _prepend_explain(fn, note: str) -> None:
    inner = getattr(fn, "kiln_explain", None)
    try:
        fn.kiln_explain = (lambda: note + inner()) if inner is not None else (lambda: note)
    except AttributeError:  # a callable that takes no attributes
        pass


def captured_graph_runs_eagerly(gm, why: str):
    """The captured FX graph itself, run op by op (eager's semantics exactly, autograd included)."""

    def eager_fallback(*args):
        return gm.forward(*args)

    eager_fallback.kiln_explain = lambda: f"this graph ran eagerly, op by op: {why}"
    return eager_fallback


def _compile_aot_eager(gm, example_inputs, options=None, *, fallback: bool = True, training: bool | None = None):
    table = decomposition_table()
    try:
        runtime = aot_compile(gm, example_inputs, run_graph_module, run_graph_module, options=options,
                              decompositions=table, training=training)
    except JointUnsupported as exc:
        stats.eager_fallbacks[f"aot_eager joint graph: {exc.reason}"] += 1
        return captured_graph_runs_eagerly(gm, f"no joint forward/backward graph: {exc.reason}")
    except UnsupportedFakeOp as exc:
        if not fallback:
            raise
        stats.eager_fallbacks[f"aot_eager: {exc.reason}"] += 1
        return captured_graph_runs_eagerly(gm, f"aot_eager could not trace it: {exc}")
    plan = getattr(runtime, "plan", None)
    if plan is not None:
        runtime.kiln_explain = plan.explain
    else:
        runtime.kiln_explain = lambda: explain_aten_graph(runtime.aten_graph)
    return runtime


@register_backend(name="aot_eager")
def aot_eager(gm, example_inputs, options=None):
    return compile_aot_eager(gm, example_inputs, options)
