"""Options.choose_faster: a graph's generated code is timed against eager on the first calls and the
faster one runs (kiln/backends/choose_faster.py)."""
import time

import torch

import kiln
from kiln.backends import choose_faster
from kiln.backends.choose_faster import EARLY, TRIALS, FasterOfTwo
from kiln.debug.stats import stats

ON = {"choose_faster": True}


def _slow(fn, seconds):
    def run(*args):
        time.sleep(seconds)
        return fn(*args)
    return run


def test_faster_of_two_keeps_the_faster_and_runs_only_it_afterwards():
    calls = {"kiln": 0, "eager": 0}

    def counted(name, fn):
        def run(x):
            calls[name] += 1
            return fn(x)
        return run

    stats.reset()
    chooser = FasterOfTwo(counted("kiln", _slow(lambda x: x + 1, 0.004)), counted("eager", lambda x: x + 1), "g", False)
    outs = [chooser(torch.ones(2)) for _ in range(2 + 2 * TRIALS)]
    assert all(torch.equal(o, torch.full((2,), 2.0)) for o in outs)
    assert chooser.chosen == "eager" and stats.speed_choices == {"eager": 1}
    assert calls == {"kiln": 1 + EARLY, "eager": 1 + TRIALS + (TRIALS - EARLY)}  # a clear winner: decided early
    chooser(torch.ones(2))
    assert calls["eager"] == 2 + 2 * TRIALS - EARLY and calls["kiln"] == 1 + EARLY
    assert "eager runs" in chooser.describe() and "generated code" in chooser.describe()


def test_generated_code_kept_when_not_slower():
    stats.reset()
    chooser = FasterOfTwo(lambda x: x * 2, _slow(lambda x: x * 2, 0.004), "g", False)
    for _ in range(2 + 2 * TRIALS):
        chooser(torch.ones(3))
    assert chooser.chosen == "kiln" and stats.speed_choices == {"kiln": 1}


def test_end_to_end_every_call_equals_eager_and_one_choice_is_made():
    def f(x, w):
        return torch.nn.functional.gelu(x @ w).softmax(-1) * 2
    stats.reset()
    g = kiln.compile(f, options=ON)
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    for i in range(3 + 2 * TRIALS):
        torch.testing.assert_close(g(x + i, w), f(x + i, w))
    assert sum(stats.speed_choices.values()) == 1, stats.speed_choices
    report = "\n".join(kiln.explain(f, backend="kiln", options=ON)(x, w).backend_reports)
    assert "speed choice:" in report


def test_not_raced_training_random_and_off():
    stats.reset()
    lin = torch.nn.Linear(4, 4)
    g = kiln.compile(lambda x: lin(x).sum(), options=ON)
    x = torch.randn(3, 4)
    for _ in range(3 + 2 * TRIALS):
        g(x).backward()
    h = kiln.compile(lambda x: torch.nn.functional.dropout(x, 0.5, training=True) + 1, options=ON)
    for _ in range(3 + 2 * TRIALS):
        h(x)
    k = kiln.compile(lambda x: x.relu() + 1, options={"choose_faster": False})
    for _ in range(3 + 2 * TRIALS):
        k(x)
    d = kiln.compile(lambda x: x.relu() * 3, options=ON)  # the second size: a size-generic graph
    d(torch.randn(8))
    for _ in range(3 + 2 * TRIALS):
        d(torch.randn(9))
    assert stats.dynamic_graphs == 1
    assert not stats.speed_choices, stats.speed_choices


def test_should_race_reasons():
    gm = torch.fx.symbolic_trace(lambda x: x + 1)

    class Training:
        plan = object()

    class Inference:
        class aten_graph:
            pass

    Inference.aten_graph.gm = gm
    opts = kiln.Options(choose_faster=True)
    assert choose_faster.should_race(gm, [torch.ones(2)], Training(), opts) == "a training graph (its backward is not timed)"
    assert choose_faster.should_race(gm, [torch.ones(2)], Inference(), opts.replace(cudagraphs=True)) == "CUDA graphs replay it"
    assert choose_faster.should_race(gm, [torch.ones(2)], Inference(), opts.replace(choose_faster=False))
    assert "warm cache" in choose_faster.should_race(gm, [torch.ones(2)], object(), opts)
    assert choose_faster.should_race(gm, [torch.ones(2)], Inference(), opts) is None


def test_race_ends_early_only_for_a_clear_winner():
    stats.reset()
    chooser = FasterOfTwo(lambda x: x + 1, lambda x: x + 1, "g", False)
    chooser.calls = 2
    chooser.times = {"kiln": [1.0, 1.1], "eager": [2.0, 1.7]}
    assert chooser._clear_winner()
    chooser.times = {"kiln": [1.0, 1.1], "eager": [2.0, 1.6]}  # one eager call within SEPARATION
    assert not chooser._clear_winner()
    chooser.times = {"kiln": [1.0], "eager": [9.0]}  # fewer than EARLY calls each
    assert not chooser._clear_winner()
