"""`t.data` in compiled code (a detached tensor over t's memory with a version counter of its own), and
writes to inputs that require grad that eager's autograd does not see (under no_grad, through
`detach()` or `.data`)."""
import pytest
import torch

import kiln

BACKENDS = ["eager", "aot_eager", "kiln"]


def _fresh():
    kiln.reset()
    kiln.stats.reset()


@pytest.mark.parametrize("backend", BACKENDS)
def test_ema_update_through_data_is_one_graph(backend):
    _fresh()
    torch.manual_seed(0)
    model, ema, ref = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    ref.load_state_dict(ema.state_dict())

    def update(avg, decay):
        for pe, p in zip(avg.parameters(), model.parameters()):
            pe.data.mul_(decay).add_(p.data, alpha=1 - decay)

    compiled = kiln.compile(update, backend=backend)
    versions = [p._version for p in ema.parameters()]
    for _ in range(2):
        compiled(ema, 0.9)
        update(ref, 0.9)
    for got, want in zip(ema.parameters(), ref.parameters()):
        torch.testing.assert_close(got, want)
    assert [p._version for p in ema.parameters()] == versions  # writes through .data are not versioned
    assert kiln.stats.graphs == 1 and not kiln.stats.graph_breaks


def _no_grad_write(x):
    with torch.no_grad():
        x.mul_(3)
    return (x * 2).sum()


def _detach_write(x):
    x.detach().mul_(3)
    return (x * 2).sum()


def _data_write(x):
    x.data.mul_(3)
    return (x * x).sum()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_no_grad_write, _detach_write, _data_write])
def test_writes_autograd_does_not_see_keep_eager_gradients(backend, fn):
    x_ref = torch.arange(1., 4., requires_grad=True)
    want = fn(x_ref)
    want.backward()
    x = torch.arange(1., 4., requires_grad=True)
    got = kiln.compile(fn, backend=backend)(x)
    got.backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x, x_ref)
    torch.testing.assert_close(x.grad, x_ref.grad)
    assert x._version == x_ref._version


@pytest.mark.parametrize("backend", BACKENDS)
def test_data_read_is_detached(backend):
    def f(x):
        d = x.data
        return d * 2, d.requires_grad, x * 2

    x = torch.arange(3., requires_grad=True)
    doubled, requires_grad, y = kiln.compile(f, backend=backend)(x)
    assert not doubled.requires_grad and requires_grad is False and y.requires_grad


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_data_write_to_a_parameter_in_forward(backend):
    class Clipped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            self.lin.weight.data.clamp_(-0.1, 0.1)
            return self.lin(x).sum()

    torch.manual_seed(0)
    m, ref = Clipped(), Clipped()
    ref.load_state_dict(m.state_dict())
    got, want = kiln.compile(m, backend=backend)(torch.ones(2, 3)), ref(torch.ones(2, 3))
    got.backward(), want.backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(m.lin.weight, ref.lin.weight)
    torch.testing.assert_close(m.lin.weight.grad, ref.lin.weight.grad)


def test_is_leaf_of_inputs_is_the_callers_and_guarded():
    _fresh()

    def f(x):
        return x * 2, x.is_leaf

    w = torch.ones(3, requires_grad=True)
    compiled = kiln.compile(f, backend="eager")
    assert compiled(w * 1.0)[1] is False  # (kiln answered True for every input before)
    assert compiled(w)[1] is True
    assert compiled(torch.ones(3))[1] is True
