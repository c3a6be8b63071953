"""kiln.compile and friends: wrap functions and nn.Modules so their frames are captured and compiled."""
from __future__ import annotations

import functools
import sys
import weakref
from typing import Any, Callable

import torch

from kiln.backends.registry import list_backends, lookup_backend
from kiln.capture import hook
from kiln.capture.convert_frame import FrameCompiler, reset_all
from kiln.distributed.ddp_backend import ddp_aware
from kiln.errors import KilnError
from kiln.options import Options

MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile(model: Callable | None = None, *, backend: str | Callable = "kiln", mode: str | None = None,
            fullgraph: bool = False, dynamic: bool | None = None, options: Options | dict | None = None):
    """Compile a function or nn.Module. Usable as `kiln.compile(f)`, `@kiln.compile` or `@kiln.compile(...)`.

    backend: a registered name (see kiln.list_backends()) or a callable (gm, example_inputs) -> callable.
    mode: None/"default", "reduce-overhead" (CUDA graphs: ``Options.cudagraphs``), "max-autotune"
        (CUDA graphs and Triton matmul templates with fused epilogues: ``Options.matmul_templates``),
        "max-autotune-no-cudagraphs" (templates only).
    fullgraph: raise GraphBreakError instead of running unsupported code eagerly.
    dynamic: None (default): static first, then the sizes that changed become symbols ("automatic
        dynamic"); True: every dim symbolic from the first compile (0 and 1 specialized); False: static.
        See docs/dynamic.md.
    options: kiln.Options or a dict of its fields.
    """
    if mode not in MODES:
        raise ValueError(f"kiln.compile: unknown mode {mode!r}; valid modes are {list(MODES)}")
    if not isinstance(fullgraph, bool):
        raise TypeError(f"kiln.compile(fullgraph=...) takes a bool, not {type(fullgraph).__name__}")
    if dynamic not in (None, True, False):
        raise TypeError(f"kiln.compile(dynamic=...) takes None, True or False, not {dynamic!r}")
    opts = Options.from_any(options)
    opts = options_for_mode(mode, opts)
    backend_name, backend_fn = lookup_backend(backend, opts)

    def make(target):
        if not callable(target):
            raise TypeError(f"kiln.compile expects a function or an nn.Module, not {type(target).__name__}")
        if backend_name == "kiln":
            from kiln.codegen.triton.precompile import prewarm_for_gpu

            prewarm_for_gpu()
        compiler = FrameCompiler(backend_name, ddp_aware(backend_fn, opts), fullgraph, opts, dynamic)
        config = CompileConfig(backend_name, mode, fullgraph, dynamic, opts, compiler)
        if isinstance(target, torch.nn.Module):
            return _compiled_module(target, config)
        if _is_optimizer_step(target) and backend_name == "kiln":
            from kiln.optim import fused_step_for

            return fused_step_for(target.__self__, opts)  # kiln.compile(optimizer.step): kiln/optim
        return CompiledFunction(target, config)

    if model is None:
        return make
    return make(model)


def _is_optimizer_step(target) -> bool:
    return isinstance(getattr(target, "__self__", None), torch.optim.Optimizer) and \
        getattr(target, "__name__", None) == "step"


def options_for_mode(mode: str | None, opts: Options) -> Options:
    """The options a mode turns on, on top of ``opts``."""
    changes = {}
    if mode in ("reduce-overhead", "max-autotune"):
        changes["cudagraphs"] = True
    if mode in ("max-autotune", "max-autotune-no-cudagraphs"):
        changes["matmul_templates"] = True
    return opts.replace(**changes) if changes else opts


class CompileConfig:
    def __init__(self, backend_name, mode, fullgraph, dynamic, options, compiler):
        self.backend_name = backend_name
        self.mode = mode
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.options = options
        self.compiler = compiler


