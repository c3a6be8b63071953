"""CUDA-graph replay as a candidate of the speed race in default mode (``Options.default_cudagraphs``).

In default mode every call of a graph launches its kernels from Python, one by one: tens of
microseconds of host time per kernel, which on a model of many small kernels (ResNet-50 at batch 32:
131 launches) costs more than the GPU's work. ``mode="reduce-overhead"`` removes that cost by
replaying a recorded CUDA graph; in default mode kiln makes the same recording a candidate of
``choose_faster``'s race, next to plain launches and eager, and keeps it only where it is measurably
faster (``GRAPHS_MARGIN``). Results are the same: the runner (``codegen/cudagraphs.py``) copies inputs
in and results out, re-records when a parameter's memory moves, and runs plainly for an input
signature it cannot record.

Only graphs the race runs within one call are candidates: inference graphs on the GPU with no random
ops, no collectives, and no mutated inputs (a mutated input would be written in its static copy).

A graph with symbolic sizes (one graph for every size) is not raced once: which path is faster depends
on the size. ``HotShapes`` races per shape instead, only for shapes that recur: the HOT-th call at one
input shape records it and times replay against plain launches (TIMED runs each); the faster path serves
that shape from then on. A shape whose plain run is GPU-bound (its launches return well before the
GPU finishes) keeps plain launches without a recording, and after STOP_AFTER races lost in a row (none
won) no shape is raced again. A workload whose sizes never repeat pays nothing; one that runs a few shapes
over and over (a serving batch size, fixed-length buckets) replays each of them, at most MAX_GRAPHS
recordings drawing from one memory pool (``codegen/cudagraphs.py``, least recently used dropped).

A recording whose memory pool (what the reserved memory grew by while recording) is over
``MAX_POOL_BYTES`` or ``MAX_POOL_SHARE`` of the device's memory is not used: default mode does not pin
large amounts of memory for speed.
"""
from __future__ import annotations

import time

import torch

from kiln.backends.choose_faster import GRAPHS_MARGIN
from kiln.codegen.cudagraphs import CudaGraphRunner
from kiln.debug.stats import FirstCall, stats, time_first_call

MAX_POOL_BYTES = 2 << 30
MAX_COUNTED = 4096  # shapes whose calls HotShapes counts at once
MAX_POOL_SHARE = 0.10


class GraphCandidate:
    """The "graphs" candidate of one inference graph: the AtenRuntime ``aten_runtime`` called through
    ``outer`` (its GPU wrapper) with its generated wrapper replayed from a CUDA graph."""

    WARMUPS = 1  # untimed runs before timing: the recording (the plain code ran in call 1)

    def __init__(self, outer, aten_runtime, n_state: int):
        self.outer, self.aten_runtime, self.n_state = outer, aten_runtime, n_state
        self.runner: CudaGraphRunner | None = None
        self.reserved_before: int | None = None
        self.device = None  # the device of the first CUDA input (where the recording's memory is)

    def _runner(self) -> CudaGraphRunner:
        if self.runner is None:
            plain = self.aten_runtime.run
            first = isinstance(plain, FirstCall)  # (replayed before the first call: the first call stays timed)
            if first:
                plain = plain.inner
            # in the trial (call 2) the plain code has run: the runner records at once
            self.runner = CudaGraphRunner(plain, self.n_state, warmed_up=not first)
        return self.runner

    def candidate(self, *args):
        rt = self.aten_runtime
        if self.reserved_before is None:
            self.device = next((a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda), None)
            self.reserved_before = torch.cuda.memory_reserved(self.device)
        plain, rt.run = rt.run, self._runner()
        try:
            return self.outer(*args)
        finally:
            rt.run = plain

    def why_not(self) -> str | None:
        """After the warm-up runs: why the recording cannot be used (None: it can)."""
        if getattr(self.outer, "compiled_graph", None) is None:
            return "the graph runs with ATen kernels"
        runner = self.runner
        if runner is None or not runner.recordings:
            why = next(iter(runner.declined.values()), None) if runner is not None else None
            return why or "no recording was made"
        return pool_too_big(self.device, self.reserved_before or 0)

    def keep(self, chosen: str):
        """The race's choice: replay from now on (returns the runtime to call), or drop the recording (its
        memory pool goes back)."""
        if chosen != "graphs":
            self.runner = None
            return None
        rt = self.aten_runtime
        first = isinstance(rt.run, FirstCall)
        rt.run = self._runner()
        if first:
            time_first_call(rt)
        return self.outer


