"""Which graph nodes draw random numbers: ``backends/choose_faster.py`` does not race a graph with
one (the generated code and eager would draw different numbers, and switching between them mid-run
would change the stream).

ATen tags its fused attention kernels ``nondeterministic_seeded`` for their dropout, but a call with
``dropout_p == 0`` (every inference call) draws nothing: such a node is not random. Without this, a
decoder whose attention stays a library call (CPU flash in inference) was never timed against eager.
"""
from __future__ import annotations

import torch

from kiln.aot.schema import is_random


def dropout_probability(node):
    """The node's ``dropout_p`` argument (its default when not passed), or None when it has none."""
    arguments = node.target._schema.arguments
    names = [a.name for a in arguments]
    if "dropout_p" not in names:
        return None
    i = names.index("dropout_p")
    if i < len(node.args) and not arguments[i].kwarg_only:
        return node.args[i]
    return node.kwargs.get("dropout_p", arguments[i].default_value)


def draws_random_numbers(node) -> bool:
    """A call of a seeded (random) ATen op, other than one with a dropout probability of exactly 0."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload) or not is_random(node.target):
        return False
    p = dropout_probability(node)
    return not (isinstance(p, (int, float)) and not isinstance(p, bool) and p == 0)
