"""The frame callback: look up the cache, or trace the frame and build a new cache entry.

One `FrameCompiler` exists per `kiln.compile(...)` call; it owns that call's cache (per code object
a list of guarded entries) and its record of what happened (for explain()).
"""
from __future__ import annotations

import dataclasses
import time
import types
import warnings
import weakref
from typing import Any, Callable

import torch
import torch.fx as fx

from kiln.capture import hook
from kiln.capture.codegen import collect_tensors, transformed_code
from kiln.capture.guards import CompiledGuards
from kiln.capture.interpreter import RootTracer
from kiln.capture.skipfiles import should_offer
from kiln.debug.stats import stats
from kiln.errors import BackendError, GraphBreakError, InternalError, Unsupported
from kiln.options import Options


@dataclasses.dataclass
class CacheEntry:
    guards: CompiledGuards
    code: types.CodeType
    graph: fx.GraphModule | None
    op_count: int


@dataclasses.dataclass
class FrameRecord:
    """What happened to one frame kiln looked at: compiled (with a graph or without) or run eagerly."""

    code_name: str
    filename: str
    lineno: int
    graph: fx.GraphModule | None = None
    guards: str = ""
    op_count: int = 0
    fallback_reason: str | None = None
    fallback_file: str = ""
    fallback_line: int = 0
    hint: str = ""


_ALL_COMPILERS: "weakref.WeakSet[FrameCompiler]" = weakref.WeakSet()
_SKIPPED_CODES: set = set()


class FrameCompiler:
    def __init__(self, backend_name: str, backend: Callable, fullgraph: bool, options: Options):
        self.backend_name = backend_name
        self.backend = backend
        self.fullgraph = fullgraph
        self.options = options
        self.cache: dict[types.CodeType, list[CacheEntry]] = {}
        self.failed: dict[types.CodeType, FrameRecord] = {}
        self.given_up: set[types.CodeType] = set()
        self.records: list[FrameRecord] = []
        _ALL_COMPILERS.add(self)

    def reset(self) -> None:
        self.cache.clear()
        self.failed.clear()
        self.given_up.clear()
        self.records.clear()

    # the callback the hook calls
    def __call__(self, code, f_locals, f_globals, f_builtins, closure):
        entries = self.cache.get(code)
        if entries:
            for entry in entries:
                if entry.guards.check(f_locals, f_globals, closure, f_builtins):
                    stats.cache_hits += 1
                    return entry.code
        if code in self.failed or code in self.given_up:
            return None
        if not should_offer(code):
            hook.mark_skip(code)
            _SKIPPED_CODES.add(code)
            return None
        stats.frames_seen += 1
        if entries:
            failing = entries[-1].guards.first_failure(f_locals, f_globals, closure, f_builtins) or "unknown guard"
            stats.recompilations[failing] += 1
            if len(entries) >= self.options.recompile_limit:
                self.given_up.add(code)
                stats.eager_fallbacks["recompile limit"] += 1
                warnings.warn(
                    f"kiln: {code.co_qualname} ({code.co_filename}:{code.co_firstlineno}) was recompiled "
                    f"{len(entries)} times (recompile_limit={self.options.recompile_limit}); it now runs eagerly. "
                    f"The guard that kept failing: {failing}",
                    stacklevel=2,
                )
                return None
        with stats.timed("capture"):
            return self._compile(code, f_locals, f_globals, f_builtins, closure)

    def _compile(self, code, f_locals, f_globals, f_builtins, closure):
        record = FrameRecord(code.co_qualname, code.co_filename, code.co_firstlineno)
        tracer = RootTracer(code, f_locals, f_globals, f_builtins, closure, self.options)
        try:
            result = tracer.run()
            new_code, gm = self._finish(code, tracer, result)
        except Unsupported as exc:
            if self.fullgraph:
                raise GraphBreakError(exc.reason, exc.filename or code.co_filename,
                                      exc.lineno or code.co_firstlineno, exc.hint) from None
            record.fallback_reason = exc.reason
            record.fallback_file = exc.filename or code.co_filename
            record.fallback_line = exc.lineno or code.co_firstlineno
            record.hint = exc.hint
            self.records.append(record)
            self.failed[code] = record
            stats.eager_fallbacks[exc.reason] += 1
            return None
        except (GraphBreakError, BackendError):
            raise
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
        guards = tracer.output.guards.compile()
        entry = CacheEntry(guards, new_code, gm, tracer.output.op_count)
        self.cache.setdefault(code, []).append(entry)
        record.graph = gm
        record.guards = guards.source_code
        record.op_count = tracer.output.op_count
        self.records.append(record)
        stats.frames_compiled += 1
        return new_code

    def _finish(self, code, tracer: RootTracer, result):
        output = tracer.output
        tensors: list = []
        seen: set = set()
        collect_tensors(result, tensors, seen)
        for value in output.side_effects.values():
            collect_tensors(value, tensors, seen)
        graph_outputs = {}
        # outputs that are graph inputs unchanged are loaded from the frame, not routed through the graph
        routed = [t for t in tensors if not (t.source is not None and t.node.op == "placeholder")]
        for i, t in enumerate(routed):
            graph_outputs[id(t.node)] = i
        gm = None
        graph_call = None
        if output.op_count > 0 or routed:
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
            if output.changes_grad_mode:
                compiled = RestoreGradModeOnError(compiled)
            graph_call = (compiled, list(output.input_sources))
        new_code = transformed_code(code, graph_call, result, graph_outputs, output.side_effects)
        return new_code, gm


class RestoreGradModeOnError:
    """Wraps a graph that switches grad mode inside: if it raises midway, the mode is put back."""

    def __init__(self, compiled: Callable):
        self.compiled = compiled

    def __call__(self, *args):
        mode = torch.is_grad_enabled()
        try:
            return self.compiled(*args)
        except BaseException:
            torch._C._set_grad_enabled(mode)
            raise


def reset_all() -> None:
    for compiler in list(_ALL_COMPILERS):
        compiler.reset()
    for code in list(_SKIPPED_CODES):
        hook.unmark(code)
    _SKIPPED_CODES.clear()
