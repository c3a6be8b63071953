"""The runtime wrapper around an ATen graph: passes state, writes mutations back, rebuilds aliases."""
from __future__ import annotations

import functools
import operator

import torch
import torch.fx as fx
from torch.autograd.graph import increment_version
from torch.utils._pytree import tree_unflatten

from kiln.aot.graph import AtenGraph


def write_back(target: torch.Tensor, new: torch.Tensor, stored_in_place: list | None = None,
               steps: int = 1) -> None:
    """Give ``target`` (a caller's tensor) the value the graph computed for it, as eager's mutation did.

    ``steps``: how far eager's in-place ops moved ``target``'s version counter (capture counted them on
    its fakes: ``version_steps``): one per in-place op on it or its views, none for writes through
    ``target.data`` (a version counter of its own, and no autograd history) or that eager does not count
    (batch norm's running statistics). A value a kernel already stored into ``target``
    (schedule/inplace.py) only counts as a change of ``target``: now, or by the caller, once for all,
    when it passes ``stored_in_place`` to collect them in (for one step)."""
    version = target._version
    if new is target or _same_memory(new, target):
        if steps != 1:
            _set_version(target, version + steps)
        elif stored_in_place is None:
            increment_version(target)
        else:
            stored_in_place.append(target)
        return
    if steps == 0 or (target.is_leaf and target.requires_grad):
        # eager could only have mutated a leaf that requires grad under no_grad (else tracing would have
        # failed); a write eager does not count is not in autograd's history either
        with torch.no_grad():
            target.copy_(new)
    else:
        target.copy_(new)  # records the mutation in autograd history where eager would
    if steps != 1:
        _set_version(target, version + steps)


def _set_version(target: torch.Tensor, version: int) -> None:
    torch._C._autograd._unsafe_set_version_counter((target,), (version,))


def _same_memory(new: torch.Tensor, target: torch.Tensor) -> bool:
    """``new`` is a view of ``target``'s own elements in ``target``'s layout (an in-place store returned
    through a view of the buffer)."""
    return (new.data_ptr() == target.data_ptr() and new.dtype == target.dtype and new.shape == target.shape
            and new.stride() == target.stride() and new.device == target.device)


def version_steps(captured: fx.GraphModule | None, mutated: list[int], n_user: int, state: list) -> dict:
    """mutated input (position among user inputs, then state) -> how far eager moves its version counter,
    where not by one (``gm.meta["kiln_version_steps"]``, set by capture)."""
    meta = captured.meta.get("kiln_version_steps") if captured is not None else None
    if not meta:
        return {}
    positions, held = meta
    steps = {}
    for i in mutated:
        found = positions.get(i) if i < n_user else held.get(id(state[i - n_user]))
        if found is not None and found >= 0:
            steps[i] = found
    return steps


def unflattener(spec):
    """A function of the flat outputs that rebuilds the graph's output structure (``tree_unflatten``
    with ``spec``), with the common structures built directly: one tensor, a flat tuple or list of
    them (it runs on every call; pytree's general walk cost microseconds there)."""
    if spec.is_leaf():
        return operator.itemgetter(0)
    children = spec.children() if hasattr(spec, "children") else spec.children_specs
    if spec.type in (tuple, list) and all(c.is_leaf() for c in children):
        return spec.type
    return functools.partial(_unflatten, spec)


def _unflatten(spec, leaves):
    return tree_unflatten(leaves, spec)


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
        self.unflatten = unflattener(ag.out_spec)
        self.sizes = ag.sizes
        self.steps: dict = {}  # mutated inputs whose version counters eager moves by other than one (version_steps)
        self.grad_mode_after = ag.grad_mode_after
        # the common case, taken on every call: each output is a graph result as it is (no views to
        # rebuild, no constants, no inputs returned), nothing mutated, grad mode unchanged
        plain = not self.n_mut and self.grad_mode_after is None and \
            all(spec.kind == "graph" and not spec.steps for spec in self.outputs)
        self.plain_outputs = tuple(self.n_mut + spec.index for spec in self.outputs) if plain else None

    def __call__(self, *args):
        flat = [*args, *self.state]
        results = run_as_traced(self.run, *flat)
        plain = self.plain_outputs
        if plain is not None:
            return self.unflatten([results[i] for i in plain])
        if self.n_mut:
            stored: list = []
            for k, index in enumerate(self.mutated):
                write_back(flat[index], results[k], stored, self.steps.get(index, 1))
            if stored:
                increment_version(stored)
        outs = []
        for spec in self.outputs:
            if spec.kind == "constant":
                outs.append(spec.value)
                continue
            value = results[self.n_mut + spec.index] if spec.kind == "graph" else flat[spec.index]
            outs.append(spec.rebuild(value, flat, self.sizes))
        if self.grad_mode_after is not None:
            torch._C._set_grad_enabled(self.grad_mode_after)
        return self.unflatten(outs)
