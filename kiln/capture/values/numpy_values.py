"""NumPy arrays and scalars inside compiled functions, traced as tensor ops.

An `NDArrayValue` is a tensor of the graph (a `TensorValue`) plus what NumPy says about it: its NumPy
dtype (always the one NumPy would give: results are cast where torch's rules differ), whether it is a
NumPy scalar (np.float64 ...: ufuncs and reductions give one where the result is 0-d) or an array,
and, for a view, the array it views and how (`view_of`), so that a view handed back to Python is made
from its base after the graph (`base[1:]`), as NumPy would have made it.

- Arrays passed in become graph inputs: `torch.from_numpy(a)` of the real array at call time (shares
  its memory, so in-place writes inside the graph are writes to the caller's array), guarded on exact
  type, dtype, shape, strides, writeability and on not overlapping another array input.
- Arrays made while tracing and handed back are `graph_output.numpy()`, NumPy scalars
  `graph_output.numpy()[()]`; views are made from their base again.
- Slices, `.T`, transposes, expand_dims/squeeze/broadcast_to and reshapes of contiguous arrays are
  torch views (writes go through as in NumPy); what NumPy copies is copied (`astype`, `copy`,
  advanced indexing, scalars taken out of an array).

The functions are in numpy_functions.py (numpy_namespace.py maps numpy's names to them), indexing in
numpy_indexing.py, the dtype rules in numpy_promotion.py.
"""
from __future__ import annotations

import operator
import sys
import types
from typing import Any

import torch

from kiln.capture.sources import AttrSource, ConstantSource, Source
from kiln.capture.values.base import BoundMethodValue, ConstantValue, Value, unsupported
from kiln.capture.values.containers import SequenceValue
from kiln.capture.values.tensors import TensorValue


def numpy_module():
    return sys.modules.get("numpy")


# ---- runtime helpers (run by the transformed code) ------------------------------------------------

def tensor_to_ndarray(t: torch.Tensor):
    """A graph result handed back as the array NumPy would have made."""
    return t.numpy()


def tensor_to_numpy_scalar(t: torch.Tensor):
    """A 0-d graph result handed back as a NumPy scalar (np.float64, np.int64, np.bool ...)."""
    return t.numpy()[()]


def arrays_overlap(*arrays) -> bool:
    """Whether the last array may share memory with one of the others (a guard on array inputs)."""
    np = numpy_module()
    last = arrays[-1]
    return any(np.may_share_memory(a, last) for a in arrays[:-1])


class _HelperSource(ConstantSource):
    """A function kiln holds, named `___<label>` in guards (so graph inputs read `from_numpy_a`)."""

    def name(self) -> str:
        return f"___{self.label}"


class CallWithSourcesSource(Source):
    """`fn(arg sources...)` for a function kiln holds: torch.from_numpy(L['a']) (the tensor a graph
    input is made from), arrays_overlap(L['a'], L['b']) (a guarded answer)."""

    def __init__(self, fn, label: str, args: tuple):
        self.base = _HelperSource(label, fn)
        self.args = args

    def name(self) -> str:
        return f"{self.base.name()}({', '.join(a.name() for a in self.args)})"

    def emit(self, cg) -> None:
        from kiln.capture import bytecode as bc

        cg.extend(bc.push_null())
        self.base.emit(cg)
        for a in self.args:
            a.emit(cg)
        cg.call(len(self.args))

    def __eq__(self, other):
        return isinstance(other, CallWithSourcesSource) and other.name() == self.name()

    def __hash__(self):
        return hash(self.name())


# ---- the value --------------------------------------------------------------------------------------

