"""Values a DDP piece computes again instead of taking them from an earlier piece.

A value crossing a cut must be a tensor the graph computed: a view of module state or of a graph input
handed from one piece to the next could come back from a backend as a copy. So a model whose blocks all
read one view of a buffer (Llama's rotary ``cos``/``sin`` tables, sliced to the sequence and cast, read by
every block) could not be cut at all. Such a value is cheap and exact to compute again in the piece that
needs it, from the module state (read again by that piece) and the graph inputs (passed to it), so it
does not cross the cut.

A node is recomputed only where that is exactly what eager computes: it is a view or a cast (a fixed
list of ops, no randomness); every tensor it is made from is a graph input, module state or such a node,
and none of them requires grad (a view of a parameter made under no_grad would gain a gradient); it is
not inside an autocast or grad-mode block of the graph; no op of the graph may write in place to the
storages involved (a cast made again later would see the write); and the graph does not return it.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

VIEW_METHODS = frozenset({
    "view", "reshape", "transpose", "permute", "unsqueeze", "squeeze", "expand", "narrow", "t", "flatten",
    "unflatten", "contiguous", "to", "type_as", "float", "half", "bfloat16", "double", "__getitem__",
})
VIEW_FUNCTIONS = frozenset({
    operator.getitem, torch.reshape, torch.transpose, torch.permute, torch.unsqueeze, torch.squeeze,
    torch.narrow, torch.flatten, torch.t,
})


def _is_view_op(node: fx.Node) -> bool:
    if node.op == "call_method":
        return node.target in VIEW_METHODS
    return node.op == "call_function" and node.target in VIEW_FUNCTIONS


def recomputable_nodes(nodes: list[fx.Node], example, storage, tensor_args, writes, mode_problem) -> set[fx.Node]:
    """The body nodes a later piece may compute again (see the module's docstring). ``writes``: the
    storages of the arguments of each op that may write in place (None: unknown)."""
    written = set().union(*(w for _, w in writes)) if writes else set()
    if None in written:
        return set()
    found: set[fx.Node] = set()
    for index, node in enumerate(nodes):
        if not _is_view_op(node) or mode_problem[index] or any(user.op == "output" for user in node.users):
            continue
        value = example(node)
        if not isinstance(value, torch.Tensor) or value.requires_grad or storage(value) in written:
            continue
        sources_ok = True
        for arg in tensor_args(node):
            if arg in found:
                continue
            arg_value = example(arg)
            if arg.op not in ("placeholder", "get_attr") or not isinstance(arg_value, torch.Tensor) \
                    or arg_value.requires_grad or storage(arg_value) in written:
                sources_ok = False
                break
        if sources_ok:
            found.add(node)
    return found


def recompute_chain(node: fx.Node, recomputable: set[fx.Node], tensor_args) -> list[fx.Node]:
    """``node`` and the recomputable nodes it is made from, in graph order (sources first)."""
    chain: list[fx.Node] = []

    def visit(n):
        if n in chain:
            return
        for arg in tensor_args(n):
            if arg in recomputable:
                visit(arg)
        chain.append(n)

    visit(node)
    return chain
