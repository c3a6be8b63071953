"""User ops in graphs (custom ops, user Triton kernel launches): extern calls of the user's own kernels.

They are not ATen fallbacks: kiln has nothing to generate for them (explain lists them as user kernels).
A mutating one reaches the code generator as its functional twin (``aot/functional_twin.py``), which
copies the tensors it writes, so the scheduler sees an ordinary extern that reads its inputs and makes
new buffers.
"""
from __future__ import annotations

import torch

from kiln.aot.functional_twin import call_on_new_tensors, fresh_copy, original_of
from kiln.aot.schema import bind_arguments, unbind_arguments

_TORCH_NAMESPACES = (None, "aten", "prims", "prim")


def user_op_reason(node) -> str | None:
    """Why ``node`` runs as an extern call of a user kernel, or None for other ops."""
    target = node.target
    namespace = getattr(target, "namespace", None)
    if namespace in _TORCH_NAMESPACES:
        return None
    name = target._schema.name if hasattr(target, "_schema") else str(target)
    if name.startswith("kiln_functional::kiln_user__triton_launch"):
        from kiln.capture.triton_launch import launch_spec

        launch_id = node.args[0] if node.args else None
        return launch_spec(launch_id).describe() if isinstance(launch_id, int) else "user Triton kernel"
    if name.startswith("kiln_functional::"):
        return f"custom op {name.split('::')[1]} (functional form: copies the arguments it mutates)"
    return f"custom op {name} (the user's kernel)"


# ops whose result's contents are unspecified: a user op that overwrites such a tensor needs no copy of it
_EMPTY_OPS = ("aten::empty.memory_format", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
              "aten::new_empty_strided")
_PASS_THROUGH = ("aten::detach", "aten::alias")


def _schema_name(node) -> str:
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return ""
    return schema.name + (f".{schema.overload_name}" if schema.overload_name else "")


def unread_empty(node, reader) -> bool:
    """``node`` is an ``empty`` result (through ``detach``/``alias``) that only ``reader`` reads."""
    while hasattr(node, "op") and node.op == "call_function" and len(node.users) == 1 and reader in node.users:
        name = _schema_name(node)
        if name in _EMPTY_OPS:
            val = node.meta.get("val")
            return isinstance(val, torch.Tensor) and all(isinstance(n, int) for n in (*val.shape, *val.stride()))
        if name.split(".")[0] not in _PASS_THROUGH:
            return False
        reader, node = node, node.args[0]
    return False


class InPlaceCall:
    """Runs a mutating user op the way its functional twin does, except that the arguments whose old
    contents nobody reads (``empty`` results) are new tensors it allocates instead of copies (and
    instead of buffers the generated code would fill first). Returns what the twin returns."""

    def __init__(self, func, mutated: tuple, fresh: dict):
        self.func, self.mutated, self.fresh = func, mutated, fresh  # fresh: (name, index) -> layout

    def _new(self, key, given):
        if key in self.fresh:
            size, stride, dtype, device = self.fresh[key]
            return torch.empty_strided(size, stride, dtype=dtype, device=device)
        return fresh_copy(given)

    def __call__(self, *args, **kwargs):
        return call_on_new_tensors(self.func, self.mutated, args, kwargs, self._new)

    def __repr__(self) -> str:
        return f"InPlaceCall({self.func}, fresh={sorted(self.fresh)})"


def lower_user_op(g, node, args, kwargs, reason: str):
    """The extern call of a user op; a functional twin whose mutated arguments are unread ``empty``
    results writes into new tensors instead of copies of them (no fill, no copy)."""
    original = original_of(node.target)
    if original is None:
        return g.add_extern(node.target, args, kwargs, reason, node)
    func, mutated = original
    nodes, values = bind_arguments(func, node.args, node.kwargs), bind_arguments(func, args, kwargs)
    fresh = {}
    for name in mutated:
        items = nodes.get(name)
        for i, item in (enumerate(items) if isinstance(items, (list, tuple)) else [(None, items)]):
            if unread_empty(item, node):
                val = item.meta["val"]
                fresh[(name, i)] = (tuple(val.shape), tuple(val.stride()), val.dtype, val.device)
                if i is None:
                    values[name] = None
                else:
                    values[name] = list(values[name])
                    values[name][i] = None
    if not fresh:
        return g.add_extern(node.target, args, kwargs, reason, node)
    margs, mkwargs = unbind_arguments(func, values)
    return g.add_extern(InPlaceCall(func, mutated, fresh), margs, mkwargs, reason + "; writes new tensors", node)
