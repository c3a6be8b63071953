"""Process-wide counters: ``kiln.stats.snapshot()`` and ``kiln.stats.reset()``."""
from __future__ import annotations

import collections
import contextlib
import threading
import time
from typing import Iterator

def _fast_hits() -> int:
    """Hits the C hook found on its own (capture/hook.py; imported when first needed: kiln.capture
    imports this module)."""
    global _fast_hits
    from kiln.capture.hook import fast_hits

    _fast_hits = fast_hits
    return fast_hits()


# The compile stages ``stats.stages`` reports, in pipeline order, with what each measures (exclusive time:
# a stage nested in another is not counted in the outer one). Stages not listed here still appear.
STAGES = {
    "capture": "bytecode interpretation into an FX graph (capture/)",
    "guards": "building the guard function of a captured graph",
    "backend": "the backend's own glue (what no stage below claims)",
    "warm_cache": "warm start: whole-graph cache key, lookup, load and store (backends/warm_cache.py)",
    "aot": "ATen tracing on fake tensors, functionalization (aot/)",
    "decompositions": "decompositions applied while tracing (decomp/)",
    "partition": "min-cut split of a joint graph (training)",
    "backward_variant": "a backward compiled again at its first call with absent gradients as zeros, less nested stages",
    "lower": "lowering to loop IR (lower/)",
    "schedule": "scheduling and fusion (schedule/)",
    "codegen": "C++/Triton kernel and wrapper source generation (codegen/)",
    "kernel_load": "loading built kernels (cache lookups, dlopen, Triton launchers), less builds",
    "cpp_compile": "kernel builds by the C++ compiler (g++)",
    "triton compile (workers)": "Triton compiles (ptxas included) in the worker pool",
    "triton load": "loading precompiled Triton binaries",
    "autotune": "timing launch configs / matmul paths on the first call",
    "first_run": "a compiled graph's first call (Triton compiles at launch included), less nested stages",
}


