"""A backward with create_graph=True through a compiled training graph (a gradient penalty, MAML,
Hessian-vector products) gives gradients autograd can differentiate again, equal to eager's. The
generated backward gave gradients without history: the second-order terms were silently missing."""
from __future__ import annotations

import pytest
import torch

import kiln


def _model(dropout=0.0):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Dropout(dropout),
                               torch.nn.Linear(8, 1))


def _penalty_step(model, params, x):
    for p in params:
        p.grad = None
    out = model(x)
    g, = torch.autograd.grad(out.sum(), x, create_graph=True)
    loss = (g.norm(2, dim=1) - 1).pow(2).mean() + out.mean()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in params], x.grad.clone()


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_gradient_penalty_through_a_compiled_model(backend):
    kiln.reset()
    eager, compiled_model = _model(), _model()
    compiled = kiln.compile(compiled_model, backend=backend)
    x1 = torch.randn(5, 4, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    want = _penalty_step(eager, list(eager.parameters()), x1)
    for _ in range(2):  # (the second step runs the cached graph)
        x2.grad = None
        got = _penalty_step(compiled, list(compiled_model.parameters()), x2)
    x1.grad = None
    want = _penalty_step(eager, list(eager.parameters()), x1)
    torch.testing.assert_close(got, want)


def test_autograd_grad_with_create_graph_inside_the_compiled_function():
    def fn(x):
        x = x.requires_grad_(True)
        g, = torch.autograd.grad((x ** 3).sum(), x, create_graph=True)
        return g

    kiln.reset()
    got = kiln.compile(fn, backend="aot_eager")(torch.ones(2))
    assert got.grad_fn is not None
    torch.testing.assert_close(got, fn(torch.ones(2)))


def test_a_graph_with_random_ops_refuses_a_differentiable_backward():
    kiln.reset()
    model = _model(dropout=0.5).train()
    compiled = kiln.compile(model)
    x = torch.randn(5, 4, requires_grad=True)
    out = compiled(x)
    with pytest.raises(RuntimeError, match="create_graph=True through a compiled graph.*random numbers"):
        torch.autograd.grad(out.sum(), x, create_graph=True)


def _detached(x):
    return (x.detach() * x ** 2).sum()


def _no_grad_block(x):
    with torch.no_grad():
        s = x.sum()
    return (x * x * s).sum()


def _writes_an_input(x, y):
    y.mul_(2)
    return (x * x * y).sum()


@pytest.mark.parametrize("fn", [_detached, _no_grad_block, _writes_an_input])
def test_what_the_joint_graph_cannot_differentiate_again_is_refused_not_wrong(fn):
    # the joint graph has no detach or grad-mode regions left, and a written input has its new value:
    # differentiating it again gave wrong second-order (and, for the write, first-order) gradients
    kiln.reset()
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    args = (x, torch.ones(3)) if fn is _writes_an_input else (x,)
    out = kiln.compile(fn, backend="aot_eager")(*args)
    with pytest.raises(RuntimeError, match="create_graph=True through a compiled graph cannot be made differentiable"):
        torch.autograd.grad(out, x, create_graph=True)


def test_inputs_are_held_weakly_for_a_double_backward():
    # (an input eager frees after the forward must stay free: only weak references are kept)
    import weakref

    kiln.reset()
    x = torch.randn(5, 4, requires_grad=True)
    out = kiln.compile(lambda h: torch.relu(h) * 2, backend="aot_eager")(x * 2)
    held = [t for t in out.grad_fn.flat_inputs if t is not None]
    assert held and all(isinstance(t, weakref.ref) for t in held)
