"""Tensors in the graph: an FX node plus a fake tensor that carries its metadata."""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from kiln.capture.values.base import ConstantValue, Value, unsupported
from kiln.capture.values.containers import TupleValue
from kiln.capture.values.symbolic import has_symbolic
from kiln.capture.values.tensor_data_store import check_not_retired

# methods whose result is metadata known at trace time (shapes are static for now and guarded)
_METADATA_METHODS = {
    "size", "dim", "ndimension", "stride", "numel", "nelement", "is_contiguous", "element_size",
    "is_floating_point", "is_complex", "get_device", "is_signed", "storage_offset", "type",
}
_ABSOLUTE_OFFSET_METHODS = {"as_strided", "as_strided_"}  # their storage_offset argument is absolute
_METADATA_ATTRS = {
    "shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "is_cpu", "is_meta", "is_sparse",
    "is_quantized", "layout", "is_leaf", "itemsize", "is_mps", "is_nested",
}
# attributes that are tensors computed from the tensor (recorded as getattr ops)
_TENSOR_ATTRS = {"T", "mT", "H", "mH", "real", "imag"}
# methods whose result depends on tensor data: they cannot be traced
_DATA_METHODS = {
    "item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "nonzero",
    "masked_select", "unique", "unique_consecutive", "data_ptr", "untyped_storage", "storage",
    "backward", "register_hook", "retain_grad", "__array__", "cpu_numpy", "equal", "allclose",
    "bincount", "repeat_interleave_data",
}

# data methods whose results are unbacked sizes where the policy allows them (kiln/fake/unbacked.py)
_UNBACKED_METHODS = {"item", "nonzero", "masked_select", "unique"}


class TensorValue(Value):
    def __init__(self, node: fx.Node, example: torch.Tensor, source=None, tensor_type: type = torch.Tensor):
        self.node = node
        self.example = example
        self.source = source
        self.tensor_type = tensor_type  # nn.Parameter for parameters passed in, else torch.Tensor

    def python_type(self) -> type:
        return self.tensor_type

    def truth(self, tx) -> bool:
        unsupported("data-dependent control flow: the truth value of a tensor depends on its data",
                    hint="use torch.where, or move the condition out of the compiled function")

    def items(self, tx) -> list[Value]:
        if tx.output.retired:
            check_not_retired(tx, self)
        if self.example.dim() == 0:
            unsupported("iteration over a 0-d tensor")
        return [tx.output.call("call_function", operator.getitem, [self, ConstantValue(i)], {})
                for i in range(self.example.shape[0])]

    def getattr(self, tx, name: str) -> Value:
        if tx.output.retired:
            check_not_retired(tx, self)
        ex = self.example
        if name in _METADATA_ATTRS:
            if name == "is_leaf":
                return ConstantValue(self.is_leaf(tx))
            if name == "device":
                return ConstantValue(ex.fake_device if hasattr(ex, "fake_device") else ex.device)
            if name == "shape" and has_symbolic(ex.shape):  # dynamic dims: sizes computed by the graph
                return tx.output.call("call_method", "size", [self], {})
            if name == "is_cuda":
                return ConstantValue(ex.fake_device.type == "cuda")
            if name == "is_cpu":
                return ConstantValue(ex.fake_device.type == "cpu")
            return ConstantValue(getattr(ex, name))
        if name in _TENSOR_ATTRS:
            return tx.output.call("call_function", getattr, [self, ConstantValue(name)], {})
        if name == "grad":
            from kiln.capture.values.tensor_grad import read_grad

            return read_grad(tx, self)
        if name == "data":
            return tx.output.tensor_data(self)
        if name == "__class__":  # the exact type (inputs' is guarded with their metadata)
            from kiln.capture.values.objects import ClassValue

            return ClassValue(self.python_type())
        if name == "grad_fn" and self.is_leaf(tx):
            return ConstantValue(None)  # a leaf has no grad_fn (a non-leaf's Node object is made at run time)
        if name in ("grad_fn", "_version", "_base"):
            unsupported(f"Tensor.{name} inside a compiled function",
                        hint="autograd state is not captured yet; read it outside the compiled function")
        if name in _DATA_METHODS:
            return TensorMethodValue(self, name)
        if hasattr(torch.Tensor, name):
            return TensorMethodValue(self, name)
        real = tx.output.real_tensor_of(self)
        if real is not None and self.source is not None and name in getattr(real, "__dict__", {}):
            # a Python attribute set on the caller's tensor (``x.scale = 5``): read from its place, guarded
            from kiln.capture.sources import AttrSource
            from kiln.capture.values.builder import wrap

            return wrap(tx, real.__dict__[name], AttrSource(self.source, name))
        unsupported(f"'Tensor' object has no attribute {name!r}")

    def call_method(self, tx, name: str, args, kwargs) -> Value:
        return TensorMethodValue(self, name).call(tx, args, kwargs)

    def is_leaf(self, tx) -> bool:
        if self.source is not None:  # an input: as the caller's tensor is (w * 1 is no leaf), guarded
            return tx.output.input_is_leaf(self.source)
        held = tx.output.held_tensor_of(self.example)
        if held is not None:  # a parameter or buffer (identity-guarded): as it is
            return held.is_leaf
        # a fresh graph value: as its fake, made under the traced grad mode (a leaf exactly when it needs
        # no grad, but for a view of a tensor needing grad made under no_grad: it needs grad and is a leaf)
        return self.example.is_leaf

    def __repr__(self) -> str:
        ex = self.example
        return f"Tensor({self.node.name}: {ex.dtype} {tuple(ex.shape)})"


