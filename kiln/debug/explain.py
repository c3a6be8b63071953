"""kiln.explain(fn)(*args, **kwargs): run fn once under kiln and report what was captured and why not."""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable

import torch.fx as fx


@dataclasses.dataclass
class BreakReason:
    reason: str
    filename: str
    lineno: int
    hint: str = ""

    def __str__(self) -> str:
        text = f"{self.filename}:{self.lineno}: {self.reason}"
        return text + (f"\n      hint: {self.hint}" if self.hint else "")


def _described(failed_guard: str) -> str:
    """A failed guard as its description where it has one (``expr  (tensor L['x']: ... size=(7, 3))``)."""
    expr, sep, described = failed_guard.rpartition("  (")
    return described[:-1] if sep and described.endswith(")") else failed_guard


@dataclasses.dataclass
class ExplainReport:
    backend: str
    runs_as: str
    graph_count: int
    graph_break_count: int
    break_reasons: list[BreakReason]
    graphs: list[fx.GraphModule]
    guards: list[str]
    ops_per_graph: list[int]
    frames: list[Any]
    eager_frames: list[str]
    backend_reports: list[str] = dataclasses.field(default_factory=list)
    result: Any = None
    stages: dict = dataclasses.field(default_factory=dict)  # compile seconds by stage (exclusive) of this run
    # of the compiled function explained (its calls so far): why it recompiled, where sizes stayed static
    recompiles: list = dataclasses.field(default_factory=list)  # (frame, [each newest entry's failed guard])
    static_sizes: list = dataclasses.field(default_factory=list)  # "frame: why its sizes are static"

    def __str__(self) -> str:
        lines = [
            f"kiln explain: backend {self.backend!r}" + (f" (runs as {self.runs_as!r})" if self.runs_as != self.backend else ""),
            f"  graphs: {self.graph_count}   graph breaks: {self.graph_break_count}   "
            f"frames run eagerly: {len(self.eager_frames)}",
        ]
        if self.recompiles:
            lines.append(f"  recompiles so far ({len(self.recompiles)}; for each, the guard that refused the call "
                         "in the newest cache entries):")
            for frame, failed in self.recompiles[-8:]:
                lines.append(f"    {frame}: " + "; ".join(map(_described, failed)))
        for note in self.static_sizes:
            lines.append(f"  sizes kept static: {note}")
        if self.break_reasons:
            lines.append("  why code ran eagerly:")
            for i, reason in enumerate(self.break_reasons):
                lines.append(f"    {i + 1}. {reason}")
        for i, (gm, guards, n) in enumerate(zip(self.graphs, self.guards, self.ops_per_graph)):
            lines.append(f"  graph {i} ({n} ops):")
            lines.extend("    " + line for line in str(gm.graph).rstrip().splitlines())
            if i < len(self.backend_reports) and self.backend_reports[i]:
                lines.append(f"  what backend {self.backend!r} made of graph {i}:")
                lines.extend("    " + line for line in self.backend_reports[i].rstrip().splitlines())
            lines.append(f"  guards of graph {i}:")
            lines.extend("    " + line for line in guards.rstrip().splitlines())
        if self.stages:
            from kiln.debug.stats import stats

            lines.append("  time by stage (exclusive; first call included):")
            lines.extend("  " + line for line in stats.format_stages(self.stages).splitlines())
        return "\n".join(lines)


def explain(fn: Callable, *, backend=None, **compile_kwargs):
    """`kiln.explain(fn)(*args, **kwargs)` compiles fn (or uses the settings of an already compiled fn, and
    what it learned about changing sizes and numbers), runs it once on the arguments, and returns an
    ExplainReport."""
    from kiln.api import compile as kiln_compile, config_of, original_of
    from kiln.backends.registry import lookup_backend

    config = config_of(fn)
    target = original_of(fn)
    if backend is None:
        backend = config.backend_name if config is not None else "kiln"
    if config is not None:
        compile_kwargs.setdefault("fullgraph", config.fullgraph)
        compile_kwargs.setdefault("options", config.options)
        compile_kwargs.setdefault("dynamic", config.dynamic)

    def run(*args, **kwargs) -> ExplainReport:
        from kiln.debug.stats import stats

        before = dict(stats.stages)
        compiled = kiln_compile(target, backend=backend, **compile_kwargs)
        if config is not None:
            # what the compiled function learned so far (which dims, ints and floats changed between its
            # compiles: automatic dynamic): the fresh compile starts from it, so the report shows the
            # graphs the function runs now (a dynamic graph after sizes changed), not a first compile's
            config_of(compiled).compiler.frame_shapes = copy.deepcopy(config.compiler.frame_shapes)
        result = compiled(*args, **kwargs)
        stages = {k: v - before.get(k, 0.0) for k, v in stats.stages.items() if v - before.get(k, 0.0) > 0}
        compiler = config_of(compiled).compiler
        records = compiler.records
        graphs = [r.graph for r in records if r.graph is not None]
        name, fn_backend = lookup_backend(backend, config_of(compiled).options)
        runs_as = getattr(getattr(fn_backend, "func", fn_backend), "runs_as", name)
        breaks = [BreakReason(r.break_reason or r.fallback_reason, r.fallback_file, r.fallback_line, r.hint)
                  for r in records if r.fallback_reason is not None or r.break_reason is not None]
        recompiles, static_sizes = [], []
        if config is not None:  # what the function explained went through in its calls so far
            recompiles = list(config.compiler.recompile_reasons)
            for code, shapes in config.compiler.frame_shapes.items():
                why = shapes.static_reason or (f"data-dependent ops break the graph ({shapes.no_unbacked})"
                                               if shapes.no_unbacked else None)
                if why:
                    static_sizes.append(f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno}): {why}")
        return ExplainReport(
            recompiles=recompiles,
            static_sizes=static_sizes,
            backend=name,
            runs_as=runs_as,
            graph_count=len(graphs),
            graph_break_count=sum(1 for r in records if r.break_reason is not None),
            break_reasons=breaks,
            graphs=graphs,
            guards=[r.guards for r in records if r.graph is not None],
            ops_per_graph=[r.op_count for r in records if r.graph is not None],
            frames=records,
            eager_frames=[f"{r.code_name} ({r.filename}:{r.lineno})" for r in records if r.fallback_reason],
            backend_reports=[g.meta.get("kiln_backend_report", "") for g in graphs],
            result=result,
            stages=stages,
        )

    return run
