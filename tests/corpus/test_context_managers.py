"""Grad-mode context managers inside compiled code, and grad mode as a guard."""
import torch
import torch.nn as nn

from . import harness
from .harness import check, check_recompiles


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def test_no_grad_block():
    def fn(w, x):
        y = x @ w
        with torch.no_grad():
            stats = y.abs().mean()
        return y / (stats + 1), stats.requires_grad

    check(fn, _t(3, 3).requires_grad_(), _t(2, 3, seed=1))


def test_enable_grad_inside_no_grad():
    def fn(w, x):
        with torch.no_grad():
            a = x * w
            with torch.enable_grad():
                b = x * w
        return a, b

    check(fn, _t(3).requires_grad_(), _t(3, seed=1))


def test_set_grad_enabled_false():
    def fn(w):
        with torch.set_grad_enabled(False):
            frozen = w * 2
        return frozen + w

    check(fn, _t(3).requires_grad_())


@torch.no_grad()
def _ema_update(avg, new):
    return avg * 0.9 + new * 0.1


def test_no_grad_decorated_helper():
    def fn(w, x):
        y = torch.tanh(x @ w)
        return y, _ema_update(y, x @ w)

    check(fn, _t(3, 3).requires_grad_(), _t(2, 3, seed=1))


def test_grad_mode_of_caller_is_a_guard():
    def fn(w):
        return (w * 2).sum()

    harness.reset()
    counter = harness.CountingBackend()
    compiled = harness.compile_fn(fn, counter)
    w = _t(3).requires_grad_()
    assert compiled(w).requires_grad
    with torch.no_grad():
        out = compiled(w)
    assert not out.requires_grad
    assert compiled(w).requires_grad
    assert len(counter.graphs) == 2


def test_backward_through_compiled_module():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))
    ref = harness.clone_args(model)
    x = _t(5, 4)
    harness.reset()
    counter = harness.CountingBackend()
    compiled = harness.compile_fn(model, counter)
    compiled(x).sum().backward()
    ref(x).sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=lambda m: f"grad of {name}: {m}")
    assert len(counter.graphs) == 1


def test_inference_mode_block():
    def fn(x):
        with torch.inference_mode():
            y = x * 2
        return y + 0, torch.is_inference_mode_enabled()

    check(fn, _t(3), graphs=1)


def test_requires_grad_change_and_no_grad_recompile_independently():
    def fn(x):
        return x.exp()

    check_recompiles(fn, [(_t(3),), (_t(3).requires_grad_(),), (_t(3),), (_t(3).requires_grad_(),)],
                     graphs=2, per_call=[1, 2, 2, 2])
