"""Optimizers in captured code: ``optimizer.step()`` breaks the graph (an optimizer's step reads and
writes state the graph does not hold), and the call made at the break runs kiln's fused step
(``kiln/optim``) when the frame is compiled by the kiln backend and the optimizer is one kiln has a
rule for; otherwise eager's ``optimizer.step()`` runs there, as it always did. ``explain`` shows the
break with which of the two runs it."""
from __future__ import annotations

import contextlib

from kiln.capture.values.base import unsupported
from kiln.capture.values.builder import OpaqueAttrValue, OpaqueObjectValue

# the backend the frame being converted is compiled for (set by convert_frame.FrameCompiler)
_BACKEND = ["kiln"]


@contextlib.contextmanager
def compiling_for(backend_name: str):
    """Context: frames traced inside are compiled by ``backend_name``."""
    previous, _BACKEND[0] = _BACKEND[0], backend_name
    try:
        yield
    finally:
        _BACKEND[0] = previous


def step_callable(opt, options):
    """What ``opt.step`` is at a graph break: kiln's fused step (which itself runs eager's step where
    it cannot compute what eager computes, kiln/optim/step.py)."""
    from kiln.optim import fused_step_for

    return fused_step_for(opt, options)


class OptimizerValue(OpaqueObjectValue):
    """A torch.optim.Optimizer: held, handed back, and its ``step()`` breaks the graph."""

    def getattr(self, tx, name: str):
        if name == "step" and _BACKEND[0] == "kiln" and type(self.obj).__module__.startswith("torch.optim"):
            return OptimizerStepValue(self, name, tx.options)
        return OpaqueAttrValue(self, name)


class OptimizerStepValue(OpaqueAttrValue):
    def __init__(self, obj, name, options):
        super().__init__(obj, name)
        self.options = options

    def call(self, tx, args, kwargs):
        from kiln.optim import unsupported_reason

        why = unsupported_reason(self.obj.obj, self.options)
        how = "kiln's fused optimizer step (kiln/optim)" if why is None else f"eager's step ({why})"
        unsupported(f"{type(self.obj.obj).__qualname__}.step() runs between graphs, as {how}",
                    hint="kiln runs it between two graphs")

    def reconstruct(self, cg) -> None:
        cg.prepare_call(step_callable)
        cg.reconstruct(self.obj)
        cg.load_const(self.options)
        cg.call(2)