class Stats:
    """Counters of what kiln did in this process.

    frames_seen / frames_compiled: frames offered by the hook / turned into transformed code.
    frames_without_tensors: frames run as they are because nothing they can reach is a tensor
    (capture/frame_filter.py).
    graphs: FX graphs handed to a backend. graph_breaks: by reason.
    joint_graphs: graphs compiled for training (forward and backward from one joint graph).
    recompilations: by the guard that failed. eager_fallbacks: frames run eagerly, by reason.
    kernels_generated / aten_fallbacks: filled in by code generation (fallbacks by op and reason).
    kernel_compiles / kernel_cache_hits: kernel libraries built by the system compiler / found in the
    disk cache. triton_precompiled: Triton kernel configs compiled by the worker pool before launch;
    triton_slow_loads: (seconds, kernel) of those whose load here took long (compiled here after all);
    triton_key_mismatches: kernels a worker built under another Triton cache key than this process's.
    triton_worker_seconds: what the worker pool's jobs took, summed over jobs (CPU seconds of the pool, not
    wall time): "compile" (Triton's compiler with ptxas), "launcher" (gcc building C launchers), "jobs",
    and "slowest" (one job's compile + launcher); triton_slowest_builds: the slowest jobs, (seconds, kernel,
    launch config), slowest first.
    matmul_choices: matmul templates by the path picked ("template" or "library"; max-autotune).
    tuning: first calls of tuned Triton kernels (and matmul templates, and size buckets) by how their
    config was found: "timed" (autotuned here), "shared" (another graph of this process timed the same
    code), "saved" (read from the tune file on the first call; choices read when a graph is loaded are
    not counted).
    dynamic_graphs / dynamic_fallbacks: graphs with symbolic sizes compiled into size-generic code / compiled
    for the sizes seen instead (by reason; the backend then specialized every size symbol).
    causal_masks: attention masks proven equal to SDPA's causal mask ("causal": traced as
    ``is_causal=True``) or to keep every score ("none": dropped) (aot/causal_mask.py).
    speed_choices: inference graphs by what runs them after timing both on the first calls ("kiln": the
    generated code, "eager": the captured graph run by eager PyTorch; Options.choose_faster).
    ddp_pieces: pieces of graphs split at DDP gradient bucket boundaries (docs/distributed.md).
    optimizer_steps: optimizer.step() calls run by kiln's fused step ("fused") or by eager's (why);
    optimizer_graphs: fused-step graphs compiled (kiln/optim).
    inplace_stores: mutated inputs whose new value a generated kernel stores in place (schedule/inplace.py).
    seconds: time spent per stage, inclusive (a stage's time includes the stages nested in it).
    stages: time spent per stage, exclusive (each second counted once: the values add up to the
    compile time); ``STAGES`` says what each stage is; ``format_stages`` prints them.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.frames_seen = 0
        self.frames_without_tensors = 0
        self.frames_compiled = 0
        self._fast_hits_at_reset = _fast_hits()
        self.cache_hits = 0
        self.graphs = 0
        self.joint_graphs = 0
        self.graph_breaks: collections.Counter[str] = collections.Counter()
        self.recompilations: collections.Counter[str] = collections.Counter()
        self.eager_fallbacks: collections.Counter[str] = collections.Counter()
        self.kernels_generated = 0
        self.inplace_stores = 0
        self.optimizer_steps: collections.Counter[str] = collections.Counter()
        self.optimizer_graphs = 0
        self.aten_fallbacks: collections.Counter[str] = collections.Counter()
        self.kernel_compiles = 0
        self.kernel_cache_hits = 0
        self.triton_precompiled = 0
        self.triton_slow_loads: list = []  # (seconds, kernel) of precompiled kernels that took long to load
        self.triton_key_mismatches: list = []  # kernels whose worker-built binary is under another cache key
        self.triton_worker_seconds: collections.Counter[str] = collections.Counter()
        self.triton_slowest_builds: list = []  # (seconds, kernel, config) of the slowest worker jobs
        self.matmul_choices: collections.Counter[str] = collections.Counter()
        self.tuning: collections.Counter[str] = collections.Counter()  # timed / shared / saved
        self.cudagraph_recordings = 0  # CUDA graphs recorded (mode="reduce-overhead"; time in seconds["cudagraph_record"])
        self.dynamic_graphs = 0  # graphs compiled once into size-generic code
        self.causal_masks: collections.Counter[str] = collections.Counter()  # "causal" / "none" (aot/causal_mask.py)
        self.dynamic_fallbacks: collections.Counter[str] = collections.Counter()  # compiled static instead, by reason
        self.speed_choices: collections.Counter[str] = collections.Counter()
        self.ddp_pieces = 0  # pieces of graphs split at DDP bucket boundaries (kiln/distributed/)
        self.seconds: collections.Counter[str] = collections.Counter()
        self.stages: collections.Counter[str] = collections.Counter()
        self.warm_cache: collections.Counter[str] = collections.Counter()  # hits, misses, stored, refused
        self._local = threading.local()

    SLOWEST_BUILDS_KEPT = 8

    def note_slow_build(self, seconds: float, kernel: str, config: dict) -> None:
        """Keep the worker jobs that took longest (``triton_slowest_builds``)."""
        builds = self.triton_slowest_builds
        if len(builds) < self.SLOWEST_BUILDS_KEPT or seconds > builds[-1][0]:
            summary = ",".join(f"{k}={v}" for k, v in sorted(config.items()) if not isinstance(v, (dict, list)))
            builds.append((round(seconds, 3), kernel, summary))
            builds.sort(key=lambda b: -b[0])
            del builds[self.SLOWEST_BUILDS_KEPT:]

    @property
    def cache_hits(self) -> int:
        """Calls that found a cache entry: those the callback found plus those the C hook found in its
        tables without calling it (capture/hook.py, "cache tables")."""
        return self._cache_hits + _fast_hits() - self._fast_hits_at_reset

    @cache_hits.setter
    def cache_hits(self, value: int) -> None:
        self._cache_hits = value - (_fast_hits() - self._fast_hits_at_reset)

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Time a stage: ``seconds[stage]`` inclusive (counted once when the stage nests in itself),
        ``stages[stage]`` exclusive of the stages nested in it."""
        stack = self._local.__dict__.setdefault("stack", [])
        frame = [stage, 0.0]  # (stage, seconds of the stages nested in it)
        outer_same = any(f[0] == stage for f in stack)
        stack.append(frame)
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            stack.pop()
            if not outer_same:
                self.seconds[stage] += elapsed
            self.stages[stage] += elapsed - frame[1]
            if stack:
                stack[-1][1] += elapsed

    def format_stages(self, stages: dict | None = None) -> str:
        """One line per stage (exclusive seconds), in pipeline order, with the total."""
        stages = dict(self.stages if stages is None else stages)
        order = [s for s in STAGES if s in stages] + sorted(s for s in stages if s not in STAGES)
        lines = [f"  {s:<26} {1000 * stages[s]:9.1f} ms  {STAGES.get(s, '')}" for s in order]
        lines.append(f"  {'total':<26} {1000 * sum(stages.values()):9.1f} ms")
        return "\n".join(lines)

    def snapshot(self) -> dict:
        return {
            "frames_seen": self.frames_seen,
            "frames_without_tensors": self.frames_without_tensors,
            "frames_compiled": self.frames_compiled,
            "cache_hits": self.cache_hits,
            "graphs": self.graphs,
            "joint_graphs": self.joint_graphs,
            "graph_breaks": dict(self.graph_breaks),
            "recompilations": dict(self.recompilations),
            "eager_fallbacks": dict(self.eager_fallbacks),
            "kernels_generated": self.kernels_generated,
            "inplace_stores": self.inplace_stores,
            "optimizer_steps": dict(self.optimizer_steps),
            "optimizer_graphs": self.optimizer_graphs,
            "aten_fallbacks": dict(self.aten_fallbacks),
            "matmul_choices": dict(self.matmul_choices),
            "tuning": dict(self.tuning),
            "cudagraph_recordings": self.cudagraph_recordings,
            "dynamic_graphs": self.dynamic_graphs,
            "dynamic_fallbacks": dict(self.dynamic_fallbacks),
            "causal_masks": dict(self.causal_masks),
            "speed_choices": dict(self.speed_choices),
            "ddp_pieces": self.ddp_pieces,
            "kernel_compiles": self.kernel_compiles,
            "kernel_cache_hits": self.kernel_cache_hits,
            "triton_precompiled": self.triton_precompiled,
            "triton_slow_loads": list(self.triton_slow_loads),
            "triton_slowest_builds": list(self.triton_slowest_builds),
            "triton_key_mismatches": list(self.triton_key_mismatches),
            "triton_worker_seconds": {k: round(v, 3) for k, v in self.triton_worker_seconds.items()},
            "seconds": {k: round(v, 6) for k, v in self.seconds.items()},
            "stages": {k: round(v, 6) for k, v in self.stages.items()},
            "warm_cache": dict(self.warm_cache),
        }

    def __repr__(self) -> str:
        return f"kiln.stats({self.snapshot()})"


class FirstCall:
    """Stands in for ``owner.<attr>`` (a compiled graph's runner) until its first call, which it times
    as stage "first_run" and after which it puts the runner back: later calls pay nothing."""

    def __init__(self, owner, attr: str):
        self.owner, self.attr, self.inner = owner, attr, getattr(owner, attr)

    def __call__(self, *args):
        setattr(self.owner, self.attr, self.inner)
        with stats.timed("first_run"):
            return self.inner(*args)

    def __getattr__(self, name):
        return getattr(self.__dict__["inner"], name)


def time_first_call(runtime) -> None:
    """Time the first call of a runtime's runner (``run``, or ``fwd`` of a training runtime)."""
    for attr in ("run", "fwd"):
        if callable(getattr(runtime, attr, None)) and not isinstance(getattr(runtime, attr), FirstCall):
            setattr(runtime, attr, FirstCall(runtime, attr))
            return


stats = Stats()
