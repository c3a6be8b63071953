"""torch.* / torch.nn.functional.* functions (recorded as graph ops) and Python modules (torch, math, F)."""
from __future__ import annotations

import math
import types

import torch

from kiln.capture.sources import AttrSource, ConstantSource
from kiln.capture.values.base import ConstantValue, KnownFunctionValue, Value, unsupported
from kiln.capture.values.tensors import TensorValue

# functions of the torch namespace that change global state or need data: never put in a graph
_NOT_IN_GRAPH = {
    torch.manual_seed, torch.seed, torch.set_default_dtype, torch.set_grad_enabled, torch.set_printoptions,
    torch.use_deterministic_algorithms, torch.save, torch.load, torch.set_num_threads, torch.is_nonzero,
    torch.equal, torch.allclose, torch.nonzero, torch.masked_select, torch.unique, torch.set_default_device,
    torch.get_rng_state, torch.set_rng_state, torch.initial_seed,
}
# data-dependent results recorded with unbacked sizes where the policy allows them (kiln/fake/unbacked.py)
_UNBACKED_FUNCTIONS = {torch.nonzero, torch.masked_select, torch.unique}
_RNG_STATE_NAMES = ("manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state")


def is_rng_state_function(fn) -> bool:
    """torch.manual_seed and friends: they read or reseed the global generator. Matched by name, since
    torch.manual_seed may be a wrapper installed after kiln was imported."""
    return getattr(fn, "__module__", None) in ("torch", "torch.random") and \
        getattr(fn, "__name__", None) in _RNG_STATE_NAMES


# functions answered at trace time from metadata or from state that the guards pin down
_CONSTANT_FUNCTIONS = {
    torch.is_tensor: lambda *a: isinstance(a[0], torch.Tensor),
    torch.is_floating_point: lambda t: t.is_floating_point(),
    torch.is_complex: lambda t: t.is_complex(),
    torch.numel: lambda t: t.numel(),
    torch.get_default_dtype: lambda: torch.get_default_dtype(),
    torch.is_grad_enabled: lambda: torch.is_grad_enabled(),
    torch.is_autocast_enabled: lambda *a: torch.is_autocast_enabled(*a),
    torch.finfo: lambda *a: torch.finfo(*a),
    torch.iinfo: lambda *a: torch.iinfo(*a),
    torch.promote_types: lambda a, b: torch.promote_types(a, b),
    torch.result_type: None,  # handled on fakes
    torch.cuda.is_available: lambda: torch.cuda.is_available(),
}
_NOT_COMPILING = ("is_compiling", "is_dynamo_compiling", "is_exporting")

# torch.overrides.has_torch_function{,_unary,_variadic}: asked by library code before its fast paths
_HAS_TORCH_FUNCTION = {torch._C._has_torch_function, torch._C._has_torch_function_unary,
                       torch._C._has_torch_function_variadic}


def has_torch_function(args: list[Value]) -> bool:
    """The answer for the real arguments: tensors in a graph are plain tensors or parameters (the types
    of inputs are guarded; subclasses are refused), constants have no __torch_function__ of their own.
    An active TorchFunctionMode would make it True: kiln does not trace under one."""
    from kiln.capture.values.containers import SequenceValue

    if torch._C._is_torch_function_mode_enabled():
        unsupported("has_torch_function() under an active TorchFunctionMode")
    plain = (torch.Tensor, torch.nn.Parameter)
    for arg in args:
        items = arg.elements if isinstance(arg, SequenceValue) else [arg]
        for item in items:
            if isinstance(item, TensorValue):
                if item.tensor_type not in plain:
                    unsupported(f"has_torch_function() of a {item.tensor_type.__name__}")
            elif not item.is_constant() or hasattr(type(item.as_constant()), "__torch_function__"):
                unsupported(f"has_torch_function() of {item}")
    return False


# Python-level namespaces of torch whose functions compute tensors from tensors without side effects:
# a call becomes one graph op (the graph runs the function itself)
_MATH_NAMESPACES = ("torch._C", "torch.masked", "torch.signal", "torch.nn.functional", "torch.fft",
                    "torch.linalg", "torch.special", "torch._linalg_utils", "torch._lowrank")


