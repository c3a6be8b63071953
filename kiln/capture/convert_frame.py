"""The frame callback: look up the cache, or trace the frame and build a new cache entry.

One `FrameCompiler` exists per `kiln.compile(...)` call; it owns that call's cache (per code object
a list of guarded entries) and its record of what happened (for explain()).
"""
from __future__ import annotations

import dataclasses
import gc
import time
import types
import warnings
import weakref
from typing import Any, Callable

import torch
import torch.fx as fx

from kiln.capture import hook, tensor_guard_build
from kiln.capture.triton_stores import is_kernel_code
from kiln.capture.codegen import collect_tensors, transformed_code
from kiln.capture.dynamic import DYNAMIC_BACKENDS, DynamicPolicy, FrameShapes
from kiln.capture.values.optimizers import compiling_for
from kiln.capture.frame_filter import SKIP_AFTER, may_use_tensors
from kiln.capture.graph_break import compile_with_break
from kiln.capture.guards import CompiledGuards, functorch_level
from kiln.capture.interpreter import RootTracer
from kiln.capture.values.lazy_generators import CALLED_AS_PYTHON, RetraceFrame, check_abandoned
from kiln.capture.values.modules import guard_module_aliasing
from kiln.capture.skipfiles import is_library_dataclass_method, is_namedtuple_new, is_torch_module_init, should_offer
from kiln.debug.stats import stats
from kiln.fake.symbolic import SpecializationError
from kiln.fake.symbolic_meta import SymbolicShapeUnsupported
from kiln.errors import BackendError, GraphBreakError, InternalError, Unsupported
from kiln.options import Options


def _in_checkpoint_forward() -> bool:
    """Whether the innermost saved-tensor hooks are those of a non-reentrant torch.utils.checkpoint."""
    hooks = _top_saved_tensors_hooks(False)
    return hooks is not None and getattr(hooks[0], "__module__", None) == "torch.utils.checkpoint"


_top_saved_tensors_hooks = torch._C._autograd._top_saved_tensors_default_hooks


_FRAME_READERS = frozenset({"locals", "vars", "dir", "eval", "exec"})


def _reads_frame_locals(code, f_globals) -> bool:
    """Whether ``code`` calls a builtin that reads the calling frame's variables: ``locals()``, ``vars()``
    or ``dir()`` without an argument, ``eval``/``exec`` with one (a global of that name in the module is
    the user's own). Decided from the bytecode before tracing: a graph break earlier in the frame would
    run the call where those variables are not what the program left."""
    import dis

    names = _FRAME_READERS.intersection(code.co_names)
    if not names:
        return False
    insts = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "PRECALL", "KW_NAMES")]
    for k, inst in enumerate(insts):
        if inst.opname not in ("LOAD_GLOBAL", "LOAD_NAME") or inst.argval not in names or inst.argval in f_globals:
            continue
        argc = _call_arguments(insts, k + 1)
        if argc is None or argc == (0 if inst.argval in ("locals", "vars", "dir") else 1):
            return True
    return False


def _call_arguments(insts, start: int) -> int | None:
    """The number of positional arguments of the call whose callee was loaded just before ``insts[start]``
    (None when a jump or an unknown instruction makes it unclear): the stack is followed from there until a
    CALL takes it back to the callee."""
    import dis

    depth = 0
    for inst in insts[start:]:
        if inst.opname == "CALL":
            if depth == inst.arg:
                return inst.arg
        elif inst.opname.startswith(("JUMP", "POP_JUMP", "FOR_ITER", "RETURN", "SEND")) or "JUMP" in inst.opname:
            return None
        try:
            depth += dis.stack_effect(inst.opcode, inst.arg if inst.opcode >= dis.HAVE_ARGUMENT else None, jump=False)
        except ValueError:
            return None
        if depth < 0:
            return None
    return None


@dataclasses.dataclass
class CacheEntry:
    guards: CompiledGuards
    code: types.CodeType
    graph: fx.GraphModule | None
    op_count: int
    owner: int | None = None  # id of the module the frame ran for (its ``self``), for the recompile limit


# Entries of one code compiled for different module instances (a layer's forward, or its resume function
# after a graph break, guarded on ``L['self']``: one entry per layer) count against ``recompile_limit``
# per instance; all of them together up to this many times the limit.
INSTANCE_FACTOR = 8
MAX_RECOMPILE_REASONS = 64  # recompiles whose reasons a compiler keeps for kiln.explain


def _module_owner(f_locals) -> int | None:
    owner = f_locals.get("self") if isinstance(f_locals, dict) else None
    return id(owner) if isinstance(owner, torch.nn.Module) else None


