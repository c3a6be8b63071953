"""Inference mode as seen by traced code.

`with torch.inference_mode():` (and `@torch.inference_mode()`) is not traced into a graph: tensors made
inside are inference tensors in eager (no version counter, refused later by autograd), which kiln's
graphs and backends do not reproduce. The `with` breaks the graph (it runs as Python) and the block
continues in a resume function that runs under the real mode, so its results are eager's.

What traced code asks about the mode is answered exactly, and guarded:
- `torch.is_inference_mode_enabled()`: the mode at trace time, guarded by a call of the same query
  (a graph traced under inference mode is not reused under plain no_grad, and the reverse).
- `t.is_inference()` of a tensor passed in: its flag, guarded the same way (`L['x'].is_inference()`).
  Of a tensor computed in the graph the answer depends on the mode at run time and on views of
  inference inputs: the call breaks the graph and runs as Python.
"""
from __future__ import annotations

import torch

from kiln.capture.values.base import ConstantValue, Value, unsupported


def inference_mode_enabled(tx) -> Value:
    from kiln.capture.sources import CallSource, ConstantSource

    query = torch.is_inference_mode_enabled
    enabled = query()
    tx.output.guards.constant(CallSource(ConstantSource("torch.is_inference_mode_enabled", query)), enabled)
    return ConstantValue(enabled)


def tensor_is_inference(tx, tensor) -> Value:
    from kiln.capture.sources import AttrSource, CallSource, ConstantSource

    source = tensor.source
    if source is None or isinstance(source, ConstantSource):
        unsupported("Tensor.is_inference() of a tensor computed in the graph: it depends on the inference "
                    "mode at run time", hint="kiln runs the call as Python")
    flag = _real_flag(tx, source)
    tx.output.guards.constant(CallSource(AttrSource(source, "is_inference")), flag)
    return ConstantValue(flag)


def _real_flag(tx, source) -> bool:
    """The is_inference() flag of the frame's tensor at `source`, read through the source's own code."""
    root = tx.root()
    name = source.name()
    if name.startswith("L['") and name.endswith("']") and name.count("'") == 2:
        value = root.frame_locals.get(name[3:-2])
        if isinstance(value, torch.Tensor):
            return value.is_inference()
    unsupported(f"Tensor.is_inference() of {name}, which kiln cannot read while tracing")
