"""The training runtime: one ``torch.autograd.Function`` per compiled region.

``forward`` runs the compiled forward graph (with grad off, as every Function's forward), writes
the new values of mutated inputs back (BatchNorm running stats), saves the values the partition
chose with ``ctx.save_for_backward`` and returns the forward outputs; outputs that do not get a
tangent (integer or bool tensors, values computed without grad) are marked non-differentiable.
``backward`` runs the compiled backward graph on the saved values and the incoming gradients.

An output nothing differentiated (the logits a model returns beside its loss, when only the loss
is differentiated) gets no gradient: autograd would hand the backward a tensor of zeros it fills for
the occasion (412 MB for GPT-2's logits at 8 x 512). Where the runtime can compile the backward again
(``backward_without``: static sizes), grads are not materialized, and a backward with such tangents
runs a variant of the backward graph in which they are constant zeros: no fill and no read. The
variant is compiled at the first backward that needs it and kept per set of absent tangents; the warm
cache keeps it with the graph's entry, and a runtime loaded from the cache runs the stored variant (or,
for a set of absent tangents no process compiled, passes zeros as autograd would).

User outputs are rebuilt around the Function as ``AtenRuntime`` does: constants, views of graph
inputs replayed on the real inputs (so autograd records those views), and forward outputs.
"""
from __future__ import annotations

import contextlib
import weakref
from typing import Callable

import torch
from torch.autograd.function import once_differentiable

from kiln.aot.joint import JointGraph
from kiln.aot.runtime import run_as_traced, unflattener, write_back
from kiln.aot.schema import is_random


class CompiledFunction(torch.autograd.Function):
    """apply(runtime, *flat_inputs) -> forward outputs; the runtime carries the compiled graphs."""

    @staticmethod
    def forward(ctx, rt: "TrainingRuntime", *flat):
        results = run_as_traced(rt.fwd, *flat)
        for k, index in enumerate(rt.mutated):
            write_back(flat[index], results[k], steps=rt.steps.get(index, 1))
        # an output that is a view of a buffer of the generated code (a Linear's [B*T, N] product seen as
        # [B, T, N]) is handed out as a plain alias of it: autograd forbids in-place ops on a custom
        # Function's view outputs, where eager's result (ATen's _unsafe_view) allows them. The alias
        # shares the buffer's version counter, so an in-place change of a value saved for the backward is
        # still caught by autograd, as in eager.
        outs = tuple(o.detach() if isinstance(o, torch.Tensor) and o._base is not None else o
                     for o in results[rt.n_mut: rt.n_mut + rt.n_out])
        ctx.save_for_backward(*results[rt.n_mut + rt.n_out:])
        ctx.rt = rt
        if rt.double_backward_refused is None:  # for a backward with create_graph=True (_double_backward):
            # weak references (an input eager would free after the forward stays free; a dead one refuses)
            ctx.flat_inputs = [weakref.ref(t) if isinstance(t, torch.Tensor) else t for t in flat]
            ctx.flat_versions = [t._version if isinstance(t, torch.Tensor) else None for t in flat]
        if rt.backward_without is not None:
            ctx.set_materialize_grads(False)  # absent gradients arrive as None: see backward_for
            # (what autograd would have filled for them, where no variant is at hand)
            ctx.tangent_like = [(o.shape, o.dtype, o.device) for o, d in zip(outs, rt.differentiable) if d]
        frozen = [o for o, d in zip(outs, rt.differentiable) if not d and isinstance(o, torch.Tensor)]
        if frozen:
            ctx.mark_non_differentiable(*frozen)
        return outs

    @staticmethod
    def backward(ctx, *grad_outputs):
        if torch.is_grad_enabled():  # create_graph=True: the gradients must be differentiable themselves
            return _double_backward(ctx, grad_outputs)
        return CompiledFunction._backward(ctx, *grad_outputs)

    @staticmethod
    @once_differentiable  # (the generated backward is not differentiated itself: see _double_backward)
    def _backward(ctx, *grad_outputs):
        rt: TrainingRuntime = ctx.rt
        bwd, tangents = rt.backward_for([g for g, d in zip(grad_outputs, rt.differentiable) if d],
                                        getattr(ctx, "tangent_like", None))
        grads = run_as_traced(bwd, *ctx.saved_tensors, *(g.contiguous() for g in tangents))
        return (None, *rt.per_input(grads))