class NDArrayValue(Value):
    """A NumPy array (or NumPy scalar, scalar=True) computed by the graph.

    known: for a NumPy scalar whose value is known while tracing (np.float32(0.5), a guarded scalar
    argument, a ufunc of known scalars and Python numbers, computed by NumPy itself), that real scalar:
    float()/int()/bool()/item() of it are constants instead of reads of the graph's data."""

    known = None

    def __init__(self, tensor: TensorValue, dtype, *, scalar: bool = False, source: Source | None = None,
                 view_of: tuple | None = None, readonly: bool = False, c_order: bool = False):
        self.tensor = tensor
        self.dtype = dtype
        self.scalar = scalar
        self.source = source
        self.created_here = source is None
        self.view_of = view_of  # (base NDArrayValue, python function, constant args): base viewed as fn(base, *args)
        self.readonly = readonly
        # known C-contiguous in NumPy and in torch alike (fresh 1-d arrays are): reshape may view it
        self.c_order = bool(c_order or tensor.example.dim() <= 1 and view_of is None) and \
            tensor.example.is_contiguous()

    @property
    def shape(self) -> tuple:
        return tuple(int(s) for s in self.tensor.example.shape)

    @property
    def ndim(self) -> int:
        return self.tensor.example.dim()

    def python_type(self) -> type:
        return self.dtype.type if self.scalar else numpy_module().ndarray

    def kiln_identity(self) -> bool:
        return True

    def graph_tensors(self) -> list:
        """The graph values the transformed code needs to rebuild this value."""
        if not self.created_here:
            return []
        if self.view_of is not None:
            return [self.view_of[0]]
        return [self.tensor]

    def truth(self, tx) -> bool:
        if self.known is not None:
            return bool(self.known)
        unsupported("the truth value of a NumPy array or scalar depends on its data",
                    hint="use np.where, or move the condition out of the compiled function")

    def items(self, tx) -> list[Value]:
        if self.ndim == 0:
            unsupported("iteration over a 0-d array (NumPy raises TypeError)")
        return [self.getitem(tx, ConstantValue(i)) for i in range(self.shape[0])]

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values import numpy_functions as nf
        from kiln.capture.values.numpy_namespace import METHODS

        if name == "dtype":
            return ConstantValue(self.dtype)
        if name == "shape":
            return ConstantValue(self.shape)
        if name == "ndim":
            return ConstantValue(self.ndim)
        if name == "size":
            return ConstantValue(int(self.tensor.example.numel()))
        if name == "itemsize":
            return ConstantValue(self.dtype.itemsize)
        if name == "nbytes":
            return ConstantValue(self.dtype.itemsize * int(self.tensor.example.numel()))
        if name == "T":
            return nf.transpose(tx, self)
        if name in METHODS:
            return BoundMethodValue(self, name)
        unsupported(f"numpy.ndarray attribute {name!r} inside a compiled function",
                    hint="kiln traces the attributes and methods listed in docs/capture.md (NumPy)")

    def call_method(self, tx, name: str, args, kwargs) -> Value:
        from kiln.capture.values.numpy_namespace import METHODS

        if name in ("item", "tolist") and self.known is not None and not args and not kwargs:
            return ConstantValue(self.known.item())  # a NumPy scalar known while tracing
        handler = METHODS.get(name)
        if handler is None:
            unsupported(f"numpy.ndarray.{name}() is not in kiln's NumPy mapping")
        try:
            return handler(tx, self, *args, **kwargs)
        except TypeError as exc:
            unsupported(f"numpy.ndarray.{name} called with arguments kiln does not trace: {exc}")

    def getitem(self, tx, index: Value) -> Value:
        from kiln.capture.values.numpy_indexing import array_getitem

        return array_getitem(tx, self, index)

    def reconstruct(self, cg) -> None:
        if self.view_of is not None:
            base, fn, args = self.view_of
            cg.prepare_call(fn)
            cg.reconstruct(base)
            for a in args:
                cg.load_const(a)
            cg.call(1 + len(args))
            return
        cg.prepare_call(tensor_to_numpy_scalar if self.scalar else tensor_to_ndarray)
        cg.reconstruct(self.tensor)
        cg.call(1)

    def __repr__(self) -> str:
        kind = "scalar" if self.scalar else "ndarray"
        return f"NDArray[{kind} {self.dtype} {self.shape} {self.tensor.node.name}]"


# ---- making values ----------------------------------------------------------------------------------

def cast(tx, tensor: TensorValue, dtype) -> TensorValue:
    """`tensor` in the torch dtype of NumPy dtype `dtype` (the same value when it already is)."""
    from kiln.capture.values.numpy_promotion import NUMPY_TO_TORCH

    target = NUMPY_TO_TORCH[dtype]
    if tensor.example.dtype == target:
        return tensor
    return tx.output.call("call_method", "to", [tensor, ConstantValue(target)], {})


def new_array(tx, tensor: TensorValue, dtype, *, scalar_if_0d: bool = False, c_order: bool = False) -> NDArrayValue:
    """A new array (or NumPy scalar where NumPy gives one for a 0-d result) of NumPy dtype `dtype`.
    c_order: NumPy's result is known to be C-contiguous (e.g. made from C-contiguous operands)."""
    tensor = cast(tx, tensor, dtype)
    return NDArrayValue(tensor, dtype, scalar=scalar_if_0d and tensor.example.dim() == 0, c_order=c_order)


