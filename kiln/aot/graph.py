"""AtenGraph: a functional ATen-level FX graph plus what the runtime needs around it.

Calling convention of ``gm``: its inputs are the user's inputs followed by the state tensors
(parameters, buffers) it reads; its outputs are the new values of the mutated inputs (in the order of
``mutated_inputs``) followed by the graph outputs that ``outputs`` refers to.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import TreeSpec

from kiln.aot.functionalize import ViewStep
from kiln.aot.schema import is_random
from kiln.aot.symbols import size_symbols

_DTYPE_ABBR = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "b8", torch.complex64: "c64", torch.complex128: "c128",
}


@dataclasses.dataclass(frozen=True)
class InputSpec:
    kind: str  # "user", "parameter", "buffer" or "attribute"
    name: str
    mutated: bool = False


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """Where one (flattened) user output comes from.

    kind "graph": graph output ``index`` (after the mutation outputs), seen through ``steps``;
    kind "input": flat input ``index`` (after write-backs), seen through ``steps``;
    kind "constant": the Python value ``value``.
    """

    kind: str
    index: int = -1
    steps: tuple[ViewStep, ...] = ()
    value: Any = None

    @property
    def symbolic(self) -> bool:
        """Its view steps take sizes computed from the call's inputs."""
        return any(step.symbolic for step in self.steps)

    def rebuild(self, value, flat, sizes):
        """``value`` (a graph output or an input) seen through the steps; ``sizes`` (a SizeReader) reads
        the symbols' values from ``flat``, the call's inputs."""
        values = sizes.read(flat) if self.symbolic else None
        for step in self.steps:
            value = step.apply(value, values)
        return value


@dataclasses.dataclass
class AtenGraph:
    gm: fx.GraphModule
    inputs: list[InputSpec]
    state: list[torch.Tensor]  # real tensors passed after the user inputs
    mutated_inputs: list[int]
    outputs: list[OutputSpec]
    out_spec: TreeSpec
    sizes: Any = None  # a SizeReader (kiln/aot/symbols.py) where output views take symbolic sizes
    grad_mode_after: bool | None = None  # grad mode the graph leaves switched (a no_grad block split by a break)

    @property
    def num_user_inputs(self) -> int:
        return len(self.inputs) - len(self.state)

    def call_nodes(self) -> list[fx.Node]:
        return [n for n in self.gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]

    def format(self) -> str:
        return format_graph(self.gm.graph, self.inputs)

    def __str__(self) -> str:
        return self.format()


def describe_val(val) -> str:
    if isinstance(val, torch.Tensor):
        dims = ", ".join(str(s) for s in val.shape)
        device = "" if val.device.type == "cpu" else f" {val.device}"
        return f"{_DTYPE_ABBR.get(val.dtype, str(val.dtype))}[{dims}]{device}"
    if isinstance(val, (tuple, list)):
        return "(" + ", ".join(describe_val(v) for v in val) + ")"
    return repr(val)


def _short_target(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return f"aten.{target.__name__}" if target.namespace == "aten" else str(target)
    return getattr(target, "__name__", str(target))


def _fmt_arg(a) -> str:
    if isinstance(a, fx.Node):
        return a.name
    if isinstance(a, (list, tuple)):
        inner = ", ".join(_fmt_arg(x) for x in a)
        return f"[{inner}]" if isinstance(a, list) else f"({inner}{',' if len(a) == 1 else ''})"
    return repr(a)


def format_graph(graph: fx.Graph, inputs: list[InputSpec] | None = None) -> str:
    """The graph as a readable program, one op a line, with each value's type in a comment."""
    params, lines = [], []
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for i, n in enumerate(placeholders):
        kind = f" ({inputs[i].kind})" if inputs and i < len(inputs) and inputs[i].kind != "user" else ""
        params.append(f"{n.name}: {describe_val(n.meta.get('val'))}{kind}")
    for n in graph.nodes:
        if n.op == "call_function":
            if n.target is operator.getitem:
                rhs = f"{n.args[0].name}[{n.args[1]}]"
            else:
                args = [_fmt_arg(a) for a in n.args] + [f"{k}={_fmt_arg(v)}" for k, v in n.kwargs.items()]
                rhs = f"{_short_target(n.target)}({', '.join(args)})"
            lines.append(f"    {n.name} = {rhs}  # {describe_val(n.meta.get('val'))}")
        elif n.op == "get_attr":
            lines.append(f"    {n.name} = self.{n.target}  # {describe_val(n.meta.get('val'))} constant")
        elif n.op == "output":
            lines.append(f"    return {_fmt_arg(n.args[0])}")
    header = "def aten_graph(" + ", ".join(params) + "):"
    return "\n".join([header] + lines)


def is_impure(node: fx.Node) -> bool:
    target = node.target
    if node.op != "call_function":
        return node.op in ("placeholder", "output")
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.is_mutable or is_random(target) or is_collective(target)
    return target is torch._C._set_grad_enabled


COLLECTIVE_NAMESPACES = ("_c10d_functional", "_c10d_functional_autograd", "c10d")


def is_collective(target) -> bool:
    """A torch.distributed collective (or its wait): every rank must run it, once, in program order,
    so it is never removed as dead code nor merged with an equal one."""
    return getattr(target, "namespace", None) in COLLECTIVE_NAMESPACES


def eliminate_dead_code(graph: fx.Graph) -> int:
    removed = 0
    for node in reversed(list(graph.nodes)):
        if not node.users and not is_impure(node):
            graph.erase_node(node)
            removed += 1
    return removed


def eliminate_common_subexpressions(graph: fx.Graph) -> int:
    """Merge nodes that compute the same value (same op, same arguments): one node per value. A graph
    traced from per-layer code repeats work (each layer of HF GPT-2 turns the same causal mask into an
    attention bias). Not merged: impure ops, fresh allocations (``empty*``), values an in-place op
    writes, values the caller gets (an output, or a view an output is made of): two outputs of
    eager are two tensors, and mutating one must not change the other; and data-dependent results
    (``x[mask]``, ``nonzero``, ``item``): each has an unbacked size symbol of its own that later nodes'
    metadata names, and merging two would leave the second's symbol bound nowhere."""
    protected = _output_aliases(graph)
    for node in graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) \
                and node.target._schema.is_mutable:
            protected.update(a for a in node.all_input_nodes)
    seen: dict[Any, fx.Node] = {}
    merged = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or is_impure(node) or node in protected or _allocates(node.target) \
                or not (isinstance(node.target, torch._ops.OpOverload) or node.target is operator.getitem) \
                or _makes_symbols(node):
            continue
        try:
            key = (node.target, _cse_key(node.args), _cse_key(node.kwargs))
            hash(key)
        except TypeError:  # an argument with no value identity
            continue
        kept = seen.setdefault(key, node)
        if kept is not node:
            node.replace_all_uses_with(kept)
            graph.erase_node(node)
            merged += 1
    return merged


