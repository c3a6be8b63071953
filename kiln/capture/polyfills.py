"""Python versions of library functions kiln traces instead of the library's own code.

The library's function lives in a skipped file (torch internals, which kiln does not trace into: they
call C helpers such as ``_group_tensors_by_device_and_dtype`` and multi-tensor ops). Each function here
computes what the library's computes, with ops kiln traces, and is inlined where the user's code calls
the library function (``values/stdlib.py``'s ``LIBRARY_CALLS``). Where it cannot match the library
exactly it calls ``refuse``: the graph then breaks at the user's call, which runs the library's own
function.
"""
from __future__ import annotations

import copy
import dataclasses
import types

import torch

from kiln.capture.refuse import refuse


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """torch.nn.utils.clip_grad_norm_ (torch 2.11-2.13): the norm of all gradients together, then every
    gradient scaled in place by ``min(1, max_norm / (norm + 1e-6))``; returns the norm."""
    if isinstance(parameters, types.GeneratorType):
        parameters = list(parameters)
        if len(parameters) == 0:
            refuse("clip_grad_norm_ of an empty generator (torch warns)")
    elif isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    else:
        parameters = list(parameters)
    with torch.no_grad():
        grads = [p.grad for p in parameters if p.grad is not None]
        norm_type = float(norm_type)
        if len(grads) == 0:
            return torch.tensor(0.0)
        first_device = grads[0].device
        norms = [torch.linalg.vector_norm(g, norm_type) for g in grads]
        total_norm = torch.linalg.vector_norm(torch.stack([n.to(first_device) for n in norms]), norm_type)
        if error_if_nonfinite:
            refuse("clip_grad_norm_(error_if_nonfinite=True) tests the norm's value")
        clip_coef = float(max_norm) / (total_norm + 1e-6)
        clip_coef_clamped = torch.clamp(clip_coef, max=1.0)
        for g in grads:
            g.mul_(clip_coef_clamped.to(g.device))
        return total_norm


def clip_grad_value_(parameters, clip_value, foreach=None):
    """torch.nn.utils.clip_grad_value_: every gradient clamped in place to [-clip_value, clip_value]."""
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    clip_value = float(clip_value)
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.grad.clamp_(min=-clip_value, max=clip_value)
    return None


_ATOMIC_TYPES = (type(None), bool, int, float, str, complex, bytes, type(Ellipsis), type(NotImplemented),
                 types.CodeType, types.BuiltinFunctionType, types.FunctionType, type, range, property)


def dataclass_asdict(obj, *, dict_factory=dict):
    """dataclasses.asdict (3.11/3.12): fields, recursively through dataclasses, namedtuples, lists, tuples
    and dicts; any other value deep-copied (atomic values are themselves, as deepcopy gives them)."""
    if isinstance(obj, type) or not hasattr(type(obj), "__dataclass_fields__"):
        raise TypeError("asdict() should be called on dataclass instances")
    return _dataclass_values(obj, dict_factory, False)


def dataclass_astuple(obj, *, tuple_factory=tuple):
    """dataclasses.astuple (3.11/3.12): as asdict, with each dataclass made ``tuple_factory(values)``."""
    if isinstance(obj, type) or not hasattr(type(obj), "__dataclass_fields__"):
        raise TypeError("astuple() should be called on dataclass instances")
    return _dataclass_values(obj, tuple_factory, True)


def _dataclass_values(obj, factory, as_tuple: bool):
    """CPython's _asdict_inner (``as_tuple`` False) and _astuple_inner (True)."""
    if type(obj) in _ATOMIC_TYPES:
        return obj
    if not isinstance(obj, type) and hasattr(type(obj), "__dataclass_fields__"):
        if as_tuple:
            return factory([_dataclass_values(getattr(obj, f.name), factory, True) for f in dataclasses.fields(obj)])
        return factory([(f.name, _dataclass_values(getattr(obj, f.name), factory, False))
                        for f in dataclasses.fields(obj)])
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*[_dataclass_values(v, factory, as_tuple) for v in obj])
    if isinstance(obj, (list, tuple)):
        return type(obj)(_dataclass_values(v, factory, as_tuple) for v in obj)
    if isinstance(obj, dict):
        if hasattr(type(obj), "default_factory"):
            refuse(f"dataclasses.{'astuple' if as_tuple else 'asdict'}() of a defaultdict (3.11 and 3.12 differ)")
        return type(obj)((_dataclass_values(k, factory, as_tuple), _dataclass_values(v, factory, as_tuple))
                         for k, v in obj.items())
    return copy.deepcopy(obj)


# library function -> its version here
POLYFILLS = {torch.nn.utils.clip_grad_norm_: clip_grad_norm_, torch.nn.utils.clip_grad_value_: clip_grad_value_,
             dataclasses.asdict: dataclass_asdict, dataclasses.astuple: dataclass_astuple}
