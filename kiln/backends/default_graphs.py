"""CUDA-graph replay as a candidate of the speed race in default mode (``Options.default_cudagraphs``).

In default mode every call of a graph launches its kernels from Python, one by one: tens of
microseconds of host time per kernel, which on a model of many small kernels (ResNet-50 at batch 32:
131 launches) costs more than the GPU's work. ``mode="reduce-overhead"`` removes that cost by
replaying a recorded CUDA graph; in default mode kiln makes the same recording a candidate of
``choose_faster``'s race, next to plain launches and eager, and keeps it only where it is measurably
faster (``GRAPHS_MARGIN``). Results are the same: the runner (``codegen/cudagraphs.py``) copies inputs
in and results out, re-records when a parameter's memory moves, and runs plainly for an input
signature it cannot record.

Only graphs the race runs within one call are candidates: inference graphs on the GPU with fixed
sizes, no random ops, no collectives, and no mutated inputs (a mutated input would be written in its
static copy). A recording whose memory pool (what the reserved memory grew by while recording) is over
``MAX_POOL_BYTES`` or ``MAX_POOL_SHARE`` of the device's memory is not used: default mode does not pin
large amounts of memory for speed.
"""
from __future__ import annotations

import torch

from kiln.codegen.cudagraphs import CudaGraphRunner
from kiln.debug.stats import FirstCall, time_first_call

MAX_POOL_BYTES = 2 << 30
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
        grew = torch.cuda.memory_reserved(self.device) - (self.reserved_before or 0)
        total = torch.cuda.get_device_properties(self.device or torch.cuda.current_device()).total_memory
        limit = min(MAX_POOL_BYTES, MAX_POOL_SHARE * total)
        if grew > limit:
            return f"its recording holds {grew / 2**20:.0f} MiB (more than {limit / 2**20:.0f} MiB in default mode)"
        return None

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


def graph_candidate(outer, aten_runtime, options) -> GraphCandidate | None:
    """The CUDA-graph candidate of a default-mode GPU inference graph, or None where there is none."""
    if not options.default_cudagraphs or options.cudagraphs or not torch.cuda.is_available():
        return None
    state = getattr(getattr(aten_runtime, "aten_graph", None), "state", None)
    if state is None or getattr(aten_runtime, "mutated", True):
        return None
    return GraphCandidate(outer, aten_runtime, len(state))
