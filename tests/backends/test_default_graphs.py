"""The CUDA-graph candidate of the default-mode speed race (kiln/backends/default_graphs.py), with the
runner and CUDA's memory counters faked on the CPU (tests/codegen/triton/test_cuda.py runs it for real)."""
from types import SimpleNamespace

import torch

from kiln.backends import default_graphs


class FakeRunner:
    def __init__(self, plain, n_state, warmed_up=False):
        self.plain, self.recordings, self.declined = plain, {}, {}
        self.warmed_up = warmed_up  # (the trial's runner: the plain code ran in call 1)

    def __call__(self, *args):
        self.recordings["sig"] = True
        return ("replayed",)

    def explain(self):
        return f"{len(self.recordings)} recordings"


def _fake_cuda(monkeypatch, reserved):
    monkeypatch.setattr(default_graphs, "CudaGraphRunner", FakeRunner)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: reserved[0])
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(total_memory=80 << 30))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def _runtime():
    rt = SimpleNamespace(run=lambda *args: ("plain",))

    def outer(*args):
        return rt.run(*args)

    outer.compiled_graph = object()
    return rt, outer


def test_candidate_replays_only_while_it_runs_and_is_kept_or_dropped(monkeypatch):
    reserved = [1 << 30]
    _fake_cuda(monkeypatch, reserved)
    rt, outer = _runtime()
    cand = default_graphs.GraphCandidate(outer, rt, 0)
    assert cand.candidate(torch.ones(2)) == ("replayed",) and cand.runner.warmed_up
    assert outer(torch.ones(2)) == ("plain",)  # the other candidates run plain launches
    assert cand.why_not() is None
    assert cand.keep("graphs") is outer and outer(torch.ones(2)) == ("replayed",)

    rt, outer = _runtime()
    cand = default_graphs.GraphCandidate(outer, rt, 0)
    cand.candidate(torch.ones(2))
    assert cand.keep("kiln") is None and cand.runner is None and outer(torch.ones(2)) == ("plain",)


def test_candidate_that_holds_too_much_memory_or_recorded_nothing_is_refused(monkeypatch):
    reserved = [0]
    _fake_cuda(monkeypatch, reserved)
    rt, outer = _runtime()
    cand = default_graphs.GraphCandidate(outer, rt, 0)
    cand.candidate(torch.ones(2))
    reserved[0] = 3 << 30  # the recording grew the reserved memory by 3 GiB
    assert "3072 MiB" in cand.why_not()
    fresh = default_graphs.GraphCandidate(outer, rt, 0)
    assert fresh.why_not() == "no recording was made"
    outer.compiled_graph = None
    assert fresh.why_not() == "the graph runs with ATen kernels"


def _hot_shapes(monkeypatch, replay_ms, plain_ms, reserved=None, launch_share=1.0):
    reserved = reserved or [1 << 30]
    _fake_cuda(monkeypatch, reserved)
    times = {"plain": plain_ms / 1e3, "replayed": replay_ms / 1e3}
    monkeypatch.setattr(default_graphs, "_timed", lambda fn, args: (times[fn(*args)[0]], fn(*args)))

    def launch_and_total(fn, args):
        out = fn(*args)
        return times[out[0]] * launch_share, times[out[0]], out

    monkeypatch.setattr(default_graphs, "_launch_and_total", launch_and_total)
    rt, outer = _runtime()
    calls = []

    def counted(*args):
        calls.append(tuple(args[0].shape))
        return outer(*args)

    counted.compiled_graph = outer.compiled_graph
    hot = default_graphs.HotShapes(counted, default_graphs.GraphCandidate(counted, rt, 0))
    return hot, calls


def test_hot_shapes_replay_a_recurring_shape_where_replay_is_faster(monkeypatch):
    hot, _ = _hot_shapes(monkeypatch, replay_ms=1.0, plain_ms=3.0)
    a, b = torch.ones(2), torch.ones(3)
    assert [hot(a)[0] for _ in range(2)] == ["plain", "plain"]  # calls before the shape's HOT-th: plain
    assert hot(b) == ("plain",)
    assert hot(a) == ("replayed",)  # the race (its last timed run's result)
    assert hot(a) == ("replayed",) and hot(b) == ("plain",)  # b has not recurred HOT times
    assert "replayed (1.000 ms against 3.000 ms plain" in hot.kiln_explain()


def test_hot_shapes_keep_plain_launches_where_replay_is_not_faster(monkeypatch):
    hot, _ = _hot_shapes(monkeypatch, replay_ms=2.9, plain_ms=3.0)  # within GRAPHS_MARGIN
    a = torch.ones(2)
    outs = [hot(a)[0] for _ in range(5)]
    assert outs[-2:] == ["plain", "plain"] and not hot.replayed
    assert not hot.graphs.runner.recordings  # the recording was dropped
    assert "plain launches (3.000 ms against 2.900 ms replayed" in hot.kiln_explain()


def test_hot_shapes_stop_recording_when_the_recordings_hold_too_much_memory(monkeypatch):
    reserved = [0]
    hot, _ = _hot_shapes(monkeypatch, replay_ms=1.0, plain_ms=3.0, reserved=reserved)

    class Growing(FakeRunner):
        def __call__(self, *args):
            reserved[0] += 3 << 30  # each recording grows the reserved memory by 3 GiB
            return super().__call__(*args)

    monkeypatch.setattr(default_graphs, "CudaGraphRunner", Growing)
    a = torch.ones(2)
    hot(a), hot(a), hot(a)
    assert hot.off is not None and "3072 MiB" in hot.off and not hot.replayed
    assert [hot(torch.ones(5))[0] for _ in range(4)] == ["plain"] * 4  # no shape races any more


def test_hot_shapes_do_not_record_a_gpu_bound_shape_and_stop_after_losing_in_a_row(monkeypatch):
    hot, _ = _hot_shapes(monkeypatch, replay_ms=1.0, plain_ms=3.0, launch_share=0.2)  # launches return early
    for n in (2, 3, 4):
        x = torch.ones(n)
        assert [hot(x)[0] for _ in range(3)] == ["plain"] * 3
    assert hot.graphs.runner is None or not hot.graphs.runner.recordings  # nothing was recorded
    assert "GPU-bound: launching took 0.600 of 3.000 ms" in hot.kiln_explain()
    assert hot.off is not None and "won the first 3 races" in hot.off
    y = torch.ones(9)
    assert [hot(y)[0] for _ in range(4)] == ["plain"] * 4 and len(hot.verdicts) == 3  # no more races
