"""A module call with forward pre-hooks and forward hooks registered on the module itself, traced as
torch.nn.Module._call_impl runs them (torch 2.11-2.13):

    for each pre-hook, in registration order: r = hook(module, args) (with_kwargs: hook(module, args,
        kwargs), which must give None or (args, kwargs)); a result that is not None replaces args (a
        non-tuple is wrapped in a 1-tuple)
    result = forward(*args, **kwargs)
    for each forward hook: r = hook(module, args, result) (with_kwargs: hook(module, args, kwargs, result));
        a result that is not None replaces result

The hook dicts' keys (which hooks, in which order, which take kwargs) are guarded, and each hook is read
through its entry (a guarded place), so adding or removing a hook between calls recompiles. Not modelled
(the module's call breaks, as before): backward hooks, global hooks, `always_call` forward hooks (run
when forward raises), and modules kiln cannot name (no source).
"""
from __future__ import annotations

from kiln.capture.sources import AttrSource, GetItemSource
from kiln.capture.values.base import Value, unsupported

_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_forward_pre_hooks_with_kwargs",
               "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_backward_hooks",
               "_backward_pre_hooks")  # (backward ones empty: a backward hook added later recompiles)


def _is_none(value: Value) -> bool:
    return value.is_constant() and value.as_constant() is None


def _hooks(tx, module_value, table: str) -> list[tuple[int, Value]]:
    from kiln.capture.values.builder import wrap

    hooks = getattr(module_value.module, table)
    return [(hook_id, wrap(tx, hook, GetItemSource(AttrSource(module_value.source, table), hook_id)))
            for hook_id, hook in hooks.items()]


def call_with_forward_hooks(tx, module_value, forward: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from kiln.capture.values.containers import DictValue, TupleValue

    m = module_value.module
    if module_value.source is None:
        unsupported(f"module {module_value.qualname} has forward hooks and no place kiln can guard")
    if getattr(m, "_forward_hooks_always_called", None):
        unsupported(f"module {module_value.qualname} has an always_call forward hook")
    for hook in (*m._forward_pre_hooks.values(), *m._forward_hooks.values()):
        _refuse_library_hook(module_value, hook)
    for table in _HOOK_DICTS:
        if hasattr(m, table):
            tx.output.guards.dict_keys(AttrSource(module_value.source, table), getattr(m, table))
    pre_with_kwargs = getattr(m, "_forward_pre_hooks_with_kwargs", {})
    for hook_id, hook in _hooks(tx, module_value, "_forward_pre_hooks"):
        if hook_id in pre_with_kwargs:
            out = tx.call(hook, [module_value, TupleValue(list(args)), DictValue(dict(kwargs))], {})
            if not _is_none(out):
                args, kwargs = _args_and_kwargs(tx, out)
        else:
            out = tx.call(hook, [module_value, TupleValue(list(args))], {})
            if not _is_none(out):
                args = tx.items(out) if issubclass(out.python_type(), tuple) else [out]
    result = forward.call(tx, args, kwargs)
    post_with_kwargs = getattr(m, "_forward_hooks_with_kwargs", {})
    for hook_id, hook in _hooks(tx, module_value, "_forward_hooks"):
        if hook_id in post_with_kwargs:
            out = tx.call(hook, [module_value, TupleValue(list(args)), DictValue(dict(kwargs)), result], {})
        else:
            out = tx.call(hook, [module_value, TupleValue(list(args)), result], {})
        if not _is_none(out):
            result = out
    return result


def _refuse_library_hook(module_value, hook) -> None:
    """A hook from a library kiln does not trace into (FSDP's all-gather and reshard hooks, torch's own):
    the module's call breaks and runs eagerly, hooks and all, as before hooks were traced."""
    import functools
    import types

    from kiln.capture.skipfiles import is_inlinable

    fn = hook
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None) or getattr(getattr(type(fn), "__call__", None), "__code__", None)
    if not isinstance(code, types.CodeType) or not is_inlinable(code):
        unsupported(f"module {module_value.qualname} ({type(module_value.module).__name__}) has hooks from a "
                    f"library kiln does not trace into ({getattr(fn, '__qualname__', type(fn).__name__)})",
                    hint="the module's call runs eagerly, hooks included")


def _args_and_kwargs(tx, out: Value) -> tuple[list[Value], dict[str, Value]]:
    """A with_kwargs pre-hook's (new_args, new_kwargs); anything else is _call_impl's RuntimeError (not
    modelled: a break)."""
    from kiln.capture.values.containers import DictValue

    if not issubclass(out.python_type(), tuple) or len(tx.items(out)) != 2:
        unsupported(f"a forward pre-hook with kwargs returned {out}, not (args, kwargs) (RuntimeError)")
    new_args, new_kwargs = tx.items(out)
    if not isinstance(new_kwargs, DictValue) or not all(isinstance(k, str) for k in new_kwargs.entries):
        unsupported(f"a forward pre-hook's kwargs {new_kwargs} are not a dict kiln knows")
    return tx.items(new_args), dict(new_kwargs.entries)

