"""aot_trace: the front door from a torch-level FX graph to a functional ATen graph."""
from __future__ import annotations

from typing import Mapping, Sequence

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten

from kiln.aot.graph import AtenGraph, InputSpec, OutputSpec, eliminate_common_subexpressions, eliminate_dead_code
from kiln.aot.tracer import AtenTracer, interpret
from kiln.aot.symbols import SizeReader, has_symbols, shape_env_of, size_reader
from kiln.fake import FakeTensor, UnsupportedFakeOp
from kiln.fake.symbolic_meta import SymbolicShapeUnsupported

aten = torch.ops.aten


def state_tensors(gm: fx.GraphModule) -> dict[str, tuple[torch.Tensor, str]]:
    state: dict[str, tuple[torch.Tensor, str]] = {}
    seen: set[int] = set()
    for name, p in gm.named_parameters(remove_duplicate=True):
        state[name] = (p, "parameter")
        seen.add(id(p))
    for name, b in gm.named_buffers(remove_duplicate=True):
        if id(b) not in seen:
            state[name] = (b, "buffer")
            seen.add(id(b))
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        obj = gm
        for part in node.target.split("."):
            obj = getattr(obj, part)
        if isinstance(obj, torch.Tensor) and id(obj) not in seen:
            state[node.target] = (obj, "attribute")
            seen.add(id(obj))
    return state


def aot_trace(
    gm: fx.GraphModule,
    example_inputs: Sequence,
    decompositions: Mapping | None = None,
    options=None,
) -> AtenGraph:
    """Trace ``gm`` on fakes of ``example_inputs`` into a functional ATen graph.

    Parameters, buffers and tensor attributes that the graph reads become inputs after the user's
    inputs. ``decompositions`` maps ATen ops to Python functions applied while tracing. Raises
    ``UnsupportedFakeOp`` for what cannot be traced (data-dependent ops, mutations kiln cannot
    express); callers fall back to eager for the graph.
    """
    tracer, args = start_trace(gm, example_inputs, decompositions)
    grad_mode = torch.is_grad_enabled()
    try:
        out = interpret(gm, tracer, args)
        grad_mode_after = torch.is_grad_enabled()  # (the graph's grad-mode switches ran while tracing)
    finally:
        torch._C._set_grad_enabled(grad_mode)
    ag = _finish(tracer, out)
    if grad_mode_after != grad_mode:  # (the ATen graph has no grad-mode nodes: the runtime switches it)
        ag.grad_mode_after = grad_mode_after
    return ag


def start_trace(gm: fx.GraphModule, example_inputs: Sequence, decompositions: Mapping | None) -> tuple:
    """A tracer with ``gm``'s inputs added and its state offered; returns (tracer, fake args)."""
    tracer = AtenTracer(decompositions)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise ValueError(f"graph has {len(placeholders)} inputs, got {len(example_inputs)} example inputs")
    symbolic = symbolic_inputs(gm, example_inputs, placeholders)
    if symbolic is not None:
        tracer.b.use_symbolic_sizes(gm.meta["kiln_shape_env"])
    args = [tracer.add_input(x, n.name, symbolic=symbolic[i] if symbolic else None)
            for i, (x, n) in enumerate(zip(example_inputs, placeholders))]
    tracer.offer_state(state_tensors(gm))
    return tracer, args


def symbolic_inputs(gm: fx.GraphModule, example_inputs: Sequence, placeholders: list) -> list | None:
    """Per input, its fake with symbolic sizes (None for a static one), where ``gm`` is a dynamic graph
    (``gm.meta["kiln_shape_env"]`` with symbols not all specialized); None for a static trace."""
    if shape_env_of(gm) is None:
        return None
    fakes = []
    storages = set()
    for x, node in zip(example_inputs, placeholders):
        fake = node.meta.get("example_value")
        if isinstance(x, torch.Tensor):
            key = x.untyped_storage().data_ptr() or id(x.untyped_storage())
            if key in storages:  # symbolic fakes do not share storage: aliasing inputs trace statically
                raise SymbolicShapeUnsupported("trace", "graph inputs that share memory")
            storages.add(key)
        if isinstance(fake, torch.SymInt) and has_symbols(fake):  # an int argument (Options.dynamic_ints)
            if type(x) is not int:
                raise SymbolicShapeUnsupported("trace", f"input {node.name} is not the int its symbol stands for")
            fakes.append(fake)
            continue
        if not (isinstance(fake, torch.Tensor) and has_symbols(fake)):
            fakes.append(None)
            continue
        if not isinstance(x, torch.Tensor) or x.dim() != fake.dim() or x.dtype != fake.dtype:
            raise SymbolicShapeUnsupported("trace", f"input {node.name} does not match its symbolic fake")
        fakes.append(fake)
    if any(f is not None for f in fakes) or getattr(gm.meta["kiln_shape_env"], "unbacked", None):
        return fakes  # (a graph whose only symbols are unbacked: static inputs, symbolic sizes inside)
    return None


