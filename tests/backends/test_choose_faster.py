"""Options.choose_faster: a graph's generated code is timed against eager on the first calls and the
faster one runs (kiln/backends/choose_faster.py)."""
import time

import torch

import kiln
from kiln.backends import choose_faster
from kiln.backends.choose_faster import EARLY, GRAPHS_MARGIN, MARGIN, TRIALS, FastestOf, _pick
from kiln.debug.stats import stats

ON = {"choose_faster": True}


def _slow(fn, seconds):
    def run(*args):
        time.sleep(seconds)
        return fn(*args)
    return run


def _counter():
    """(runs per name, counted(name, fn): fn counting its runs under name)."""
    calls = {"kiln": 0, "eager": 0}

    def counted(name, fn):
        def run(x):
            calls[name] += 1
            return fn(x)
        return run

    return calls, counted


def _two(kiln_fn, eager_fn, in_one_call=False):
    return FastestOf({"kiln": kiln_fn, "eager": eager_fn}, "g", False, in_one_call)


def test_one_run_per_call_keeps_the_faster_and_runs_only_it_afterwards():
    calls, counted = _counter()
    stats.reset()
    chooser = _two(counted("kiln", _slow(lambda x: x + 1, 0.004)), counted("eager", lambda x: x + 1))
    outs = [chooser(torch.ones(2)) for _ in range(2 + 2 * TRIALS)]
    assert all(torch.equal(o, torch.full((2,), 2.0)) for o in outs)
    assert chooser.chosen == "eager" and stats.speed_choices == {"eager": 1}
    assert calls == {"kiln": 1 + EARLY, "eager": 1 + TRIALS + (TRIALS - EARLY)}  # a clear winner: decided early
    chooser(torch.ones(2))
    assert calls["eager"] == 2 + 2 * TRIALS - EARLY and calls["kiln"] == 1 + EARLY
    assert "eager runs" in chooser.describe() and "generated code" in chooser.describe()


def test_side_effect_free_graph_is_decided_within_its_second_call():
    calls, counted = _counter()
    stats.reset()
    chooser = _two(counted("kiln", lambda x: x + 1), counted("eager", _slow(lambda x: x + 1, 0.004)), in_one_call=True)
    assert torch.equal(chooser(torch.ones(2)), torch.full((2,), 2.0)) and calls == {"kiln": 1, "eager": 0}
    assert torch.equal(chooser(torch.ones(2)), torch.full((2,), 2.0))
    assert chooser.chosen == "kiln" and stats.speed_choices == {"kiln": 1}
    assert calls["eager"] == 1 + EARLY and calls["kiln"] == 1 + EARLY  # a warm-up, then EARLY rounds: clear winner
    chooser(torch.ones(2))
    assert calls["eager"] == 1 + EARLY and calls["kiln"] == 2 + EARLY


def test_a_candidate_that_fails_its_check_is_not_timed_and_said_why():
    runs = []
    chooser = FastestOf({"kiln": lambda x: runs.append("kiln") or x, "eager": lambda x: runs.append("eager") or x,
                         "graphs": lambda x: runs.append("graphs") or x}, "g", False, True,
                        warmups={"graphs": 2}, check={"graphs": lambda: "its recording holds 9000 MiB"})
    chooser(1)
    chooser(1)
    assert runs.count("graphs") == 2 and chooser.chosen in ("kiln", "eager") and "graphs" not in chooser.medians
    assert "not timed: its recording holds 9000 MiB" in chooser.describe()


def test_explain_says_what_the_race_cost_and_gives_the_graph_runners_report():
    class Runner:
        def __call__(self, x):
            return x + 1

        def explain(self):
            return "cudagraphs: 1 recording (0.8 ms)"

    runner = Runner()
    chooser = FastestOf({"kiln": _slow(lambda x: x + 1, 0.003), "eager": _slow(lambda x: x + 1, 0.003),
                         "graphs": lambda x: x + 1}, "g", False, True, on_keep=lambda name: runner if name == "graphs" else None)
    chooser(torch.ones(1))
    start = time.perf_counter()
    chooser(torch.ones(1))
    took = time.perf_counter() - start
    assert chooser.chosen == "graphs" and chooser.run is runner
    text = chooser.describe()
    assert "the race took" in text and "in its second call" in text
    assert 0.006 < chooser.trial_seconds <= took  # at least a warm-up and one timed run of each slow candidate
    assert text.endswith("\ncudagraphs: 1 recording (0.8 ms)")
    per_call = _two(lambda x: x + 1, _slow(lambda x: x + 1, 0.003))
    for _ in range(2 + 2 * TRIALS):
        per_call(torch.ones(1))
    assert per_call.chosen == "kiln" and "over calls 3 to" in per_call.describe()
    assert per_call.trial_seconds >= 0.003 * EARLY


