"""What an ATen op does to its arguments, read from its schema: views, mutations, functional variants."""
from __future__ import annotations

import dataclasses
import functools

import torch

aten = torch.ops.aten


def mutated_arguments(func) -> list[str]:
    """Names of the arguments ``func`` writes to (``Tensor(a!)``)."""
    return [a.name for a in func._schema.arguments if a.alias_info is not None and a.alias_info.is_write]


def is_inplace_view(func) -> bool:
    """An op that changes the metadata (size, stride, offset) of its input in place, like ``t_``."""
    return torch.Tag.inplace_view in func.tags


def is_view(func) -> bool:
    """An op whose outputs alias its first input without writing to it (``view``, ``slice``, ``split``)."""
    return bool(getattr(func, "is_view", False)) and not func._schema.is_mutable


def is_random(func) -> bool:
    return torch.Tag.nondeterministic_seeded in func.tags


def has_composite_implicit(func) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")


def run_composite_implicit(func, *args, **kwargs):
    """ATen's own (C++) CompositeImplicitAutograd kernel of ``func``. Not ``OpOverload.decompose``:
    that prefers a Python kernel registered for the key, which is torch._decomp's code once anything
    has imported it (torch's compiler stack, which kiln must not run)."""
    return func._op_dk(torch._C.DispatchKey.CompositeImplicitAutograd, *args, **kwargs)


def _arg_signature(arg) -> tuple:
    return (arg.name, str(arg.type).replace("(a!)", "").replace("!", ""))


@dataclasses.dataclass(frozen=True)
class FunctionalVariant:
    """How to express a mutating op functionally.

    ``op`` computes without mutating; ``drop`` names arguments of the mutating op it does not take
    (``out=`` arguments); ``new_values`` gives, for each mutated argument name, the index of the
    functional op's output that holds that argument's new value; ``results`` gives, for each output
    of the mutating op that does not alias a mutated argument, the functional output index.
    """

    op: object
    drop: tuple[str, ...]
    new_values: dict
    results: dict


@functools.lru_cache(maxsize=None)
def functional_variant(func) -> FunctionalVariant | None:
    """The functional form of a mutating op, or None when ATen has none."""
    schema = func._schema
    mutated = mutated_arguments(func)
    packet_name = schema.name.split("::")[1]
    overload = func._overloadname
    returns = schema.returns
    aliased_returns = [i for i, r in enumerate(returns) if r.alias_info is not None and r.alias_info.is_write]
    plain_returns = [i for i, r in enumerate(returns) if not (r.alias_info is not None and r.alias_info.is_write)]

    # foo_ -> foo: the functional op returns the new value of self (plus the op's other results)
    if packet_name.endswith("_") and mutated == ["self"] and not packet_name.startswith("_foreach"):
        packet = getattr(aten, packet_name[:-1], None)
        wanted = [(*_arg_signature(a), a.has_default_value()) for a in schema.arguments]
        # the overload of the same name, if its arguments match (pow_.Scalar is pow.Tensor_Scalar)
        names = [overload] + sorted(packet.overloads()) if packet is not None else []
        for name in names:
            if name not in packet.overloads():
                continue
            op = getattr(packet, name)
            signature = [(*_arg_signature(a), a.has_default_value()) for a in op._schema.arguments]
            if not op._schema.is_mutable and signature == wanted:
                return FunctionalVariant(op, (), {"self": 0}, {i: i for i in plain_returns})

    # foo.out -> foo.<overload with the same non-out arguments>
    out_args = [a for a in schema.arguments if a.is_out]
    if out_args and set(a.name for a in out_args) == set(mutated):
        packet = getattr(aten, packet_name, None)
        wanted = [_arg_signature(a) for a in schema.arguments if not a.is_out]
        for name in packet.overloads() if packet is not None else ():
            candidate = getattr(packet, name)
            cs = candidate._schema
            if cs.is_mutable or [_arg_signature(a) for a in cs.arguments] != wanted:
                continue
            if len(cs.returns) != len(out_args):
                continue
            return FunctionalVariant(candidate, tuple(a.name for a in out_args),
                                     {a.name: i for i, a in enumerate(out_args)}, {})

    # foo (mutates some args) -> foo_functional: original results, then the new values
    packet = getattr(aten, packet_name + "_functional", None)
    if packet is not None and overload in packet.overloads():
        op = getattr(packet, overload)
        n_plain = len(plain_returns)
        if not op._schema.is_mutable and len(op._schema.returns) == n_plain + len(mutated) and not aliased_returns:
            return FunctionalVariant(op, (), {name: n_plain + i for i, name in enumerate(mutated)},
                                     {i: i for i in plain_returns})
    return None


def bind_arguments(func, args, kwargs) -> dict:
    """Argument name -> value, for a call of ``func`` with ``args`` and ``kwargs``."""
    bound = {}
    for i, arg in enumerate(func._schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
    return bound


def unbind_arguments(func, bound: dict, drop=()) -> tuple[tuple, dict]:
    """Positional args and kwargs for ``func`` from a name -> value map (missing names use defaults)."""
    args, kwargs = [], {}
    positional = True
    for arg in func._schema.arguments:
        if arg.name in drop or arg.name not in bound:
            positional = False  # later arguments go by name
            continue
        if arg.kwarg_only or not positional:
            kwargs[arg.name] = bound[arg.name]
        else:
            args.append(bound[arg.name])
    return tuple(args), kwargs
