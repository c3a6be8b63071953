"""The joint graph: forward and backward of a captured graph traced together into one ATen graph.

The forward runs on fake tensors under the ``AtenTracer`` with grad mode on, so autograd records
its own graph above the tracer (autograd sits above the Python dispatch key) while the tracer
records the decomposed, functionalized ATen ops below it. ``torch.autograd.grad`` on the fake
outputs, with one tangent placeholder per differentiable output, then runs autograd's backward
formulas; their ATen ops dispatch through the same tracer and land in the same graph.

Calling convention of the joint ``gm``::

    joint(*primals, *tangents) -> (*new values of mutated inputs, *forward outputs, *input grads)

``primals`` are the user's inputs then the state tensors (parameters, buffers) the graph reads, as
in ``AtenGraph``; a grad output is None where an input gets no gradient.

While tracing, ``saved_tensors_hooks`` record what eager's autograd would save for backward: the
estimate of eager's activation memory that the partition is compared against.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import torch
import torch.fx as fx
from torch.utils._pytree import TreeSpec, tree_flatten

from kiln.aot.functionalize import Storage, Value
from kiln.aot.symbols import size_hint
from kiln.aot.graph import InputSpec, OutputSpec, eliminate_dead_code, format_graph
from kiln.aot.trace import frozen_steps, input_sizes, input_storages, start_trace, state_tensors
from kiln.aot.tracer import AtenTracer, interpret
from kiln.fake import FakeTensor, UnsupportedFakeOp, fake_like

aten = torch.ops.aten


class JointUnsupported(UnsupportedFakeOp):
    """The graph traces, but not into a joint forward/backward graph (e.g. it mutates an input that
    requires grad). Callers may still run the forward ATen graph op by op under autograd."""


@dataclasses.dataclass
class EagerSaved:
    """What eager autograd saves for backward, by storage: activations, and graph inputs kept alive."""

    activation_bytes: int = 0
    input_bytes: int = 0
    tensors: int = 0


@dataclasses.dataclass
class JointGraph:
    gm: fx.GraphModule
    inputs: list[InputSpec]  # primals
    state: list[torch.Tensor]
    mutated_inputs: list[int]
    outputs: list[OutputSpec]  # user outputs; kind "graph" indexes the forward outputs
    out_spec: TreeSpec
    num_fwd_outputs: int
    differentiable: list[bool]  # per forward output: does it get a tangent
    grad_inputs: list[int]  # primal index of each grad output
    eager_saved: EagerSaved
    grad_mode_after: bool  # grad mode the graph leaves behind (a no_grad block left open)
    sizes: object = None  # a SizeReader: where output views with symbolic sizes read them

    @property
    def num_tangents(self) -> int:
        return sum(self.differentiable)

    def format(self) -> str:
        return format_graph(self.gm.graph, self.inputs)


def needs_joint_graph(gm: fx.GraphModule, example_inputs: Sequence) -> bool:
    """Training: grad mode is on (on entry, or switched on inside: a no_grad block split by a graph
    break ends in this graph) and some input or state tensor of ``gm`` requires grad."""
    if not torch.is_grad_enabled() and not any(
            n.op == "call_function" and n.target is torch._C._set_grad_enabled and n.args[:1] == (True,)
            for n in gm.graph.nodes):
        return False
    if any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs):
        return True
    return any(t.requires_grad for t, _ in state_tensors(gm).values())


def is_differentiable(t) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())


class _SavedLog:
    """saved_tensors_hooks that measure what autograd saves, keeping the tensors themselves."""

    def __init__(self, tracer: AtenTracer) -> None:
        self.tracer = tracer
        self.seen: dict[int, tuple[bool, int]] = {}  # storage key -> (is graph input, bytes)
        self.count = 0

    def pack(self, t):
        self.count += 1
        storage = t.untyped_storage()
        key = storage._cdata
        if key not in self.seen:
            found = self.tracer._values.get(id(t))
            is_input = not isinstance(t, FakeTensor) or (
                found is not None and found[0] is t and found[1].storage.input_index is not None)
            self.seen[key] = (is_input, size_hint(storage.nbytes()))
        return t

    @staticmethod
    def unpack(t):
        return t

    def summary(self) -> EagerSaved:
        acts = sum(n for is_input, n in self.seen.values() if not is_input)
        ins = sum(n for is_input, n in self.seen.values() if is_input)
        return EagerSaved(acts, ins, self.count)


def trace_joint(gm: fx.GraphModule, example_inputs: Sequence, decompositions: Mapping | None = None,
                options=None) -> JointGraph:
    """Trace ``gm``'s forward and backward into one functional ATen graph (see the module doc).

    Raises ``UnsupportedFakeOp`` where ``aot_trace`` would, and ``JointUnsupported`` where only the
    joint graph is out of reach.
    """
    tracer, args = start_trace(gm, example_inputs, decompositions)
    log = _SavedLog(tracer)
    grad_mode = torch.is_grad_enabled()
    try:
        with torch.autograd.graph.saved_tensors_hooks(log.pack, log.unpack):
            out = interpret(gm, tracer, args)
        grad_mode_after = torch.is_grad_enabled()
    finally:
        torch._C._set_grad_enabled(grad_mode)
    flat_out, out_spec = tree_flatten(out)
    flat_out = [tracer._lift(x) for x in flat_out]
    mutated = _mutated_inputs(tracer, args)
    specs, fwd_fakes = _forward_outputs(tracer, flat_out)
    fwd_nodes = [_output_node(tracer, f) for f in fwd_fakes]
    differentiable = [is_differentiable(f) for f in fwd_fakes]
    targets = _grad_targets(tracer, args)
    grads = _trace_backward(tracer, [f for f, d in zip(fwd_fakes, differentiable) if d], [t for _, t in targets])

    b = tracer.b
    b.provenance = {}
    storages = input_storages(tracer)
    out_node = b.output([storages[i].root for i in mutated] + fwd_nodes + grads)
    _drop_detach(b.graph, out_node)
    eliminate_dead_code(b.graph)
    joint = fx.GraphModule(b.root, b.graph, class_name="JointGraphModule")
    inputs = [InputSpec(kind, name, i in mutated) for i, (kind, name, _) in enumerate(tracer.inputs)]
    state = [real for kind, _, real in tracer.inputs if kind != "user"]
    return JointGraph(joint, inputs, state, mutated, specs, out_spec, len(fwd_nodes), differentiable,
                      [i for i, _ in targets], log.summary(), grad_mode_after, input_sizes(tracer))


def _mutated_inputs(tracer: AtenTracer, args: list) -> list[int]:
    storages = input_storages(tracer)
    mutated = sorted(i for i, s in storages.items() if s.mutated)
    for i in mutated:
        kind, name, real = tracer.inputs[i]
        seen = args[i] if kind == "user" else real
        if isinstance(seen, torch.Tensor) and seen.requires_grad:
            raise JointUnsupported("joint", f"input {name!r} requires grad and is mutated in the graph")
    return mutated


def _forward_outputs(tracer: AtenTracer, flat_out: list) -> tuple[list[OutputSpec], list[FakeTensor]]:
    """A spec per user output, and the distinct fakes that become forward graph outputs.

    Outputs that view a graph input are rebuilt by the runtime from the real input (so autograd sees
    the view); every other tensor output is its own forward output (one per distinct tensor).
    """
    specs: list[OutputSpec] = []
    fakes: list[FakeTensor] = []
    index: dict[int, int] = {}
    for x in flat_out:
        if not isinstance(x, FakeTensor):
            specs.append(OutputSpec("constant", value=x))
            continue
        value = tracer.value(x)
        if value.storage.input_index is not None:
            specs.append(OutputSpec("input", value.storage.input_index, frozen_steps(value.steps)))
            continue
        if id(x) not in index:
            index[id(x)] = len(fakes)
            fakes.append(x)
        specs.append(OutputSpec("graph", index[id(x)]))
    return specs, fakes


def _output_node(tracer: AtenTracer, fake: FakeTensor) -> fx.Node:
    node = tracer.node_of(fake)
    if node.op == "get_attr":
        node = tracer.b.call(aten.clone.default, (node,))  # a fresh tensor per call, as in eager
    return node


def _grad_targets(tracer: AtenTracer, args: list) -> list[tuple[int, torch.Tensor]]:
    """(primal index, the tensor autograd saw for it) for each primal that requires grad."""
    targets = []
    for i, (kind, _, real) in enumerate(tracer.inputs):
        seen = args[i] if kind == "user" else real  # state enters autograd as the real tensor
        if is_differentiable(seen):
            targets.append((i, seen))
    return targets


def _trace_backward(tracer: AtenTracer, outputs: list, targets: list) -> list:
    """Record autograd's backward of ``outputs`` w.r.t. ``targets``; one node (or None) per target."""
    if not outputs or not targets:
        return [None] * len(targets)
    n_inputs = len(tracer.inputs)
    tangents = []
    for k, out in enumerate(outputs):
        tangent = fake_like(torch.empty(out.shape, dtype=out.dtype, device="meta"), out.fake_device)
        node = tracer.b.placeholder(f"tangent_{k}", tangent)
        tracer._bind(tangent, Value(Storage(node), (), node, 0))
        tangents.append(tangent)
    tracer.b.provenance = {"from_node": "backward"}
    try:
        # autocast off: eager runs the backward where ``backward()`` is called, outside the autocast
        # block (as torch's autocast docs ask), in the dtypes the forward's casts left
        with tracer, torch._C._DisableAutocast():
            grads = torch.autograd.grad(outputs, targets, tangents, allow_unused=True)
    except UnsupportedFakeOp as exc:  # the forward traced: it can still run under autograd
        raise JointUnsupported(exc.func, f"backward: {exc.reason}") from exc
    except RuntimeError as exc:
        # the backward of these inputs raises (``scatter_add`` with a source larger than its index: the
        # forward is valid and only eager's backward rejects it): the forward runs under autograd, and
        # a backward, if one is asked for, raises as eager's does
        raise JointUnsupported("joint", f"the backward raises: {str(exc).splitlines()[0][:200]}") from exc
    if len(tracer.inputs) != n_inputs:
        raise JointUnsupported("joint", "the backward read a tensor the forward did not")
    nodes = []
    for g, target in zip(grads, targets):
        if g is None:
            nodes.append(None)
            continue
        node = tracer.node_of(tracer._lift(g))
        if node.op == "get_attr":
            node = tracer.b.call(aten.clone.default, (node,))
        nodes.append(node)
    return nodes


def _drop_detach(graph: fx.Graph, output: fx.Node) -> None:
    """``detach`` is an autograd notion: inside the compiled graphs (run without grad) it is the
    identity. Those autograd put around saved values are dropped; outputs keep theirs."""
    returned = set(output.all_input_nodes)
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is aten.detach.default and node not in returned:
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
