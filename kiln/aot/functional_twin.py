"""Functional twins of user ops that mutate their arguments.

A custom op declared with ``mutates_args`` (schema ``Tensor(a!) x``), or kiln's own Triton launch op,
has no functional form in ATen. Its twin ``kiln_functional::<ns>__<name>__<overload>`` takes the same
arguments without the write annotations and returns the op's results followed by the new values of the
mutated arguments: it copies each mutated argument (same size, strides and offset-free storage), runs the
op on the copies, and returns them. So a graph holds one functional node per call; the tracer writes the
new values back into the tensors the op mutated (``functionalize.py``), and the kiln backend runs the twin
as an extern call like any op it has no lowering for.
"""
from __future__ import annotations

import re

import torch

from kiln.aot.schema import FunctionalVariant, bind_arguments, mutated_arguments, unbind_arguments

NAMESPACE = "kiln_functional"
_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")
_TWINS: dict = {}
_ORIGINALS: dict = {}  # twin op -> (the mutating op, names of the arguments it mutates)
_ALIAS = re.compile(r"\(\w+!?\)")


def fresh_copy(t):
    """A copy of tensor ``t`` with its size and strides (a list: each item)."""
    if isinstance(t, (list, tuple)):
        return [fresh_copy(x) for x in t]
    if not isinstance(t, torch.Tensor):
        return t
    out = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def _twin_schema(func, name: str) -> str | None:
    schema = func._schema
    if any(r.alias_info is not None for r in schema.returns):
        return None  # a result aliasing an input: not expressible as a copy
    text = str(schema)
    head, _, returns = text.partition(") -> ")
    arguments = _ALIAS.sub("", head[head.index("(") + 1:])
    extra = []
    for arg in schema.arguments:
        if arg.alias_info is not None and arg.alias_info.is_write:
            kind = str(arg.type)
            if kind == "Tensor":
                extra.append("Tensor")
            elif kind in ("List[Tensor]", "Tensor[]"):
                extra.append("Tensor[]")
            else:
                return None  # optional or other mutated argument kinds
    returns = returns.strip()
    inner = returns[1:-1] if returns.startswith("(") else returns
    outs = [part for part in [inner.strip()] + extra if part]
    return f"{name}({arguments}) -> ({', '.join(outs)})"


def functional_twin(func) -> FunctionalVariant | None:
    """The functional twin of a mutating non-ATen op, or None where its schema has no such form."""
    if func in _TWINS:
        return _TWINS[func]
    variant = None
    if getattr(func, "namespace", "aten") not in ("aten", "prims", NAMESPACE):
        overload = func._overloadname or "default"
        name = re.sub(r"\W", "_", f"{func.namespace}__{func._schema.name.split('::')[1]}__{overload}")
        schema = _twin_schema(func, name)
        if schema is not None:
            variant = _define(func, name, schema)
    _TWINS[func] = variant
    return variant


def call_on_new_tensors(func, mutated, args, kwargs, new_tensor):
    """Run the mutating op ``func`` with each tensor of a mutated argument replaced by
    ``new_tensor((name, index or None), tensor)``; returns what its twin returns: the op's results, then
    the mutated arguments' new values."""
    bound = bind_arguments(func, args, kwargs)
    for arg in mutated:
        value = bound[arg]
        if isinstance(value, (list, tuple)):
            bound[arg] = [new_tensor((arg, i), t) for i, t in enumerate(value)]
        else:
            bound[arg] = new_tensor((arg, None), value)
    margs, mkwargs = unbind_arguments(func, bound)
    out = func(*margs, **mkwargs)
    n_plain = len(func._schema.returns)
    plain = [] if n_plain == 0 else [out] if n_plain == 1 else list(out)
    results = plain + [bound[arg] for arg in mutated]
    return results[0] if len(results) == 1 else tuple(results)


def _define(func, name: str, schema: str) -> FunctionalVariant:
    mutated = mutated_arguments(func)
    n_plain = len(func._schema.returns)

    def twin(*args, **kwargs):
        return call_on_new_tensors(func, mutated, args, kwargs, lambda key, t: fresh_copy(t))

    twin.__name__ = name
    _LIB.define(schema)
    _LIB.impl(name, twin, "CompositeExplicitAutograd")
    op = getattr(getattr(torch.ops, NAMESPACE), name).default
    _ORIGINALS[op] = (func, tuple(mutated))
    return FunctionalVariant(op, (), {arg: n_plain + i for i, arg in enumerate(mutated)},
                             {i: i for i in range(n_plain)})


def original_of(twin_op) -> tuple | None:
    """(the mutating op, the names of its mutated arguments) behind a functional twin, else None."""
    return _ORIGINALS.get(twin_op)
