"""Reference execution of a lowered graph: loop bodies evaluated with torch, externs with ATen.

Slow and simple; tests use it to check lowerings independently of any code generator.
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_map

from kiln.loopir.handlers import evaluate_buffer
from kiln.loopir.nodes import ComputedBuffer, ExternKernel, Stored
from kiln.loopir.scatter import is_update
from kiln.lower.graph import LoweredGraph


def _storage_numel(size, stride) -> int:
    if any(n == 0 for n in size):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(size, stride))


def tensor_of(value: Stored, flats: dict) -> torch.Tensor:
    flat = flats[value.buffer.name]
    return flat.as_strided(value.size, value.stride, value.offset)


def run_reference(lg: LoweredGraph, args) -> list:
    flats: dict[str, torch.Tensor] = {}
    if lg.arg_names:  # (int arguments among them: Options.dynamic_ints)
        args = [a for name, a in zip(lg.arg_names, args) if name not in lg.int_inputs]
    for buf, arg in zip(lg.inputs, args):
        flats[buf.name] = arg.as_strided((_storage_numel(arg.shape, arg.stride()),), (1,))
    for buf in lg.constants:
        v = buf.value
        flats[buf.name] = v.as_strided((_storage_numel(v.shape, v.stride()),), (1,), v.storage_offset())
    for node in lg.nodes:
        if isinstance(node, ExternKernel):
            a, k = tree_map(lambda v: tensor_of(v, flats) if isinstance(v, Stored) else v, (node.args, node.kwargs))
            result = node.op(*a, **k)
            for out in node.outputs:
                t = result
                for i in out.path:
                    t = t[i]
                t = t.as_strided(out.size, out.stride) if tuple(t.stride()) == out.stride else \
                    torch.empty_strided(out.size, out.stride, dtype=t.dtype).copy_(t)
                flats[out.name] = t.as_strided((_storage_numel(out.size, out.stride),), (1,))
            continue
        assert isinstance(node, ComputedBuffer)
        if not is_update(node):  # a scatter updates its copy's buffer in place
            flats[node.name] = torch.zeros(_storage_numel(node.size, node.stride), dtype=node.dtype)
        evaluate_buffer(node, flats)
    return [tensor_of(o, flats) if isinstance(o, Stored) else o for o in lg.outputs]
