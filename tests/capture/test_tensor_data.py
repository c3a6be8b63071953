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


def test_held_ranges_live_reads_memory_again():
    from kiln.capture.storage_aliasing import HeldRanges, aliasing_signature

    buf, x = torch.zeros(3), torch.ones(3)
    fixed, live = HeldRanges([buf]), HeldRanges([buf], live=True)
    assert aliasing_signature((x,), fixed) == aliasing_signature((x,), live) == ((0,), (-1,))
    buf.data = x  # the buffer now lives in x's memory
    assert aliasing_signature((x,), fixed) == ((0,), (-1,))  # (the ranges taken when tracing)
    assert aliasing_signature((x,), live) == ((0,), (0,))


def _store_then_use(x, y):
    x.data = y
    return x + 1


def _store_into_graph_value(x, y):
    z = x * 2
    z.data = y
    return z


@pytest.mark.parametrize("fn,args,reason", [
    (_store_then_use, (torch.ones(3), torch.zeros(2)), "a use of a tensor after its .data was assigned"),
    (_store_into_graph_value, (torch.ones(3), torch.zeros(2)), "Tensor.data of a tensor made inside"),
])
def test_data_stores_kiln_refuses_break_with_a_reason(fn, args, reason):
    _fresh()
    want = fn(*[a.clone() for a in args])
    got = kiln.compile(fn, backend="eager")(*[a.clone() for a in args])
    assert torch.equal(got, want)
    assert any(reason in why for why in kiln.stats.graph_breaks), dict(kiln.stats.graph_breaks)


def test_data_store_is_a_side_effect_after_the_graph():
    _fresh()

    def f(x, y):
        d = x * 3  # computed from x's memory before the swap
        x.data = y
        y.add_(1)  # x shares y's memory after the store: it sees this
        return d, x

    x, y = torch.ones(2), torch.zeros(3)
    d, out = kiln.compile(f, backend="aot_eager")(x, y)
    assert out is x and torch.equal(x, torch.ones(3)) and torch.equal(d, torch.full((2,), 3.0))
    assert x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    assert kiln.stats.graphs == 1 and not kiln.stats.graph_breaks
