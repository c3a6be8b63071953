"""User kernels in graphs: custom ops (``torch.library.custom_op`` / ``torch.library.Library``) and user
Triton kernels (``kernel[grid](...)``), each call one node of the graph.

- A ``CustomOpDef`` (what ``@torch.library.custom_op`` makes) is its dispatcher op; ops of other
  namespaces than aten/prims (``torch.ops.mylib.foo``) are recorded like ATen ops. Their fake (Meta)
  implementation gives the output metadata; an op without one breaks the graph, saying so.
- A Triton kernel object (``@triton.jit``, ``@triton.autotune``, ``@triton.heuristics``) subscripted with
  a grid and called becomes ``kiln_user.triton_launch`` (``capture/triton_launch.py``), recording the
  tensors the kernel writes (``capture/triton_stores.py``). kiln never looks inside Triton's launcher.
"""
from __future__ import annotations

import sys
import types

import torch

from kiln.capture.sources import ConstantSource
from kiln.capture.values.base import ConstantValue, KnownFunctionValue, Value, unsupported
from kiln.errors import Unsupported
from kiln.capture.values.tensors import TensorValue
from kiln.capture.values.torch_functions import TorchFunctionValue

_BUILTIN_NAMESPACES = ("aten", "prims", "prim", "kiln_user", "kiln_functional")


def is_custom_op(obj) -> bool:
    """A user-defined dispatcher op: a CustomOpDef, or an op (packet) of a namespace torch does not own."""
    if type(obj).__name__ == "CustomOpDef" and type(obj).__module__ == "torch._library.custom_ops":
        return True
    if isinstance(obj, torch._ops.OpOverloadPacket):
        return obj._qualified_op_name.split("::")[0] not in _BUILTIN_NAMESPACES
    if isinstance(obj, torch._ops.OpOverload):
        return obj.namespace not in _BUILTIN_NAMESPACES
    return False


def wrap_user_kernel(tx, value, source) -> Value | None:
    """The value for a custom op or a Triton kernel object, or None for anything else."""
    if is_custom_op(value):
        _guard_identity(tx, source, value)
        if type(value).__name__ == "CustomOpDef":
            body = triton_op_body(value)
            if body is not None and value._backward_fn is None:
                # torch.library.triton_op: its body is traced (it launches wrap_triton(kernel)[grid](...)),
                # as its fake implementation is the body itself
                from kiln.capture.values.functions import UserFunctionValue

                return UserFunctionValue(body, None)
            return CustomOpValue(value._opoverload, source, differentiable=value._backward_fn is not None)
        return CustomOpValue(value, source, differentiable=_has_autograd_kernel(value))
    if getattr(value, "__name__", None) == "wrap_triton" and getattr(value, "__module__", "").startswith("torch"):
        return WrapTritonValue(value, None)
    if "triton" in sys.modules and any(value is f for f in _triton_helpers()):
        return TritonHelperValue(value, None)
    if _is_triton_constant(value):  # tl.float16, tl.constexpr(4): kernel arguments, fixed objects
        _guard_identity(tx, source, value)
        return ConstantValue(value)
    if "triton" in sys.modules and _is_triton_kernel(value):
        _guard_identity(tx, source, value)
        return TritonKernelValue(value, source)
    return None


def _guard_identity(tx, source, value) -> None:
    if source is not None and not isinstance(source, ConstantSource):
        tx.output.guards.identity(source, value)


def triton_op_body(op) -> types.FunctionType | None:
    """The user's function behind a ``torch.library.triton_op`` (its backend function closes over it)."""
    init = getattr(op, "_init_fn", None)
    code = getattr(init, "__code__", None)
    if code is None or not init.__qualname__.startswith("triton_op.") or code.co_freevars != ("fn",):
        return None
    body = init.__closure__[0].cell_contents
    return body if isinstance(body, types.FunctionType) else None


