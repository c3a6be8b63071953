"""``p.grad`` of a graph input read and written inside a compiled function (update loops over
``model.parameters()``, ``p.grad = None``, ``p.grad.zero_()``).

A read of an input tensor's ``.grad`` is the real tensor's ``.grad`` when the frame is traced:
``None`` (guarded to stay None), or a tensor that becomes a graph input of its own at
``AttrSource(p, "grad")`` (guarded like every tensor input). Nothing in a graph changes a ``.grad``
behind kiln's back: ``backward()`` and ``torch.autograd`` calls break the graph, so the frame after
the break reads ``.grad`` again.

A store ``p.grad = v`` is a side effect replayed after the graph, like attribute stores to other
existing objects, and later reads in the same frame see ``v``. Eager checks the new gradient's
metadata at the store; kiln checks it while tracing and breaks the graph where eager would raise
(a mismatched dtype, device or size), so the error is eager's own, at its line.

Refused (a graph break with a reason): ``.grad`` of a tensor made inside the graph (eager gives None
with a warning for non-leaves, or the leaf's grad a later backward fills), and ``del p.grad``.
"""
from __future__ import annotations

from kiln.capture.side_effects import DELETED
from kiln.capture.sources import AttrSource, ConstantSource
from kiln.capture.values.base import ConstantValue, Value, unsupported


def _real_input(tx, t):
    """(the real tensor behind ``t``, a source for it), or (None, None) when ``t`` is neither a graph
    input nor a parameter or buffer the graph holds (a get_attr node). One tensor object is one fake
    tensor (an in-place op's result is its input's): the lookup is by the fake."""
    out = tx.output
    for value, real in zip(out._input_values, out.example_inputs):
        if value.example is t.example and value.source is not None:
            return real, value.source
    for name in out._attr_names.values():
        held = getattr(out.root, name)
        if out.fake_mode.from_real(held) is t.example:
            return held, ConstantSource(f"held {name}", held)
    return None, None


class _GradOwner(Value):
    """The tensor whose ``.grad`` is written, as the side-effect record names it: the real tensor
    (the written place) and where the transformed code finds it."""

    def __init__(self, obj, source):
        self.obj, self.source = obj, source


def read_grad(tx, t) -> Value:
    real, source = _real_input(tx, t)
    recorded = tx.output.side_effects.load_attr(_GradOwner(real, source), "grad") if real is not None else None
    if recorded is DELETED:
        return ConstantValue(None)
    if recorded is not None:
        return recorded
    if real is None:
        unsupported("Tensor.grad of a tensor made inside the compiled function",
                    hint="read .grad of parameters or inputs; a tensor made in the graph has no gradient yet")
    from kiln.capture.values.builder import wrap

    return wrap(tx, real.grad, AttrSource(source, "grad"))


def store_grad(tx, t, value: Value) -> None:
    from kiln.capture.values.tensors import TensorValue, _device_of

    real, source = _real_input(tx, t)
    if real is None:
        unsupported("assigning Tensor.grad of a tensor made inside the compiled function")
    owner = _GradOwner(real, source)
    if isinstance(value, ConstantValue) and value.value is None:
        tx.output.side_effects.store_attr(owner, "grad", value)
        return
    if not isinstance(value, TensorValue):
        unsupported(f"assigning Tensor.grad a {value.python_type().__name__} (eager raises TypeError)")
    new, ex = value.example, t.example
    if new.dtype != ex.dtype or _device_of(new) != _device_of(ex) or tuple(new.shape) != tuple(ex.shape):
        unsupported("assigning Tensor.grad a tensor of another dtype, device or size (eager raises RuntimeError)")
    tx.output.side_effects.store_attr(owner, "grad", value)
