"""Mapping over op arguments: tuples, lists and dicts of leaves.

``torch.utils._pytree`` handles every registered container and costs several microseconds per node;
the tracers call it several times per op. ATen op arguments and results are plain tuples, lists and
dicts, which these walk directly; other tuples (named tuples, torch.return_types) go through pytree.
"""
from __future__ import annotations

from torch.utils import _pytree as pytree


def map_leaves(fn, tree):
    """``tree`` with ``fn`` applied to every leaf (as ``pytree.tree_map``)."""
    t = type(tree)
    if t is tuple:
        return tuple([map_leaves(fn, x) for x in tree])
    if t is list:
        return [map_leaves(fn, x) for x in tree]
    if t is dict:
        return {k: map_leaves(fn, v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list, dict)):
        return pytree.tree_map(fn, tree)
    return fn(tree)


def leaves(tree) -> list:
    """The leaves of ``tree`` in order (as ``pytree.tree_leaves``)."""
    out: list = []
    _collect(tree, out)
    return out


def _collect(tree, out: list) -> None:
    t = type(tree)
    if t is tuple or t is list:
        for x in tree:
            _collect(x, out)
    elif t is dict:
        for x in tree.values():
            _collect(x, out)
    elif isinstance(tree, (tuple, list, dict)):
        out.extend(pytree.tree_leaves(tree))
    else:
        out.append(tree)
