"""Partition a joint graph into a forward graph and a backward graph, by a minimum cut.

Every node of the joint graph that does not depend on a tangent is *forward-able*: it can run in
the forward, or in the backward from what the forward saved. Which values cross from forward to
backward is a minimum s-t cut over a flow network (as in AOTAutograd's min-cut partitioner):

    source ──∞──▶ primal_in                     graph inputs are available in the forward
    source ──∞──▶ v_in          v must run in the forward and may not run again (``must_stay``)
    v_in ──cost(v)──▶ v_out     saving v costs the bytes its storage keeps alive
    v_out ──∞──▶ u_in           for each use of v by a forward-able u
    v_out ──∞──▶ sink           v is used by a backward node (one that depends on a tangent)

The cut edges ``v_in → v_out`` are the saved values. Nodes on the sink side that the forward also
computes are recomputed in the backward; the rest of the sink side runs in the backward only.
The rules are small pure functions below; ``explain_rules()`` prints them. The cut itself is
``kiln.aot.maxflow`` (Dinic's algorithm), the largest source side among the cheapest cuts.
"""
from __future__ import annotations

import dataclasses
import math
import operator

import torch
import torch.fx as fx

from kiln.aot.graph import describe_val, format_graph, is_impure
from kiln.aot.joint import JointGraph, JointUnsupported
from kiln.aot.maxflow import FlowNetwork, Unbounded
from kiln.aot.schema import is_random, is_view
from kiln.aot.symbols import SizeNodes, is_size_node, size_hint, size_symbols
from kiln.fake.shapes import to_expr
from kiln.decomp.core_ops import op_kind

# core op kinds cheap enough to run again in the backward instead of saving their result
RECOMPUTABLE_KINDS = frozenset({"pointwise", "view", "factory", "shape"})
# a graph input kept alive for the backward costs (almost) nothing: it is alive anyway
INPUT_COST = 1


# rules --------------------------------------------------------------------------------------------
def recompute_rule(node: fx.Node) -> tuple[bool, str]:
    """May ``node`` run a second time, in the backward? (answer, reason)"""
    if node.op == "get_attr":
        return True, "constant"
    if node.op != "call_function":
        return False, node.op
    target = node.target
    if target is operator.getitem:
        return recompute_rule(node.args[0])
    if not isinstance(target, torch._ops.OpOverload):
        return False, "not an ATen op"
    if is_random(target):
        return False, "random"
    if node.meta.get("mutates_fresh_copies") or node.meta.get("mutated_in_place"):
        return False, "mutated in place"
    kind = op_kind(target)
    if kind in RECOMPUTABLE_KINDS:
        return True, kind
    if kind == "non-core" and (is_view(target) or torch.Tag.pointwise in target.tags):
        return True, "view" if is_view(target) else "pointwise"
    return False, kind


def storage_bytes(val) -> int:
    """Bytes a tensor keeps alive: its whole storage (a saved view keeps its base alive); for symbolic
    sizes, at the sizes seen while compiling (the cut is a heuristic: it records no guards)."""
    return size_hint(val.untyped_storage().nbytes())