class WrapTritonValue(KnownFunctionValue):
    """``torch.library.wrap_triton(kernel)``: the kernel itself (its launches are recorded as usual)."""

    def call(self, tx, args, kwargs) -> Value:
        if len(args) != 1 or kwargs or not isinstance(args[0], TritonKernelValue):
            unsupported("torch.library.wrap_triton of something other than a Triton kernel")
        return args[0]


def _is_triton_constant(value) -> bool:
    language = sys.modules.get("triton.language")
    kinds = tuple(k for k in (getattr(language, "dtype", None), getattr(language, "constexpr", None)) if k is not None)
    return bool(kinds) and isinstance(value, kinds)


def _is_triton_kernel(value) -> bool:
    # (no import here: a frame may be traced while triton itself is half imported)
    interface = getattr(sys.modules.get("triton.runtime.jit"), "KernelInterface", None)
    return interface is not None and isinstance(value, interface)


def _triton_helpers() -> tuple:
    """Triton's pure integer helpers (``triton.cdiv``, ``triton.next_power_of_2``): grids use them."""
    triton = sys.modules.get("triton")
    return tuple(f for f in (getattr(triton, "cdiv", None), getattr(triton, "next_power_of_2", None)) if f is not None)


class TritonHelperValue(KnownFunctionValue):
    """``triton.cdiv(n, 64)`` on constant ints: computed while tracing."""

    def call(self, tx, args, kwargs) -> Value:
        values = [a.as_constant() if a.is_constant() else None for a in args]
        name = self.fn.fn.__name__ if hasattr(self.fn, "fn") else getattr(self.fn, "__name__", "helper")
        if kwargs or not all(isinstance(v, int) and not isinstance(v, bool) for v in values) or \
                len(values) != (2 if name == "cdiv" else 1):
            unsupported(f"triton.{name} of arguments that are not constant ints")
        # computed here, not by calling Triton (its interpreter patches these while it runs a launch)
        if name == "cdiv":
            return ConstantValue(-(-values[0] // values[1]))
        n = values[0]
        return ConstantValue(1 << (n - 1).bit_length() if n > 0 else 0)

    def __repr__(self) -> str:
        return f"TritonHelper({self.fn})"


def _has_autograd_kernel(op) -> bool:
    """Whether autograd knows a formula for ``op`` (a packet: for every overload)."""
    ops = [getattr(op, name) for name in op.overloads()] if isinstance(op, torch._ops.OpOverloadPacket) else [op]
    return all(any(torch._C._dispatch_has_kernel_for_dispatch_key(o.name(), key)
                   for key in ("Autograd", "AutogradCPU", "AutogradCUDA", "CompositeImplicitAutograd")) for o in ops)


class CustomOpValue(TorchFunctionValue):
    """A custom op: one node of the graph, its outputs from its fake (Meta) implementation."""

    def __init__(self, fn, source=None, differentiable: bool = True):
        super().__init__(fn, source)
        self.differentiable = differentiable

    def call(self, tx, args, kwargs) -> Value:
        if not self.differentiable and tx.output.grad_enabled and _any_requires_grad(args, kwargs) and \
                _differentiable_results(tx, self.fn, args, kwargs):
            unsupported(f"custom op {self._name()} has no autograd formula and an argument requires grad",
                        hint="register one with op.register_autograd (torch.library.register_autograd), "
                             "or call it under torch.no_grad(); kiln runs the call as Python, as eager does")
        _refuse_non_tensor_results(self.fn, self._name())
        _refuse_aliased_mutation(self.fn, self._name(), args, kwargs)
        try:
            return super().call(tx, args, kwargs)
        except Unsupported as exc:
            text = str(exc)
            if "no fake impl" in text or "'Meta' backend" in text or "Meta backend" in text:
                unsupported(f"custom op {self._name()} has no fake (meta) implementation, so kiln cannot know "
                            f"the shapes of its results without running it",
                            hint="register one with @op.register_fake (torch.library.register_fake), "
                                 "or an impl for the 'Meta' key of a torch.library.Library")
            raise

    def getattr(self, tx, name: str) -> Value:
        if isinstance(self.fn, torch._ops.OpOverloadPacket):
            found = super().getattr(tx, name)  # torch.ops.ns.op.overload: the same checks apply to it
            if isinstance(found, TorchFunctionValue) and isinstance(found.fn, torch._ops.OpOverload):
                return CustomOpValue(found.fn, None, differentiable=self.differentiable)
            return found
        unsupported(f"attribute {name!r} of custom op {self._name()}")

    def _name(self) -> str:
        schema = getattr(self.fn, "_schema", None)
        return schema.name if schema is not None else str(self.fn)

    def __repr__(self) -> str:
        return f"CustomOp({self._name()})"


class TritonKernelValue(Value):
    """A user Triton kernel object; ``kernel[grid]`` is a launcher."""

    def __init__(self, kernel, source=None):
        self.kernel = kernel
        self.source = source

    def python_type(self) -> type:
        return type(self.kernel)

    def getitem(self, tx, grid: Value) -> Value:
        return TritonLaunchValue(self, grid)

    def call(self, tx, args, kwargs) -> Value:
        unsupported(f"calling Triton kernel {_kernel_name(self.kernel)} without a grid",
                    hint="launch it as kernel[grid](...)")

    def getattr(self, tx, name: str) -> Value:
        unsupported(f"attribute {name!r} of Triton kernel {_kernel_name(self.kernel)}",
                    hint="kiln records kernel[grid](...) launches only")

    def reconstruct(self, cg) -> None:
        if self.source is None:
            unsupported("handing back a Triton kernel kiln cannot locate")
        self.source.emit(cg)

    def __repr__(self) -> str:
        return f"TritonKernel({_kernel_name(self.kernel)})"


class TritonLaunchValue(Value):
    """``kernel[grid]``: calling it records one ``kiln_user.triton_launch`` node."""

    def __init__(self, kernel: TritonKernelValue, grid: Value):
        self.kernel = kernel
        self.grid = grid

    def call(self, tx, args, kwargs) -> Value:
        from kiln.capture.triton_launch_record import record_launch

        record_launch(tx, self.kernel.kernel, grid_of(self.grid), args, kwargs)
        return ConstantValue(None)  # Triton's launch returns a handle only on GPU; kiln hands back None

    def reconstruct(self, cg) -> None:
        # a graph break at the launch (a refused argument): the launch runs as Python after the graph
        self.kernel.reconstruct(cg)
        cg.reconstruct(self.grid)
        cg.binary_subscr()

    def __repr__(self) -> str:
        return f"TritonLaunch({_kernel_name(self.kernel.kernel)})"


def _any_requires_grad(args, kwargs) -> bool:
    from kiln.fake.tree import leaves
    from kiln.capture.output_graph import to_fx

    for value in list(args) + list(kwargs.values()):
        for item in leaves(to_fx(value)):
            example = item.meta.get("example_value") if hasattr(item, "meta") else None
            if isinstance(example, torch.Tensor) and example.requires_grad:
                return True
    return False


_TENSOR_RESULTS = ("Tensor", "Optional[Tensor]", "List[Tensor]", "Tensor?", "Tensor[]")


def _refuse_non_tensor_results(op, name: str) -> None:
    """A result that is a number (``-> int``) would be the fake implementation's value, fixed in the graph."""
    ops = [getattr(op, o) for o in op.overloads()] if isinstance(op, torch._ops.OpOverloadPacket) else [op]
    for overload in ops:
        for ret in overload._schema.returns:
            if str(ret.type) not in _TENSOR_RESULTS:
                unsupported(f"custom op {name} returns a {ret.type}, which its fake implementation cannot know",
                            hint="kiln runs the call as Python; return tensors only to keep it in the graph")


def _refuse_aliased_mutation(op, name: str, args, kwargs) -> None:
    """A mutated argument sharing memory with another argument: the functional form (a copy of the
    mutated one) would not see the op's writes through the other, so the call breaks and runs as Python."""
    from kiln.capture.output_graph import to_fx
    from kiln.fake.tree import leaves

    schema = getattr(op, "_schema", None)
    if schema is None or not schema.is_mutable:
        return
    written, others = [], []
    for i, arg in enumerate(schema.arguments):
        value = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
        if value is None:
            continue
        fakes = [n.meta.get("example_value") for n in leaves(to_fx(value)) if hasattr(n, "meta")]
        keys = [t.untyped_storage()._cdata for t in fakes if isinstance(t, torch.Tensor)]
        (written if arg.alias_info is not None and arg.alias_info.is_write else others).append((arg.name, keys))
    for wname, wkeys in written:
        for oname, okeys in written + others:
            if oname != wname and set(wkeys) & set(okeys):
                unsupported(f"custom op {name}: argument {wname!r}, which it mutates, shares memory with {oname!r}",
                            hint="pass tensors that do not overlap (clone one of them)")


def _differentiable_results(tx, op, args, kwargs) -> bool:
    """Whether the op makes floating or complex tensors (integer results, like indices, carry no gradient)."""
    from kiln.capture.output_graph import to_fx
    from kiln.fake.tree import leaves

    example = tx.output._run_on_fakes("call_function", op, tuple(to_fx(a) for a in args),
                                      {k: to_fx(v) for k, v in kwargs.items()})
    return any(isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) for t in leaves(example))


def _kernel_name(kernel) -> str:
    from kiln.capture.triton_stores import python_function

    fn = python_function(kernel)
    return fn.__qualname__ if fn is not None else type(kernel).__name__


def grid_of(grid: Value):
    """The real grid: a tuple of ints, or a function of the meta-parameters that Triton calls at launch
    (a function made in the traced frame is rebuilt from its code when everything it closes over is a
    constant)."""
    from kiln.capture.values.functions import NestedFunctionValue, UserFunctionValue

    if grid.is_constant() and not isinstance(grid, (UserFunctionValue, NestedFunctionValue)):
        value = grid.as_constant()
        if isinstance(value, int) and not isinstance(value, bool):
            return (value,)
        if isinstance(value, (tuple, list)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return tuple(value)
        unsupported(f"a Triton grid {value!r} that is not a tuple of ints")
    if hasattr(grid, "elements"):
        parts = [e.as_constant() if e.is_constant() else None for e in grid.elements]
        if all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            return tuple(parts)
        unsupported("a Triton grid with entries that are not constant ints (dynamic sizes or tensors)")
    if isinstance(grid, UserFunctionValue):
        return grid.fn  # guarded by identity when read
    if isinstance(grid, NestedFunctionValue):
        return _rebuild_function(grid)
    unsupported(f"a Triton grid given as {grid}", hint="use a tuple of ints or a lambda over the meta-parameters")


def _rebuild_function(fn) -> types.FunctionType:
    cells = []
    for cell in fn.closure:
        content = cell.contents
        if content is None or not content.is_constant() or isinstance(content, TensorValue):
            unsupported(f"a Triton grid function {fn.qualname} that closes over {content}",
                        hint="compute sizes outside the lambda (n = x.numel()) so it closes over ints only")
        cells.append(types.CellType(content.as_constant()))
    defaults = tuple(d.as_constant() if d.is_constant() else unsupported("a grid function with non-constant "
                                                                         "defaults") for d in fn.default_values or ())
    rebuilt = types.FunctionType(fn.code, fn.f_globals, fn.code.co_name, defaults or None, tuple(cells) or None)
    rebuilt.__qualname__ = fn.qualname
    if fn.kwdefault_values:
        rebuilt.__kwdefaults__ = {k: v.as_constant() if v.is_constant() else unsupported(
            "a grid function with non-constant keyword defaults") for k, v in fn.kwdefault_values.items()}
    return rebuilt
