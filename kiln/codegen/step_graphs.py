"""CUDA graphs for the two graphs of a training step: the forward and the backward of a ``TrainingRuntime``.

``CudaGraphRunner`` (``cudagraphs.py``) serves inference graphs: it copies every result out of the
recording's memory and declines a graph whose results share memory with its inputs. A training forward
returns more: the tensors saved for the backward (often hundreds of megabytes of activations), views of
parameters and of its inputs saved beside them, and the parameters and buffers it updated in place.
``StepGraphRunner`` replays such graphs without copying what it need not:

- a result in the memory of an input (a parameter or buffer, used in place by address, or a caller's
  input, copied in) is the caller's tensor itself or the same view of it, made anew;
- a result at a **lent** position (the forward's saved tensors) is handed out as an alias of the
  recording's memory: no copy. A later replay would overwrite it, so each replay first checks that no
  alias of the previous replay is still alive (the storage's use count is back to what the recording
  itself holds: autograd frees saved tensors after the backward). Where one is alive (two forwards before
  their backwards, ``retain_graph=True``), that call runs plainly;
- every other result is copied out (the user's outputs, gradients), once per storage.

**Pinned** inputs are used by address instead of being copied in: the backward's saved tensors that live in
the forward recording's lent memory or in parameters. A replay needs them at the recorded addresses; a
call whose pinned input is elsewhere (its forward ran plainly) runs plainly. The recording holds no
reference to a pinned input (that would keep the forward's lent memory in use for good).

One recording per runner (a training graph's sizes are static). The policy, when to record and whether
replay is kept, is ``backends/step_graphs.py``'s.
"""
from __future__ import annotations

import sys
import time

import torch

from kiln.codegen.cudagraphs import CudaGraphRunner, _caller, _copy, _Recording, _signature, _storage
from kiln.debug.stats import stats

_use_count = torch._C._storage_Use_Count
GIVE_UP = 3  # moved pinned inputs in a row, or parameter moves, before a runner stops recording


