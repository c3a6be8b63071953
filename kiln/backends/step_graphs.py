"""CUDA-graph replay of a training step's forward and backward graphs, in default mode where it is faster.

A training step on the GPU launches every kernel of its forward and backward from Python. On a model of
many small kernels the launches cost more than the GPU's work: timm ResNet-50 training at batch 32 on an
H200 spent 36 ms enqueueing 971 launches for 8.7 ms of GPU time (eager 32 ms, torch.compile 42 ms).
Replaying the two graphs from CUDA graphs (``codegen/step_graphs.py``: saved activations lent, not
copied) removes that cost. As for inference graphs (``default_graphs.py``), default mode keeps replay
only where it measured it faster:

1. the first call of a graph runs plainly (kernels build and tune; BatchNorm's in-place stores start
   after it);
2. call ``HOT`` runs plainly, timed: if its launches returned before ``HOST_SHARE`` of its time the
   graph is GPU-bound and stays plain; else it records right after the plain run (a recording runs
   nothing);
3. the next call replays, timed: replay is kept unless it is slower than the plain time
   (``STEP_MARGIN``), else the recording is dropped. So the third call runs at the steady speed (issue
   20), where recording in the third call made the fourth the first at that speed.

The bounds are looser than inference's (``GRAPHS_MARGIN``): a graph timed alone may look GPU-bound,
yet the step around it is not (the optimizer's launches, Python between the graphs). The host time
replay saves in the forward and backward is then the step's own: an f32 MLP training step (256x1024 ->
4096 -> 4096 -> 1024, AdamW; H200) ran 0.88x eager with both graphs plain and 0.97x with the forward
replayed, the backward judged GPU-bound (``HOST_SHARE`` was 0.6, the margin 0.95).

The forward decides in its call 3. The backward times its plain call 2 too and records right after it
as well, reading its saved tensors where the forward's recording (made moments before) will lend them
(``StepGraphRunner.lent_inputs``): its call 3 follows a replayed forward, whose saved tensors are there,
and replays. Where that cannot be (the forward did not record), the backward records once its forward
has chosen replay, in its call 3. It stays plain where the forward does.
Graphs that run collectives or have symbolic sizes are not replayed, nor random ops with a generator of
their own; dropout is (its ATen call, recorded, draws from the default generator at each replay's
offset: eager's numbers). With ``mode="reduce-overhead"`` both
graphs replay from their second call, without a race. Not covered: a saved-tensor hook that reads a lent tensor on a
side stream and drops it (offloading) frees it for the next replay before that stream's copy ran
(eager's allocator waits for the stream; a replay does not). A recording whose memory pool is larger than
default mode allows (``default_graphs.MAX_POOL_BYTES``, ``MAX_POOL_SHARE``) is dropped. ``explain``
reports the verdicts.
"""
from __future__ import annotations

import torch

from kiln.aot.symbols import has_symbols
from kiln.backends.choose_faster import ops_reason
from kiln.backends.seeded_ops import draws_random_numbers
from kiln.backends.default_graphs import _launch_and_total, pool_too_big
from kiln.codegen.cudagraphs import _storage
from kiln.codegen.step_graphs import StepGraphRunner
from kiln.debug.stats import stats

HOT = 2  # the call whose plain launches are timed (call 1 builds kernels, stores in place from call 2)
HOST_SHARE = 0.3  # launches returning before this share of a plain call's time: GPU-bound, not recorded
STEP_MARGIN = 1.0  # replay is kept when its time is below this x the plain time
TRIES = 3  # timed calls that ran plainly (a lent tensor still held) before the race gives up


