"""aot_compile: the one entry point from a captured torch-level graph to a compiled callable.

    aot_compile(gm, example_inputs, compile_fwd, compile_bwd, options, decompositions)

Inference (grad mode off, or nothing requires grad): ``aot_trace`` gives one functional ATen graph,
handed to ``compile_fwd(gm, example_inputs)``, and run by ``AtenRuntime``.

Training: ``trace_joint`` gives the joint forward/backward graph, ``partition`` splits it, and the
forward and backward graphs go to ``compile_fwd`` and ``compile_bwd``; ``TrainingRuntime`` runs
them inside a ``torch.autograd.Function``.

A backend's compiler is any ``(gm, example_inputs) -> callable`` that takes and returns flat lists
(as the graph module itself does). The forward's example inputs are the real inputs and state; the
backward's are fake tensors (``kiln.fake.FakeTensor``: shapes, dtypes and devices, no data), the same
values as each placeholder's ``meta["val"]``.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Mapping, Sequence

import torch
import torch.fx as fx

from kiln.aot.graph import AtenGraph
from kiln.aot.joint import JointGraph, needs_joint_graph, trace_joint
from kiln.aot.partition import Partition, describe_saved, explain_rules, partition
from kiln.aot.runtime import AtenRuntime, version_steps
from kiln.aot.symbols import size_symbols
from kiln.aot.trace import aot_trace
from kiln.aot.training import TrainingRuntime
from kiln.debug.stats import stats
from kiln.decomp.core_ops import count_by_kind

GraphCompiler = Callable  # (gm: fx.GraphModule, example_inputs: list) -> callable


@dataclasses.dataclass
class TrainingPlan:
    """Everything the training path made, for explain and tests."""

    joint: JointGraph
    partition: Partition
    forward: AtenGraph  # the forward graph with the runtime's view of its inputs and outputs

    def explain(self) -> str:
        return explain_training(self)


def aot_compile(
    gm: fx.GraphModule,
    example_inputs: Sequence,
    compile_fwd: GraphCompiler,
    compile_bwd: GraphCompiler | None = None,
    options=None,
    decompositions: Mapping | None = None,
    training: bool | None = None,
):
    """Compile ``gm`` for inference or training (see the module doc); returns the runtime callable.

    ``training`` None decides from grad mode and ``requires_grad``. Raises ``UnsupportedFakeOp``
    (``JointUnsupported`` for what only the training path cannot do).
    """
    if training is None:
        training = needs_joint_graph(gm, example_inputs)
    if not training:
        with stats.timed("aot"):
            ag = aot_trace(gm, example_inputs, decompositions=decompositions, options=options)
        # the graph's first outputs are the new values of these inputs (placeholder positions): a code
        # generator may store them in place (schedule/inplace.py)
        ag.gm.meta["kiln_mutated_inputs"] = list(ag.mutated_inputs)
        runtime = AtenRuntime(ag, run=compile_fwd(ag.gm, [*example_inputs, *ag.state]))
        runtime.steps = version_steps(gm, ag.mutated_inputs, ag.num_user_inputs, ag.state)
        runtime.aten_graph = ag
        return runtime
    with stats.timed("aot"):
        joint = trace_joint(gm, example_inputs, decompositions=decompositions, options=options)
    with stats.timed("partition"):
        part = partition(joint)
    forward = AtenGraph(part.fwd, joint.inputs, joint.state, joint.mutated_inputs, joint.outputs, joint.out_spec,
                        joint.sizes)
    # as for inference: the forward's first outputs are the new values of these inputs (BatchNorm's running
    # statistics), which its kernels may store in place (schedule/inplace.py; the partition keeps the
    # backward off mutated inputs, and an input also saved for the backward is not stored into)
    part.fwd.meta["kiln_mutated_inputs"] = list(joint.mutated_inputs)
    fwd = compile_fwd(part.fwd, [*example_inputs, *joint.state])
    bwd = (compile_bwd or compile_fwd)(part.bwd, placeholder_values(part.bwd))
    runtime = TrainingRuntime(joint, fwd, bwd)
    if not _symbolic(part.bwd):
        runtime.backward_without = functools.partial(_backward_without, part.bwd, compile_bwd or compile_fwd)
    runtime.steps = version_steps(gm, joint.mutated_inputs, len(joint.inputs) - len(joint.state), joint.state)
    runtime.plan = TrainingPlan(joint, part, forward)
    if runtime.double_backward_refused is None:
        runtime.double_backward_refused = _not_differentiable_again(gm)
    runtime.aten_graph = forward
    stats.joint_graphs += 1
    return runtime


_STOPS_GRADIENTS = {"detach", "detach_", "requires_grad_", "data"}


def _not_differentiable_again(gm: fx.GraphModule) -> str | None:
    """Why the joint ATen graph, run under autograd for a backward with create_graph=True, would not
    differentiate as eager does: it has no detach and no grad-mode regions left (autograd's own detaches
    of saved values are dropped, and the user's cannot be told from them), so a captured graph with a
    ``detach``, a ``no_grad``/``enable_grad`` switch or ``.data`` is refused."""
    for node in gm.graph.nodes:
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        if node.target is torch._C._set_grad_enabled or name in _STOPS_GRADIENTS or node.target is torch.detach:
            return f"the captured code stops gradients ({name}), which the joint graph does not record"
    return None


def _symbolic(gm: fx.GraphModule) -> bool:
    return any(size_symbols(n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder")


def _backward_without(bwd: fx.GraphModule, compile_bwd: GraphCompiler, absent: tuple) -> Callable:
    """The backward graph compiled with the tangents at positions ``absent`` (among the tangents) taken
    as zeros: constants in its kernels, not inputs (``TrainingRuntime.backward_for``)."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(bwd.graph, {}))
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    tangents = [n for n in placeholders if n.name.startswith("tangent")]
    first_op = next(n for n in graph.nodes if n.op != "placeholder")
    for i in absent:
        node, val = tangents[i], tangents[i].meta["val"]
        with graph.inserting_before(first_op):
            zeros = graph.call_function(torch.ops.aten.full.default, ([int(d) for d in val.shape], 0),
                                        {"dtype": val.dtype, "layout": torch.strided, "device": val.device,
                                         "pin_memory": False})
        zeros.meta = {"val": val}
        node.replace_all_uses_with(zeros)
        graph.erase_node(node)
    gm = fx.GraphModule(bwd, graph, class_name="BackwardGraphModule")
    gm.meta.update(bwd.meta)
    gm.meta["kiln_role"] = f"backward without gradient(s) for tangent(s) {', '.join(map(str, absent))} (zeros)"
    with stats.timed("backward_variant"):
        return compile_bwd(gm, placeholder_values(gm))


def placeholder_values(gm: fx.GraphModule) -> list:
    return [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _kinds(gm: fx.GraphModule) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in count_by_kind(gm.graph).items()) or "none"


def explain_training(plan: TrainingPlan) -> str:
    """The forward and backward graphs, what crosses between them, and memory against eager's."""
    part, eager = plan.partition, plan.joint.eager_saved
    ratio = f" ({part.saved_activation_bytes / eager.activation_bytes:.2f}x eager)" if eager.activation_bytes else ""
    joint_ops = len(plan.joint.gm.graph.nodes)
    lines = [
        f"training: a joint forward/backward ATen graph ({joint_ops} nodes, after decompositions and "
        "functionalization), split by a min-cut",
        part.format(plan.joint.inputs),
        "",
        "ops by kind: forward " + _kinds(part.fwd) + "; backward " + _kinds(part.bwd),
        "",
        "saved values:",
        *[f"  {line}" for line in describe_saved(part)],
        f"activation memory saved for backward: {_fmt_bytes(part.saved_activation_bytes)}{ratio}; "
        f"eager autograd saves {_fmt_bytes(eager.activation_bytes)} in {eager.tensors} tensors "
        f"(plus graph inputs: kiln {_fmt_bytes(part.saved_input_bytes)}, eager {_fmt_bytes(eager.input_bytes)})",
        "partition rules:",
        *[f"  {line}" for line in explain_rules().splitlines()],
    ]
    return "\n".join(lines)
