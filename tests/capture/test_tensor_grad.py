"""``p.grad`` read and written inside compiled code (kiln/capture/values/tensor_grad.py): reads are the
real gradient (None guarded, or a graph input), stores are side effects replayed after the graph."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln
from kiln.debug.stats import stats


def _run(fn, backend="eager"):
    stats.reset()
    kiln.reset()
    return kiln.compile(fn, backend=backend)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_manual_sgd_loop_over_parameters_is_one_graph_and_matches_eager(backend):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
    ref = copy.deepcopy(net)

    def update(model):
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
                p.grad = None

    compiled = _run(lambda: update(net), backend)
    for step in range(3):
        x, y = torch.randn(4, 3), torch.randn(4)
        for m in (net, ref):
            F.mse_loss(m(x).squeeze(-1), y).backward()
        compiled()
        update(ref)
        for p, q in zip(net.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q)
            assert p.grad is None and q.grad is None
    assert stats.graphs == 1 and not stats.graph_breaks, (stats.graphs, dict(stats.graph_breaks))


def test_none_grad_is_guarded():
    w = nn.Parameter(torch.ones(3))

    def f(x):
        return x * 2 if w.grad is None else x + w.grad

    g = _run(f)
    x = torch.arange(3.0)
    assert torch.equal(g(x), x * 2)
    w.grad = torch.full((3,), 5.0)
    assert torch.equal(g(x), x + 5)  # a second entry: the None guard failed
    w.grad = torch.full((3,), 7.0)
    assert torch.equal(g(x), x + 7)  # the grad is a graph input, not a constant
    assert stats.graphs == 2


def test_store_then_read_in_the_same_frame_and_in_place_on_new_grad():
    w = nn.Parameter(torch.ones(2, 2))

    def f():
        w.grad = torch.zeros_like(w)
        w.grad.add_(3)
        return w.grad * 2

    out = _run(f)()
    assert torch.equal(out, torch.full((2, 2), 6.0)) and torch.equal(w.grad, torch.full((2, 2), 3.0))
    assert not stats.graph_breaks


def test_zero_grad_in_place_writes_the_real_gradient():
    w = nn.Parameter(torch.ones(4))
    w.grad = torch.full((4,), 2.0)
    grad = w.grad
    _run(lambda: w.grad.zero_())()
    assert w.grad is grad and torch.equal(grad, torch.zeros(4))


def test_mismatched_store_raises_as_eager():
    w = nn.Parameter(torch.ones(2, 3))

    def f():
        w.grad = torch.zeros(3)

    with pytest.raises(RuntimeError) as want:
        f()
    with pytest.raises(RuntimeError) as got:
        _run(f)()
    assert str(got.value) == str(want.value)
    assert any("another dtype, device or size" in r for r in stats.graph_breaks)


def test_grad_of_a_tensor_made_in_the_graph_breaks():
    def f(x):
        y = x * 2
        return y.grad

    x = torch.ones(2)
    assert _run(f)(x) is None
    assert any("made inside the compiled function" in r for r in stats.graph_breaks)


@pytest.mark.parametrize("backend", ["eager", "kiln"])
def test_a_new_leaf_with_requires_grad_made_inside_is_a_real_leaf(backend):
    # torch.full(..., requires_grad=True) / x.new_ones(..., requires_grad=True): autograd tracks the new
    # leaf (eager gives it a gradient); a graph value would not be one, so the call runs between graphs
    def fn(x):
        w = torch.full((3,), 0.5, requires_grad=True)
        b = x.new_ones(3, requires_grad=True)
        z = torch.zeros(3, requires_grad=False)  # (no leaf: stays in the graph)
        return (x * w + b * 2 + z).sum(), w, b

    x = torch.randn(3)
    out, w, b = _run(fn, backend)(x)
    assert w.is_leaf and w.requires_grad and b.is_leaf and b.requires_grad
    gw, gb = torch.autograd.grad(out, (w, b))
    torch.testing.assert_close(gw, x)
    torch.testing.assert_close(gb, torch.full((3,), 2.0))
    assert stats.graph_breaks["torch.full(..., requires_grad=True) makes a new leaf tensor that autograd tracks"] == 1


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_a_no_grad_block_split_by_a_break_leaves_grad_mode_as_eager(backend):
    # the graph after the break switches grad mode back on: the runtime must do it on every call (the
    # ATen graph has no grad-mode nodes), and the outputs computed after the block get their grads
    w0 = torch.ones(3, requires_grad=True)

    def split_by_leaf(x):
        with torch.no_grad():
            w = torch.ones(3, requires_grad=True)  # (a break: a new leaf)
        return w * x

    def split_by_data(x):
        with torch.no_grad():
            if x.sum() > 0:  # (a break: data-dependent control flow)
                x = x + 1
        return w0 * x

    for fn in (split_by_leaf, split_by_data):
        compiled = _run(fn, backend)
        for _ in range(3):
            got = compiled(torch.ones(3))
            assert torch.is_grad_enabled()
            assert got.requires_grad and not got.is_leaf
            torch.testing.assert_close(got, fn(torch.ones(3)))


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_enable_grad_inside_a_function_called_under_no_grad(backend):
    def fn(x, w):
        with torch.enable_grad():
            y = w * x
        return y, y.grad_fn is None, w.view(3).is_leaf

    w, x = torch.ones(3, requires_grad=True), torch.randn(3)
    compiled = _run(fn, backend)
    with torch.no_grad():
        want = fn(x, w)
        for _ in range(2):
            got = compiled(x, w)
            assert not torch.is_grad_enabled()
            assert got[0].requires_grad and got[1:] == want[1:] == (False, True)
    got[0].sum().backward()
    torch.testing.assert_close(w.grad, x)
