"""Frames kiln cannot capture: they run wholly eagerly (0 graphs for that frame), with eager's results,
while functions they call may still be compiled as their own frames; with fullgraph=True, a
GraphBreakError names the user's file and line.

This version of kiln has no graph breaks, so the counts here differ from dynamo's (which splits the
frame into graphs around the break); ``dynamo_graphs=`` records dynamo's count for the reference run.
"""
import numpy as np
import pytest
import torch
import torch.nn as nn

from . import harness
from .harness import check, check_fullgraph_error


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def compiled_helper(x):
    return x.sin() * 2 + 1


def chatty_helper(x):
    y = x * 2
    print("chatty_helper: y computed")  # BREAK:chatty
    return y + 1


def countdown(n, x):
    for i in range(n):
        yield x * i


# ------------------------------------------------------------------------------------------
# eager fallback, correct results
# ------------------------------------------------------------------------------------------


def test_print_runs_frame_eagerly(capsys):
    def fn(x):
        y = x * 2
        print("shape", tuple(y.shape))
        return y + 1

    check(fn, _t(3), graphs=2)
    assert capsys.readouterr().out.count("shape (3,)") == 4  # 2 eager + 2 compiled calls, printed once each


def test_item_in_python_control_flow():
    def fn(x):
        m = x.abs().max().item()
        if m > 1.0:
            return x / m
        return x * 2

    check(fn, _t(5), graphs=2)


def test_item_as_python_number():
    def fn(x):
        n = int(x.sum().item()) % 3
        return x * n + 1

    check(fn, torch.arange(4.0), graphs=2)


def test_data_dependent_if_on_tensor():
    def fn(x):
        if x.sum() > 0:
            return x * 2
        return x - 2

    check(fn, _t(4), graphs=(1, 2))
    check(fn, -_t(4).abs() - 1, graphs=(1, 2))


def test_data_dependent_while_on_tensor():
    def fn(x):
        steps = 0
        while x.norm() > 1.0:
            x = x * 0.5
            steps += 1
        return x, steps

    check(fn, _t(8) * 4, graphs=(1, 2, 3, 4, 5, 6, 7, 8, 9, 10))


def test_bool_of_tensor_in_and():
    def fn(x, flag):
        if flag and (x > 0).any():
            return x.relu()
        return x.neg()

    check(fn, _t(4), True, graphs=(1, 2))


def test_numpy_calls():
    def fn(x):
        a = x.numpy()
        b = np.tanh(a) * 2
        return torch.from_numpy(b) + 1

    check(fn, _t(4), graphs=(0, 1, 2))


def test_tolist_and_tensor_repr():
    def fn(x):
        vals = x.tolist()
        key = f"{x[0]}"
        return torch.tensor([v * 2 for v in vals]), len(key) > 0

    check(fn, _t(3), graphs=(0, 1, 2))


def test_generator_function():
    # A user generator function (yield): run eagerly in a first version, captured later (dynamo: 1).
    def fn(x):
        total = torch.zeros_like(x)
        for y in countdown(3, x):
            total = total + y
        return total

    check(fn, _t(3), graphs=1)


def test_try_except_may_be_captured():
    # "maybe" in this version: a frame with try/except is captured whole or run eagerly.
    def fn(x, d):
        try:
            s = d["scale"]
        except KeyError:
            s = 1.0
        return x * s

    check(fn, _t(3), {"scale": 3.0}, graphs=1)
    # the KeyError would be raised while tracing, inside the try block: kiln runs this frame eagerly
    check(fn, _t(3), {}, graphs=(0, 1))


def test_class_defined_inside_frame():
    if harness.USE_DYNAMO:
        pytest.skip("dynamo recompiles this frame on each call (the class is new each time)")

    def fn(x):
        class Local:
            k = 3

        return x * Local.k

    check(fn, _t(3), graphs=0)


def test_data_dependent_output_shape():
    # Boolean-mask indexing and nonzero have data-dependent sizes; a first version runs the frame
    # eagerly, a later one may capture it with unbacked sizes.
    def fn(x):
        pos = x[x > 0]
        idx = torch.nonzero(x < 0)
        return pos * 2, idx

    check(fn, _t(6), graphs=(1, 2, 3))


def test_callee_of_fallback_frame_is_compiled():
    def fn(x):
        y = x + 1
        print("between")
        return compiled_helper(y)

    counter = check(fn, _t(3), graphs=2)
    if not harness.USE_DYNAMO:
        # graph 0 is `x + 1` before the print; the resume function inlines compiled_helper
        targets = [str(t) for i in range(len(counter.graphs)) for t in counter.targets(i)]
        assert any("sin" in t for t in targets), f"expected compiled_helper's graph, got {targets}"


def test_fallback_inside_inlined_callee():
    # The outer frame cannot inline chatty_helper (it prints), so it runs eagerly; chatty_helper's
    # own frame cannot be captured either.
    def fn(x):
        y = x.cos()
        z = chatty_helper(y)
        return z * 3

    check(fn, _t(3), graphs=(3, 4))


def test_fallback_frame_calls_user_submodule():
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(x).relu()

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            if x.mean() > 10:  # data-dependent: Outer.forward runs eagerly
                x = x * 0
            return self.inner(x) + self.inner(x * 2)

    torch.manual_seed(0)
    # Inner.forward is its own frame: one graph, reused for the second call (same guards).
    check(Outer(), _t(2, 3), graphs=(1, 2))