@dataclasses.dataclass
class FrameRecord:
    """What happened to one frame kiln looked at: compiled (with a graph or without) or run eagerly."""

    code_name: str
    filename: str
    lineno: int
    graph: fx.GraphModule | None = None
    guards: str = ""
    op_count: int = 0
    fallback_reason: str | None = None  # the whole frame ran eagerly because of this
    break_reason: str | None = None  # the graph was broken here; the rest continues in a resume function
    fallback_file: str = ""
    fallback_line: int = 0
    hint: str = ""
    backend_report: str = ""  # what the backend says it did with the graph (e.g. the ATen graph)


_ALL_COMPILERS: "weakref.WeakSet[FrameCompiler]" = weakref.WeakSet()
_SKIPPED_CODES: set = set()
_TENSOR_FREE_CALLS: dict = {}  # code -> tensor-free calls in a row (frame_filter.SKIP_AFTER)


class FrameCompiler:
    def __init__(self, backend_name: str, backend: Callable, fullgraph: bool, options: Options,
                 dynamic: bool | None = None):
        self.backend_name = backend_name
        self.backend = backend
        self.fullgraph = fullgraph
        self.options = options
        self.dynamic = dynamic
        self.frame_shapes: dict[types.CodeType, FrameShapes] = {}  # automatic dynamic, per code object
        self.cache: dict[types.CodeType, list[CacheEntry]] = {}
        self.failed: dict[types.CodeType, FrameRecord] = {}
        self.given_up: set[types.CodeType] = set()
        self.records: list[FrameRecord] = []
        # (the frame, why each of its cache entries refused the call) at each recompile: kiln.explain
        self.recompile_reasons: list[tuple[str, list[str]]] = []
        # id(code) -> (check, code) of each entry: the table the C hook reads on its own (hook.py), so a
        # cache hit costs no call of this object; it calls it when no entry matches. (``self.cache`` holds
        # the code objects, so no id here is a reused one.)
        self._kiln_tables: dict[int, list] = {}
        tensor_guard_build.ensure(options)  # guards read tensors' fields in C++ once it is built
        _ALL_COMPILERS.add(self)

    def reset(self) -> None:
        self._kiln_tables.clear()
        self.cache.clear()
        self.frame_shapes.clear()
        self.failed.clear()
        self.given_up.clear()
        self.records.clear()
        self.recompile_reasons.clear()

    def _add_entry(self, code, entry: CacheEntry) -> None:
        self.cache.setdefault(code, []).append(entry)
        self._kiln_tables.setdefault(id(code), []).append((entry.guards.check, entry.code))

    # the callback the hook calls (a cache hit that the hook's table finds does not reach it)
    def __call__(self, code, f_locals, f_globals, f_builtins, closure):
        if _in_checkpoint_forward():
            # torch.utils.checkpoint (non-reentrant) recomputes this frame in the backward, eagerly (outside
            # the compiled call), and requires the recomputation to save what the forward saved: so the
            # forward runs eagerly too (a compiled graph saves what its partition chose)
            if should_offer(code):
                stats.eager_fallbacks["inside torch.utils.checkpoint (non-reentrant): its recomputation runs eagerly"] += 1
            return None
        entries = self.cache.get(code)
        if entries:
            for entry in entries:
                if entry.guards.check(f_locals, f_globals, closure, f_builtins):
                    stats.cache_hits += 1
                    return entry.code
        if code in self.failed or code in self.given_up:
            return None
        if torch._C._is_torch_function_mode_enabled():
            # a TorchFunctionMode (also `with torch.device(...)`) may change what every torch call does:
            # this call runs eagerly, and entries compiled without one are guarded against it
            if self.fullgraph:
                raise GraphBreakError("a TorchFunctionMode is active (for example `with torch.device(...)`)",
                                      code.co_filename, code.co_firstlineno,
                                      "call the compiled function outside the mode, or move the mode inside it "
                                      "as explicit device=/dtype= arguments")
            if should_offer(code):  # (library frames run as they are anyway: not counted)
                stats.eager_fallbacks["a TorchFunctionMode is active"] += 1
            return None
        if functorch_level is not None and functorch_level() is not None:
            # inside torch.func.vmap/grad/jvp the arguments are wrapped tensors with no storage of their own:
            # the frame runs eagerly, under the transform (entries compiled outside are guarded against it)
            if self.fullgraph:
                raise GraphBreakError("called inside a torch.func transform (vmap, grad, jvp)",
                                      code.co_filename, code.co_firstlineno,
                                      "kiln does not compile under torch.func transforms; call the compiled "
                                      "function outside the transform")
            if should_offer(code):
                stats.eager_fallbacks["inside a torch.func transform (vmap, grad, jvp): runs eagerly"] += 1
            return None
        if not should_offer(code) or is_kernel_code(code, f_globals) or is_namedtuple_new(code, f_globals) \
                or is_library_dataclass_method(code, f_globals) or is_torch_module_init(code):
            hook.mark_skip(code)
            _SKIPPED_CODES.add(code)
            return None
        if not entries and _reads_frame_locals(code, f_globals):
            # locals()/vars()/dir()/eval/exec read the frame's variables, which the code kiln makes at a graph
            # break does not keep as the program left them: the frame runs as Python, every call
            stats.eager_fallbacks["locals(), vars(), dir(), eval() or exec() read the frame's local variables"] += 1
            hook.mark_skip(code)
            _SKIPPED_CODES.add(code)
            return None
        if not entries and not may_use_tensors(code, f_locals, f_globals, closure):
            stats.frames_without_tensors += 1
            misses = _TENSOR_FREE_CALLS[code] = _TENSOR_FREE_CALLS.get(code, 0) + 1
            if misses >= SKIP_AFTER:
                hook.mark_skip(code)
                _SKIPPED_CODES.add(code)
            return None
        _TENSOR_FREE_CALLS.pop(code, None)
        stats.frames_seen += 1
        if entries:
            failing = entries[-1].guards.first_failure(f_locals, f_globals, closure, f_builtins) or "unknown guard"
            stats.recompilations[failing] += 1
            if len(self.recompile_reasons) < MAX_RECOMPILE_REASONS:
                every = [failing] + [e.guards.first_failure(f_locals, f_globals, closure, f_builtins) or "unknown guard"
                                     for e in reversed(entries[-4:-1])]  # (the newest entries: each one's guard)
                self.recompile_reasons.append((f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})", every))
            owner = _module_owner(f_locals)
            mine = sum(1 for e in entries if e.owner == owner) if owner is not None else len(entries)
            limit = self.options.recompile_limit
            if mine >= limit or len(entries) >= limit * (INSTANCE_FACTOR if owner is not None else 1):
                self.given_up.add(code)
                stats.eager_fallbacks["recompile limit"] += 1
                warnings.warn(
                    f"kiln: {code.co_qualname} ({code.co_filename}:{code.co_firstlineno}) was recompiled "
                    f"{mine} times{' for this module instance' if owner is not None else ''} "
                    f"(recompile_limit={self.options.recompile_limit}); it now runs eagerly. "
                    f"The guard that kept failing: {failing}",
                    stacklevel=2,
                )
                return None
        try:
            with stats.timed("capture"), compiling_for(self.backend_name):
                while True:
                    try:
                        return self._compile(code, f_locals, f_globals, f_builtins, closure)
                    except _RetraceStatic:
                        continue  # sizes could not stay symbolic: traced again, static from now on
                    except RetraceFrame:
                        continue  # the trace learned how to model a value (lazy_generators): traced again
        finally:
            if _holds_finalizable(f_locals):
                # the tracers' reference cycles hold the frame's objects: freed now, so a generator the
                # frame abandons is closed (its finally run) when eager would, not at a later collection
                gc.collect()

    def _policy(self, code) -> DynamicPolicy:
        shapes = self.frame_shapes.setdefault(code, FrameShapes())
        enabled = self.backend_name in DYNAMIC_BACKENDS or getattr(self.backend, "kiln_dynamic", False)
        return DynamicPolicy(self.dynamic, shapes, enabled, ints=self.options.dynamic_ints,
                             floats=self.options.dynamic_floats)

    def _compile(self, code, f_locals, f_globals, f_builtins, closure):
        record = FrameRecord(code.co_qualname, code.co_filename, code.co_firstlineno)
        policy = self._policy(code)
        tracer = RootTracer(code, f_locals, f_globals, f_builtins, closure, self.options, dynamic=policy)
        try:
            try:
                result = tracer.run()
                new_code, gm = self._finish(code, tracer, result)
            finally:
                self._check_dynamic(code, tracer.output.shape_env)
        except Unsupported as exc:
            if self.fullgraph:
                raise GraphBreakError(exc.reason, exc.filename or code.co_filename,
                                      exc.lineno or code.co_firstlineno, exc.hint) from None
            broken = self._try_break(code, f_locals, f_globals, f_builtins, closure, exc, record)
            if broken is not None:
                return broken
            record.fallback_reason = exc.reason
            record.fallback_file = exc.filename or code.co_filename
            record.fallback_line = exc.lineno or code.co_firstlineno
            record.hint = exc.hint
            self.records.append(record)
            self.failed[code] = record
            stats.eager_fallbacks[exc.reason] += 1
            return None
        except (GraphBreakError, BackendError, _RetraceStatic, SpecializationError, RetraceFrame):
            raise
        except SymbolicShapeUnsupported as exc:  # (where no ShapeEnv noted it): static sizes from now on
            self.frame_shapes.setdefault(code, FrameShapes()).static_reason = str(exc)
            stats.dynamic_fallbacks[str(exc)] += 1
            raise _RetraceStatic(str(exc)) from None
        except Exception as exc:  # a bug in kiln: never let it change the program's result
            if self.fullgraph:
                raise InternalError(
                    f"kiln failed while capturing {code.co_qualname} ({code.co_filename}:{code.co_firstlineno}): "
                    f"{type(exc).__name__}: {exc}. This is a bug in kiln; without fullgraph=True the "
                    f"function would run eagerly.") from exc
            reason = f"internal error in kiln: {type(exc).__name__}: {exc}"
            record.fallback_reason = reason
            record.fallback_file, record.fallback_line = code.co_filename, tracer.lineno
            self.records.append(record)
            self.failed[code] = record
            stats.eager_fallbacks[reason] += 1
            warnings.warn(f"kiln: {reason} (at {code.co_filename}:{tracer.lineno}); "
                          f"{code.co_qualname} runs eagerly", stacklevel=2)
            return None
        with stats.timed("guards"):
            guard_module_aliasing(tracer.output)
            guards = tracer.output.guards.compile((f_locals, f_globals, closure, f_builtins))
        self._add_entry(code, CacheEntry(guards, new_code, gm, tracer.output.op_count, _module_owner(f_locals)))
        record.graph = gm
        record.guards = guards.source_code
        record.op_count = tracer.output.op_count
        self.records.append(record)
        stats.frames_compiled += 1
        return new_code

    def _try_break(self, code, f_locals, f_globals, f_builtins, closure, exc: Unsupported, record):
        """Break the graph at the root instruction where `exc` happened; None if that is not possible."""
        index = getattr(exc, "root_index", None)
        if index is None or index < 0:
            return None
        policy = self._policy(code)
        holder = {}

        def finish(output, tensors):
            holder["env"] = output.shape_env
            return self._compile_graph(code, output, tensors)

        try:
            try:
                new_code, gm, tracer = compile_with_break(
                    code, f_locals, f_globals, f_builtins, closure, self.options, index, finish, dynamic=policy)
            finally:
                self._check_dynamic(code, holder.get("env"))
        except Unsupported as why_not:
            exc.hint = f"the function runs eagerly: no graph break is possible here ({why_not.reason})" + \
                (f"; {exc.hint}" if exc.hint else "")
            return None
        except (BackendError, _RetraceStatic, SpecializationError, RetraceFrame):
            raise
        except Exception as bug:  # a bug in kiln: the frame runs eagerly instead
            warnings.warn(f"kiln: internal error while breaking the graph of {code.co_qualname} at "
                          f"{exc.where()}: {type(bug).__name__}: {bug}; the frame runs eagerly", stacklevel=2)
            exc.hint = (exc.hint + "; " if exc.hint else "") + f"graph break failed: {type(bug).__name__}: {bug}"
            return None
        with stats.timed("guards"):
            guard_module_aliasing(tracer.output)
            guards = tracer.output.guards.compile((f_locals, f_globals, closure, f_builtins))
        self._add_entry(code, CacheEntry(guards, new_code, gm, tracer.output.op_count, _module_owner(f_locals)))
        record.graph = gm
        record.guards = guards.source_code
        record.op_count = tracer.output.op_count
        record.break_reason = exc.reason
        record.fallback_file = exc.filename or code.co_filename
        record.fallback_line = exc.lineno or code.co_firstlineno
        record.hint = exc.hint
        self.records.append(record)
        stats.graph_breaks[exc.reason] += 1
        stats.frames_compiled += 1
        return new_code

    def _check_dynamic(self, code, env) -> None:
        """Where sizes could not stay symbolic (``env.failed``), the code is traced again with static sizes
        from now on; a dim the user marked dynamic that had to become a constant is the user's error."""
        if env is None:
            return
        if env.specialization_error is not None:
            raise env.specialization_error
        if env.unbacked_failed is not None:  # data-dependent ops break the graph from now on, as before
            shapes = self.frame_shapes.setdefault(code, FrameShapes())
            shapes.no_unbacked = env.unbacked_failed
            stats.dynamic_fallbacks[f"unbacked: {env.unbacked_failed}"] += 1
            raise _RetraceStatic(env.unbacked_failed)
        if env.failed is not None:
            shapes = self.frame_shapes.setdefault(code, FrameShapes())
            shapes.static_reason = env.failed
            stats.dynamic_fallbacks[env.failed] += 1
            raise _RetraceStatic(env.failed)

    def _finish(self, code, tracer: RootTracer, result):
        output = tracer.output
        check_abandoned(output)
        tensors: list = []
        seen: set = set()
        collect_tensors(result, tensors, seen)
        for value in output.side_effects.values():
            collect_tensors(value, tensors, seen)
        graph_call, graph_outputs, gm = self._compile_graph(code, output, tensors)
        new_code = transformed_code(code, graph_call, result, graph_outputs, output.side_effects)
        return new_code, gm

    def _compile_graph(self, code, output, tensors):
        """Compile the graph with `tensors` as its outputs: (graph_call or None, output index by node, gm)."""
        # outputs that are graph inputs unchanged are loaded from the frame, not routed through the graph
        routed = [t for t in tensors if not (t.source is not None and t.node.op == "placeholder")]
        graph_outputs = {id(t.node): i for i, t in enumerate(routed)}
        if output.op_count == 0 and not routed:
            if output.changes_grad_mode and output.grad_enabled != torch.is_grad_enabled():
                return (SetGradMode(output.grad_enabled), []), graph_outputs, None  # no graph needed
            return None, graph_outputs, None
        gm = output.finish(routed)
        stats.graphs += 1
        with stats.timed("backend"):
            try:
                compiled = self.backend(gm, list(output.example_inputs))
            except Unsupported:
                raise
            except Exception as exc:
                raise BackendError(
                    f"backend {self.backend_name!r} failed to compile the graph of {code.co_qualname} "
                    f"({code.co_filename}:{code.co_firstlineno}): {type(exc).__name__}: {exc}"
                ) from exc
        if not callable(compiled):
            raise BackendError(f"backend {self.backend_name!r} returned {compiled!r}, which is not callable")
        report = getattr(compiled, "kiln_explain", None)
        gm.meta["kiln_backend_report"] = report() if callable(report) else ""
        inference = output.inference_outputs(routed)
        if inference:  # outputs eager makes as inference tensors (values/inference.py)
            from kiln.capture.values.inference import InferenceOutputs

            compiled = InferenceOutputs(compiled, inference)
        if output.changes_grad_mode or output.changes_autocast:
            compiled = RestoreGradModeOnError(compiled)
        return (compiled, list(output.input_sources)), graph_outputs, gm


