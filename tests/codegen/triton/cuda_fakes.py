"""CUDA graphs faked on the CPU for the runners' tests (test_cudagraphs.py, test_step_graphs.py): a
"graph" that replays by calling the function the test gives it, and a capture that runs the recorded
code for real (a real capture runs no kernels: ``CAPTURING[0]`` says when code runs inside one)."""
import pytest
import torch

CAPTURING = [False]


class FakeGraph:
    last = None

    def __init__(self):
        self.replay_fn = None
        FakeGraph.last = self

    def replay(self):
        self.replay_fn()


class FakeCapture:
    def __init__(self, graph, **kw):
        self.graph = graph

    def __enter__(self):
        CAPTURING[0] = True
        return self

    def __exit__(self, *exc):
        CAPTURING[0] = False
        return False


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", FakeCapture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