def all_c_order(*values) -> bool:
    """Whether every array among `values` is known C-contiguous (Python numbers count as such)."""
    return all(v.c_order for v in values if isinstance(v, NDArrayValue))


def view_array(tx, base: NDArrayValue, tensor: TensorValue, fn, args: tuple, readonly: bool = False) -> NDArrayValue:
    """A view of `base` (a torch view in the graph): handed back as fn(base, *args) made by NumPy."""
    return NDArrayValue(tensor, base.dtype, view_of=(base, fn, tuple(args)), readonly=readonly or base.readonly,
                        c_order=base.c_order)


def constant_array(tx, data: Any) -> NDArrayValue:
    """np.asarray(data) of Python constants (numbers, nested lists/tuples of numbers) as a graph constant."""
    from kiln.capture.values.numpy_promotion import NUMPY_TO_TORCH, check_dtype

    np = numpy_module()
    try:
        arr = np.asarray(data)
    except Exception as exc:
        unsupported(f"np.asarray({data!r}) raised {type(exc).__name__}: {exc}")
    check_dtype(arr.dtype, "an array made from Python values")
    tensor = tx.output.call("call_function", torch.tensor, [ConstantValue(arr.tolist())],
                            {"dtype": ConstantValue(NUMPY_TO_TORCH[arr.dtype])})
    return NDArrayValue(tensor, arr.dtype, c_order=True)


def numpy_scalar_constant(tx, value) -> NDArrayValue:
    """A NumPy scalar known while tracing (np.float32(2.5), a guarded scalar argument)."""
    from kiln.capture.values.numpy_promotion import NUMPY_TO_TORCH, check_dtype

    dtype = check_dtype(value.dtype, "a NumPy scalar")
    tensor = tx.output.call("call_function", torch.scalar_tensor, [ConstantValue(value.item())],
                            {"dtype": ConstantValue(NUMPY_TO_TORCH[dtype])})
    result = NDArrayValue(tensor, dtype, scalar=True)
    result.known = value
    return result


def known_numpy_result(fn, operands: list[Value], result: NDArrayValue) -> None:
    """Set result.known when every operand is a known NumPy scalar or a Python number (at least one
    NumPy scalar): NumPy computes `fn` on the real values (its warnings silenced: the graph raises
    none either). Only a NumPy scalar of the traced result's dtype is kept."""
    np = numpy_module()
    reals = []
    for v in operands:
        if isinstance(v, NDArrayValue) and v.known is not None:
            reals.append(v.known)
        elif is_python_number(v):
            reals.append(v.as_constant())
        else:
            return
    if not any(isinstance(r, np.generic) for r in reals):
        return
    try:
        with np.errstate(all="ignore"):
            real = fn(*reals)
    except Exception:  # noqa: BLE001 - NumPy refuses: the value stays unknown (the graph decides)
        return
    if result.scalar and isinstance(real, np.generic) and real.dtype == result.dtype:
        result.known = real


# ---- arrays and scalars from the frame --------------------------------------------------------------

def wrap_ndarray(tx, arr, source: Source) -> NDArrayValue:
    """An array argument (or global): a graph input made by torch.from_numpy of the array at call time."""
    from kiln.capture.guards import GuardKind
    from kiln.capture.values.numpy_promotion import check_dtype, numpy_major

    np = numpy_module()
    out = tx.output
    seen = out.__dict__.setdefault("numpy_inputs", {})  # id(array) -> NDArrayValue
    if id(arr) in seen:
        found = seen[id(arr)]
        out.guards.add(GuardKind.IDENTITY_OF_SOURCE, source, found.source)
        return found
    if numpy_major() < 2:
        unsupported(f"NumPy {np.__version__}: kiln models NumPy 2's dtype rules (NEP 50) only")
    if type(arr) is not np.ndarray:
        unsupported(f"a {type(arr).__qualname__} (an ndarray subclass) {source.name()}")
    check_dtype(arr.dtype, f"array {source.name()}")
    if not arr.flags.writeable:
        unsupported(f"read-only array {source.name()}", hint="torch.from_numpy cannot share a read-only array")
    if any(s < 0 or s % arr.itemsize for s in arr.strides):
        unsupported(f"array {source.name()} with negative or unaligned strides {arr.strides}")
    guards = out.guards
    guards.type(source, arr)
    guards.constant(AttrSource(source, "dtype"), arr.dtype)
    guards.constant(AttrSource(source, "shape"), arr.shape)
    guards.constant(AttrSource(source, "strides"), arr.strides)
    guards.constant(AttrSource(AttrSource(source, "flags"), "writeable"), True)
    others = [v for v in seen.values()]
    if others:
        if arrays_overlap(*[o.real for o in others], arr):
            unsupported(f"array {source.name()} shares memory with another array argument",
                        hint="kiln does not model aliasing between array inputs; this runs as Python")
        guards.constant(CallWithSourcesSource(arrays_overlap, "numpy_arrays_overlap",
                                              tuple(o.source for o in others) + (source,)), False)
    tensor = out.add_input(CallWithSourcesSource(torch.from_numpy, "from_numpy", (source,)),
                           torch.from_numpy(arr))
    value = NDArrayValue(tensor, arr.dtype, source=source, c_order=arr.flags.c_contiguous)
    value.real = arr
    seen[id(arr)] = value
    return value


