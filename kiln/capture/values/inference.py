"""Inference mode inside compiled code: `with torch.inference_mode():` blocks, and the queries about it.

A block is traced into the graph (one graph, as TorchDynamo) when the mode is off around the call
(guarded): entering it switches grad mode off in the graph (`_set_grad_enabled` nodes, as `no_grad`),
and `InferenceState` follows which tensors of the trace eager would make inference tensors:

- inside a block, a tensor with new storage is an inference tensor; a view shares its base's flag;
- outside, a view of an inference tensor is one too; every other result is a normal tensor.

The graph itself computes plain tensors (no backend makes inference tensors); the graph's outputs that
are inference tensors in eager are turned into inference tensors sharing their storage
(`InferenceOutputs`, around the compiled graph), so `is_inference()`, `requires_grad` (False), aliasing
between outputs and eager's later errors on them are eager's. Where inference mode is not the same as
no_grad, or eager would raise, the op breaks the graph and runs as Python:

- inside a block: a view of a tensor that requires grad (it requires grad in eager, not under no_grad);
  switching grad mode on (`enable_grad` inside inference mode records nothing); `inference_mode(False)`;
- outside: an in-place op on an inference tensor or on a normal tensor viewed inside a block (eager
  raises), any op mixing an inference tensor with a tensor that requires grad while grad is on (eager
  raises if autograd saves it for backward);
- a graph break inside a block moves to its `with` statement (the block then runs under the real mode,
  continued by a resume function), as for @contextmanager blocks.

What traced code asks is answered exactly: `torch.is_inference_mode_enabled()` is True inside a block,
else the mode at trace time guarded by a call of the same query; `t.is_inference()` of an input is its
flag (guarded), of a tensor computed in the graph the flag above (with the mode guarded off).
"""
from __future__ import annotations

import torch

from kiln.capture.values.base import ConstantValue, Value, unsupported


def storage_key(fake: torch.Tensor) -> int:
    return fake.untyped_storage()._cdata


class InferenceState:
    """Per graph: the inference-mode blocks open at this point and the storages of inference tensors."""

    def __init__(self) -> None:
        self.depth = 0  # open `with torch.inference_mode()` blocks
        self.storages: set[int] = set()  # storages of inference tensors (eager's is_inference())
        self.viewed_inside: set[int] = set()  # storages of normal tensors viewed inside a block

    def active(self) -> bool:
        return bool(self.depth or self.storages or self.viewed_inside)

    def is_inference(self, fake: torch.Tensor) -> bool:
        return storage_key(fake) in self.storages

    def note_input(self, real: torch.Tensor, fake: torch.Tensor) -> None:
        if real.is_inference():
            self.storages.add(storage_key(fake))

    def check_op(self, grad_enabled: bool, tensors_in: list, written: list, results: list, what: str) -> None:
        """After an op ran on fakes: follow the flags; break where eager's inference mode differs."""
        keys_in = {storage_key(t) for t in tensors_in}
        if self.depth:
            for r in results:
                key = storage_key(r)
                if key not in keys_in:
                    self.storages.add(key)  # made inside the block
                elif key not in self.storages and not any(r is t for t in tensors_in):
                    if any(t.requires_grad for t in tensors_in if storage_key(t) == key):
                        unsupported(f"{what}: a view of a tensor that requires grad inside torch.inference_mode() "
                                    f"(it requires grad in eager, unlike under no_grad)")
                    self.viewed_inside.add(key)
            return
        for w in written:
            key = storage_key(w)
            if key in self.storages or key in self.viewed_inside:
                unsupported(f"{what}: an in-place change, outside inference mode, of a tensor made or viewed inside "
                            f"torch.inference_mode()", hint="eager raises here; kiln runs it as Python")
        if grad_enabled and any(t.requires_grad for t in tensors_in) and keys_in & self.storages:
            unsupported(f"{what}: an inference tensor used with a tensor that requires grad",
                        hint="eager raises if autograd saves it for backward; kiln runs it as Python")


class InferenceOutputs:
    """Around a compiled graph: its outputs at `indexes` become inference tensors sharing their storage."""

    def __init__(self, compiled, indexes: list[int]):
        self.compiled, self.indexes = compiled, indexes

    def __call__(self, *args):
        outs = list(self.compiled(*args))
        with torch.inference_mode():
            for i in self.indexes:
                t = outs[i]
                if not t.is_inference():
                    outs[i] = torch.empty((0,), dtype=t.dtype, device=t.device).set_(
                        t.untyped_storage(), t.storage_offset(), t.size(), t.stride())
        return outs

    def __getattr__(self, name):  # kiln_explain and the like, from the backend's callable
        return getattr(self.compiled, name)


class InferenceModeValue(Value):
    """`torch.inference_mode(mode)`: its block is traced (see the module doc)."""

    def __init__(self, mode: bool):
        self.mode = mode
        self.previous_grad: bool | None = None

    def python_type(self) -> type:
        return torch.inference_mode

    def enter(self, tx) -> Value:
        from kiln.capture.values.contexts import set_grad_mode

        state = tx.output.inference
        if not self.mode:
            if state.depth:
                unsupported("torch.inference_mode(False) inside an inference-mode block")
            return ConstantValue(None)
        if not state.depth and inference_mode_enabled(tx).as_constant():
            unsupported("torch.inference_mode() inside code already running in inference mode")
        self.previous_grad = tx.output.grad_enabled
        set_grad_mode(tx, False)
        state.depth += 1
        return ConstantValue(None)

    def exit(self, tx) -> Value:
        from kiln.capture.values.contexts import set_grad_mode

        if self.mode:
            tx.output.inference.depth -= 1
            set_grad_mode(tx, self.previous_grad)
        return ConstantValue(None)

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.contexts import _ContextMethod

        if name in ("__enter__", "__exit__"):
            return _ContextMethod(self, name)
        unsupported(f"attribute {name!r} of torch.inference_mode")

    def call(self, tx, args, kwargs) -> Value:
        unsupported("using torch.inference_mode as a decorator inside a compiled function")

    def reconstruct(self, cg) -> None:  # not entered yet (a break at its `with`)
        cg.prepare_call(torch.inference_mode)
        cg.load_const(self.mode)
        cg.call(1)


def make_inference_mode(tx, args, kwargs) -> Value:
    mode = args[0] if args else kwargs.get("mode", ConstantValue(True))
    if not mode.is_constant():
        unsupported("torch.inference_mode(mode) with a mode computed while tracing")
    return InferenceModeValue(bool(mode.as_constant()))


def inference_mode_enabled(tx) -> Value:
    from kiln.capture.sources import CallSource, ConstantSource

    if tx.output.inference.depth:
        return ConstantValue(True)  # inside a block the graph opened
    query = torch.is_inference_mode_enabled
    enabled = query()
    tx.output.guards.constant(CallSource(ConstantSource("torch.is_inference_mode_enabled", query)), enabled)
    return ConstantValue(enabled)


def tensor_is_inference(tx, tensor) -> Value:
    from kiln.capture.sources import AttrSource, CallSource, ConstantSource

    source = tensor.source
    if source is None or isinstance(source, ConstantSource):
        if inference_mode_enabled(tx).as_constant() and not tx.output.inference.depth:
            unsupported("Tensor.is_inference() of a tensor computed in the graph under an outer inference mode",
                        hint="kiln runs the call as Python")
        return ConstantValue(tx.output.inference.is_inference(tensor.example))
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
