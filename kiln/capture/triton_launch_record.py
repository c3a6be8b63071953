"""Recording ``kernel[grid](args..., META=...)`` while tracing: bind the arguments to the kernel's
parameters, sort the tensors into written and read ones, refuse what the launch op cannot model exactly
(each refusal is a graph break with its reason), and add one ``kiln_user.triton_launch`` node."""
from __future__ import annotations

import inspect

import torch

from kiln.capture.triton_launch import TRITON_LAUNCH, LaunchSpec, register_launch
from kiln.capture.triton_stores import analyse_stores, python_function
from kiln.capture.values.base import ConstantValue, unsupported
from kiln.capture.values.containers import ListValue
from kiln.capture.values.tensors import TensorValue
from kiln.fake.shapes import is_dense

_ANALYSES: dict = {}


def _analysis(fn):
    found = _ANALYSES.get(fn)
    if found is None:
        found = _ANALYSES[fn] = analyse_stores(fn)
    return found


def _bind(fn, name: str, args, kwargs) -> list[tuple[str, object, bool]]:
    """(parameter name, value, positional?) for each argument of the call, checked against the signature."""
    params = list(inspect.signature(fn).parameters)
    if len(args) > len(params):
        unsupported(f"Triton kernel {name} takes {len(params)} arguments, the launch gives {len(args)}")
    bound = [(params[i], a, True) for i, a in enumerate(args)]
    for key, value in kwargs.items():
        if key in params[:len(args)]:
            unsupported(f"Triton kernel {name}: argument {key!r} given twice")
        bound.append((key, value, False))
    return bound


def _tensor_checks(tx, name: str, pname: str, t: torch.Tensor) -> None:
    if any(not isinstance(n, int) for n in (*t.shape, *t.stride())):
        unsupported(f"Triton kernel {name}: tensor argument {pname!r} has symbolic sizes",
                    hint="user kernels are recorded for static shapes")
    if t.requires_grad and tx.output.grad_enabled:
        unsupported(f"Triton kernel {name}: tensor argument {pname!r} requires grad, and autograd cannot "
                    f"see through a Triton kernel",
                    hint="wrap the launch in a torch.library.custom_op with register_autograd, or call it "
                         "under torch.no_grad()")
    if not is_dense(t.shape, t.stride()):
        unsupported(f"Triton kernel {name}: tensor argument {pname!r} is not dense (size {tuple(t.shape)}, "
                    f"stride {tuple(t.stride())}); the kernel could touch memory between its elements",
                    hint="pass a contiguous tensor (.contiguous())")


def _tensor_slots(tx, name: str, analysis, bound) -> tuple[dict, list, list, dict, list]:
    """Slots for the tensor arguments: ("w", i) for written[i], ("r", i) for read[i]. One tensor passed as
    several arguments (``kernel[g](x, y, x)``, in place) takes one slot, written if any use writes."""
    groups: dict = {}  # storage -> [(parameter, tensor value)]
    for pname, value, _ in bound:
        if isinstance(value, TensorValue):
            _tensor_checks(tx, name, pname, value.example)
            groups.setdefault(value.example.untyped_storage()._cdata, []).append((pname, value))
    slot_of, written, read, layouts, written_names = {}, [], [], {}, []
    for uses in groups.values():
        first = uses[0][1].example
        where = (first.storage_offset(), tuple(first.shape), tuple(first.stride()), first.dtype)
        for pname, value in uses[1:]:
            t = value.example
            if (t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype) != where:
                unsupported(f"Triton kernel {name}: arguments {uses[0][0]!r} and {pname!r} are different views "
                            f"of the same memory", hint="kiln copies the tensors a kernel writes; pass tensors "
                                                        "that do not overlap, or the same tensor twice")
        writes = [p for p, _ in uses if analysis.unsure or p in analysis.written]
        if writes:
            slot = ("w", len(written))
            written.append(uses[0][1])
            written_names += writes
        else:
            slot = ("r", len(read))
            read.append(uses[0][1])
        layouts[slot] = (tuple(first.shape), tuple(first.stride()))
        for pname, _ in uses:
            slot_of[pname] = slot
    return slot_of, written, read, layouts, written_names


def _constant_slot(name: str, pname: str, value):
    if not value.is_constant():
        unsupported(f"Triton kernel {name}: argument {pname!r} is {value}, not a tensor or a constant")
    const = value.as_constant()
    if not isinstance(const, (int, float, bool, str, type(None), torch.dtype)) and \
            type(const).__module__.split(".")[0] != "triton":
        unsupported(f"Triton kernel {name}: argument {pname!r} is a {type(const).__name__}")
    return ("c", const)


def record_launch(tx, kernel, grid, args, kwargs) -> None:
    fn = python_function(kernel)
    if fn is None:
        unsupported(f"a Triton kernel object {type(kernel).__name__} without a Python function")
    name = fn.__qualname__
    analysis = _analysis(fn)
    bound = _bind(fn, name, args, kwargs)
    slot_of, written, read, layouts, written_names = _tensor_slots(tx, name, analysis, bound)
    slots_args, slots_kwargs = [], {}
    for pname, value, positional in bound:
        slot = slot_of[pname] if pname in slot_of else _constant_slot(name, pname, value)
        if positional:
            slots_args.append(slot)
        else:
            slots_kwargs[pname] = slot
    spec = LaunchSpec(kernel, grid, tuple(slots_args), slots_kwargs, layouts, name, tuple(written_names),
                      analysis.unsure)
    key = (id(kernel), _grid_key(grid), repr(spec.args), repr(sorted(spec.kwargs.items())),
           repr(sorted(layouts.items())))
    launch_id = register_launch(spec, key)
    tx.output.call("call_function", TRITON_LAUNCH,
                   [ConstantValue(launch_id), ListValue(written), ListValue(read)], {})


def _grid_key(grid):
    if isinstance(grid, tuple):
        return grid
    # a function rebuilt from the frame's code: the same code and closure values are the same grid
    cells = tuple(repr(c.cell_contents) for c in (grid.__closure__ or ()))
    return (grid.__code__, cells, repr(grid.__defaults__))
