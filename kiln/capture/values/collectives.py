"""torch.distributed functional collectives called in user code: graph ops with their wait.

``torch.distributed._functional_collectives.all_reduce(t, "sum", group)`` and its kin are Python
functions of a skipped file: a call used to break the graph. Here each becomes the dispatcher op it
calls (``torch.ops._c10d_functional.all_reduce``, ``all_gather_into_tensor``, ``reduce_scatter_tensor``)
followed at once by ``wait_tensor``, plus the chunk/cat that moves a gather or scatter dimension to 0,
as the library does. Eager hands back an ``AsyncCollectiveTensor`` that waits on first use; the graph
waits right after the op, which gives the same values (the wait could move to the first use later).
The backends run the ops as extern calls through the same process group, found by its name.

The group is resolved while tracing (``_resolve_group_name``, the library's own helper, on the real
object) into the name the ops take, a constant of the graph; the group object is guarded by identity
(a different group recompiles). Groups kiln cannot read as one object (a rank list, a DeviceMesh) break
the graph as before, and so does everything not listed here (all_to_all, broadcast, the *_autograd
variants, the coalesced forms): the call runs as Python, which is exact. The in-place
``torch.distributed.all_reduce(t)`` is captured as the functional op, its wait and ``t.copy_``
where that is exact (synchronous, ``t`` contiguous and not requiring grad).
"""
from __future__ import annotations

import torch

from kiln.capture.values.base import ConstantValue, Value, unsupported

MODULE = "torch.distributed._functional_collectives"


def _group_name(tx, group: Value, tag: Value | None) -> str:
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc

    tag_value = "" if tag is None else tag.as_constant() if tag.is_constant() else None
    if tag_value is None:
        unsupported("functional collective with a tag that is not a constant")
    obj = getattr(group, "obj", None)
    source = getattr(group, "source", None)
    if not isinstance(obj, dist.ProcessGroup) or source is None:
        unsupported(f"functional collective on a group kiln cannot guard ({type(group).__name__}); "
                    "pass a torch.distributed.ProcessGroup", hint="the call runs as Python")
    tx.output.guards.identity(source, obj)
    return fc._resolve_group_name(obj, tag_value)


def _group_size(name: str) -> int:
    from torch.distributed import distributed_c10d as c10d

    return c10d._get_group_size_by_name(name)


def _constant(value: Value, what: str):
    if not value.is_constant():
        unsupported(f"functional collective with a {what} that is not a constant")
    return value.as_constant()


def _call(tx, op, *args) -> Value:
    return tx.output.call("call_function", op, list(args), {})


def _wait(tx, tensor: Value) -> Value:
    return _call(tx, torch.ops._c10d_functional.wait_tensor.default, tensor)


def _bind(args, kwargs, names, defaults=None):
    defaults = defaults or {}
    if len(args) > len(names):
        unsupported("functional collective called with too many arguments")
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names or key in bound:
            unsupported(f"functional collective called with keyword {key!r} kiln does not know")
        bound[key] = value
    for key in names:
        if key not in bound:
            if key not in defaults:
                unsupported(f"functional collective called without {key!r}")
            bound[key] = defaults[key]
    return [bound[n] for n in names]


def all_reduce(tx, args, kwargs) -> Value:
    tensor, op, group, tag = _bind(args, kwargs, ["self", "reduceOp", "group", "tag"], {"tag": None})
    name = _group_name(tx, group, tag)
    reduce_op = str(_constant(op, "reduce op")).lower()
    out = _call(tx, torch.ops._c10d_functional.all_reduce.default, tensor, ConstantValue(reduce_op),
                ConstantValue(name))
    return _wait(tx, out)


def all_gather(tx, args, kwargs) -> Value:
    tensor, dim, group, tag = _bind(args, kwargs, ["self", "gather_dim", "group", "tag"], {"tag": None})
    name = _group_name(tx, group, tag)
    size = _group_size(name)
    gather_dim = _constant(dim, "gather dim")
    out = _call(tx, torch.ops._c10d_functional.all_gather_into_tensor.default, tensor, ConstantValue(size),
                ConstantValue(name))
    out = _wait(tx, out)
    if gather_dim != 0:  # the ranks' blocks are stacked on dim 0: move them to gather_dim
        chunks = tx.output.call("call_function", torch.chunk, [out, ConstantValue(size)], {"dim": ConstantValue(0)})
        out = tx.output.call("call_function", torch.cat, [chunks], {"dim": ConstantValue(gather_dim)})
    return out


