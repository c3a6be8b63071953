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
