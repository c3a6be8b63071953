"""Which frames are worth tracing: those that can reach a tensor.

A frame none of whose locals, closure cells or referenced globals holds a tensor, a module, a NumPy
array or the torch or numpy package cannot record a tensor op itself (its callees are still offered to kiln one by one).
Tracing it would only produce guards on plain Python values, and a recompile for each new value:
an import finder's `find_spec(fullname)` run by a lazy import inside a compiled function hit the
recompile limit. Such frames run as they are (always exact); TorchDynamo skips them the same way.
A code object found tensor-free on SKIP_AFTER calls in a row is not offered again (hook.mark_skip,
undone by kiln.reset()): the walk is not repeated on every call of a hot pure-Python function.
"""
from __future__ import annotations

import sys
import types

import torch

_LEAF_TYPES = (str, bytes, int, float, complex, bool, type(None), range, slice, type, types.FunctionType,
               types.BuiltinFunctionType, types.MethodType, types.CodeType)
_WALK_LIMIT = 2000  # objects visited before giving up (as holding no tensor)
SKIP_AFTER = 16
_DEPTH = 4  # container items and object attributes followed this many levels down


def may_use_tensors(code: types.CodeType, f_locals: dict, f_globals: dict, closure) -> bool:
    """True unless the frame surely cannot reach a tensor (when unsure: True)."""
    # (an optimizer: its step() runs as kiln's fused step at a graph break, capture/values/optimizers.py)
    tensor_like = (torch.Tensor, torch.nn.Module, torch.optim.Optimizer, *_array_types())
    for name in code.co_names:
        value = f_globals.get(name)
        if value is not None and _is_torchy_global(value, tensor_like):
            return True
    roots = list(f_locals.values())
    for cell in closure or ():
        try:
            roots.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    return _reaches_tensor(roots, tensor_like)


def _is_torchy_global(value, tensor_like: tuple) -> bool:
    if isinstance(value, types.ModuleType):
        name = value.__name__
        return name == "torch" or name.startswith("torch.") or name == "numpy" or name.startswith("numpy.")
    return isinstance(value, tensor_like)


def _array_types() -> tuple:
    """NumPy's array and scalar types when NumPy is loaded: kiln traces NumPy code as tensor ops."""
    numpy = sys.modules.get("numpy")
    return (numpy.ndarray, numpy.generic) if numpy is not None else ()


_PLAIN_DICT: dict = {}  # type -> whether its instances' __dict__ is the interpreter's own (a C descriptor)


def _instance_dict(obj):
    """``obj.__dict__`` as the interpreter keeps it, read without running code of its class: a
    ``__getattr__`` runs for a class with ``__slots__`` and no ``__dict__`` (sympy's SingletonRegistry,
    half built while sympy is imported inside a compiled function, recursed forever in its own), and a
    property could do anything. None when there is no such dict."""
    cls = type(obj)
    plain = _PLAIN_DICT.get(cls)
    if plain is None:
        found = next((k.__dict__["__dict__"] for k in cls.__mro__ if "__dict__" in k.__dict__), None)
        if len(_PLAIN_DICT) > 10000:  # (classes made at run time: keep the table bounded)
            _PLAIN_DICT.clear()
        plain = _PLAIN_DICT[cls] = type(found) in (types.GetSetDescriptorType, types.MemberDescriptorType) \
            or (found is None and getattr(cls, "__dictoffset__", 0) != 0)
    if not plain:
        return None
    try:
        return object.__getattribute__(obj, "__dict__")
    except Exception:  # noqa: BLE001 -- (no dict on this instance)
        return None


def _reaches_tensor(roots: list, tensor_like: tuple) -> bool:
    """Whether a tensor or module is among `roots`, their container items and (plain) objects' attributes,
    up to _DEPTH levels down. Objects kiln cannot look into (C objects, slots) count as holding none,
    as in TorchDynamo: their frame runs as it is, which is exact, only not compiled."""
    seen: set[int] = set()
    stack = [(obj, 0) for obj in roots]
    while stack:
        obj, depth = stack.pop()
        if isinstance(obj, _LEAF_TYPES) or id(obj) in seen or depth > _DEPTH:
            continue
        if isinstance(obj, tensor_like):
            return True
        if len(seen) >= _WALK_LIMIT:
            return False  # a large object graph with no tensor near the top (a test runner's config)
        seen.add(id(obj))
        if isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend((item, depth + 1) for item in obj)
        elif isinstance(obj, dict):
            stack.extend((item, depth + 1) for item in list(obj.values()))
        elif not isinstance(obj, types.ModuleType):
            attrs = _instance_dict(obj)
            if type(attrs) is dict:
                stack.extend((item, depth + 1) for item in list(attrs.values()))
    return False
