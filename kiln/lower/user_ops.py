"""User ops in graphs (custom ops, user Triton kernel launches): extern calls of the user's own kernels.

They are not ATen fallbacks: kiln has nothing to generate for them (explain lists them as user kernels).
A mutating one reaches the code generator as its functional twin (``aot/functional_twin.py``), which
copies the tensors it writes, so the scheduler sees an ordinary extern that reads its inputs and makes
new buffers.
"""
from __future__ import annotations

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