def _makes_symbols(node: fx.Node) -> bool:
    """The node's result has size symbols none of its inputs has (an unbacked size: data-dependent)."""
    made = size_symbols(node.meta.get("val"))
    if not made:
        return False
    for a in node.all_input_nodes:
        made -= size_symbols(a.meta.get("val"))
    return bool(made)


def _output_aliases(graph: fx.Graph) -> set:
    """The graph's outputs and the nodes they are views of."""
    out = next(n for n in reversed(graph.nodes) if n.op == "output")
    todo = [a for a in out.all_input_nodes]
    found: set = set()
    while todo:
        node = todo.pop()
        if node in found:
            continue
        found.add(node)
        if node.op == "call_function" and (node.target is operator.getitem or _returns_alias(node.target)):
            todo.extend(node.all_input_nodes)
    return found


def _returns_alias(target) -> bool:
    if not isinstance(target, torch._ops.OpOverload):
        return True  # unknown: assume it may alias its inputs
    return any(r.alias_info is not None for r in target._schema.returns)


def _allocates(target) -> bool:
    return isinstance(target, torch._ops.OpOverload) and target.__name__.split(".")[0].startswith(("empty", "new_empty"))


def _cse_key(a):
    """A hashable key for an FX argument that tells apart values Python's == confuses (1, 1.0, True; 0.0, -0.0)."""
    if isinstance(a, fx.Node):
        return a
    if isinstance(a, (list, tuple)):
        return (type(a).__name__,) + tuple(_cse_key(x) for x in a)
    if isinstance(a, dict):
        return ("dict",) + tuple((k, _cse_key(v)) for k, v in a.items())
    if isinstance(a, float):
        return ("float", a.hex())
    if a is None or isinstance(a, (bool, int, str, torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return (type(a).__name__, a)
    raise TypeError(type(a).__name__)


def verify(ag: AtenGraph, allowed_ops=None) -> None:
    """Check the invariants of an ATen graph; raise AssertionError naming the first broken one."""
    graph = ag.gm.graph
    graph.lint()
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == len(ag.inputs), (len(placeholders), len(ag.inputs))
    for n in graph.nodes:
        if n.op == "call_module":
            raise AssertionError(f"{n.name}: an ATen graph calls no modules")
        if n.op != "call_function":
            continue
        assert "val" in n.meta, f"{n.name} has no fake value"
        if n.target is operator.getitem or n.target is torch._C._set_grad_enabled:
            continue
        assert isinstance(n.target, torch._ops.OpOverload), f"{n.name}: {n.target} is not an ATen op overload"
        if n.target._schema.is_mutable:
            assert n.meta.get("mutates_fresh_copies"), f"{n.name}: mutating op {n.target} in a functional graph"
        if allowed_ops is not None:
            assert n.target in allowed_ops, f"{n.name}: {n.target} is not in the allowed op set"
    out = next(n for n in reversed(graph.nodes) if n.op == "output")
    n_graph_outputs = len(out.args[0]) - len(ag.mutated_inputs)
    for spec in ag.outputs:
        if spec.kind == "graph":
            assert 0 <= spec.index < n_graph_outputs, spec
        elif spec.kind == "input":
            assert 0 <= spec.index < len(ag.inputs), spec