def _double_backward(ctx, grad_outputs) -> tuple:
    """A backward under ``create_graph=True`` (a gradient penalty, MAML, Hessian-vector products): the
    generated backward gives gradients with no history. Instead the joint ATen graph runs as ATen ops
    under autograd, on the inputs of the forward and these tangents, so the gradients it returns are
    functions of both that autograd can differentiate again. Refused with an error (never a gradient
    without its history, nor a wrong one) where that would not differentiate as eager does: the graph's
    own reasons (``_refuse_double_backward``, and ``aot/compile._not_differentiable_again`` for the
    captured code), or an input freed or changed in place since the forward."""
    rt: TrainingRuntime = ctx.rt
    why = rt.double_backward_refused
    flat = []
    if why is None:
        flat = [t() if isinstance(t, weakref.ref) else t for t in ctx.flat_inputs]
        if any(t is None for t in flat):
            why = "an input of the compiled graph was freed after its forward"
        elif any(isinstance(t, torch.Tensor) and t._version != v for t, v in zip(flat, ctx.flat_versions)):
            why = "an input of the compiled graph was changed in place after its forward"
    if why is not None:
        raise RuntimeError(f"kiln: a backward with create_graph=True through a compiled graph cannot be made "
                           f"differentiable: {why}. Run the function uncompiled where its gradients are "
                           f"differentiated again.")
    tangents = [g for g, d in zip(grad_outputs, rt.differentiable) if d]
    like = getattr(ctx, "tangent_like", None)  # (absent gradients arrive as None where it is set)
    tangents = [(g if g is not None else _zeros(like[i])).contiguous() for i, g in enumerate(tangents)]
    with torch.enable_grad():
        results = run_as_traced(rt.joint_gm, *flat, *tangents)
    return (None, *rt.per_input(results[len(results) - len(rt.grad_inputs):]))


def _zeros(like) -> torch.Tensor:
    """Autograd's gradient for an output nothing differentiated: zeros of its (shape, dtype, device)."""
    shape, dtype, device = like
    return torch.zeros(shape, dtype=dtype, device=device)


def _refuse_double_backward(rt) -> str | None:
    if rt.joint_gm is None:
        return "the compiled graph has no joint graph at hand (it was loaded from the warm cache)"
    if rt.mutated:  # (the joint graph would run again on the values the forward wrote)
        return "the compiled graph writes to its inputs"
    if any(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and is_random(n.target)
           for n in rt.joint_gm.graph.nodes):
        return "the compiled graph draws random numbers, which running it again would draw anew"
    return None


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
        self.unflatten = unflattener(joint.out_spec)
        self.sizes = joint.sizes
        self.grad_mode_after = joint.grad_mode_after
        self.steps: dict = {}  # mutated inputs whose version counters eager moves by other than one (runtime.version_steps)
        # (absent tangent positions) -> the backward graph compiled with those tangents as zeros (or None:
        # none to be had, zeros are passed); None when this runtime cannot compile variants (autograd then
        # materializes absent gradients)
        self.backward_without: Callable | None = None
        self._variants: dict = {}
        # for a backward with create_graph=True (_double_backward): the joint graph, run as ATen ops, or
        # why that would not differentiate as eager does (aot/compile.py sets it from the captured graph)
        self.joint_gm = joint.gm if isinstance(getattr(joint, "gm", None), torch.fx.GraphModule) else None
        self.double_backward_refused: str | None = _refuse_double_backward(self)

    def backward_for(self, tangents: list, like: list | None = None) -> tuple:
        """(the backward to run, the tangents it takes) for these tangents, some None (absent).
        ``like``: (shape, dtype, device) per tangent, for zeros where no variant can be had
        (``backward_without`` gave None: a runtime loaded from the warm cache without that variant)."""
        if self.backward_without is None:
            return self.bwd, tangents
        absent = tuple(i for i, g in enumerate(tangents) if g is None)
        if not absent:
            return self.bwd, tangents
        if absent not in self._variants:
            self._variants[absent] = self.backward_without(absent)
        bwd = self._variants[absent]
        if bwd is None:  # autograd's zeros, as without variants
            return self.bwd, [g if g is not None else _zeros(like[i]) for i, g in enumerate(tangents)]
        return bwd, [g for g in tangents if g is not None]

    def per_input(self, grads) -> list:
        """The backward's gradients placed at their inputs' positions (None for inputs without one)."""
        placed: list = [None] * self.n_inputs
        for index, g in zip(self.grad_inputs, grads):
            placed[index] = g
        return placed

    def __call__(self, *args):
        flat = [*args, *self.state]
        # (grad mode switched on inside the graph: its outputs have grads, applied under grad)
        with torch.enable_grad() if any(self.differentiable) else contextlib.nullcontext():
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
        return self.unflatten(outs)