def is_torch_function(obj) -> bool:
    if isinstance(obj, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return True  # torch.ops.<namespace>.<op>[.<overload>]: dispatcher ops, called straight from user code
    if isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        mod = getattr(obj, "__module__", None) or ""
        self_obj = getattr(obj, "__self__", None)
        if mod.startswith("torch"):
            return True
        return isinstance(self_obj, types.ModuleType) and self_obj.__name__.startswith("torch") or \
            type(self_obj).__name__ in ("_VariableFunctionsClass",) or \
            (self_obj is not None and getattr(self_obj, "__name__", "").startswith("torch._C"))
    if isinstance(obj, types.FunctionType):
        mod = obj.__module__ or ""
        return mod in ("torch.nn.functional", "torch.functional", "torch", "torch._tensor", "torch.fft",
                       "torch.linalg", "torch.special") or mod.startswith(_MATH_NAMESPACES)
    if type(obj).__name__ in ("method_descriptor", "wrapper_descriptor", "getset_descriptor"):
        return getattr(obj, "__objclass__", None) in (torch._C.TensorBase, torch.Tensor)
    return False


def refuse_new_leaf(kwargs: dict, what: str) -> None:
    """A factory call with ``requires_grad=True`` makes a new leaf tensor that autograd tracks (its
    ``.grad`` fills, ``autograd.grad`` differentiates with respect to it): a graph value is never that.
    The call runs between two graphs, as eager, and the leaf enters the next graph as an input."""
    grad = kwargs.get("requires_grad")
    if grad is not None and not (grad.is_constant() and grad.as_constant() is False):
        unsupported(f"{what}(..., requires_grad=True) makes a new leaf tensor that autograd tracks",
                    hint="kiln runs the call between two graphs; the new leaf enters the next graph as an input")


def _refuse_growing_mask(args, kwargs) -> None:
    """SDPA whose mask would broadcast the scores to a larger shape (more dims, or a size-1 dim made
    larger): ATen adds it in place and raises, but on fake tensors (tensor subclasses) it adds out of
    place and gives a larger result. The call runs as Python, which raises eager's error."""
    from kiln.decomp.attention import mask_grows_scores

    values = dict(zip(("query", "key", "value", "attn_mask"), args))
    values.update({k: v for k, v in kwargs.items() if k in ("query", "key", "value", "attn_mask")})
    tensors = {k: getattr(v, "example", None) for k, v in values.items()}
    if not all(isinstance(t, torch.Tensor) for t in tensors.values()) or len(tensors) != 4:
        return
    q, k, mask = tensors["query"], tensors["key"], tensors["attn_mask"]
    if q.dim() < 2 or k.dim() < 2:
        return
    try:
        batch = torch.broadcast_shapes(tuple(q.shape[:-2]), tuple(k.shape[:-2]))
    except RuntimeError:  # (grouped-query heads: the scores take the query's)
        batch = tuple(q.shape[:-2])
    scores = (*batch, q.shape[-2], k.shape[-2])
    if mask_grows_scores(mask.shape, scores):
        unsupported("scaled_dot_product_attention with a mask that broadcasts the scores to a larger shape "
                    "(eager raises)", hint="the call runs as Python, which raises eager's error")


class TorchFunctionValue(KnownFunctionValue):
    """A function of the torch namespace: calls become graph ops."""

    def call(self, tx, args, kwargs) -> Value:
        fn = self.fn
        if is_rng_state_function(fn):
            unsupported(f"torch.{fn.__name__}() reads or reseeds the global random number generator",
                        hint="kiln runs it between two graphs; random ops in the next graph draw from the "
                             "generator in program order, as in eager")
        if fn is torch.from_numpy:  # a tensor sharing the array's memory (values/numpy_values.py)
            from kiln.capture.values.numpy_values import ndarray_as_tensor

            return ndarray_as_tensor(tx, args, kwargs)
        if fn is torch.as_tensor and len(args) == 1 and not kwargs and type(args[0]).__name__ == "NDArrayValue":
            from kiln.capture.values.numpy_values import ndarray_as_tensor

            if args[0].scalar:  # a NumPy scalar: a new 0-d tensor of its dtype
                return tx.output.call("call_function", torch.ops.aten.clone.default, [args[0].tensor], {})
            return ndarray_as_tensor(tx, args, kwargs)  # an array: shares its memory, as from_numpy
        refuse_new_leaf(kwargs, f"torch.{getattr(fn, '__name__', fn)}")
        if fn is torch._C._nn.scaled_dot_product_attention:
            _refuse_growing_mask(args, kwargs)
        if fn in (torch.tensor, torch.as_tensor):
            from kiln.capture.values.symbolic import tensor_of_sizes

            made = tensor_of_sizes(tx, fn, args, kwargs)  # torch.tensor(x.shape): sizes stay symbolic
            if made is not None:
                return made
        if fn in _NOT_IN_GRAPH and not (fn in _UNBACKED_FUNCTIONS and getattr(tx.output.dynamic, "unbacked", False)):
            unsupported(f"torch.{getattr(fn, '__name__', fn)} changes global state or needs tensor data")
        if fn is torch.is_grad_enabled:
            return ConstantValue(tx.output.grad_enabled)  # the mode at this point of the graph
        if fn is torch.is_inference_mode_enabled:
            from kiln.capture.values.inference import inference_mode_enabled

            return inference_mode_enabled(tx)  # guarded (values/inference.py)
        if fn in _HAS_TORCH_FUNCTION:
            return ConstantValue(has_torch_function(args))
        if fn in (torch.is_autocast_enabled, torch.get_autocast_dtype) and all(a.is_constant() for a in args):
            # inside autocast blocks the graph opened, the state they set (not the ambient one)
            device = args[0].as_constant() if args else "cuda"
            for entry_device, dtype, enabled, _ in reversed(tx.output.autocast_stack):
                if entry_device == device:
                    return ConstantValue(enabled if fn is torch.is_autocast_enabled else dtype)
        if fn in _CONSTANT_FUNCTIONS and _CONSTANT_FUNCTIONS[fn] is not None:
            cargs = [a.example if isinstance(a, TensorValue) else a.as_constant() for a in args]
            return ConstantValue(_CONSTANT_FUNCTIONS[fn](*cargs, **{k: v.as_constant() for k, v in kwargs.items()}))
        if getattr(fn, "__name__", "") in _NOT_COMPILING and (fn.__module__ or "").startswith("torch"):
            return ConstantValue(False)
        offset_at = _ABSOLUTE_OFFSET_ARGS.get(getattr(fn, "__name__", None))
        if offset_at is not None and (fn in _ABSOLUTE_OFFSET_FUNCTIONS or type(fn).__name__ == "method_descriptor") \
                and args and isinstance(args[0], TensorValue) and (len(args) > offset_at or "storage_offset" in kwargs):
            tx.output.guard_storage_offset(args[0].example)  # (as_strided's offset is into the storage)
        if type(fn).__name__ in ("method_descriptor", "wrapper_descriptor") and args:
            # torch.Tensor.add(x, y): an unbound Tensor method
            return tx.output.call("call_method", fn.__name__, args, kwargs)
        return tx.output.call("call_function", fn, args, kwargs)

    def getattr(self, tx, name: str) -> Value:
        if isinstance(self.fn, torch._ops.OpOverloadPacket):
            try:
                overload = getattr(self.fn, name)
            except AttributeError:
                unsupported(f"{self.fn} has no overload {name!r}")
            if isinstance(overload, torch._ops.OpOverload):
                return TorchFunctionValue(overload)
        if name in ("__name__", "__qualname__", "__module__") and isinstance(getattr(self.fn, name, None), str):
            return ConstantValue(getattr(self.fn, name))
        unsupported(f"attribute {name!r} of {self}")

    def __repr__(self) -> str:
        return f"TorchFunction({getattr(self.fn, '__qualname__', self.fn)})"


class PythonModuleValue(Value):
    """A Python module object (torch, torch.nn.functional, math, ...): attribute reads resolve statically."""

    def __init__(self, module: types.ModuleType, source=None):
        self.module = module
        self.source = source

    def python_type(self) -> type:
        return types.ModuleType

    def is_constant(self) -> bool:
        return True

    def as_constant(self):
        return self.module

    def attribute(self, name: str):
        """The module's attribute `name`, or a break naming what is missing."""
        try:
            return getattr(self.module, name)
        except AttributeError:
            unsupported(f"module {self.module.__name__!r} has no attribute {name!r}")

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.builder import wrap

        value = self.attribute(name)
        # attributes of library modules are treated as fixed; user modules are guarded through the source
        library = self.module.__name__.split(".")[0] in ("torch", "math", "operator", "functools", "collections",
                                                        "typing", "itertools", "builtins", "numbers", "enum")
        if library or self.source is None:
            return wrap(tx, value, ConstantSource(f"{self.module.__name__}.{name}", value))
        return wrap(tx, value, AttrSource(self.source, name))

    def reconstruct(self, cg) -> None:
        cg.load_const(self.module)

    def __repr__(self) -> str:
        return f"Module[{self.module.__name__}]"


# functions whose ``storage_offset`` argument (at this position, or by keyword) is an offset into the
# input's storage: the trace guards the caller's offset where it is given (OutputGraph.guard_storage_offset)
_ABSOLUTE_OFFSET_ARGS = {"as_strided": 3, "as_strided_": 3, "as_strided_copy": 3, "as_strided_scatter": 4,
                         "storage_offset": 0}
_ABSOLUTE_OFFSET_FUNCTIONS = frozenset({torch.as_strided, torch.as_strided_copy, torch.as_strided_scatter})
