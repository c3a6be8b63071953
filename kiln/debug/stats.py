"""Process-wide counters: ``kiln.stats.snapshot()`` and ``kiln.stats.reset()``."""
from __future__ import annotations

import collections
import contextlib
import time
from typing import Iterator


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
    disk cache. triton_precompiled: Triton kernel configs compiled by the worker pool before launch.
    matmul_choices: matmul templates by the path picked ("template" or "library"; max-autotune).
    dynamic_graphs / dynamic_fallbacks: graphs with symbolic sizes compiled into size-generic code / compiled
    for the sizes seen instead (by reason; the backend then specialized every size symbol).
    speed_choices: inference graphs by what runs them after timing both on the first calls ("kiln": the
    generated code, "eager": the captured graph run by eager PyTorch; Options.choose_faster).
    ddp_pieces: pieces of graphs split at DDP gradient bucket boundaries (docs/distributed.md).
    seconds: time spent per stage.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.frames_seen = 0
        self.frames_without_tensors = 0
        self.frames_compiled = 0
        self.cache_hits = 0
        self.graphs = 0
        self.joint_graphs = 0
        self.graph_breaks: collections.Counter[str] = collections.Counter()
        self.recompilations: collections.Counter[str] = collections.Counter()
        self.eager_fallbacks: collections.Counter[str] = collections.Counter()
        self.kernels_generated = 0
        self.aten_fallbacks: collections.Counter[str] = collections.Counter()
        self.kernel_compiles = 0
        self.kernel_cache_hits = 0
        self.triton_precompiled = 0
        self.matmul_choices: collections.Counter[str] = collections.Counter()
        self.cudagraph_recordings = 0  # CUDA graphs recorded (mode="reduce-overhead"; time in seconds["cudagraph_record"])
        self.dynamic_graphs = 0  # graphs compiled once into size-generic code
        self.dynamic_fallbacks: collections.Counter[str] = collections.Counter()  # compiled static instead, by reason
        self.speed_choices: collections.Counter[str] = collections.Counter()
        self.ddp_pieces = 0  # pieces of graphs split at DDP bucket boundaries (kiln/distributed/)
        self.seconds: collections.Counter[str] = collections.Counter()

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] += time.perf_counter() - start

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
            "aten_fallbacks": dict(self.aten_fallbacks),
            "matmul_choices": dict(self.matmul_choices),
            "cudagraph_recordings": self.cudagraph_recordings,
            "dynamic_graphs": self.dynamic_graphs,
            "dynamic_fallbacks": dict(self.dynamic_fallbacks),
            "speed_choices": dict(self.speed_choices),
            "ddp_pieces": self.ddp_pieces,
            "kernel_compiles": self.kernel_compiles,
            "kernel_cache_hits": self.kernel_cache_hits,
            "triton_precompiled": self.triton_precompiled,
            "seconds": {k: round(v, 6) for k, v in self.seconds.items()},
        }

    def __repr__(self) -> str:
        return f"kiln.stats({self.snapshot()})"


stats = Stats()