def test_side_effects_happen_once_in_fallback_frame():
    # Whatever kiln traced before giving up must not have run: the in-place update and the list
    # append happen exactly once per call.
    log = []

    def fn(x):
        x.add_(1)
        log.append(x.sum())
        print("side effects")
        return x * 2

    harness.reset()
    counter = harness.CountingBackend()
    compiled = harness.compile_fn(fn, counter)
    x = torch.zeros(3)
    out = compiled(x)
    torch.testing.assert_close(x, torch.ones(3))
    torch.testing.assert_close(out, torch.full((3,), 2.0))
    assert len(log) == 1
    compiled(x)
    torch.testing.assert_close(x, torch.full((3,), 2.0))
    assert len(log) == 2
    if not harness.USE_DYNAMO:
        # the graph before the print (add_, sum) and the one after it (x * 2); the second call
        # recompiles the first frame because the guarded length of `log` changed
        assert len(counter.graphs) in (2, 3)


def test_fallback_frame_mutating_inputs():
    def fn(x, cache):
        x.mul_(2)
        cache["v"] = x.sum().item()
        return x + cache["v"]

    check(fn, _t(3), {}, graphs=(1, 2), inputs_mutated=True)


def test_fallback_stats_and_no_retry():
    if harness.USE_DYNAMO:
        pytest.skip("kiln's stats only")
    import kiln

    def fn(x):
        print("eager")
        return x + 1

    harness.reset()
    counter = harness.CountingBackend()
    compiled = harness.compile_fn(fn, counter)
    for _ in range(3):
        compiled(_t(2))
    snap = kiln.stats.snapshot()
    # the print breaks the graph once; the resume function holds `x + 1`; later calls hit the caches
    assert snap["graphs"] == 1
    assert sum(snap["graph_breaks"].values()) == 1
    assert snap["frames_compiled"] == 2
    assert len(counter.graphs) == 1


def test_explain_reports_fallback_reason():
    if harness.USE_DYNAMO:
        pytest.skip("kiln.explain only")
    import kiln

    def fn(x):
        y = x * 2
        print("explain me")  # BREAK:explain
        return y

    harness.reset()
    report = kiln.explain(fn)(_t(3))
    assert report.graph_count == 1  # y = x * 2; the resume function has no tensor work
    assert report.graph_break_count == 1
    assert len(report.break_reasons) >= 1
    reason = report.break_reasons[0]
    assert reason.filename.endswith("test_fallback.py")
    assert reason.lineno == harness.marker_line(__file__, "BREAK:explain")
    assert "print" in str(reason.reason).lower()


def test_explain_on_capturable_function():
    if harness.USE_DYNAMO:
        pytest.skip("kiln.explain only")
    import kiln

    def fn(x):
        return (x * 2).relu() + 1

    harness.reset()
    report = kiln.explain(fn)(_t(3))
    assert report.graph_count == 1
    assert report.graph_break_count == 0
    assert report.break_reasons == [] or len(report.break_reasons) == 0
    assert len(report.graphs) == 1
    ops = report.ops_per_graph[0]  # a count, or the list of ops
    assert (ops if isinstance(ops, int) else len(ops)) >= 3


# ------------------------------------------------------------------------------------------
# fullgraph=True: GraphBreakError naming file and line
# ------------------------------------------------------------------------------------------


def test_fullgraph_print():
    def fn(x):
        y = x + 1
        print(y.shape)  # BREAK:print
        return y

    check_fullgraph_error(fn, _t(3), marker="BREAK:print")


def test_fullgraph_item():
    if harness.USE_DYNAMO:
        pytest.skip("dynamo's fullgraph captures .item() as an unbacked scalar")

    def fn(x):
        s = x.sum().item()  # BREAK:item
        return x * s

    check_fullgraph_error(fn, _t(3), marker="BREAK:item")


def test_fullgraph_data_dependent_if():
    def fn(x):
        if (x > 0).all():  # BREAK:ddif
            return x
        return -x

    check_fullgraph_error(fn, _t(3), marker="BREAK:ddif")


def test_fullgraph_numpy():
    def fn(x):
        return torch.from_numpy(np.unique(x.detach().numpy()))  # BREAK:numpy

    if harness.USE_DYNAMO:
        pytest.skip("dynamo traces numpy")
    check_fullgraph_error(fn, _t(3), marker="BREAK:numpy")


def test_fullgraph_in_inlined_callee_names_callee_line():
    def fn(x):
        return chatty_helper(x.exp())

    check_fullgraph_error(fn, _t(3), marker="BREAK:chatty")


def test_fullgraph_module_forward():
    if harness.USE_DYNAMO:
        pytest.skip("dynamo's fullgraph captures .item() as an unbacked scalar")

    class M(nn.Module):
        def forward(self, x):
            n = x.max().item()  # BREAK:module
            return x + n

    check_fullgraph_error(M(), _t(3), marker="BREAK:module")


def test_fullgraph_success_gives_one_graph():
    def fn(x):
        return torch.tanh(x) * 2

    check(fn, _t(3), fullgraph=True)


def test_fallback_compiled_twice_with_different_functions_is_independent():
    def good(x):
        return x.relu() * 3

    def bad(x):
        print("bad")
        return x.relu() * 3

    check(bad, _t(3), graphs=1)
    check(good, _t(3), graphs=1)