def save_cost(node: fx.Node, input_storages: set) -> float:
    """What saving ``node``'s value for the backward costs, in bytes (inf: it cannot be saved)."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return math.inf  # tuples (save their items instead), non-tensors (sizes are rebuilt in each graph)
    if node.op == "placeholder" or val.untyped_storage()._cdata in input_storages:
        return INPUT_COST
    return storage_bytes(val)


def explain_rules() -> str:
    kinds = ", ".join(sorted(RECOMPUTABLE_KINDS))
    return (
        f"recompute: core ops of kind {kinds}, non-core views and pointwise ops, constants;\n"
        f"  never random ops, copies mutated in place, matmuls, reductions, indexing, sorts or other ops\n"
        f"save cost: bytes of the value's storage; graph inputs and their views {INPUT_COST}; tuples cannot be saved"
    )


# the partition -------------------------------------------------------------------------------------
@dataclasses.dataclass
class Partition:
    fwd: fx.GraphModule  # (*primals) -> (*mutated input values, *forward outputs, *saved)
    bwd: fx.GraphModule  # (*saved, *tangents) -> (*grads)
    saved: list[str]
    recomputed: list[str]
    saved_activation_bytes: int  # storages of saved values that are not graph inputs
    saved_input_bytes: int
    num_fwd_outputs: int  # mutated input values + forward outputs
    num_saved: int

    def format(self, inputs=None) -> str:
        return "\n".join([
            "forward graph:", format_graph(self.fwd.graph, inputs), "",
            "backward graph:", format_graph(self.bwd.graph), "",
            f"saved for backward ({len(self.saved)}): " + (", ".join(self.saved) or "nothing"),
            f"recomputed in backward ({len(self.recomputed)}): " + (", ".join(self.recomputed) or "nothing"),
        ])


def partition(joint: JointGraph) -> Partition:
    graph = joint.gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    primals = placeholders[: len(joint.inputs)]
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    n_fwd = len(joint.mutated_inputs) + joint.num_fwd_outputs
    fwd_outputs = list(output.args[0][:n_fwd])
    grad_outputs = list(output.args[0][n_fwd:])
    _mark_mutated_copies(graph)

    backward = _tangent_dependent(graph, placeholders[len(joint.inputs):])
    forwardable = [n for n in graph.nodes if n.op not in ("output",) and n not in backward and not is_size_node(n)]
    impure = [n for n in forwardable if n.op == "call_function" and is_impure(n)]
    forward_required = _ancestors(fwd_outputs + impure)
    # a mutated input is written back after the forward: the backward must not read it in place
    mutated = {primals[i].meta["val"].untyped_storage()._cdata for i in joint.mutated_inputs}
    input_storages = {p.meta["val"].untyped_storage()._cdata for p in primals
                      if isinstance(p.meta.get("val"), torch.Tensor)} - mutated

    primal_set = set(primals)
    saved = _min_cut(forwardable, primal_set, forward_required, backward, grad_outputs, input_storages)
    fwd_nodes = forward_required | _ancestors(saved)
    bwd_nodes = _needed(grad_outputs, stop=set(saved) | backward.intersection(placeholders))
    bwd_nodes -= set(saved)
    saved += _size_sources(joint.gm, primals, saved, placeholders[len(joint.inputs):], bwd_nodes)
    bad = [n.name for n in bwd_nodes if n in primal_set]
    if bad:
        raise JointUnsupported("partition", f"the backward needs graph inputs that were not saved: {bad}")

    fwd = _forward_module(joint.gm, primal_set, fwd_nodes, fwd_outputs, saved, mutated)
    bwd = _backward_module(joint.gm, saved, placeholders[len(joint.inputs):], bwd_nodes, grad_outputs)
    recomputed = [n.name for n in graph.nodes if n in bwd_nodes and n in fwd_nodes and n.op != "get_attr"]
    acts, ins = _saved_bytes(saved, input_storages)
    return Partition(fwd, bwd, [n.name for n in saved], recomputed, acts, ins, n_fwd, len(saved))


def _mark_mutated_copies(graph: fx.Graph) -> None:
    """Copies that an op without a functional form mutates in place must not be recomputed."""
    for node in graph.nodes:
        if node.meta.get("mutates_fresh_copies"):
            for arg in node.all_input_nodes:
                if arg.op == "call_function" and arg.target is torch.ops.aten.clone.default:
                    arg.meta["mutated_in_place"] = True


def _tangent_dependent(graph: fx.Graph, tangents: list) -> set:
    found = set(tangents)
    for node in graph.nodes:
        if node.op == "call_function" and not is_size_node(node) and any(a in found for a in _inputs(node)):
            found.add(node)
    return found


def _ancestors(nodes) -> set:
    """``nodes`` and every node they are computed from."""
    return _needed(nodes, stop=set())


def _needed(roots, stop: set) -> set:
    """Nodes needed to compute ``roots``, not looking past ``stop`` (included when reached)."""
    seen: set = set()
    stack = [n for n in roots if isinstance(n, fx.Node)]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node not in stop:
            stack.extend(_inputs(node))
    return seen


def _min_cut(forwardable, primals: set, forward_required: set, backward: set, grad_outputs, input_storages):
    net = FlowNetwork()
    source, sink = net.add_vertex(), net.add_vertex()
    grad_nodes = {n for n in grad_outputs if isinstance(n, fx.Node)}
    vertex = {node: net.add_vertex() for node in forwardable}  # v_in; v_out is the next vertex
    for node in forwardable:
        net.add_vertex()
    for node in forwardable:
        v_in = vertex[node]
        v_out = v_in + len(forwardable)
        net.add_edge(v_in, v_out, save_cost(node, input_storages))
        if node in primals or (node in forward_required and not recompute_rule(node)[0]):
            net.add_edge(source, v_in)
        for user in node.users:
            if is_size_node(user):
                continue
            if user in backward:
                net.add_edge(v_out, sink)
            elif user.op != "output":
                net.add_edge(v_out, vertex[user])
        if node in grad_nodes:  # a forward-able grad output (a zero gradient, say)
            net.add_edge(v_out, sink)
    try:
        _, sink_side = net.min_cut(source, sink)
    except Unbounded:
        raise JointUnsupported("partition", "no finite cut: the backward needs a value that cannot be saved")
    return [n for n in forwardable if vertex[n] not in sink_side and vertex[n] + len(forwardable) in sink_side]


def _forward_module(root, primals, fwd_nodes, fwd_outputs, saved, mutated_storages) -> fx.GraphModule:
    graph, env = fx.Graph(), {}
    copy = _copier(root, graph, env)
    for node in root.graph.nodes:
        if node in primals:
            copy.placeholder(node)
        elif node in fwd_nodes and node.op != "placeholder":
            copy.node(node)
    saved_values = []
    for node in saved:
        value = env[node]
        if node.meta["val"].untyped_storage()._cdata in mutated_storages:
            # the input's memory is overwritten after the graph: save a copy of the value it had
            value = graph.call_function(torch.ops.aten.clone.default, (value,))
            value.meta = {"val": node.meta["val"]}
        saved_values.append(value)
    graph.output(tuple(env[n] for n in fwd_outputs) + tuple(saved_values))
    return fx.GraphModule(root, graph, class_name="ForwardGraphModule")


def _backward_module(root, saved, tangents, bwd_nodes, grad_outputs) -> fx.GraphModule:
    graph, env = fx.Graph(), {}
    copy = _copier(root, graph, env)
    for node in list(saved) + list(tangents):
        copy.placeholder(node)
    for node in root.graph.nodes:
        if node in bwd_nodes and node not in env and node.op != "placeholder":
            copy.node(node)
    graph.output(tuple(env[n] if isinstance(n, fx.Node) else n for n in grad_outputs))
    return fx.GraphModule(root, graph, class_name="BackwardGraphModule")


def _inputs(node: fx.Node) -> list:
    """The nodes ``node`` is computed from, less size nodes (each graph rebuilds those from its inputs)."""
    return [a for a in node.all_input_nodes if not is_size_node(a)]


class _copier:
    """Copies joint-graph nodes into a forward or backward graph; size arguments are rebuilt there
    from that graph's own placeholders (``SizeNodes``), not copied."""

    def __init__(self, root, graph: fx.Graph, env: dict) -> None:
        self.graph, self.env = graph, env
        shape_env = _shape_env(root.graph)
        self.sizes = SizeNodes(graph, shape_env) if shape_env is not None else None

    def placeholder(self, node: fx.Node) -> None:
        new = self.env[node] = self.graph.placeholder(node.name)
        new.meta = dict(node.meta)
        if self.sizes is not None:
            self.sizes.bind(new, node.meta.get("val"))

    def node(self, node: fx.Node) -> None:
        if is_size_node(node):
            return
        self.env[node] = self.graph.node_copy(node, self._arg)

    def _arg(self, n: fx.Node):
        if is_size_node(n):
            return self.sizes.expr_node(to_expr(n.meta["val"]))
        return self.env[n]


