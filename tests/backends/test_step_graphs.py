"""The default-mode race of a training step's graphs between plain launches and CUDA-graph replay
(kiln/backends/step_graphs.py), with the runner, timings and CUDA's memory counters faked on the CPU
(tests/codegen/triton/test_cuda_step_graphs.py trains with real CUDA graphs)."""
from types import SimpleNamespace

import torch

from kiln.backends import step_graphs


class FakeRunner:
    """Stands in for StepGraphRunner: the first call records (growing the reserved memory by ``grew``)."""

    def __init__(self, reserved, grew=0, hold_lent=0, replay_ms=None):
        self.recordings, self.declined = {}, {}
        self.time_replay, self.replay_seconds, self.replay_ms = False, None, replay_ms
        self.replays, self.busy, self.moved, self.other_callers = 0, 0, 0, 0
        self.reserved, self.grew = reserved, grew
        self.hold_lent = hold_lent  # calls that find a lent tensor still held (they run plainly)
        self.lends, self.recorded_with = True, None

    def record(self, args, substitutes=None):  # (recorded in the timed plain call 2)
        if self.recordings:
            return False
        self.reserved[0] += self.grew
        self.recordings["sig"] = True
        self.recorded_with = substitutes
        return True

    def lent_inputs(self, args):  # (a forward's: where its recording lends the saved tensors)
        return {0: "lent"} if self.recordings and self.lends else {}

    def __call__(self, *args):
        if not self.recordings:
            self.reserved[0] += self.grew
            self.recordings["sig"] = True
        if self.hold_lent:
            self.hold_lent -= 1
            self.busy += 1
            return ("plain",)
        self.replays += 1
        if self.time_replay:  # (the race asks for the replay after a recording to be timed)
            self.time_replay, self.replay_seconds = False, self.replay_ms / 1e3
        return ("replayed",)

    def explain(self):
        return f"{len(self.recordings)} recordings"


def _race(monkeypatch, plain_ms, replay_ms, launch_share=1.0, grew=0, hold_lent=0, **kw):
    reserved = [0]
    times = {"plain": plain_ms / 1e3, "replayed": replay_ms / 1e3}

    def launch_and_total(fn, args):
        out = fn(*args)
        return times[out[0]] * launch_share, times[out[0]], out

    monkeypatch.setattr(step_graphs, "_launch_and_total", launch_and_total)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: reserved[0])
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(total_memory=80 << 30))
    runner = FakeRunner(reserved, grew, hold_lent, replay_ms)
    return step_graphs.ReplayRace(lambda *a: ("plain",), runner, "forward", **kw), runner


def test_host_bound_graph_replays_after_its_race(monkeypatch):
    race, runner = _race(monkeypatch, plain_ms=10, replay_ms=3)
    got = [race(_cuda()) for _ in range(5)]
    # call 1 plain, 2 plain timed and recorded, 3 replays timed: replay kept from call 3 on
    assert [g[0] for g in got] == ["plain"] * 2 + ["replayed"] * 3
    assert race.choice == "replay" and race.calls == 3 and "3.00 ms against 10.00 ms plain" in race.verdict


def test_gpu_bound_graph_stays_plain_without_a_recording(monkeypatch):
    race, runner = _race(monkeypatch, plain_ms=10, replay_ms=3, launch_share=0.2)
    got = [race(_cuda())[0] for _ in range(6)]
    assert got == ["plain"] * 6 and race.choice == "plain" and "GPU-bound" in race.verdict
    assert not runner.recordings


def test_slower_replay_is_dropped(monkeypatch):
    race, runner = _race(monkeypatch, plain_ms=10, replay_ms=10.2)
    got = [race(_cuda())[0] for _ in range(7)]
    assert got[-1] == "plain" and race.choice == "plain" and not runner.recordings


def test_replay_no_slower_than_plain_is_kept(monkeypatch):
    """A training graph's replay is kept when it is not slower (STEP_MARGIN): the host time it saves is
    the step's where the optimizer's launches follow, although the graph timed alone gains little."""
    race, runner = _race(monkeypatch, plain_ms=10, replay_ms=9.8, launch_share=0.4)
    got = [race(_cuda())[0] for _ in range(7)]
    assert got[-1] == "replayed" and race.choice == "replay" and runner.recordings


def test_recording_too_big_for_default_mode_is_dropped(monkeypatch):
    race, runner = _race(monkeypatch, plain_ms=10, replay_ms=3, grew=3 << 30)
    [race(_cuda()) for _ in range(6)]
    assert race.choice == "plain" and "3072 MiB" in race.verdict and not runner.recordings


