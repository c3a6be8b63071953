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


@dataclasses.dataclass
class AtenGraph:
    gm: fx.GraphModule
    inputs: list[InputSpec]
    state: list[torch.Tensor]  # real tensors passed after the user inputs
    mutated_inputs: list[int]
    outputs: list[OutputSpec]
    out_spec: TreeSpec

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
        return target._schema.is_mutable or is_random(target)
    return target is torch._C._set_grad_enabled


def eliminate_dead_code(graph: fx.Graph) -> int:
    removed = 0
    for node in reversed(list(graph.nodes)):
        if not node.users and not is_impure(node):
            graph.erase_node(node)
            removed += 1
    return removed


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