def _shape_env(graph: fx.Graph):
    for node in graph.nodes:
        if is_size_node(node):
            return node.meta["val"].node.env
    return None


def _size_sources(joint_gm, primals, saved, tangents, bwd_nodes) -> list:
    """Primals to save only for their sizes: the backward uses a size symbol that none of its other
    inputs (saved values, tangents) has as a whole dim: in a size argument, or in the sizes of a value
    (a saved pooled view of the input is [FloorDiv(s1 - 2, 2) + 1, ...]: s1 is no whole dim of it, and
    the backward's kernels are written over s1). A graph input kept alive costs nothing."""
    needed: set = set()
    for node in list(bwd_nodes) + list(saved):
        needed |= size_symbols(node.meta.get("val"))
        for a in node.all_input_nodes:
            if is_size_node(a):
                needed |= to_expr(a.meta["val"]).free_symbols
    if not needed:
        return []
    shape_env = _shape_env(joint_gm.graph)
    probe = SizeNodes(fx.Graph(), shape_env)
    for node in list(saved) + list(tangents):
        probe.bind(node, node.meta.get("val"))
    extra = []
    ordered = [p for p in joint_gm.graph.nodes if p in primals]
    for symbol in sorted(needed - set(probe.bindings), key=str):
        if symbol in probe.bindings:
            continue
        source = next((p for p in ordered if _binds(p, symbol)), None)
        if source is None:
            raise JointUnsupported("partition", f"no input of the backward has the size {symbol}")
        extra.append(source)
        probe.bind(source, source.meta.get("val"))
    return extra


def _binds(node: fx.Node, symbol) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and any(str(s) == str(symbol) and to_expr(s) == symbol for s in val.shape)


def _saved_bytes(saved, input_storages) -> tuple[int, int]:
    storages: dict = {}
    for node in saved:
        val = node.meta["val"]
        storages[val.untyped_storage()._cdata] = storage_bytes(val)
    acts = sum(b for key, b in storages.items() if key not in input_storages)
    ins = sum(b for key, b in storages.items() if key in input_storages)
    return acts, ins


def describe_saved(part: Partition) -> list[str]:
    lines = []
    for node in part.bwd.graph.nodes:
        if node.op == "placeholder" and not node.name.startswith("tangent"):
            lines.append(f"{node.name}: {describe_val(node.meta.get('val'))}")
    return lines