def reduce_scatter(tx, args, kwargs) -> Value:
    tensor, op, dim, group, tag = _bind(args, kwargs, ["self", "reduceOp", "scatter_dim", "group", "tag"],
                                        {"tag": None})
    name = _group_name(tx, group, tag)
    size = _group_size(name)
    scatter_dim = _constant(dim, "scatter dim")
    reduce_op = str(_constant(op, "reduce op")).lower()
    example = getattr(tensor, "example", None)
    if not isinstance(example, torch.Tensor) or example.size(scatter_dim) % size:
        unsupported("reduce_scatter_tensor: the scattered dim is not a multiple of the group size")
    if scatter_dim != 0:  # the library moves the scattered blocks to dim 0 first
        chunks = tx.output.call("call_function", torch.chunk, [tensor, ConstantValue(size)],
                                {"dim": ConstantValue(scatter_dim)})
        tensor = tx.output.call("call_function", torch.cat, [chunks], {"dim": ConstantValue(0)})
    out = _call(tx, torch.ops._c10d_functional.reduce_scatter_tensor.default, tensor, ConstantValue(reduce_op),
                ConstantValue(size), ConstantValue(name))
    return _wait(tx, out)


def wait_tensor(tx, args, kwargs) -> Value:
    (tensor,) = _bind(args, kwargs, ["tensor"])
    return _wait(tx, tensor)


HANDLERS = {
    "all_reduce": all_reduce,
    "all_gather_tensor": all_gather,
    "all_gather_single": all_gather,
    "reduce_scatter_tensor": reduce_scatter,
    "reduce_scatter_single": reduce_scatter,
    "wait_tensor": wait_tensor,
}


_REDUCE_OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX")


def in_place_all_reduce(tx, args, kwargs) -> Value:
    """``torch.distributed.all_reduce(t)`` (synchronous, a ProcessGroup or the default group): the
    functional all_reduce and its wait, copied back into ``t``. Exact where ``t`` does not require
    grad and is contiguous (eager's in-place collective is invisible to autograd and refuses
    non-contiguous tensors); anything else breaks the graph at the call, as before."""
    import torch.distributed as dist

    tensor, op, group, async_op = _bind(args, kwargs, ["tensor", "op", "group", "async_op"],
                                        {"op": None, "group": None, "async_op": None})
    if async_op is not None and not (async_op.is_constant() and async_op.as_constant() is False):
        unsupported("torch.distributed.all_reduce(async_op=True) hands back a Work object")
    example = getattr(tensor, "example", None)
    if not isinstance(example, torch.Tensor) or example.requires_grad or not example.is_contiguous():
        unsupported("torch.distributed.all_reduce of a tensor that requires grad or is not contiguous")
    reduce_op = "sum"
    if op is not None:
        real = op.as_constant() if op.is_constant() else getattr(op, "obj", None)
        names = [n for n in _REDUCE_OPS if real is getattr(dist.ReduceOp, n) or real == getattr(dist.ReduceOp, n)]
        if not names or (not op.is_constant() and getattr(op, "source", None) is None):
            unsupported("torch.distributed.all_reduce with a reduce op kiln cannot read")
        if not op.is_constant():
            tx.output.guards.identity(op.source, real)
        reduce_op = names[0].lower()
    if group is None or (group.is_constant() and group.as_constant() is None):
        name = dist.distributed_c10d._get_default_group().group_name
    else:
        name = _group_name(tx, group, None)
    out = _call(tx, torch.ops._c10d_functional.all_reduce.default, tensor, ConstantValue(reduce_op),
                ConstantValue(name))
    tx.output.call("call_method", "copy_", [tensor, _wait(tx, out)], {})
    return ConstantValue(None)


def _default_group_query(tx, fn, args, kwargs) -> Value:
    """``torch.distributed.get_rank()`` / ``get_world_size()`` of the default group: a constant of the
    graph, as the default group's name is in the collectives above (a process has one default group
    for its life). Another group, or no process group yet, breaks the graph as before."""
    import torch.distributed as dist

    (group,) = _bind(args, kwargs, ["group"], {"group": None})
    if not dist.is_initialized():
        unsupported(f"torch.distributed.{fn.__name__}() before init_process_group (it raises)")
    if group is not None and not (group.is_constant() and group.as_constant() is None):
        obj, source = getattr(group, "obj", None), getattr(group, "source", None)
        if obj is None or obj is not dist.group.WORLD or source is None:
            unsupported(f"torch.distributed.{fn.__name__} of a group other than the default one")
        tx.output.guards.identity(source, obj)  # (the default group, named: dist.group.WORLD)
    return ConstantValue(fn())


def functional_collective_handler(fn):
    """The handler for a function of torch.distributed._functional_collectives (or the in-place
    torch.distributed.all_reduce, or the default group's rank and size), or None."""
    if getattr(fn, "__module__", None) == "torch.distributed.distributed_c10d":
        import torch.distributed as dist

        if fn is dist.all_reduce:
            return in_place_all_reduce
        if fn is dist.get_rank or fn is dist.get_world_size:
            return lambda tx, args, kwargs: _default_group_query(tx, fn, args, kwargs)
        return None
    if getattr(fn, "__module__", None) != MODULE:
        return None
    handler = HANDLERS.get(getattr(fn, "__name__", ""))
    if handler is None:
        return None
    import sys

    module = sys.modules.get(MODULE)
    return handler if module is not None and getattr(module, fn.__name__, None) is fn else None
