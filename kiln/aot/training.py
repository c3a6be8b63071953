"""The training runtime: one ``torch.autograd.Function`` per compiled region.

``forward`` runs the compiled forward graph (with grad off, as every Function's forward), writes
the new values of mutated inputs back (BatchNorm running stats), saves the values the partition
chose with ``ctx.save_for_backward`` and returns the forward outputs; outputs that do not get a
tangent (integer or bool tensors, values computed without grad) are marked non-differentiable.
``backward`` runs the compiled backward graph on the saved values and the incoming gradients.

User outputs are rebuilt around the Function as ``AtenRuntime`` does: constants, views of graph
inputs replayed on the real inputs (so autograd records those views), and forward outputs.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.autograd.function import once_differentiable
from torch.utils._pytree import tree_unflatten

from kiln.aot.joint import JointGraph
from kiln.aot.runtime import run_as_traced, write_back


class CompiledFunction(torch.autograd.Function):
    """apply(runtime, *flat_inputs) -> forward outputs; the runtime carries the compiled graphs."""

    @staticmethod
    def forward(ctx, rt: "TrainingRuntime", *flat):
        results = run_as_traced(rt.fwd, *flat)
        for k, index in enumerate(rt.mutated):
            write_back(flat[index], results[k], steps=rt.steps.get(index, 1))
        outs = tuple(results[rt.n_mut: rt.n_mut + rt.n_out])
        ctx.save_for_backward(*results[rt.n_mut + rt.n_out:])
        ctx.rt = rt
        frozen = [o for o, d in zip(outs, rt.differentiable) if not d and isinstance(o, torch.Tensor)]
        if frozen:
            ctx.mark_non_differentiable(*frozen)
        return outs

    @staticmethod
    @once_differentiable  # the backward graph is not itself differentiated (no double backward yet)
    def backward(ctx, *grad_outputs):
        rt: TrainingRuntime = ctx.rt
        tangents = [g.contiguous() for g, d in zip(grad_outputs, rt.differentiable) if d]
        grads = run_as_traced(rt.bwd, *ctx.saved_tensors, *tangents)
        per_input: list = [None] * rt.n_inputs
        for index, g in zip(rt.grad_inputs, grads):
            per_input[index] = g
        return (None, *per_input)


class TrainingRuntime:
    """Calls a partitioned graph through ``CompiledFunction`` and rebuilds the user's outputs."""

    def __init__(self, joint: JointGraph, fwd: Callable, bwd: Callable) -> None:
        self.fwd, self.bwd = fwd, bwd
        self.state = list(joint.state)
        self.mutated = list(joint.mutated_inputs)
        self.n_mut = len(self.mutated)
        self.n_out = joint.num_fwd_outputs
        self.n_inputs = len(joint.inputs)
        self.differentiable = list(joint.differentiable)
        self.grad_inputs = list(joint.grad_inputs)
        self.outputs = list(joint.outputs)
        self.out_spec = joint.out_spec
        self.sizes = joint.sizes
        self.grad_mode_after = joint.grad_mode_after
        self.steps: dict = {}  # mutated inputs whose version counters eager moves by other than one (runtime.version_steps)

    def __call__(self, *args):
        flat = [*args, *self.state]
        results = CompiledFunction.apply(self, *flat)
        outs = []
        for spec in self.outputs:
            if spec.kind == "constant":
                outs.append(spec.value)
                continue
            value = results[spec.index] if spec.kind == "graph" else flat[spec.index]
            outs.append(spec.rebuild(value, flat, self.sizes))
        if torch.is_grad_enabled() != self.grad_mode_after:
            torch._C._set_grad_enabled(self.grad_mode_after)
        return tree_unflatten(outs, self.out_spec)
