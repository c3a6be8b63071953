"""Autograd state that eager keeps and a compiled function must keep too: in-place ops on inputs that are
not leaves (allowed by eager, gradients through the write), the version counters of written inputs and
buffers, and the version counter of a returned ``x.data``.

Each case runs the same calls eagerly and compiled, on fresh tensors made by the same code, and compares
results, gradients and ``_version``s; graph counts are taken with the counting backend, values also with
the "aot_eager" backend (and kiln's own, where the corpus runs kiln).
"""
import pytest
import torch

from .harness import USE_DYNAMO, CountingBackend, assert_same, compile_fn, dynamo_bug, reset

BACKENDS = ["aot_eager"] if USE_DYNAMO else ["aot_eager", "kiln"]


def _graphs(fn, *args) -> int:
    reset()
    counter = CountingBackend()
    compile_fn(fn, counter)(*args)
    return counter.graph_count


def _breaks() -> int:
    if USE_DYNAMO:
        return 0
    import kiln

    return sum(kiln.stats.graph_breaks.values())


def _run(fn, make, backend=None):
    """fn on the tensors ``make()`` gives (leaf first): (result or the RuntimeError's text, the leaf's
    grad, the inputs' versions)."""
    leaf, *args = make()
    if backend is not None:
        reset()
        fn = compile_fn(fn, backend)
    try:
        out = fn(*args)
    except RuntimeError as exc:
        return str(exc).split("\n")[0], None, None
    if out.requires_grad:
        out.backward()
    return out.detach(), leaf.grad, [a._version for a in args]


def _non_leaf_input():
    w = torch.arange(1.0, 4.0, requires_grad=True)
    return w, w * 1


def _mul_in_place(x):
    y = x * 3
    x.mul_(2)
    return (x * y).sum()


@dynamo_bug("aot_eager's backward raises 'modified by an inplace operation' (one graph, as kiln)")
@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_op_on_an_input_that_is_not_a_leaf(backend):
    # eager allows it (the gradient goes through the write to w); dynamo: one graph
    want = _run(_mul_in_place, _non_leaf_input)
    assert_same(_run(_mul_in_place, _non_leaf_input, backend), want)
    assert _graphs(_mul_in_place, _non_leaf_input()[1]) == 1 and _breaks() == 0


def _view_of_non_leaf():
    w = torch.arange(1.0, 4.0, requires_grad=True)
    return w, (w * 1)[:2]


def _view_of_leaf():
    w = torch.arange(1.0, 4.0, requires_grad=True)
    return w, w[:2]


def _leaf():
    w = torch.arange(1.0, 4.0, requires_grad=True)
    return w, w


def _unbind_output():
    w = torch.arange(1.0, 4.0, requires_grad=True)
    return w, (w * 1).unbind(0)[0]


def _view_made_under_no_grad():
    w = torch.arange(1.0, 4.0, requires_grad=True)
    x = w * 1
    with torch.no_grad():
        return w, x[:2]


_OWN_MESSAGE = dynamo_bug("raises 'RuntimeError when making fake tensor call', not eager's error")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make", [
    pytest.param(_view_of_non_leaf, marks=dynamo_bug("aot_eager's backward raises 'modified by an inplace operation'")),
    pytest.param(_view_of_leaf, marks=_OWN_MESSAGE), pytest.param(_leaf, marks=_OWN_MESSAGE),
    pytest.param(_unbind_output, marks=_OWN_MESSAGE), pytest.param(_view_made_under_no_grad, marks=_OWN_MESSAGE)])
def test_in_place_op_on_inputs_autograd_allows_or_refuses(backend, make):
    """The same compiled function called with inputs from different places of autograd's graph: each
    is allowed (the gradient right) or refused with eager's error."""
    want = _run(_mul_in_place, make)
    assert_same(_run(_mul_in_place, make, backend), want)


class _Box:
    pass


def _mark_then_mul_in_place(x, box):
    box.seen = True
    x.mul_(2)
    return x.sum()


@dynamo_bug("the effect before the refused write is lost")
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_leaf_after_a_non_leaf_is_refused_as_in_eager(backend):
    """The graph traced for an input that is not a leaf writes it; a leaf with the same metadata must not
    run that graph (the cache entry guards where the input sits): the write raises eager's error after
    the effects before it, as in eager."""
    reset()
    compiled = compile_fn(_mark_then_mul_in_place, backend)
    w, x = _non_leaf_input()
    compiled(x, _Box()).backward()
    leaf, box = torch.arange(1.0, 4.0, requires_grad=True), _Box()
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        compiled(leaf, box)
    assert vars(box) == {"seen": True} and torch.equal(leaf, torch.arange(1.0, 4.0))


class _Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(()))
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        self.steps.add_(1)
        return self.lin(x) * self.steps


class _TwoWrites(_Counter):
    def forward(self, x):
        self.steps.add_(1)
        self.steps.mul_(2)
        return self.lin(x) + self.steps


def _versions(module) -> list:
    return [t._version for t in [*module.buffers(), *module.parameters()]]


def _batch_norm():
    return torch.nn.BatchNorm1d(3)


_VERSIONS = dynamo_bug("a buffer's version counter differs from eager's")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("cls", [pytest.param(_Counter, marks=_VERSIONS), _TwoWrites,
                                 pytest.param(_batch_norm, marks=_VERSIONS)])
def test_buffer_versions_after_calls_are_eagers(backend, grad, cls):
    """A buffer written in forward advances its version counter as eager's does: once per in-place op
    (not once more on the first call), and not at all for batch norm's running statistics."""
    def run(module, compiled):
        fn = compile_fn(module, backend) if compiled else module
        outs = []
        with torch.set_grad_enabled(grad):
            for _ in range(3):
                outs.append(fn(torch.ones(4, 3)))
        return outs, _versions(module)

    torch.manual_seed(0)
    eager_module = cls()
    torch.manual_seed(0)
    compiled_module = cls()
    want = run(eager_module, False)
    reset()
    assert_same(run(compiled_module, True), want)
    assert_same(list(compiled_module.buffers()), list(eager_module.buffers()))


def _write_twice_into_input(x):
    x.add_(1)
    x[0].mul_(2)
    x.data.mul_(3)
    return x.sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_versions_count_each_write(backend):
    want = _run(_write_twice_into_input, lambda: (torch.ones(3), torch.ones(3)))
    assert_same(_run(_write_twice_into_input, lambda: (torch.ones(3), torch.ones(3)), backend), want)
    assert want[2] == [2]


def _returns_data(x):
    return x.data, x.data[1:], x * 2


@dynamo_bug("a returned x.data shares x's version counter")
@pytest.mark.parametrize("backend", BACKENDS)
def test_returned_data_has_its_own_version_counter(backend):
    """``x.data`` is rebuilt after the call as ``x.data``: writing to it leaves x's version as in eager."""
    def run(fn):
        x = torch.ones(3, requires_grad=True)
        data, tail, doubled = fn(x)
        before = x._version
        data.add_(1)
        tail.add_(1)
        return (x._version - before, data._version, tail._version, data.requires_grad, tail._is_view(),
                x.detach().clone(), doubled.detach())

    want = run(_returns_data)
    reset()
    assert_same(run(compile_fn(_returns_data, backend)), want)
    assert want[0] == 0
    assert _graphs(_returns_data, torch.ones(3, requires_grad=True)) == 1
