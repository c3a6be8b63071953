"""Channels-last layout for convolution graphs (``Options.conv_channels_last``; on by default for CUDA).

cuDNN's fast convolution kernels work on NHWC data; given NCHW tensors it converts input, weight and
output around every convolution (``nchwToNhwc``/``nhwcToNchw`` kernels: about 0.7 ms of timm
resnet50's 4 ms on an H100 in float32). This pass, run on the captured graph before ATen tracing,
asks for channels-last inputs and weights of each 2-D convolution. ATen's layout rules then carry
channels-last through what follows (batch norm, activations, residual adds), so the conversions
of activations fuse into the kernels that produce them (computed in memory order, see
``lower/graph.memory_order``); only weights are converted on each call.
Graph outputs that eager returns contiguous are made contiguous again, so callers see eager's strides.

Layout only: every value is the same as without the pass. It applies to inference graphs (no grad).
"""
from __future__ import annotations

import torch
import torch.fx as fx

CONVOLUTIONS = {torch.conv2d, torch.nn.functional.conv2d}


def use_channels_last(gm: fx.GraphModule) -> bool:
    """Rewrite ``gm`` in place; True when it had a 4-D convolution to rewrite."""
    graph = gm.graph
    convs = [n for n in graph.nodes if n.op == "call_function" and n.target in CONVOLUTIONS
             and _is_4d(n.args[0] if n.args else None) and len(n.args) >= 2 and _is_4d(n.args[1])]
    if not convs:
        return False
    for conv in convs:
        with graph.inserting_before(conv):
            conv.args = (_channels_last(graph, conv.args[0]), _channels_last(graph, conv.args[1]), *conv.args[2:])
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):
        output.args = (fx.node.map_arg(output.args[0], lambda v: _as_eager_returns(graph, v)),)
    graph.lint()
    gm.recompile()
    return True


def _is_4d(node) -> bool:
    val = node.meta.get("example_value") if isinstance(node, fx.Node) else None
    return isinstance(val, torch.Tensor) and val.dim() == 4


def _channels_last(graph: fx.Graph, node: fx.Node) -> fx.Node:
    out = graph.call_method("contiguous", (node,), {"memory_format": torch.channels_last})
    val = node.meta["example_value"]
    out.meta["example_value"] = val.contiguous(memory_format=torch.channels_last)
    return out


def _as_eager_returns(graph: fx.Graph, node: fx.Node) -> fx.Node:
    """A graph output that eager returns NCHW-contiguous, made contiguous (a no-op when it already is)."""
    val = node.meta.get("example_value")
    if not (isinstance(val, torch.Tensor) and val.dim() == 4 and val.is_contiguous()):
        return node
    out = graph.call_method("contiguous", (node,))
    out.meta["example_value"] = val
    return out
