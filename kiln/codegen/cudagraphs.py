"""CUDA graphs for generated wrappers (``mode="reduce-overhead"``): record the kernels and library calls
of one graph once, then replay them with one launch.

``CudaGraphRunner(run, n_state)`` wraps a wrapper function ``run(*inputs)`` (graph inputs, then the
module's parameters and buffers: ``n_state`` of them). Per input signature (sizes, strides, dtypes,
devices) it:

1. runs ``run`` plainly the first time (Triton compiles and autotunes, cuBLAS warms up);
2. the second time, copies the inputs into static buffers (parameters and buffers are used in place,
   by address) and records ``run`` on them into a ``torch.cuda.CUDAGraph``;
3. then, on every call: copies the inputs into the static buffers, replays the graph, and returns
   copies of the static results (a later replay overwrites them, so callers never see that).

Only the thread and CUDA stream that recorded a graph replay it (its static buffers are shared by every
replay); a call from another thread or stream runs plainly. Graphs are not used, and ``run`` runs
plainly, when: an input is not a CUDA tensor, an input has
overlapping memory (expanded), a result shares memory with an input or another result, or recording
fails (an op that synchronizes or touches CPU memory). A parameter whose memory moved is re-recorded.
``explain()`` says which and why.

A graph compiled for every size (dynamic shapes) gets one recording per distinct input shape, with no
kernel recompiled: all recordings of a runner draw from one CUDA memory pool, at most ``max_graphs``
are kept, and the least recently replayed one is dropped to make room for a new shape. The time each
recording took is kept for ``explain()``.
"""
from __future__ import annotations

import collections
import threading
import time

import torch

from kiln.debug.stats import stats
from kiln.fake.shapes import is_dense

MAX_GRAPHS = 8  # recordings kept per runner (input signatures); the least recently used goes first
_MAX_COUNTED = 4096  # signatures whose calls are counted (for admission) before the counts restart


class _Recording:
    def __init__(self, graph, static_inputs, static_results, state_ptrs, caller):
        self.graph, self.static_inputs, self.static_results = graph, static_inputs, static_results
        self.state_ptrs = state_ptrs
        self.caller = caller  # (thread, stream) that recorded it: the only one that replays it (_caller)


def _caller(device_type: str) -> tuple:
    """The calling thread and its current CUDA stream. A recording's static buffers are shared by every
    replay: two threads (or two streams) replaying at once would copy their inputs over each other's
    between copy-in and replay, so only the thread and stream that recorded it replay it; any other
    caller runs the code plainly (correct, and as fast as default mode's launches)."""
    stream = torch._C._cuda_getCurrentRawStream(torch.cuda.current_device()) if device_type == "cuda" else None
    return threading.get_ident(), stream


def _signature(inputs) -> tuple:
    return tuple((tuple(t.shape), t.stride(), t.dtype, t.device) if isinstance(t, torch.Tensor) else ("value", t)
                 for t in inputs)