class StepGraphRunner(CudaGraphRunner):
    """``run`` (a training graph's generated wrapper: user inputs, then ``n_state`` parameters and buffers)
    recorded once and replayed; see the module docstring. ``lend_from``: results from this position on
    are lent (the forward's saved tensors; None: none). ``pinned(storage_ptr)``: whether a user input
    in that memory is used by address."""

    def __init__(self, run, n_state: int, lend_from: int | None = None, pinned=None):
        super().__init__(run, n_state, max_graphs=1, warmed_up=True)
        self.lend_from = lend_from
        self.pinned = pinned
        self.busy = 0  # calls run plainly: a lent result of an earlier replay was still held
        self.moved = 0  # calls run plainly: a pinned input was not where the recording read it
        self.moved_in_a_row = 0
        self.rerecorded = 0  # recordings made again because a parameter moved
        self.time_replay = False  # set by the race: time the next replay (synchronized), in replay_seconds
        self.replay_seconds: float | None = None
        self._substitutes: dict = {}  # input position -> the tensor a recording reads there (``record``)

    def lent_storages(self) -> set[int]:
        """The memory (storage addresses) of the kept recording's lent results."""
        return {st.data_ptr() for rec in self.recordings.values() for st in rec.lent}

    def _key(self, inputs) -> tuple:
        return _signature(inputs[:len(inputs) - self.n_state])

    def record(self, inputs, substitutes: dict | None = None) -> bool:
        """Record now without replaying (the call's results came from a plain run), so that the next call
        replays. ``substitutes``: input position -> the tensor the recording reads there, by address, in
        place of the input (a backward recorded before its forward replayed reads the saved tensors where
        that forward's recording lends them: ``lent_inputs``). False where no recording was made (why
        is in ``declined``)."""
        key = self._key(inputs)
        if self.recordings or key in self.declined:
            return False
        why = self._why_not(inputs, None)
        if why is not None:
            self.declined[key] = why
            return False
        self._substitutes = dict(substitutes or {})
        try:
            return self._record(key, inputs) is not None
        finally:
            self._substitutes = {}

    def lent_inputs(self, inputs) -> dict:
        """For the backward's ``inputs`` (the saved tensors, in the order this forward returned them from
        ``lend_from`` on, then the tangents): position -> the kept recording's result that a replay will
        lend there, where that result has the input's layout."""
        rec = next(iter(self.recordings.values()), None)
        if rec is None or self.lend_from is None:
            return {}
        out = {}
        for i, t in enumerate(inputs):
            k = self.lend_from + i
            if k >= len(rec.plan):
                break
            r = rec.static_results[k]
            if rec.plan[k][0] == "lend" and isinstance(t, torch.Tensor) and \
                    (r.shape, r.stride(), r.storage_offset(), r.dtype, r.device) == \
                    (t.shape, t.stride(), t.storage_offset(), t.dtype, t.device):
                out[i] = r
        return out

    def _record(self, key, inputs) -> _Recording | None:
        n_user = len(inputs) - self.n_state
        if self.recordings:  # a parameter moved: recorded again, a few times at most
            self.recordings.clear()
            self.rerecorded += 1
            if self.rerecorded > GIVE_UP:
                self.declined[key] = f"its parameters moved more than {GIVE_UP} times"
                return None
        start = time.perf_counter()
        subs = self._substitutes
        pinned = [i for i, t in enumerate(inputs[:n_user])
                  if i in subs or (self.pinned is not None and t.numel() and self.pinned(_storage(t)))]
        static = [subs[i] if i in subs else t if i in pinned else
                  torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device).copy_(t)
                  for i, t in enumerate(inputs[:n_user])]
        static += list(inputs[n_user:])
        # (thread_local: other threads of the process, a DataLoader's pin-memory thread, may use CUDA
        # meanwhile: default mode records without the user asking for it)
        captured = self._capture(key, static, capture_error_mode="thread_local")
        if captured is None:
            return None
        graph, results = captured
        results = tuple(results)
        plan = _plan(static, results, n_user, self.lend_from)
        if isinstance(plan, str):
            self.declined[key] = plan
            return None
        pinned_ptrs = [(i, static[i].data_ptr()) for i in pinned]
        for i in pinned:
            static[i] = None  # (no reference kept: see the module docstring)
        rec = _Recording(graph, static, results, [t.data_ptr() for t in inputs[n_user:]], _caller(self.device_type))
        rec.plan, rec.pinned = plan, pinned_ptrs
        rec.copy_in = [(i, s) for i, s in enumerate(static[:n_user]) if s is not None]
        lent_at = {step[1]: step[2] for step in plan if step[0] == "lend"}
        rec.lent = [results[k].untyped_storage() for k in lent_at.values()]
        rec.lent_counts = _counts(rec.lent)  # what the recording alone holds: a replay needs it back
        self.recordings[key] = rec
        self.record_seconds.append(time.perf_counter() - start)
        stats.cudagraph_recordings += 1
        stats.seconds["cudagraph_record"] += self.record_seconds[-1]
        return rec

    def _replay(self, rec: _Recording, inputs):
        for i, ptr in rec.pinned:
            if inputs[i].data_ptr() != ptr:
                self.moved += 1
                self.moved_in_a_row += 1
                if self.moved_in_a_row >= GIVE_UP:  # (its inputs live elsewhere now: the recording is of no use)
                    self.recordings.clear()
                    self.declined[self._key(inputs)] = f"its pinned inputs moved {GIVE_UP} calls in a row"
                return self.run(*inputs)
        self.moved_in_a_row = 0
        if _counts(rec.lent) != rec.lent_counts:
            self.busy += 1
            return self.run(*inputs)
        timed = self.time_replay
        if timed:
            self.time_replay = False
            torch.cuda.synchronize()
            start = time.perf_counter()
        for i, static in rec.copy_in:
            t = inputs[i]
            if static.data_ptr() != t.data_ptr():
                static.copy_(t)
        rec.graph.replay()
        self.replays += 1
        results = rec.static_results
        out, copies = [], {}
        for step in rec.plan:
            kind = step[0]
            if kind == "lend":
                out.append(results[step[2]].detach())
            elif kind == "copy":
                out.append(_copy_out(results[step[2]], step[1], step[3], copies))
            else:  # "input": the caller's tensor itself, or the same view of it made anew (a view made
                # at the recording, under no_grad, would outlive in-place updates of its base: autograd
                # refuses to unpack such a saved view)
                t, view = inputs[step[1]], step[2]
                out.append(t if view is None else t.as_strided(view[0], view[1], t.storage_offset() + view[2]))
        if timed:
            torch.cuda.synchronize()
            self.replay_seconds = time.perf_counter() - start
        return tuple(out)

    def explain(self) -> str:
        lines = [super().explain().replace("(mode='reduce-overhead')", "(training step)")]
        if self.busy:
            lines.append(f"  {self.busy} calls ran plainly: tensors an earlier replay lent (saved for a backward) "
                         f"were still held")
        if self.moved:
            lines.append(f"  {self.moved} calls ran plainly: an input was not in the memory the recording reads "
                         f"(its forward ran plainly)")
        return "\n".join(lines)