class ReplayRace:
    """One graph of a training step: plain launches or CUDA-graph replay (see the module docstring)."""

    def __init__(self, plain, runner: StepGraphRunner, name: str, always: bool = False, after=None):
        self.plain, self.runner, self.name, self.always, self.after = plain, runner, name, always, after
        self.calls = 0
        self.choice: str | None = None  # "plain" or "replay" once decided
        self.verdict = "not raced yet"
        self.plain_seconds: float | None = None
        self.tries = 0

    def settle_plain(self, fn) -> None:
        """``InplaceAfterFirstForward`` hands over the wrapper it ran once (now storing in place)."""
        self.plain = fn
        self.runner.run = fn

    def __call__(self, *args):
        choice = self.choice
        if choice == "replay":
            return self.runner(*args)
        if choice == "plain":
            return self.plain(*args)
        return self._race(args)

    def _decide(self, choice: str, verdict: str) -> None:
        self.choice, self.verdict = choice, verdict
        if choice == "plain":
            self.runner.recordings.clear()  # (its memory pool goes back)
        stats.speed_choices[f"training {self.name}: {'CUDA graph' if choice == 'replay' else 'plain launches'}"] += 1

    def _race(self, args):
        self.calls += 1
        if self.plain_seconds is None and not self.always:
            if self.calls < HOT:
                return self.plain(*args)
            launched, total, out = _launch_and_total(self.plain, args)
            if launched < HOST_SHARE * total:
                self._decide("plain", f"plain launches (GPU-bound: launching took {launched * 1e3:.2f} of "
                                      f"{total * 1e3:.2f} ms)")
            else:
                self.plain_seconds = total
                self._record_now(args)
            return out
        if self.after is not None:  # the backward records once its forward replays (it reads its memory)
            if self.after.choice is None:
                return self.plain(*args)
            if self.after.choice == "plain":
                self._decide("plain", "plain launches (its forward runs plainly)")
                return self.plain(*args)
        if self.always:
            if self.calls < 2:
                return self.plain(*args)
            self._decide("replay", "CUDA graph (mode='reduce-overhead')")
            return self.runner(*args)
        runner = self.runner
        if not runner.recordings:
            device = _cuda_device(args)
            reserved_before = torch.cuda.memory_reserved(device)
            runner.time_replay = True
            out = runner(*args)
            why = self._not_kept(device, reserved_before)
            if why is not None:
                self._decide("plain", f"plain launches: {why}")
            elif runner.replay_seconds is not None:  # (the replay that followed the recording, timed)
                self._verdict(runner.replay_seconds)
            return out
        replays = runner.replays
        _, total, out = _launch_and_total(runner, args)
        if runner.replays == replays:  # (ran plainly: a lent tensor was held, an input moved, another thread)
            self.tries += 1
            if self.tries >= TRIES:
                self._decide("plain", "plain launches: replay could not run in a row of calls "
                                      f"({runner.busy} with lent tensors still held, {runner.moved} with moved "
                                      f"inputs, {runner.other_callers} from another thread or stream)")
            return out
        self._verdict(total)
        return out

    def _record_now(self, args) -> None:
        """Record in the timed plain call, so that the next call replays (timed) at its steady speed: the
        forward at once; the backward where its forward recorded, reading the saved tensors where that
        recording lends them (``lent_inputs``). Else the backward records in its next call."""
        substitutes = None
        if self.after is not None:
            if self.after.choice is not None or not self.after.runner.recordings:
                return
            substitutes = self.after.runner.lent_inputs(args)
            if not substitutes:
                return
        device = _cuda_device(args)
        reserved_before = torch.cuda.memory_reserved(device)
        self.runner.record(args, substitutes)
        why = self._not_kept(device, reserved_before)
        if why is not None:
            self._decide("plain", f"plain launches: {why}")

    def _not_kept(self, device, reserved_before: int) -> str | None:
        """After an attempt to record: why there is no recording to keep (none was made, or its memory
        pool is larger than default mode allows), or None."""
        if self.runner.recordings:
            return pool_too_big(device, reserved_before)
        return next(iter(self.runner.declined.values()), None)

    def _verdict(self, replayed: float) -> None:
        p = self.plain_seconds
        if replayed < STEP_MARGIN * p:
            self._decide("replay", f"CUDA graph ({replayed * 1e3:.2f} ms against {p * 1e3:.2f} ms plain)")
        else:
            self._decide("plain", f"plain launches ({p * 1e3:.2f} ms against {replayed * 1e3:.2f} ms replayed)")

    def explain(self) -> str:
        line = f"{self.name}: {self.verdict}"
        if self.runner.recordings:
            line += "\n" + self.runner.explain()
        return line