class CompiledFunction(hook.HookedCall):
    """A function whose frames (and those of what it calls) are captured while it runs. Calling it
    calls ``fn`` with the compiler as the thread's frame callback: in C (``hook.HookedCall``), with no
    Python frame of its own, since it runs on every call."""

    def __init__(self, fn: Callable, config: CompileConfig):
        super().__init__(fn, config.compiler)
        self._kiln_fn = fn
        self._kiln_config = config
        functools.update_wrapper(self, fn)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    def __copy__(self):  # (as for functions, which copy.copy and copy.deepcopy return as they are)
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce_ex__(self, protocol):
        raise TypeError("a kiln-compiled function cannot be pickled; pickle the original function and compile it "
                        "again after loading (kiln.save/kiln.load keep compiled code across processes)")

    def __repr__(self) -> str:
        return f"<kiln compiled {getattr(self._kiln_fn, '__qualname__', self._kiln_fn)!r} " \
               f"backend={self._kiln_config.backend_name!r}>"


def _compiled_module(module: torch.nn.Module, config: CompileConfig) -> torch.nn.Module:
    """A module that shares all state with `module` (same __dict__: parameters, buffers, submodules,
    training flag) and whose calls run compiled. isinstance(result, type(module)) holds."""
    cls = type(module)
    compiled_cls = _COMPILED_CLASSES.get(cls)
    if compiled_cls is None:
        compiled_cls = type(f"Compiled{cls.__name__}", (cls,), {
            "__call__": _compiled_module_call,
            "__reduce_ex__": _refuse_pickle,
            "_kiln_compiled": True,
            "__module__": cls.__module__,
        })
        _COMPILED_CLASSES[cls] = compiled_cls
    wrapper = object.__new__(compiled_cls)
    object.__setattr__(wrapper, "__dict__", module.__dict__)
    _MODULE_CONFIGS[wrapper] = (config, module)
    _share_composable_state(module, wrapper)
    return wrapper


def _share_composable_state(module, wrapper) -> None:
    """The state torch.distributed's composable APIs keep per module object (FSDP2's ``fully_shard``):
    the wrapper is another object, so without it FSDP's methods called on the wrapper, or on a model whose
    blocks were replaced by their wrappers (set_requires_gradient_sync, unshard, reshard, ...), found no
    state ("No FSDP state found"). (Not imported when nothing imported it: then no module has any.)"""
    composable = sys.modules.get("torch.distributed._composable_state")
    if composable is None:
        return
    try:
        state = composable._get_module_state(module)
        if state is not None and wrapper not in composable._module_state_mapping:
            composable._insert_module_state(wrapper, state)
    except Exception:  # noqa: BLE001 -- another torch's internals: FSDP's methods on the wrapper then fail as before
        pass


_COMPILED_CLASSES: dict[type, type] = {}
_MODULE_CONFIGS: "weakref.WeakKeyDictionary[torch.nn.Module, tuple]" = weakref.WeakKeyDictionary()


def _compiled_module_call(self, *args, **kwargs):
    config, original = _MODULE_CONFIGS[self]
    return hook.call_with_callback(config.compiler, original, *args, **kwargs)


def _refuse_pickle(self, protocol):
    raise TypeError("a kiln-compiled module cannot be pickled; pickle the original module instead")


def original_of(obj):
    """The function or module that kiln.compile wrapped."""
    if isinstance(obj, CompiledFunction):
        return obj._kiln_fn
    if getattr(type(obj), "_kiln_compiled", False):
        return _MODULE_CONFIGS[obj][1]
    return obj


def config_of(obj) -> CompileConfig | None:
    if isinstance(obj, CompiledFunction):
        return obj._kiln_config
    if getattr(type(obj), "_kiln_compiled", False):
        return _MODULE_CONFIGS[obj][0]
    return None


def reset() -> None:
    """Clear every cache, so the next call of a compiled function compiles afresh."""
    reset_all()
    from kiln.capture import interpreter

    interpreter._DECODED.clear()
    interpreter._INDEXES.clear()


def graph_break() -> None:
    """Force a graph break here when called inside compiled code; does nothing when run eagerly."""


def disable(fn: Callable | None = None):
    """Run `fn` eagerly, without kiln looking inside it or the functions it calls."""
    if fn is None:
        return disable
    if not callable(fn):
        raise TypeError(f"kiln.disable expects a callable, not {type(fn).__name__}")

    @functools.wraps(fn)
    def run_eagerly(*args, **kwargs):
        return hook.call_without_hook(fn, *args, **kwargs)

    run_eagerly._kiln_disabled = True
    if hook.available():
        hook.mark_skip(run_eagerly.__code__)
    return run_eagerly