_data_ptr = torch.Tensor.data_ptr


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class CudaGraphRunner:
    """``run`` recorded into CUDA graphs and replayed; see the module docstring."""

    device_type = "cuda"  # the device every input must be on (tests on CPU stand in fake graphs)

    def __init__(self, run, n_state: int, max_graphs: int = MAX_GRAPHS, warmed_up: bool = False):
        self.run, self.n_state, self.max_graphs = run, n_state, max_graphs
        self.warmed_up = warmed_up  # ``run`` has run already (kernels built): the first call records
        self.recordings: collections.OrderedDict[tuple, _Recording] = collections.OrderedDict()  # LRU order
        self.warm: set[tuple] = set()
        self.declined: dict[tuple, str] = {}  # signature -> why no graph is used for it
        self.replays = 0
        self.evicted = 0
        self.record_seconds: list[float] = []  # per recording made
        self.pool = None  # the memory pool every recording of this runner shares (made at the first)
        self.other_callers = 0  # calls from another thread or stream than the recording's: run plainly
        self.calls: collections.Counter[tuple] = collections.Counter()  # calls per signature (admission)
        self.not_admitted = 0  # calls run plainly because their shape is rarer than every kept recording

    # ----------------------------------------------------------------------------------- calls

    def __call__(self, *inputs):
        # the signature covers the caller's inputs; parameters and buffers are matched by address
        # (_state_in_place): their sizes, strides and dtypes are the compiled graph's own (guarded)
        key = _signature(inputs[:len(inputs) - self.n_state])
        self.calls[key] += 1
        if len(self.calls) > _MAX_COUNTED:  # (shapes that never repeat: forget the counts, keep the kept)
            self.calls = collections.Counter({k: self.calls[k] for k in self.recordings})
            self.calls[key] += 1
        rec = self.recordings.get(key)
        if rec is not None and self._state_in_place(rec, inputs):
            if rec.caller != _caller(self.device_type):
                self.other_callers += 1
                return self.run(*inputs)
            self.recordings.move_to_end(key)
            return self._replay(rec, inputs)
        if key in self.declined:
            return self.run(*inputs)
        reason = self._why_not(inputs, rec)
        if reason is not None:
            self.declined[key] = reason
            return self.run(*inputs)
        if key not in self.warm and not self.warmed_up:
            self.warm.add(key)
            return self.run(*inputs)
        self.warmed_up = False  # (only the first signature: another one runs plainly once first)
        if key not in self.recordings and len(self.recordings) >= self.max_graphs and \
                self.calls[key] <= self.calls[next(iter(self.recordings))]:
            # full, and this shape is not called more often than the least recently used recording:
            # recording it would evict one that recurs as much (more shapes than room, in a cycle: every
            # call would record again and replay once)
            self.not_admitted += 1
            return self.run(*inputs)
        rec = self._record(key, inputs)
        if rec is None:
            return self.run(*inputs)
        return self._replay(rec, inputs)

    def _why_not(self, inputs, stale) -> str | None:
        for t in inputs:
            if not isinstance(t, torch.Tensor):
                return f"a graph input is a {type(t).__name__}, not a tensor"
            if t.device.type != self.device_type:
                return f"a graph input is on {t.device}; CUDA graphs need every input on the GPU"
            if not is_dense(t.size(), t.stride()):
                return "a graph input has overlapping or non-dense memory (an expanded view), which cannot be copied in"
        if self.max_graphs <= 0:
            return "max_graphs is 0"
        return None

    def _state_in_place(self, rec: _Recording, inputs) -> bool:
        return list(map(_data_ptr, inputs[len(inputs) - self.n_state:])) == rec.state_ptrs

    def _replay(self, rec: _Recording, inputs):
        n_user = len(inputs) - self.n_state
        for static, t in zip(rec.static_inputs[:n_user], inputs[:n_user]):
            if static.data_ptr() != t.data_ptr():
                static.copy_(t)
        rec.graph.replay()
        self.replays += 1
        return tuple(_copy(r) for r in rec.static_results)

    # ------------------------------------------------------------------------------- recording

    def _record(self, key, inputs) -> _Recording | None:
        n_user = len(inputs) - self.n_state
        if key not in self.recordings:
            while len(self.recordings) >= self.max_graphs:  # room for a new shape: drop the least recent
                self.recordings.popitem(last=False)
                self.evicted += 1
        else:
            del self.recordings[key]  # stale (a parameter moved): recorded again
        start = time.perf_counter()
        static = [torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device).copy_(t)
                  for t in inputs[:n_user]]
        static += list(inputs[n_user:])
        captured = self._capture(key, static)
        if captured is None:
            return None
        graph, results = captured
        reason = _aliasing(static, results)
        if reason is not None:
            self.declined[key] = reason
            return None
        rec = _Recording(graph, static, tuple(results), [t.data_ptr() for t in inputs[n_user:]],
                         _caller(self.device_type))
        self.recordings[key] = rec
        self.record_seconds.append(time.perf_counter() - start)
        stats.cudagraph_recordings += 1
        stats.seconds["cudagraph_record"] += self.record_seconds[-1]
        return rec

    def _capture(self, key, static, **capture):
        """``run`` on ``static`` recorded into a new CUDA graph drawing from the runner's memory pool:
        (graph, results), or None (an op that cannot be captured: why is kept in ``declined``, and that
        signature runs plainly). ``capture``: more arguments of ``torch.cuda.graph``."""
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        if self.pool is None and hasattr(torch.cuda, "graph_pool_handle") and self.device_type == "cuda":
            self.pool = torch.cuda.graph_pool_handle()
        try:
            with torch.cuda.graph(graph, **capture, **({"pool": self.pool} if self.pool is not None else {})):
                results = self.run(*static)
        except Exception as exc:
            self.declined[key] = f"recording the CUDA graph failed ({type(exc).__name__}: {str(exc)[:200]})"
            torch.cuda.synchronize()
            return None
        return graph, results

    def explain(self) -> str:
        made = len(self.record_seconds)
        lines = [f"CUDA graphs (mode='reduce-overhead'): {len(self.recordings)} kept of {made} recorded "
                 f"(at most {self.max_graphs}, least recently used dropped: {self.evicted}), {self.replays} replays"
                 + (f", {self.not_admitted} calls of shapes rarer than every kept one run plainly"
                    if self.not_admitted else "")]
        if made:
            lines.append(f"  recording time per new shape: {1000 * sum(self.record_seconds) / made:.1f} ms mean, "
                         f"{1000 * max(self.record_seconds):.1f} ms max")
        if self.other_callers:
            lines.append(f"  {self.other_callers} calls from another thread or CUDA stream than the recording's ran "
                         f"plainly (replays share the recording's buffers)")
        lines += [f"  not used for one input signature: {why}" for why in dict.fromkeys(self.declined.values())]
        return "\n".join(lines)


def _aliasing(static_inputs, results) -> str | None:
    inputs = {_storage(t) for t in static_inputs if isinstance(t, torch.Tensor) and t.numel()}
    seen: set[int] = set()
    for r in results:
        if not isinstance(r, torch.Tensor) or r.numel() == 0:
            continue
        s = _storage(r)
        if s in inputs:
            return "a result shares memory with a graph input"
        if s in seen:
            return "two results share memory"
        seen.add(s)
    return None


def _copy(r):
    """A copy of a static result with its size, strides and offset (an expanded one keeps its strides)."""
    if not isinstance(r, torch.Tensor):
        return r
    if is_dense(r.size(), r.stride()):
        return torch.empty_strided(r.size(), r.stride(), dtype=r.dtype, device=r.device).copy_(r)
    extent = r.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(r.size(), r.stride()))
    flat = torch.empty(extent, dtype=r.dtype, device=r.device)
    flat.copy_(r.as_strided((extent,), (1,), 0))
    return flat.as_strided(r.size(), r.stride(), r.storage_offset())
