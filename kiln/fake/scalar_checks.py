"""Eager's checks of the Python numbers an integer op is given, which the meta kernels skip.

ATen converts a Python number to an integer or bool tensor's dtype with a range check in some ops
(``fill_``/``full`` of 300 into uint8, ``clamp(max=2**40)`` on int32, ``pow``'s exponent), refuses some
outright (a negative integer exponent of an integer tensor), and divides by a number that wrapped to zero
(``int8_tensor % 256`` raises ZeroDivisionError on the CPU). The meta kernels do none of this, so the
generated code computed values where eager raises.

``check_scalars`` runs such an op for real, before its meta kernel, on one-element 1-D CPU tensors of its
tensor arguments' dtypes (ones: nothing of the caller's data is read, and no division by a zero the
caller's tensors may not hold is invented): whatever it raises is what eager raises for any data, and it
is raised while tracing, as eager raises it at the call. The probe runs on the CPU for every device; for
tensors on another device only the checks eager makes on the host count (a number out of the dtype's
range, a negative integer exponent, bool operands), not the CPU kernels' own errors (an integer division
by zero does not raise on CUDA). A probe that fails for a reason of its own (an op that wants more than
one element) is ignored.
"""
from __future__ import annotations

import functools

import torch

_NAMED = frozenset({"fill", "fill_", "full", "full_like", "clamp", "clamp_", "clamp_min", "clamp_min_",
                    "clamp_max", "clamp_max_", "pow", "pow_", "remainder", "remainder_", "fmod", "fmod_",
                    "floor_divide", "floor_divide_", "div", "div_", "sub", "sub_", "rsub", "add", "add_",
                    "cumsum", "cumprod"})


_AUTOCAST_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)


def _device(t) -> torch.device:
    # (a fake's own device: ``t.device`` on a fake goes through torch's subclass handling, which imports
    # torch.distributed.tensor and sympy, 1 s of a warm start)
    device = getattr(t, "fake_device", None)
    return device if device is not None else t.device


def _plain_number(x) -> bool:
    return type(x) in (int, float, bool)


def _integral(dtype) -> bool:
    return dtype is not None and not dtype.is_floating_point and not dtype.is_complex


@functools.lru_cache(maxsize=None)
def _candidate(func) -> bool:
    name = func._schema.name.split("::")[-1]
    return name in _NAMED or torch.Tag.pointwise in getattr(func, "tags", ())


def wants_check(func, args, kwargs) -> bool:
    """An op that converts a plain Python number for an integer or bool tensor, or takes a bool tensor
    (``int16 - bool``: eager refuses it)."""
    if not _candidate(func):
        return False
    values = [*args, *kwargs.values()]
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if not any(_plain_number(v) for v in values) and not any(t.dtype == torch.bool for t in tensors):
        return False
    dtype = kwargs.get("dtype")
    return any(_integral(t.dtype) for t in tensors) or (isinstance(dtype, torch.dtype) and _integral(dtype))


def check_scalars(func, args, kwargs) -> None:
    """Raise what eager raises for these numbers (see the module docstring); nothing otherwise."""
    name = func._schema.name.split("::")[-1]
    if name == "full":  # (size, fill_value): the size is not what is checked
        args = ((), *args[1:])
    if name == "full_like":
        args = (torch.ones((), dtype=args[0].dtype), *args[1:])

    def probe(x):
        if isinstance(x, torch.Tensor):
            return torch.ones((1,), dtype=x.dtype)
        if isinstance(x, torch.device):
            return torch.device("cpu")
        return x

    try:
        with torch._C._DisableTorchDispatch(), torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS):
            # (real tensors and eager's own kernels: no mode of the tracer, no autocast around them)
            func(*tuple(probe(a) for a in args), **{k: probe(v) for k, v in kwargs.items()})
    except (RuntimeError, NotImplementedError) as exc:
        values = [*args, *kwargs.values()]
        on_cpu = all(_device(t).type == "cpu" for t in values if isinstance(t, torch.Tensor)) and \
            torch.device(kwargs.get("device") or "cpu").type == "cpu"
        if _eager_check(str(exc), on_cpu):
            raise type(exc)(str(exc)) from None
    except Exception:  # noqa: BLE001 -- a probe of its own making failed: nothing learned
        return


# the errors a probe raises for the numbers themselves (anything else: the probe's own shapes). The host
# checks hold on every device; the CPU kernels' own errors (a division by zero, a dtype the CPU kernel
# lacks) only for CPU tensors: CUDA's kernels differ
_HOST_CHECKS = ("without overflow", "negative integer powers", "with a bool tensor is not supported",
                "Boolean alpha only supported", "For integral input tensors")
_CPU_KERNEL_ERRORS = ("ZeroDivisionError", "not implemented for '")


def _eager_check(message: str, on_cpu: bool) -> bool:
    return any(m in message for m in _HOST_CHECKS + (_CPU_KERNEL_ERRORS if on_cpu else ()))