def _counts(lent: list) -> list:
    """(use count, refcount) of each lent storage. Both: tensors (and the storage's Python object) count
    in the storage's use count; a caller holding that Python object itself (a saved-tensor hook packing
    the storage) only in its refcount. Taken by this one function at the recording and before each
    replay, so that its own transient references are the same both times."""
    return [(_use_count(st._cdata), sys.getrefcount(st)) for st in lent]


def _plan(static, results, n_user: int, lend_from: int | None):
    """How each result is handed out after a replay (see the module docstring), or why it cannot be."""
    where: dict[int, int] = {}
    for i, t in enumerate(static):
        if isinstance(t, torch.Tensor) and t.numel():
            where.setdefault(_storage(t), i)
    groups: dict[int, list[int]] = {}
    plan: list = []
    for k, r in enumerate(results):
        if not isinstance(r, torch.Tensor):
            return f"a result is a {type(r).__name__}, not a tensor"
        s = _storage(r) if r.numel() else None
        if s is not None and s in where:
            i = where[s]
            if r is static[i]:
                plan.append(("input", i, None))
                continue
            if r.dtype != static[i].dtype:
                return "a result is a view of an input with another dtype"
            plan.append(("input", i, (tuple(r.size()), r.stride(), r.storage_offset() - static[i].storage_offset())))
            continue
        if s is not None:
            groups.setdefault(s, []).append(k)
        plan.append(None)
    for k, r in enumerate(results):
        if plan[k] is not None:
            continue
        s = _storage(r) if r.numel() else None
        members = groups.get(s, [k])
        if len({results[m].dtype for m in members}) > 1:
            return "results of different dtypes share memory"
        lend = lend_from is not None and s is not None and all(m >= lend_from for m in members)
        plan[k] = ("lend", s, k) if lend else ("copy", s, k, len(members) > 1)
    return plan


def _copy_out(r: torch.Tensor, storage: int | None, shared: bool, copies: dict) -> torch.Tensor:
    """A copy of result ``r``; results sharing one storage (``shared``) get views of one tensor holding
    a copy of it, so that they share its version counter as eager's do (an in-place change of an output
    that is also saved for the backward is caught)."""
    if not shared:
        return _copy(r)
    base = copies.get(storage)
    if base is None:
        st = r.untyped_storage()
        n = st.nbytes() // r.element_size()
        base = copies[storage] = torch.empty(0, dtype=r.dtype, device=r.device).set_(st.clone(), 0, (n,), (1,))
    return base.as_strided(r.size(), r.stride(), r.storage_offset())