class HotShapes:
    """A default-mode GPU inference graph with symbolic sizes: per input shape, plain launches until the
    shape's HOT-th call, which races CUDA-graph replay against them (see the module docstring)."""

    HOT = 3  # the call at one shape that races (earlier calls: plain; a benchmark's second pass stays plain)
    TIMED = 2  # timed runs of each path in the race (synchronized; the median of few is their minimum)
    HOST_SHARE = 0.6  # a plain run whose launches return before this share of its time is GPU-bound: no race
    STOP_AFTER = 3  # races lost in a row, none won: no more races (a GPU-bound graph: ResNet-50)

    def __init__(self, outer, graphs: GraphCandidate):
        self.outer, self.graphs = outer, graphs
        self.calls: dict[tuple, int] = {}  # shape -> calls so far (until its race)
        self.replayed: set[tuple] = set()  # shapes whose race replay won
        self.verdicts: dict[tuple, str] = {}  # shape -> what the race measured, for explain
        self.off: str | None = None  # why no shape replays any more (the recordings' memory)

    def __call__(self, *args):
        key = _shape_key(args)
        if key in self.replayed:
            return self.graphs.candidate(*args)
        n = self.calls.get(key, 0) + 1
        if n > self.HOT or self.off is not None:
            return self.outer(*args)
        if len(self.calls) >= MAX_COUNTED:  # (sizes that never repeat: forget the counts, not the verdicts)
            self.calls = {k: c for k, c in self.calls.items() if c >= self.HOT}
        self.calls[key] = n
        if n < self.HOT:
            return self.outer(*args)
        return self._race(key, args)

    def _race(self, key, args):
        start = time.perf_counter()
        launched, total, out = _launch_and_total(self.outer, args)
        if launched < self.HOST_SHARE * total:  # the GPU's work outlasts the launches: replay cannot help
            self.verdicts[key] = (f"plain launches (GPU-bound: launching took {launched * 1e3:.3f} of "
                                  f"{total * 1e3:.3f} ms)")
            self._lost()
            return out
        plain = [(total, out)] + [_timed(self.outer, args) for _ in range(self.TIMED - 1)]
        runner = self.graphs._runner()
        runner.warmed_up = True  # (this shape ran plainly: it records at once)
        out = self.graphs.candidate(*args)
        why = self.graphs.why_not()
        if why is not None:
            self._drop(why if runner.recordings else None)  # (a recording made, too big: no more)
            self.verdicts[key] = f"plain launches: {why}"
            return out
        replay = [_timed(self.graphs.candidate, args) for _ in range(self.TIMED)]
        p, r = min(t for t, _ in plain), min(t for t, _ in replay)
        cost = (time.perf_counter() - start) * 1e3
        if r < GRAPHS_MARGIN * p:
            self.replayed.add(key)
            self.losses = 0
            self.verdicts[key] = f"replayed ({r * 1e3:.3f} ms against {p * 1e3:.3f} ms plain; race {cost:.1f} ms)"
            stats.speed_choices["graphs (a shape)"] += 1
        else:
            runner.recordings.pop(next(reversed(runner.recordings)), None)  # (its memory goes back to the pool)
            self.verdicts[key] = f"plain launches ({p * 1e3:.3f} ms against {r * 1e3:.3f} ms replayed; race {cost:.1f} ms)"
            self._lost()
        return replay[-1][1]

    losses = 0  # races in a row that plain launches won

    def _lost(self) -> None:
        stats.speed_choices["kiln (a shape)"] += 1
        self.losses += 1
        if self.losses >= self.STOP_AFTER and not self.replayed:
            self.off = f"plain launches won the first {self.losses} races (the graph is GPU-bound at its sizes)"

    def _drop(self, memory_note: str | None) -> None:
        """Release the recordings; with ``memory_note`` (they hold more than default mode allows), for good."""
        if self.graphs.runner is not None:
            self.graphs.runner.recordings.clear()
        if memory_note is not None:
            self.off = memory_note
            self.replayed.clear()

    def kiln_explain(self) -> str:
        inner = getattr(self.outer, "kiln_explain", None)
        lines = [inner() if callable(inner) else ""]
        lines.append(f"speed choice per shape (symbolic sizes; a shape's call {self.HOT} races CUDA-graph replay "
                     "against plain launches):" + (" none raced yet" if not self.verdicts else ""))
        lines += [f"  {_describe_key(k)}: {v}" for k, v in self.verdicts.items()]
        if self.off is not None:
            lines.append(f"  no more recordings: {self.off}")
        runner = self.graphs.runner
        if runner is not None and runner.recordings:
            lines.append(runner.explain())
        return "\n".join(lines)

    def __getattr__(self, name):
        return getattr(self.__dict__["outer"], name)


def pool_too_big(device, reserved_before: int) -> str | None:
    """Why a recording made since the device's reserved memory was ``reserved_before`` holds more memory
    than default mode allows (``MAX_POOL_BYTES``, ``MAX_POOL_SHARE`` of the device), or None."""
    grew = torch.cuda.memory_reserved(device) - reserved_before
    total = torch.cuda.get_device_properties(device or torch.cuda.current_device()).total_memory
    limit = min(MAX_POOL_BYTES, MAX_POOL_SHARE * total)
    if grew > limit:
        return f"its recording holds {grew / 2**20:.0f} MiB (more than {limit / 2**20:.0f} MiB in default mode)"
    return None


def _shape_key(args) -> tuple:
    return tuple((tuple(a.shape), a.stride()) if isinstance(a, torch.Tensor) else type(a) for a in args)


def _describe_key(key) -> str:
    return ", ".join("x".join(map(str, k[0])) if isinstance(k, tuple) else k.__name__ for k in key)


def _launch_and_total(fn, args):
    """(seconds until ``fn`` returned, seconds until the GPU finished, its result)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn(*args)
    launched = time.perf_counter() - start
    torch.cuda.synchronize()
    return launched, time.perf_counter() - start, out


def _timed(fn, args):
    """(seconds until the GPU finished ``fn``'s work, its result)."""
    _, total, out = _launch_and_total(fn, args)
    return total, out


def graph_candidate(outer, aten_runtime, options) -> GraphCandidate | None:
    """The CUDA-graph candidate of a default-mode GPU inference graph, or None where there is none."""
    if not options.default_cudagraphs or options.cudagraphs or not torch.cuda.is_available():
        return None
    state = getattr(getattr(aten_runtime, "aten_graph", None), "state", None)
    if state is None or getattr(aten_runtime, "mutated", True):
        return None
    return GraphCandidate(outer, aten_runtime, len(state))