def test_pick_prefers_generated_code_and_graphs_only_by_their_margins():
    assert _pick({"kiln": 1.0, "eager": 1.0}) == "kiln"
    assert _pick({"kiln": 1.0, "eager": MARGIN * 0.99}) == "eager"
    assert _pick({"kiln": 1.0, "eager": 2.0, "graphs": GRAPHS_MARGIN * 1.01}) == "kiln"
    assert _pick({"kiln": 1.0, "eager": 2.0, "graphs": GRAPHS_MARGIN * 0.99}) == "graphs"
    assert _pick({"kiln": 1.0, "eager": 0.5, "graphs": 0.6}) == "eager"
    assert _pick({"kiln": 1.0, "eager": 0.6, "graphs": 0.5}) == "graphs"


def test_end_to_end_a_graph_that_mutates_its_input_runs_once_per_call():
    def f(x, buf):
        buf.add_(1)
        return (x * 2).relu() + buf
    stats.reset()
    g = kiln.compile(f, options=ON)
    x = torch.randn(8)
    buf, ref = torch.zeros(8), torch.zeros(8)
    for i in range(3 + 2 * TRIALS):
        torch.testing.assert_close(g(x, buf), f(x, ref))
        assert torch.equal(buf, ref), i
    assert sum(stats.speed_choices.values()) == 1, stats.speed_choices


def test_generated_code_kept_when_not_slower():
    stats.reset()
    chooser = _two(lambda x: x * 2, _slow(lambda x: x * 2, 0.004))
    for _ in range(2 + 2 * TRIALS):
        chooser(torch.ones(3))
    assert chooser.chosen == "kiln" and stats.speed_choices == {"kiln": 1}


def test_end_to_end_every_call_equals_eager_and_one_choice_is_made():
    def f(x, w):
        return torch.nn.functional.gelu(x @ w).softmax(-1) * 2
    stats.reset()
    g = kiln.compile(f, options=ON)
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    for i in range(2):
        torch.testing.assert_close(g(x + i, w), f(x + i, w))
    assert sum(stats.speed_choices.values()) == 1, stats.speed_choices  # decided within the second call
    for i in range(3):
        torch.testing.assert_close(g(x + i, w), f(x + i, w))
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
    chooser = _two(lambda x: x + 1, lambda x: x + 1)
    chooser.calls = 2
    chooser.times = {"kiln": [1.0, 1.1], "eager": [2.0, 1.7]}
    assert chooser._clear_winner()
    chooser.times = {"kiln": [1.0, 1.1], "eager": [2.0, 1.6]}  # one eager call within SEPARATION
    assert not chooser._clear_winner()
    chooser.times = {"kiln": [1.0], "eager": [9.0]}  # fewer than EARLY calls each
    assert not chooser._clear_winner()


def test_attention_without_dropout_is_not_a_random_op():
    """SDPA's fused kernels are tagged as seeded (for dropout): with dropout_p 0 they draw nothing, and a
    graph of them is raced like any other (HF GPT-2 and Llama on the GPU were never raced)."""
    from kiln.backends.seeded_ops import draws_random_numbers as draws_random

    aten = torch.ops.aten
    g = torch.fx.Graph()
    q = g.placeholder("q")
    flash = aten._scaled_dot_product_flash_attention.default
    eff = aten._scaled_dot_product_efficient_attention.default
    nodes = [g.call_function(flash, (q, q, q)), g.call_function(flash, (q, q, q, 0.0, True)),
             g.call_function(flash, (q, q, q, 0.1)), g.call_function(eff, (q, q, q, None, False), {"dropout_p": 0.0}),
             g.call_function(eff, (q, q, q, None, False, 0.5)), g.call_function(aten.rand.default, ([2],)),
             g.call_function(aten.add.Tensor, (q, q))]
    assert [draws_random(n) for n in nodes] == [False, False, True, False, True, True, False]