def wrap_numpy_scalar(tx, value, source: Source | None) -> NDArrayValue:
    """A NumPy scalar argument: guarded by type and value, a constant of the graph."""
    if value != value:
        unsupported("a NaN NumPy scalar argument (a guard cannot compare it)")
    if source is not None and not isinstance(source, ConstantSource):
        tx.output.guards.constant(source, value)
    result = numpy_scalar_constant(tx, value)
    return result


def is_numpy_object(value) -> bool:
    """Whether `value` comes from NumPy (arrays, scalars, dtypes, ufuncs, functions, types, modules)."""
    if "numpy" not in sys.modules:
        return False
    if isinstance(value, types.ModuleType):
        return value.__name__ == "numpy" or value.__name__.startswith("numpy.")
    mod = type(value).__module__ or ""
    if mod == "numpy" or mod.startswith("numpy."):
        return True
    if isinstance(value, (type, types.BuiltinFunctionType, types.FunctionType, types.MethodType)):
        owner = getattr(value, "__module__", None) or ""
        return owner == "numpy" or owner.startswith("numpy.")
    return False


def wrap_numpy_object(tx, value, source: Source | None) -> Value:
    """The value for a NumPy object read from the frame or from the numpy module."""
    from kiln.capture.values.numpy_namespace import NumpyFunctionValue, NumpyModuleValue, NumpyTypeValue

    np = numpy_module()
    guardable = source is not None and not isinstance(source, ConstantSource)
    if isinstance(value, types.ModuleType):
        if guardable:
            tx.output.guards.identity(source, value)
        return NumpyModuleValue(value, source)
    if type(value) is np.ndarray or isinstance(value, np.ndarray):
        if not guardable:
            unsupported("a NumPy array kiln holds without a place in the frame")
        return wrap_ndarray(tx, value, source)
    if isinstance(value, np.generic):
        return wrap_numpy_scalar(tx, value, source)
    if isinstance(value, np.dtype):
        if guardable:
            tx.output.guards.constant(source, value)
        return ConstantValue(value, source)
    if isinstance(value, type):
        if guardable:
            tx.output.guards.identity(source, value)
        return NumpyTypeValue(value, source)
    if isinstance(value, (np.ufunc, types.FunctionType, types.BuiltinFunctionType, types.MethodType)) or \
            type(value).__name__ == "_ArrayFunctionDispatcher":
        if guardable:
            tx.output.guards.identity(source, value)
        return NumpyFunctionValue(value, source)
    if not guardable:
        unsupported(f"a NumPy {type(value).__name__} kiln holds without a place in the frame")
    # another NumPy object (a random Generator, a RandomState): held and handed back; using it breaks
    from kiln.capture.values.builder import OpaqueObjectValue

    tx.output.guards.type(source, value)
    return OpaqueObjectValue(value, source)


# ---- operands ---------------------------------------------------------------------------------------

def is_python_number(v: Value) -> bool:
    return v.is_constant() and not isinstance(v, SequenceValue) and type(v.as_constant()) in (bool, int, float)


def as_array(tx, v: Value, where: str) -> NDArrayValue:
    """An operand as an array: arrays as they are; Python numbers and (nested) lists of them as constants."""
    if isinstance(v, NDArrayValue):
        return v
    if isinstance(v, TensorValue):
        unsupported(f"a torch.Tensor passed to {where}: NumPy would convert it with .numpy() (data)",
                    hint="kiln does not mix tensors and NumPy arrays in one graph")
    if isinstance(v, SequenceValue) and any(isinstance(e, NDArrayValue) for e in v.elements):
        from kiln.capture.values.numpy_functions import stack_arrays

        return stack_arrays(tx, [as_array(tx, e, where) for e in v.elements], 0, where)
    if v.is_constant():
        return constant_array(tx, v.as_constant())
    unsupported(f"{v} as an array argument of {where}")


