"""Context managers kiln understands: grad mode (torch.no_grad, enable_grad, set_grad_enabled).

Entering and leaving one records `torch._C._set_grad_enabled(mode)` into the graph and switches the
mode used to compute fake results, so the graph runs each op under the mode eager would.
"""
from __future__ import annotations

import torch

from kiln.capture.values.base import ConstantValue, Value, unsupported


def set_grad_mode(tx, enabled: bool) -> None:
    out = tx.output
    if out.grad_enabled == enabled:
        return
    if enabled and out.inference.depth:
        unsupported("enabling grad inside torch.inference_mode() (autograd records nothing there in eager)")
    node = out.graph.call_function(torch._C._set_grad_enabled, (enabled,))
    node.meta["example_value"] = None
    out.grad_enabled = enabled
    out.changes_grad_mode = True


class GradModeValue(Value):
    """A grad-mode context manager. `target` is the mode inside the block."""

    def __init__(self, target: bool, already_entered: bool = False, previous: bool | None = None):
        self.target = target
        self.already_entered = already_entered  # set_grad_enabled(...) switches on construction
        self.previous = previous

    has_identity = True  # one object however many places hold it (codegen.reconstruct)
    inside = False  # between its __enter__ and __exit__
    obj = None  # the real no_grad/enable_grad object read from the frame (its `prev` store is a side effect)

    def python_type(self) -> type:
        if self.already_entered:
            return torch.autograd.grad_mode.set_grad_enabled
        return torch.enable_grad if self.target else torch.no_grad

    def enter(self, tx) -> Value:
        if not self.already_entered:
            self.previous = tx.output.grad_enabled
            set_grad_mode(tx, self.target)
            if self.obj is not None:  # __enter__ saves the mode in the object: `self.prev = ...`
                tx.output.side_effects.store_attr(self, "prev", ConstantValue(self.previous))
        self.inside = True
        return ConstantValue(None)

    def exit(self, tx) -> Value:
        set_grad_mode(tx, self.previous)
        self.inside = False
        return ConstantValue(None)

    def reconstruct(self, cg) -> None:
        """torch.no_grad() / torch.enable_grad() outside its block: a new one is the same (its __enter__
        saves the mode afresh); set_grad_enabled(), which switched the mode when made, is not rebuilt."""
        if self.source is not None and not self.inside:
            self.source.emit(cg)  # the object from the frame itself
            return
        if self.already_entered or self.inside:
            unsupported("handing on a grad-mode context manager that set_grad_enabled() made or that is "
                        "inside its block")
        cg.prepare_call(_grad_mode_object)
        cg.load_const(torch.enable_grad if self.target else torch.no_grad)
        cg.load_const(self.previous)
        cg.call(2)


def _grad_mode_object(cls, prev):
    """A no_grad/enable_grad object as eager's is after its blocks: `prev` is what its last __enter__ saved."""
    obj = cls()
    if prev is not None:
        obj.prev = prev
    return obj

    def getattr(self, tx, name: str) -> Value:
        if name in ("__enter__", "__exit__"):
            return _ContextMethod(self, name)
        unsupported(f"attribute {name!r} of a grad-mode context manager")

    def call(self, tx, args, kwargs) -> Value:
        unsupported("using a grad-mode context manager as a decorator inside a compiled function")


class AutocastValue(Value):
    """torch.autocast(...) and its device-specific spellings: entering and leaving the block are graph
    nodes (torch.amp's _enter_autocast/_exit_autocast), and fake results are computed under the same
    autocast state, so each op gets the dtype eager would give it."""

    def __init__(self, device_type: str, dtype, enabled: bool, cache_enabled):
        self.args = (device_type, dtype, enabled, cache_enabled)
        self.node = None

    def python_type(self) -> type:
        return torch.autocast

    def enter(self, tx) -> Value:
        from torch.amp import autocast_mode

        out = tx.output
        self.node = out.graph.call_function(autocast_mode._enter_autocast, self.args)
        self.node.meta["example_value"] = None
        out.autocast_stack.append(self.args)
        out.changes_autocast = True
        return ConstantValue(None)

    def exit(self, tx) -> Value:
        from torch.amp import autocast_mode

        out = tx.output
        node = out.graph.call_function(autocast_mode._exit_autocast, (self.node,))
        node.meta["example_value"] = None
        out.autocast_stack.pop()
        return ConstantValue(None)

    def getattr(self, tx, name: str) -> Value:
        if name in ("__enter__", "__exit__"):
            return _ContextMethod(self, name)
        unsupported(f"attribute {name!r} of torch.autocast")


class _ContextMethod(Value):
    def __init__(self, ctx: GradModeValue, name: str):
        self.ctx, self.name = ctx, name

    def call(self, tx, args, kwargs) -> Value:
        return self.ctx.enter(tx) if self.name == "__enter__" else self.ctx.exit(tx)


class GradModeExit:
    """The `__exit__` of a grad-mode block that a graph break split: it lives on the stack of the
    resume function, which calls it when the block ends (normally or by an exception)."""

    def __init__(self, previous: bool):
        self.previous = previous

    def __call__(self, *exc_info) -> bool:
        torch._C._set_grad_enabled(self.previous)
        return False

    def __repr__(self) -> str:
        return f"GradModeExit(previous={self.previous})"