def _device_of(ex) -> torch.device:
    return ex.fake_device if hasattr(ex, "fake_device") else ex.device


class TensorMethodValue(Value):
    """`tensor.method`, bound but not yet called."""

    def __init__(self, tensor: TensorValue, name: str):
        self.tensor = tensor
        self.name = name

    def call(self, tx, args, kwargs) -> Value:
        if tx.output.retired:
            check_not_retired(tx, self.tensor)
        name, ex = self.name, self.tensor.example
        if len(args) == 1 and not kwargs:  # x.mul(lr), x.add_(s): a float argument as a graph input
            from kiln.capture.values.symbolic_float import float_method

            result = float_method(tx, self.tensor, name, args[0])
            if result is not None:
                return result
        if name == "numpy":  # an ndarray sharing the tensor's memory (values/numpy_values.py)
            from kiln.capture.values.numpy_values import tensor_as_ndarray

            return tensor_as_ndarray(tx, self.tensor, args, kwargs)
        if name in _DATA_METHODS and not (name in _UNBACKED_METHODS and getattr(tx.output.dynamic, "unbacked", False)):
            unsupported(f"Tensor.{name}() needs the tensor's data",
                        hint="kiln breaks the graph here and runs it as Python")
        if name in _METADATA_METHODS:
            if not all(a.is_constant() for a in args) or not all(v.is_constant() for v in kwargs.values()):
                unsupported(f"Tensor.{name} with non-constant arguments")
            if name == "storage_offset":
                tx.output.guard_storage_offset(ex)
            if name in ("size", "numel", "nelement") and has_symbolic(ex.shape):
                return tx.output.call("call_method", name, [self.tensor, *args], kwargs)
            cargs = [a.as_constant() for a in args]
            ckwargs = {k: v.as_constant() for k, v in kwargs.items()}
            if name == "get_device":
                dev = _device_of(ex)
                return ConstantValue(dev.index if dev.type == "cuda" else -1)
            if name == "type" and (cargs or ckwargs):
                return tx.output.call("call_method", name, [self.tensor, *args], kwargs)
            if name == "type":
                dev = _device_of(ex)
                base = {torch.float32: "FloatTensor", torch.float64: "DoubleTensor", torch.float16: "HalfTensor",
                        torch.bfloat16: "BFloat16Tensor", torch.int64: "LongTensor", torch.int32: "IntTensor",
                        torch.int16: "ShortTensor", torch.int8: "CharTensor", torch.uint8: "ByteTensor",
                        torch.bool: "BoolTensor"}.get(ex.dtype)
                if base is None:
                    unsupported(f"Tensor.type() of {ex.dtype}")
                return ConstantValue(("torch.cuda." if dev.type == "cuda" else "torch.") + base)
            return ConstantValue(getattr(ex, name)(*cargs, **ckwargs))
        if name in _ABSOLUTE_OFFSET_METHODS and (len(args) > 2 or "storage_offset" in kwargs):
            tx.output.guard_storage_offset(ex)  # (an offset into the storage, not into the tensor)
        if name == "__setitem__":
            tx.output.call("call_function", operator.setitem, [self.tensor, *args], kwargs)
            return ConstantValue(None)
        if name == "requires_grad_":
            unsupported("Tensor.requires_grad_() inside a compiled function")
        if name.startswith("new_"):
            from kiln.capture.values.torch_functions import refuse_new_leaf

            refuse_new_leaf(kwargs, f"Tensor.{name}")
        if name == "new_tensor" and len(args) == 1:  # x.new_tensor(x.shape): torch.tensor of the sizes, with
            from kiln.capture.values.symbolic import tensor_of_sizes  # x's dtype and device by default

            options = {"dtype": ConstantValue(ex.dtype), "device": ConstantValue(_device_of(ex)), **kwargs}
            made = tensor_of_sizes(tx, torch.tensor, args, options)
            if made is not None:
                return made
        if name == "is_inference" and not args and not kwargs:
            from kiln.capture.values.inference import tensor_is_inference

            return tensor_is_inference(tx, self.tensor)  # guarded, or a break (values/inference.py)
        return tx.output.call("call_method", name, [self.tensor, *args], kwargs)

    def reconstruct(self, cg) -> None:
        cg.reconstruct(self.tensor)
        cg.load_attr(self.name)

    def __repr__(self) -> str:
        return f"TensorMethod({self.tensor!r}.{self.name})"
