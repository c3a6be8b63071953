"""``t.data = v`` inside a compiled function, for a graph input or a parameter or buffer the graph holds
(EMA copies, swapping or resizing a parameter in forward, weight-tying tricks).

Eager's ``t.data = v`` (``set_data``) gives the tensor object ``t`` the memory and metadata of ``v`` and
keeps its autograd identity (``requires_grad``, ``.grad``, its version counter). kiln records it as a side
effect replayed after the graph, in program order, as the same statement on the real tensors: the graph
runs on ``t`` as it was (writes back into its old memory before the swap, as eager's writes went there),
then ``t`` takes the real ``v`` the graph made (shared by everything else that holds ``v``, so later writes
to one are seen through the other, as in eager).

After the store, ``t`` is *retired* for the rest of the trace (``OutputGraph.retired``): any use of it (an
op, a metadata read, ``t.data``) breaks the graph there, and the rest runs as Python on the swapped
tensor, so nothing traced reads ``t`` with its old memory. Code that swaps and then only returns or hands
on ``t`` is one graph. On the next call the guards read ``t`` as it then is: a held tensor whose metadata
changed fails its guard and recompiles, and a graph that assigns a held tensor's data checks the held
tensors' memory ranges afresh on each call (capture/storage_aliasing.py, ``HeldRanges.live``).

Refused (a graph break, the store then runs as Python): ``t`` made inside the graph, a value that is not
a tensor, another device, a dtype that cannot require grad for a ``t`` that does (eager raises
there), and a store inside an inference-mode block.
"""
from __future__ import annotations

from kiln.capture.values.base import Value, unsupported


def store_data(tx, t, value: Value) -> None:
    from kiln.capture.values.tensor_grad import _GradOwner, _real_input
    from kiln.capture.values.tensors import TensorValue, _device_of

    check_not_retired(tx, t)
    real, source = _real_input(tx, t)
    if real is None:
        unsupported("assigning Tensor.data of a tensor made inside the compiled function",
                    hint="assign .data of an input, a parameter or a buffer")
    if not isinstance(value, TensorValue):
        unsupported(f"assigning Tensor.data a {value.python_type().__name__} (eager raises TypeError)")
    check_not_retired(tx, value)
    new, ex = value.example, t.example
    if _device_of(new) != _device_of(ex):
        unsupported("assigning Tensor.data a tensor on another device")
    if real.requires_grad and not (new.dtype.is_floating_point or new.dtype.is_complex):
        unsupported("assigning Tensor.data of a tensor that requires grad a tensor of an integer dtype "
                    "(eager raises RuntimeError)")
    if tx.output.inference.active():
        unsupported("assigning Tensor.data inside an inference_mode block")
    tx.output.side_effects.store_attr(_GradOwner(real, source), "data", value)
    where = getattr(source, "label", None) or source.name()
    tx.output.retire(t.example, f"its .data was assigned earlier in this graph ({where})")


def check_not_retired(tx, t) -> None:
    """Break at a use of a tensor whose ``.data`` this trace assigned (see the module doc)."""
    retired = tx.output.retired
    if retired and id(t.example) in retired:
        unsupported(f"a use of a tensor after {retired[id(t.example)]}",
                    hint="the rest runs as Python on the swapped tensor")