def _cuda_device(args):
    return next((a.device for a in args if getattr(a, "is_cuda", False)), None)


def why_not(runtime, gm, options) -> str | None:
    """Why the training runtime's graphs are not candidates for replay, or None."""
    if not options.cudagraphs and not options.default_cudagraphs:
        return "Options.default_cudagraphs is off"
    if not torch.cuda.is_available():
        return "no GPU"
    n_user = runtime.n_inputs - len(runtime.state)
    if any(index < n_user for index in runtime.mutated):
        # (a caller's input is copied into the recording's memory: a store there would be lost)
        return "the graph writes to an input of the caller"
    if any(has_symbols(n.meta.get("example_value", n.meta.get("val"))) for n in gm.graph.nodes if n.op == "placeholder"):
        return "symbolic sizes"
    joint = getattr(runtime, "joint_gm", None)
    if joint is None:
        # (loaded from the warm cache: the verdict kept with the entry, random ops refused with the rest)
        return getattr(runtime, "warm_race_ops", "no ATen graph to check for random ops")
    nodes = list(gm.graph.nodes) + list(joint.graph.nodes)
    if any(isinstance(a, torch.Generator) for n in nodes for a in (*n.args, *n.kwargs.values())):
        return "a random op draws from a generator of its own"
    # Random ops are ATen calls on the GPU (kiln generates no random numbers itself: decomp/random.py,
    # lower/graph.py), and a recorded ATen random op draws from the device's default generator at the
    # offset it has at each replay, advancing it as the call would: replay draws eager's numbers.
    return ops_reason([n for n in nodes if not draws_random_numbers(n)])


def install(runtime, gm, options) -> None:
    """Route a GPU training runtime's forward and backward through ``ReplayRace`` where they are candidates;
    ``runtime.step_graphs_note`` says what was done, for ``explain``."""
    why = why_not(runtime, gm, options)
    if why is not None:
        runtime.step_graphs_note = f"training graphs run with plain launches (not replayed from CUDA graphs: {why})"
        return
    n_state = len(runtime.state)
    always = bool(options.cudagraphs)
    fwd_runner = StepGraphRunner(_settled(runtime.fwd), n_state, lend_from=runtime.n_mut + runtime.n_out)
    fwd = ReplayRace(runtime.fwd, fwd_runner, "forward", always=always)
    plain_fwd = runtime.fwd
    if hasattr(plain_fwd, "settle"):  # InplaceAfterFirstForward: it hands its wrapper over after one call
        plain_fwd.settle = fwd.settle_plain

    def pinned(ptr: int) -> bool:
        return ptr in fwd_runner.lent_storages() or ptr in {_storage(t) for t in runtime.state}

    bwd = ReplayRace(runtime.bwd, StepGraphRunner(runtime.bwd, 0, pinned=pinned), "backward", always=always,
                     after=fwd)
    runtime.fwd, runtime.bwd = fwd, bwd
    runtime.step_graphs_note = None
    runtime.step_graphs = [fwd, bwd]
    variant = runtime.backward_without
    if variant is not None:  # the backward compiled without some tangents (logits nothing differentiated)
        def without(absent):
            fn = variant(absent)
            if fn is None:
                return None
            race = ReplayRace(fn, StepGraphRunner(fn, 0, pinned=pinned), f"backward without tangents {list(absent)}",
                              always=always, after=fwd)
            runtime.step_graphs.append(race)
            return race

        runtime.backward_without = without


def _settled(fn):
    """The function a runner records: the wrapper itself once it is known (see ``settle_plain``)."""
    return getattr(fn, "fwd", fn)


def explain(runtime) -> str:
    note = getattr(runtime, "step_graphs_note", None)
    if note is not None:
        return note
    races = getattr(runtime, "step_graphs", ())
    return "training step graphs (CUDA-graph replay raced against plain launches):\n" + \
        "\n".join("  " + r.explain().replace("\n", "\n  ") for r in races)