class WithExitValue(Value):
    """What BEFORE_WITH leaves below the block: calling it (with None, None, None) leaves the block."""

    def __init__(self, ctx: GradModeValue, source=None):
        self.ctx = ctx
        self.source = source

    with_index = None  # the BEFORE_WITH of an inference-mode block (a break inside moves there)

    def call(self, tx, args, kwargs) -> Value:
        if tx.active_withs and tx.active_withs[-1] is self.ctx:
            tx.active_withs.pop()
        if self.with_index is not None and self.with_index in tx.open_generator_withs:
            tx.open_generator_withs.remove(self.with_index)
        return self.ctx.exit(tx)

    def reconstruct(self, cg) -> None:
        if isinstance(self.ctx, AutocastValue):
            # the graph closed the block at its end: enter it again for the code that runs as Python
            cg.prepare_call(AutocastExit)
            cg.load_const(self.ctx.args)
            cg.call(1)
            return
        if not isinstance(self.ctx, GradModeValue):
            unsupported(f"handing on the exit of a `with` block on {self.ctx}")
        cg.load_const(GradModeExit(self.ctx.previous))


class AutocastExit:
    """An autocast block split by a graph break, entered again (on construction) for the code that runs
    as Python at the break; calling it leaves the block (as a with statement's __exit__)."""

    def __init__(self, args: tuple):
        device_type, dtype, enabled, cache_enabled = args
        self.mode = torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
        self.mode.__enter__()

    def __call__(self, *exc_info) -> bool:
        self.mode.__exit__(*exc_info)
        return False


_AUTOCAST_CLASSES = {torch.autocast: None, torch.amp.autocast: None}
for _name, _device in (("cpu", "cpu"), ("cuda", "cuda")):
    _cls = getattr(getattr(getattr(torch, _name, None), "amp", None), "autocast", None)
    if isinstance(_cls, type):
        _AUTOCAST_CLASSES[_cls] = _device


def _make_autocast(tx, cls, args, kwargs) -> Value:
    fixed_device = _AUTOCAST_CLASSES[cls]
    names = ("dtype", "enabled", "cache_enabled") if fixed_device else ("device_type", "dtype", "enabled", "cache_enabled")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    if not all(v.is_constant() for v in bound.values()):
        unsupported("torch.autocast with arguments computed from tensors")
    values = {k: v.as_constant() for k, v in bound.items()}
    device = fixed_device or values["device_type"]
    dtype = values.get("dtype") or torch.get_autocast_dtype(device)
    return AutocastValue(device, dtype, bool(values.get("enabled", True)), values.get("cache_enabled"))


def user_context_methods(tx, ctx: Value):
    """(bound __enter__, bound __exit__) of a context manager object whose class defines both in Python
    code kiln traces into, else None."""
    import types

    from kiln.capture.skipfiles import is_inlinable
    from kiln.capture.values.objects import NewObjectValue, UserObjectValue, class_attribute

    if not isinstance(ctx, (UserObjectValue, NewObjectValue)):
        return None
    cls = ctx.python_type()
    found = []
    for name in ("__enter__", "__exit__"):
        attr = next((vars(k)[name] for k in cls.__mro__ if name in vars(k)), None)
        if not isinstance(attr, types.FunctionType) or not is_inlinable(attr.__code__):
            return None
        found.append(class_attribute(tx, cls, name, ctx))
    return tuple(found)


def make_context_manager(tx, cls, args, kwargs) -> Value | None:
    """The value for calling `cls(*args)` if cls is a context manager kiln models (grad mode, autocast)."""
    if cls in _AUTOCAST_CLASSES:
        return _make_autocast(tx, cls, args, kwargs)
    if cls is torch.inference_mode:
        from kiln.capture.values.inference import make_inference_mode

        return make_inference_mode(tx, args, kwargs)
    if cls is torch.no_grad:
        return GradModeValue(False)
    if cls is torch.enable_grad:
        return GradModeValue(True)
    if cls is torch.set_grad_enabled:
        mode = (args[0] if args else kwargs["mode"]).as_constant()
        previous = tx.output.grad_enabled
        set_grad_mode(tx, bool(mode))
        return GradModeValue(bool(mode), already_entered=True, previous=previous)
    return None


def _decorate_context_code():
    import torch.utils._contextlib as contextlib_

    for const in contextlib_.context_decorator.__code__.co_consts:
        if getattr(const, "co_name", None) == "decorate_context":
            return const
    return None


DECORATE_CONTEXT_CODE = _decorate_context_code()  # the wrapper @torch.no_grad() puts around a function


def call_grad_mode_decorated(tx, fn_value, args, kwargs) -> Value:
    """A function decorated with @torch.no_grad() / @torch.enable_grad(): torch's wrapper runs
    `with ctx_factory(): return func(*args, **kwargs)` with ctx_factory the decorator's `clone` (a new
    context manager of the same class each call). Traced as that with-block around the inlined func."""
    from kiln.capture.values.exceptions import TracedRaise

    fn = fn_value.fn
    closure = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    try:
        factory = closure["ctx_factory"].cell_contents
    except (KeyError, ValueError):
        unsupported(f"call to {fn.__qualname__}: a context-manager decorator kiln does not model")
    owner = getattr(factory, "__self__", None)
    if type(owner) not in (torch.no_grad, torch.enable_grad, torch.inference_mode) or \
            getattr(factory, "__func__", None) is not type(owner).clone:
        unsupported(f"call to {fn.__qualname__}: decorated with a context manager kiln does not model "
                    f"({type(owner).__name__})")
    func = fn_value.bind_closure(tx)["func"].get()
    if type(owner) is torch.inference_mode:
        from kiln.capture.values.inference import InferenceModeValue

        ctx = InferenceModeValue(owner.mode)
    else:
        ctx = GradModeValue(type(owner) is torch.enable_grad)
    ctx.enter(tx)
    try:
        result = tx.call(func, args, kwargs)
    except TracedRaise:
        ctx.exit(tx)  # the with-block's __exit__ runs as the exception leaves it
        raise
    ctx.exit(tx)
    return result