def input_storages(tracer: AtenTracer) -> dict:
    """Flat input index -> its storage; raises for input mutations kiln cannot write back."""
    storages = {}
    for fake, value in tracer._values.values():
        if value.storage.input_index is not None:
            storages.setdefault(value.storage.input_index, value.storage)
    for group in tracer.aliased_inputs():
        if any(storages.get(i) is not None and storages[i].mutated for i in group):
            raise UnsupportedFakeOp("trace", "inputs that share memory, one of them mutated")
    for index, storage in storages.items():
        if storage.metadata_mutated:
            raise UnsupportedFakeOp("trace", "an in-place metadata change (t_, resize_, ...) of a graph input")
    return storages


def frozen_steps(steps: tuple) -> tuple:
    """View steps the runtime replays on real tensors, with symbolic sizes as ``SizeArg``s."""
    return tuple(step.frozen() for step in steps)


def input_sizes(tracer: AtenTracer) -> SizeReader:
    """Where the runtime reads each size symbol: (symbol, flat input index, dim)."""
    placeholders = [n for n in tracer.b.graph.nodes if n.op == "placeholder"][: len(tracer.inputs)]
    return size_reader(tracer.b.sizes, placeholders)


def _finish(tracer: AtenTracer, out) -> AtenGraph:
    b, fn = tracer.b, tracer.fn
    flat_out, spec = tree_flatten(out)
    flat_out = [tracer._lift(x) for x in flat_out]  # a parameter returned as is becomes an input alias

    storages = input_storages(tracer)
    mutated = sorted(i for i, s in storages.items() if s.mutated)
    graph_outputs = [storages[i].root for i in mutated]

    uses: dict[int, int] = {}
    for x in flat_out:
        if isinstance(x, FakeTensor):
            st = tracer.value(x).storage
            uses[id(st)] = uses.get(id(st), 0) + 1
    root_index: dict[int, int] = {}
    specs: list[OutputSpec] = []
    for x in flat_out:
        if not isinstance(x, FakeTensor):
            specs.append(OutputSpec("constant", value=x))
            continue
        value = tracer.value(x)
        st = value.storage
        if st.input_index is not None:
            specs.append(OutputSpec("input", st.input_index, frozen_steps(value.steps)))
        elif uses[id(st)] == 1:
            node = fn.current(value)
            if node.op == "get_attr":
                node = b.call(aten.clone.default, (node,))  # a fresh tensor per call, as in eager
            graph_outputs.append(node)
            specs.append(OutputSpec("graph", len(graph_outputs) - 1 - len(mutated)))
        else:
            if id(st) not in root_index:
                root = st.root if st.root.op != "get_attr" else b.call(aten.clone.default, (st.root,))
                graph_outputs.append(root)
                root_index[id(st)] = len(graph_outputs) - 1 - len(mutated)
            specs.append(OutputSpec("graph", root_index[id(st)], frozen_steps(value.steps)))
    b.provenance = {}
    b.output(graph_outputs)
    eliminate_dead_code(b.graph)
    eliminate_common_subexpressions(b.graph)
    gm = fx.GraphModule(b.root, b.graph, class_name="AtenGraphModule")
    inputs = [InputSpec(kind, name, i in mutated) for i, (kind, name, _) in enumerate(tracer.inputs)]
    state = [real for kind, _, real in tracer.inputs if kind != "user"]
    return AtenGraph(gm, inputs, state, mutated, specs, spec, input_sizes(tracer))