def operand(tx, v: Value, where: str):
    """(promotion operand, value): a Python number stays weak (NEP 50), everything else is an array."""
    if is_python_number(v):
        return v.as_constant(), v.as_constant()
    arr = as_array(tx, v, where)
    return arr.dtype, arr


def ufunc(tx, name: str, torch_fn, operands: list[Value], *, int_safe=None) -> NDArrayValue:
    """np.<name>(*operands): inputs cast to the dtype NumPy's loop computes in, the result in NumPy's
    result dtype; a NumPy scalar where the result is 0-d (as ufuncs give)."""
    from kiln.capture.values.numpy_promotion import NUMPY_TO_TORCH, result_type, ufunc_dtypes

    parts = [operand(tx, v, f"numpy.{name}") for v in operands]
    compute, result = ufunc_dtypes(name, result_type([p[0] for p in parts]))
    args = []
    for _, value in parts:
        if isinstance(value, NDArrayValue):
            args.append(cast(tx, value.tensor, compute))
        else:
            args.append(tx.output.call("call_function", torch.scalar_tensor, [ConstantValue(value)],
                                       {"dtype": ConstantValue(NUMPY_TO_TORCH[compute])}))
    fn = int_safe if int_safe is not None and compute.kind in "biu" else torch_fn
    out = fn(tx, *args) if callable(fn) and getattr(fn, "_kiln_builder", False) else \
        tx.output.call("call_function", fn, args, {})
    return new_array(tx, out, result, scalar_if_0d=True, c_order=all_c_order(*[p[1] for p in parts]))


def builder(fn):
    """Mark a function that emits ops itself (tx, *tensor values) -> TensorValue (ufunc's int_safe)."""
    fn._kiln_builder = True
    return fn


def binary_op(tx, op, a: Value, b: Value) -> Value:
    """Python operators with a NumPy operand (a + b, a @ b, a += b, a < b)."""
    from kiln.capture.values.base import INPLACE_TO_PLAIN
    from kiln.capture.values import numpy_functions as nf

    plain = INPLACE_TO_PLAIN.get(op, op)
    if isinstance(a, TensorValue) or isinstance(b, TensorValue):
        return _tensor_with_numpy_scalar(tx, op, a, b)
    name = nf.OPERATOR_UFUNCS.get(plain)
    if plain is operator.matmul:
        result = nf.matmul(tx, a, b)
    elif name is None:
        unsupported(f"operator {getattr(plain, '__name__', plain)} on a NumPy array")
    else:
        result = nf.call_ufunc(tx, name, [a, b])
    if plain is not op and isinstance(a, NDArrayValue) and not a.scalar:
        return write_in_place(tx, a, result)
    return result


def _tensor_with_numpy_scalar(tx, op, a: Value, b: Value) -> Value:
    """`t * np.float64(2.0)`: torch takes a NumPy scalar as a Python number (np.bool_ and floats as a
    float, ints as an int), so the result is a tensor with torch's promotion for a Python number. The
    scalar enters as a 0-d tensor whose dtype gives that promotion: the tensor's own float dtype wins
    over a 0-d float64 (keeping the double's precision); an int or bool tensor with a float scalar
    gives the default dtype. Arrays (not scalars) with tensors break: torch's rules there depend on
    the operand order and the NumPy version."""
    from kiln.capture.values.base import INPLACE_TO_PLAIN

    scalar, tensor = (a, b) if isinstance(a, NDArrayValue) else (b, a)
    if not isinstance(scalar, NDArrayValue) or not scalar.scalar:
        unsupported("an operator between a torch.Tensor and a NumPy array",
                    hint="convert with torch.from_numpy(a) first")
    ex = tensor.example
    if ex.is_complex() or scalar is a and op in INPLACE_TO_PLAIN:
        unsupported("an operator between a complex tensor (or an in-place NumPy scalar) and a NumPy scalar")
    if scalar.dtype.kind in "iu":
        dtype = torch.int64
    elif ex.is_floating_point():
        dtype = torch.float64
    else:
        dtype = torch.get_default_dtype()
    as_number = tx.output.call("call_method", "to", [scalar.tensor, ConstantValue(dtype)], {})
    args = [as_number, tensor] if scalar is a else [tensor, as_number]
    return tx.output.call("call_function", op, args, {})


