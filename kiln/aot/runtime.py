"""The runtime wrapper around an ATen graph: passes state, writes mutations back, rebuilds aliases."""
from __future__ import annotations

import torch
import torch.fx as fx
from torch.autograd.graph import increment_version
from torch.utils._pytree import tree_unflatten

from kiln.aot.graph import AtenGraph


def write_back(target: torch.Tensor, new: torch.Tensor, stored_in_place: list | None = None,
               silent: bool = False) -> None:
    """Give ``target`` (a caller's tensor) the value the graph computed for it, as eager's mutation did.

    A value a kernel already stored into ``target`` (schedule/inplace.py) only counts as a change of
    ``target`` (its version counter, as eager's in-place op bumps it): now, or by the caller, once for
    all, when it passes ``stored_in_place`` to collect them in. ``silent``: eager wrote it only through
    ``target.data``, which has a version counter of its own: ``target``'s stays as it was."""
    if new is target or _same_memory(new, target):
        if silent:
            return
        if stored_in_place is None:
            increment_version(target)
        else:
            stored_in_place.append(target)
        return
    if silent:
        version = target._version
        with torch.no_grad():
            target.copy_(new)
        torch._C._autograd._unsafe_set_version_counter((target,), (version,))
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


def silent_writes(captured: fx.GraphModule | None, mutated: list[int], n_user: int, state: list) -> frozenset:
    """The mutated inputs (positions among user inputs, then state) that the captured graph wrote only
    through ``t.data`` (``gm.meta["kiln_silent_writes"]``, set by capture)."""
    meta = captured.meta.get("kiln_silent_writes") if captured is not None else None
    if not meta:
        return frozenset()
    positions, held = meta
    return frozenset(i for i in mutated
                     if (i < n_user and i in positions) or (i >= n_user and id(state[i - n_user]) in held))


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
        self.run = run if run is not None else ag.gm.forward  # (not the module: no global hooks on it)
        self.state = list(ag.state)
        self.mutated = list(ag.mutated_inputs)
        self.n_mut = len(self.mutated)
        self.outputs = list(ag.outputs)
        self.out_spec = ag.out_spec
        self.sizes = ag.sizes
        self.silent = frozenset()  # mutated inputs eager writes only through `t.data` (silent_writes)

    def __call__(self, *args):
        flat = [*args, *self.state]
        results = run_as_traced(self.run, *flat)
        if self.n_mut:
            stored: list = []
            for k, index in enumerate(self.mutated):
                write_back(flat[index], results[k], stored, index in self.silent)
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