if hook.available():
    hook.set_saved_hooks_probe(_top_saved_tensors_hooks)


def _holds_finalizable(f_locals) -> bool:
    """The frame's locals include an object whose end runs code: a generator or coroutine, or an object
    whose class defines __del__."""
    for value in f_locals.values():
        if isinstance(value, (types.GeneratorType, types.CoroutineType)) or \
                getattr(type(value), "__del__", None) is not None:
            return True
    return False


class _RetraceStatic(Exception):
    """Sizes could not stay symbolic in this trace: trace the frame again with static sizes."""


class SetGradMode:
    """Stands in for a graph whose only effect is to leave grad mode switched (a block entered)."""

    def __init__(self, mode: bool):
        self.mode = mode

    def __call__(self):
        torch._C._set_grad_enabled(self.mode)
        return ()


class RestoreGradModeOnError:
    """Wraps a graph that switches grad mode or autocast inside: if it raises midway, both are put back."""

    def __init__(self, compiled: Callable):
        self.compiled = compiled

    def __call__(self, *args):
        mode = torch.is_grad_enabled()
        autocast = {d: (torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")}
        try:
            return self.compiled(*args)
        except BaseException:
            torch._C._set_grad_enabled(mode)
            for device, (enabled, dtype) in autocast.items():
                torch.set_autocast_enabled(device, enabled)
                torch.set_autocast_dtype(device, dtype)
            raise


def reset_all() -> None:
    for compiler in list(_ALL_COMPILERS):
        compiler.reset()
    for code in list(_SKIPPED_CODES):
        hook.unmark(code)
    _SKIPPED_CODES.clear()
    _TENSOR_FREE_CALLS.clear()
    CALLED_AS_PYTHON.clear()