def test_race_gives_up_when_lent_tensors_stay_held(monkeypatch):
    race, runner = _race(monkeypatch, plain_ms=10, replay_ms=3, hold_lent=10)
    [race(_cuda()) for _ in range(9)]
    assert race.choice == "plain" and "lent tensors still held" in race.verdict


def test_backward_waits_for_its_forward_and_follows_a_plain_verdict(monkeypatch):
    fwd, _ = _race(monkeypatch, plain_ms=10, replay_ms=3)
    bwd, bwd_runner = _race(monkeypatch, plain_ms=10, replay_ms=3, after=fwd)
    for _ in range(2):  # a step: forward, then backward
        fwd(_cuda())
        assert bwd(_cuda())[0] == "plain"  # plain; timed in call 2
    # both recorded in their call 2, the backward reading the saved tensors where the forward lends them
    assert fwd.choice is None and bwd.plain_seconds is not None and bwd_runner.recorded_with == {0: "lent"}
    fwd(_cuda())  # call 3: the forward replays and keeps replay
    assert fwd.choice == "replay"
    assert bwd(_cuda())[0] == "replayed" and bwd.choice == "replay"  # its call 3: replays, replay kept

    fwd, _ = _race(monkeypatch, plain_ms=10, replay_ms=3, launch_share=0.2)
    bwd, bwd_runner = _race(monkeypatch, plain_ms=10, replay_ms=3, launch_share=0.2, after=fwd)  # (one timing patch)
    for _ in range(2):
        fwd(_cuda())
    assert fwd.choice == "plain"
    assert bwd(_cuda())[0] == "plain" and bwd(_cuda())[0] == "plain" and bwd.choice == "plain"


def test_backward_records_in_its_call_3_where_the_forward_lends_nothing_it_reads(monkeypatch):
    fwd, fwd_runner = _race(monkeypatch, plain_ms=10, replay_ms=3)
    fwd_runner.lends = False
    bwd, bwd_runner = _race(monkeypatch, plain_ms=10, replay_ms=3, after=fwd)
    for _ in range(2):
        fwd(_cuda())
        bwd(_cuda())
    assert fwd_runner.recordings and not bwd_runner.recordings
    fwd(_cuda())
    assert bwd(_cuda())[0] == "replayed" and bwd.choice == "replay" and bwd_runner.recorded_with is None


def test_backward_waits_while_its_forward_has_not_decided(monkeypatch):
    fwd, _ = _race(monkeypatch, plain_ms=10, replay_ms=3)
    bwd, bwd_runner = _race(monkeypatch, plain_ms=10, replay_ms=3, after=fwd)
    for _ in range(4):  # (the forward is called elsewhere: it never gets past its call 1)
        assert bwd(_cuda())[0] == "plain"
    assert bwd.choice is None and not bwd_runner.recordings


def test_reduce_overhead_replays_from_the_second_call(monkeypatch):
    race, runner = _race(monkeypatch, plain_ms=1, replay_ms=3, always=True)
    assert [race(_cuda())[0] for _ in range(3)] == ["plain", "replayed", "replayed"]


def test_not_installed_without_a_gpu_or_with_random_ops():
    from kiln.options import default_options

    gm = torch.fx.symbolic_trace(lambda x: torch.nn.functional.dropout(x, 0.5))
    rt = SimpleNamespace(joint_gm=None, warm_race_ops="random ops", n_inputs=1, state=[], mutated=[])
    why = step_graphs.why_not(rt, gm, default_options())
    assert why in ("no GPU", "random ops")
    assert step_graphs.why_not(rt, gm, default_options().replace(default_cudagraphs=False)).startswith("Options")


def _cuda():
    """An argument the race takes for a CUDA tensor (its device is only read for the faked memory counters)."""
    return SimpleNamespace(device="cuda:0", is_cuda=True)


def test_a_graph_writing_a_callers_input_is_not_replayed(monkeypatch):
    from kiln.options import default_options

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    rt = SimpleNamespace(n_inputs=3, state=[torch.ones(1)], mutated=[0], joint_gm=gm)
    assert step_graphs.why_not(rt, gm, default_options()) == "the graph writes to an input of the caller"
    rt.mutated = [2]  # a buffer of the module (BatchNorm's running statistics): written in place by address
    assert step_graphs.why_not(rt, gm, default_options()) is None