def write_in_place(tx, target: NDArrayValue, result: NDArrayValue) -> NDArrayValue:
    """`target op= ...`: the result written into target (NumPy's same_kind casting rule)."""
    from kiln.capture.values.numpy_promotion import can_cast_same_kind

    if target.readonly:
        unsupported("writing to a read-only array (np.broadcast_to gives one; NumPy raises ValueError)")
    if not can_cast_same_kind(result.dtype, target.dtype):
        unsupported(f"in-place operation casting {result.dtype} to {target.dtype} "
                    f"(NumPy raises UFuncTypeError: casting rule 'same_kind')")
    if result.shape != target.shape and torch.broadcast_shapes(result.shape, target.shape) != target.shape:
        unsupported(f"in-place operation broadcasting {result.shape} into {target.shape} (NumPy raises ValueError)")
    tx.output.call("call_method", "copy_", [target.tensor, result.tensor], {})
    return target


def unary_op(tx, op, a: NDArrayValue) -> Value:
    from kiln.capture.values import numpy_functions as nf

    name = {operator.neg: "negative", operator.abs: "absolute", operator.invert: "invert"}.get(op)
    if op is operator.pos:
        return nf.call_ufunc(tx, "positive", [a])
    if name is None:
        unsupported(f"unary {getattr(op, '__name__', op)} of a NumPy array")
    return nf.call_ufunc(tx, name, [a])


def builtin_on_arrays(tx, fn, args: list[Value]) -> Value:
    """abs(a) is np.absolute(a) (ndarray.__abs__), pow(a, b) is np.power(a, b) (ndarray.__pow__)."""
    from kiln.capture.values import numpy_functions as nf

    return nf.call_ufunc(tx, "absolute" if fn is abs else "power", list(args))



# ---- tensors and arrays sharing memory --------------------------------------------------------------

def tensor_as_ndarray(tx, t: TensorValue, args, kwargs) -> NDArrayValue:
    """`t.numpy()` (and np.asarray(t)): an array sharing t's memory. In the graph it is t itself (NumPy
    writes are writes to t); handed back it is made again as `t.numpy()` of the tensor handed back."""
    from kiln.capture.values.numpy_promotion import TORCH_TO_NUMPY

    ex = t.example
    if args or kwargs:
        unsupported("Tensor.numpy(force=...)")
    device = ex.fake_device if hasattr(ex, "fake_device") else ex.device
    if device.type != "cpu":
        unsupported(f"Tensor.numpy() of a {device.type} tensor (torch raises TypeError)")
    if ex.requires_grad:
        unsupported("Tensor.numpy() of a tensor that requires grad (torch raises RuntimeError)")
    if ex.is_conj() or ex.is_neg() or t.tensor_type is not torch.Tensor:
        unsupported("Tensor.numpy() of a conjugate/negative view or a tensor subclass")
    dtype = TORCH_TO_NUMPY.get(ex.dtype)
    if dtype is None:
        unsupported(f"Tensor.numpy() of a {ex.dtype} tensor (kiln traces bool, int8-64, uint8, float16-64)")
    return NDArrayValue(t, dtype, view_of=(t, torch.Tensor.numpy, ()), c_order=ex.is_contiguous())


def ndarray_as_tensor(tx, args, kwargs) -> TensorValue:
    """`torch.from_numpy(b)`: a tensor sharing b's memory (a torch alias of b's tensor in the graph).
    For an array made in the graph, b is from then on handed back as `t.numpy()` of that tensor, so the
    two share memory after the graph too; an array passed in shares it through its graph input."""
    if kwargs or len(args) != 1 or not isinstance(args[0], NDArrayValue) or args[0].scalar:
        unsupported("torch.from_numpy of something other than one ndarray (torch raises TypeError)")
    (arr,) = args
    if arr.created_here and arr.view_of is not None and arr.view_of[1] is not torch.Tensor.numpy:
        unsupported("torch.from_numpy of a view made in the compiled function: kiln cannot hand the view and "
                    "the tensor back sharing memory")
    t = tx.output.call("call_function", torch.ops.aten.alias.default, [arr.tensor], {})
    if arr.created_here:
        arr.view_of = (t, torch.Tensor.numpy, ())
    return t
