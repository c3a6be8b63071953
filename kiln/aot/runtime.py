"""The runtime wrapper around an ATen graph: passes state, writes mutations back, rebuilds aliases."""
from __future__ import annotations

import torch
from torch.autograd.graph import increment_version
from torch.utils._pytree import tree_unflatten

from kiln.aot.graph import AtenGraph


def write_back(target: torch.Tensor, new: torch.Tensor, stored_in_place: list | None = None) -> None:
    """Give ``target`` (a caller's tensor) the value the graph computed for it, as eager's mutation did.

    A value a kernel already stored into ``target`` (schedule/inplace.py) only counts as a change of
    ``target`` (its version counter, as eager's in-place op bumps it): now, or by the caller, once for
    all, when it passes ``stored_in_place`` to collect them in."""
    if new is target or _same_memory(new, target):
        if stored_in_place is None:
            increment_version(target)
        else:
            stored_in_place.append(target)
        return
    if target.is_leaf and target.requires_grad:
        # eager could only have mutated it under no_grad (else tracing would have failed)
        with torch.no_grad():
            target.copy_(new)
    else:
        target.copy_(new)  # records the mutation in autograd history where eager would


def _same_memory(new: torch.Tensor, target: torch.Tensor) -> bool:
    """``new`` is a view of ``target``'s own elements in ``target``'s layout (an in-place store returned
    through a view of the buffer)."""
    return (new.data_ptr() == target.data_ptr() and new.dtype == target.dtype and new.shape == target.shape
            and new.stride() == target.stride() and new.device == target.device)


def run_as_traced(fn, *args):
    """Call a compiled graph with autocast off: tracing ran under the caller's autocast, so the graph
    already holds its casts; autocast again would recast extern ops (an ``mm`` that an
    ``autocast(enabled=False)`` block kept in float32 would come back in bfloat16)."""
    if torch._C._is_any_autocast_enabled():
        with torch._C._DisableAutocast():
            return fn(*args)
    return fn(*args)


class AtenRuntime:
    """Calls an AtenGraph's module with real tensors and restores eager's mutation and alias behaviour."""

    def __init__(self, ag: AtenGraph, run=None) -> None:
        self.ag = ag
        self.run = run if run is not None else ag.gm
        self.state = list(ag.state)
        self.mutated = list(ag.mutated_inputs)
        self.n_mut = len(self.mutated)
        self.outputs = list(ag.outputs)
        self.out_spec = ag.out_spec
        self.sizes = ag.sizes

    def __call__(self, *args):
        flat = [*args, *self.state]
        results = run_as_traced(self.run, *flat)
        if self.n_mut:
            stored: list = []
            for k, index in enumerate(self.mutated):
                write_back(flat[index], results[k], stored)
            if stored:
                increment_version(stored)
        outs = []
        for spec in self.outputs:
            if spec.kind == "constant":
                outs.append(spec.value)
                continue
            value = results[self.n_mut + spec.index] if spec.kind == "graph" else flat[spec.index]
            outs.append(spec.rebuild(value, flat, self.sizes))
        return tree_unflatten(outs, self.out_spec)
