"""Findings of a new-user dynamic-shapes trial (session 45), each compared with eager over several sizes."""
import pytest
import torch

import kiln


def _outcome(fn, *args):
    try:
        out = fn(*args)
    except Exception as exc:  # noqa: BLE001 -- compared with the other side's
        return ("raises", type(exc), str(exc))
    return ("returns", out)


def _same(a, b):
    if a[0] != b[0]:
        return False
    if a[0] == "raises":
        return a[1] is b[1] and a[2] == b[2]
    flat_a, flat_b = _flat(a[1]), _flat(b[1])
    return len(flat_a) == len(flat_b) and all(_equal(x, y) for x, y in zip(flat_a, flat_b))


def _flat(v):
    if isinstance(v, (tuple, list)) and not isinstance(v, torch.Size):
        return [y for x in v for y in _flat(x)]
    return [v]


def _equal(x, y):
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)
    return x == y


def check(fn, make_args, values, dynamic=None):
    compiled = kiln.compile(fn, dynamic=dynamic)
    for v in values:
        want, got = _outcome(fn, *make_args(v)), _outcome(compiled, *make_args(v))
        assert _same(want, got), (v, want, got)


# In-place changes of an input's sizes or strides in a dynamic graph: the symbols were read from the input
# after the change (the first call's sizes came back), and squeeze_ crashed the process.
METADATA_PROGRAMS = {
    "t_": lambda x: (x.t_(), x.shape, x.size(1))[1:],
    "transpose_": lambda x: (x.transpose_(0, 1), x.size(1), x.numel())[1:],
    "swapdims_": lambda x: (x.swapdims_(0, 1), x.shape)[1:],
    "unsqueeze_": lambda x: (x.unsqueeze_(0), x.shape, x.shape[1] * 2)[1:],
    "as_strided_": lambda x: (x.as_strided_((x.shape[0] - 1,), (1,)), x.shape)[1:],
    "t_ then tensors": lambda x: (x.t_(), torch.zeros(x.shape[1]), x.new_ones(x.shape))[1:],
    "squeeze_": lambda x: (x.squeeze_(0), x + 1)[1],
}


@pytest.mark.parametrize("name", list(METADATA_PROGRAMS))
@pytest.mark.parametrize("dynamic", [None, True])
def test_in_place_metadata_changes_of_inputs(name, dynamic):
    shape = (lambda n: (1, n, 3)) if name == "squeeze_" else (lambda n: (n, 3))
    check(METADATA_PROGRAMS[name], lambda n: (torch.arange(float(n * 3)).reshape(shape(n)),), (3, 4, 7, 9), dynamic)


@pytest.mark.parametrize("dynamic", [None, True])
def test_arange_bounds_in_the_wrong_order_raise(dynamic):
    check(lambda x, y: torch.arange(x.shape[0] - y.shape[0]), lambda ab: (torch.randn(ab[0]), torch.randn(ab[1])),
          [(6, 2), (8, 3), (4, 6), (3, 7), (5, 5)], dynamic)
    check(lambda x, n: torch.arange(n, x.shape[0]), lambda ab: (torch.randn(ab[0]), ab[1]),
          [(6, 2), (8, 3), (4, 6), (3, 7)], dynamic)


@pytest.mark.parametrize("dynamic", [None, True])
def test_split_sizes_from_sizes_are_checked(dynamic):
    sizes = [(6, 2), (8, 3), (4, 5), (3, 7), (5, 5)]

    def make(ab):
        return torch.arange(ab[0] * 1.0), torch.randn(ab[1])

    check(lambda x, y: x.split(x.shape[0] - y.shape[0]), make, sizes, dynamic)
    check(lambda x, y: x.split([y.shape[0], x.shape[0] - y.shape[0]]), make, sizes[:4], dynamic)


def test_view_by_half_the_batch_keeps_one_dynamic_graph():
    # x.view(x.shape[0] // 2, -1): -1 is 3*s0 / FloorDiv(s0, 2), an integer where s0 is even (guarded): one
    # dynamic graph for every even size (it compiled once per size); odd sizes raise or view as eager does
    from kiln.api import config_of

    def f(x):
        return x.view(x.shape[0] // 2, -1) * 2

    c = kiln.compile(f)
    for n in (4, 6, 8, 10, 12, 14, 16, 18, 20, 22):
        x = torch.randn(n, 3)
        assert torch.equal(c(x), f(x))
    assert sum(1 for r in config_of(c).compiler.records if r.graph is not None) == 2
    check(f, lambda n: (torch.arange(n * 3.0).reshape(n, 3),), (5, 7, 24))


def test_marking_a_size_one_dim_dynamic_runs_as_eager():
    # (a loop that marks the batch dim and gets a last batch of 1: torch.compile runs it too)
    x = torch.randn(1, 3)
    kiln.mark_dynamic(x, 0)
    assert torch.equal(kiln.compile(lambda t: t * 2)(x), x * 2)


def test_unfold_backward_with_symbolic_sizes_has_no_internal_error():
    # torch's Python meta kernel read SymNode._hint ("'SymNode' object has no attribute '_hint'")
    from kiln.debug.stats import stats

    stats.reset()
    f = kiln.compile(lambda x: x.unfold(0, 2, 1).pow(2).sum(), dynamic=True)
    for n in (5, 6):
        a = torch.randn(n, 4, requires_grad=True)
        b = a.detach().clone().requires_grad_()
        f(a).backward()
        (b.unfold(0, 2, 1).pow(2).sum()).backward()
        torch.testing.assert_close(a.grad, b.grad)
    assert not any("_hint" in reason for reason in stats.dynamic_fallbacks), dict(stats.dynamic_fallbacks)
