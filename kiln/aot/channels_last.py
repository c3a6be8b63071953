"""Channels-last layout for convolution graphs (``Options.conv_channels_last``; on by default for CUDA).

cuDNN's fast convolution kernels work on NHWC data; given NCHW tensors it converts input, weight and
output around every convolution (``nchwToNhwc``/``nhwcToNchw`` kernels: about 0.7 ms of timm
resnet50's 4 ms on an H100 in float32). This pass, run on the captured graph before ATen tracing,
asks for channels-last inputs and weights of each 2-D convolution. ATen's layout rules then carry
channels-last through what follows (batch norm, activations, residual adds), so the conversions
of activations fuse into the kernels that produce them (computed in memory order, see
``lower/graph.memory_order``); only weights are converted on each call.
Graph outputs, and stride-sensitive ops (``view``), see eager's strides again (``use_channels_last``).

Layout only: every value is the same as without the pass. It applies to inference and training graphs:
in a joint graph the conversions are differentiated like any op (a gradient flows back through
``contiguous`` unchanged), and a weight's gradient reaches ``AccumulateGrad``, which stores it in the
parameter's own layout, as eager's does.
"""
from __future__ import annotations

import torch
import torch.fx as fx

CONVOLUTIONS = {torch.conv2d, torch.nn.functional.conv2d}


# ops whose success or values depend on their input's strides, not only on its values: an input whose
# layout the pass changed is given back its own (eager's) layout first
STRIDE_SENSITIVE_METHODS = {"view", "view_as", "as_strided", "as_strided_", "stride", "data_ptr", "storage_offset",
                            "is_contiguous", "set_", "resize_", "untyped_storage"}
STRIDE_SENSITIVE_FUNCTIONS = {torch.as_strided}


class _Ineligible(Exception):
    """The graph uses a changed layout in a way a copy back cannot undo: the pass leaves it alone."""


def use_channels_last(gm: fx.GraphModule) -> bool:
    """Rewrite ``gm`` in place; True when it had a 4-D convolution to rewrite.

    Values never change, but layouts downstream of a convolution do (every op follows its input's
    layout). So callers and stride-sensitive ops (``view``, ``as_strided``, ...) still see eager's
    strides, a value whose layout may have changed is copied back to its own layout where they read
    it (nothing when it already has it); when its own layout is neither row-major nor channels-last,
    or a graph output is a view, the graph is left as it is."""
    graph = gm.graph
    convs = [n for n in graph.nodes if n.op == "call_function" and n.target in CONVOLUTIONS
             and _is_4d(n.args[0] if n.args else None) and len(n.args) >= 2 and _is_4d(n.args[1])]
    if not convs:
        return False
    try:
        restores, outputs = _plan(graph, set(convs))
    except _Ineligible:
        return False
    for conv in convs:
        with graph.inserting_before(conv):
            conv.args = (_channels_last(graph, conv.args[0]), _channels_last(graph, conv.args[1]), *conv.args[2:])
    for user, changed in restores:
        with graph.inserting_before(user):
            back = {v: _own_layout(graph, v) for v in changed}
        user.args, user.kwargs = fx.node.map_arg((user.args, user.kwargs), lambda v: back.get(v, v))
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):
        output.args = (fx.node.map_arg(output.args[0], lambda v: _own_layout(graph, v) if v in outputs else v),)
    graph.lint()
    gm.recompile()
    return True


def _plan(graph: fx.Graph, convs: set):
    """(nodes that must read some inputs in their own layout, with those inputs; graph outputs to give
    back their layout), following which values' layouts the convolutions' new layout reaches."""
    changed: set = set(convs)
    restores = []
    outputs: set = set()
    for n in graph.nodes:
        inputs = [v for v in n.all_input_nodes if v in changed]
        if not inputs:
            continue
        if n.op == "output":
            outputs = set(inputs)
            for v in outputs:
                val = v.meta.get("example_value")
                if isinstance(val, torch.Tensor) and val._is_view():
                    raise _Ineligible(f"graph output {v.name} is a view")
                _restorable(v)
        elif _stride_sensitive(n):
            for v in inputs:
                _restorable(v)
            restores.append((n, inputs))
        else:
            changed.add(n)
    return restores, outputs


def _stride_sensitive(n: fx.Node) -> bool:
    if n.op == "call_method":
        return n.target in STRIDE_SENSITIVE_METHODS
    return n.op == "call_function" and n.target in STRIDE_SENSITIVE_FUNCTIONS


def _memory_format(val):
    """The memory format whose ``contiguous`` gives ``val``'s strides, or None."""
    if val.is_contiguous():
        return torch.contiguous_format
    if val.dim() == 4 and val.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return None


def _restorable(node: fx.Node) -> None:
    val = node.meta.get("example_value")
    if isinstance(val, torch.Tensor) and _memory_format(val) is None:
        raise _Ineligible(f"{node.name} has a layout a copy cannot give back")


def _own_layout(graph: fx.Graph, node: fx.Node) -> fx.Node:
    """``node`` with the strides eager gives it (a no-op where it has them already)."""
    val = node.meta.get("example_value")
    if not isinstance(val, torch.Tensor):
        return node
    return _contiguous(graph, node, _memory_format(val), val)


def _is_4d(node) -> bool:
    val = node.meta.get("example_value") if isinstance(node, fx.Node) else None
    return isinstance(val, torch.Tensor) and val.dim() == 4


def _channels_last(graph: fx.Graph, node: fx.Node) -> fx.Node:
    val = node.meta["example_value"].contiguous(memory_format=torch.channels_last)
    return _contiguous(graph, node, torch.channels_last, val)


def _contiguous(graph: fx.Graph, node: fx.Node, memory_format, val) -> fx.Node:
    """``node.contiguous(memory_format=...)``, whose value is ``val``."""
    out = graph.call_method("contiguous", (node,), {"memory_format": memory_format})
    out.meta["example_value"] = val
    return out
