"""Unit tests of module forward hooks (values/module_hooks.py): pre-hooks and forward hooks traced in
_call_impl's order (with_kwargs variants too), the hook dicts guarded, library hooks and always_call
hooks breaking."""
import functools

import pytest
import torch
from torch import nn

import kiln


def setup_function():
    kiln.reset()
    kiln.stats.reset()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)

    def forward(self, x, scale=1.0):
        return self.b(torch.relu(self.a(x))) * scale


def _hooked(feats):
    m = Net()
    m.a.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    m.a.register_forward_pre_hook(lambda mod, args: None)  # None: args unchanged
    m.a.register_forward_hook(lambda mod, args, out: feats.append(out.detach()))
    m.b.register_forward_hook(functools.partial(lambda k, mod, args, out: out + k, 0.5))
    m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {**kwargs, "scale": 3.0}), with_kwargs=True)
    m.register_forward_hook(lambda mod, args, kwargs, out: out * kwargs["scale"], with_kwargs=True)
    return m


def test_hooks_traced_in_one_graph_in_call_impl_order():
    feats = []
    m = _hooked(feats)
    x = torch.randn(2, 3)
    expected = m(x, scale=1.0)
    expected_feat = feats.pop()
    out = kiln.compile(lambda x: m(x, scale=1.0), backend="eager")(x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(feats.pop(), expected_feat)
    assert kiln.stats.graphs == 1 and not kiln.stats.graph_breaks


def test_adding_or_removing_a_hook_recompiles():
    m = Net()
    compiled = kiln.compile(lambda x: m(x), backend="eager")
    x = torch.randn(2, 3)
    compiled(x)
    handle = m.b.register_forward_hook(lambda mod, args, out: out * 0)
    assert torch.equal(compiled(x), torch.zeros(2, 3))
    handle.remove()
    torch.testing.assert_close(compiled(x), m(x))
    assert kiln.stats.graphs == 2  # (the first entry, traced with no hooks, matches again)


@pytest.mark.parametrize("register, reason", [
    (lambda m: m.a.register_forward_hook(lambda mod, args, out: out, always_call=True), "always_call"),
    (lambda m: nn.utils.spectral_norm(m.a), "has hooks from a library"),
    (lambda m: m.a.register_full_backward_hook(lambda mod, gin, gout: None), "backward or global hooks"),
])
def test_unmodelled_hooks_break_at_the_module_call(register, reason):
    import copy

    m = Net()
    register(m)
    reference = copy.deepcopy(m)  # (spectral_norm updates its state on every call)
    x = torch.randn(2, 3)
    torch.testing.assert_close(kiln.compile(lambda x: m(x), backend="eager")(x), reference(x))
    assert any(reason in r for r in kiln.stats.graph_breaks), dict(kiln.stats.graph_breaks)


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.lin = nn.Linear(3, 3)
        self.scale = 2.0

    def forward(self, x):
        return self.lin(x)


class Wrapper(nn.Module):
    """PEFT-style: unknown names forwarded to the wrapped model."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.model, name)

    def forward(self, x):
        return self.model(x) * self.scale + self.lin.bias, getattr(self, "nope", 3), self.__dict__.get("training")


def test_module_python_getattr_traced_and_absence_guarded():
    w = Wrapper(Inner())
    compiled = kiln.compile(lambda x: w(x), backend="eager")
    x = torch.randn(2, 3)
    out = compiled(x)
    torch.testing.assert_close(out[0], w(x)[0])
    assert out[1:] == (3, True) and kiln.stats.graphs == 1 and not kiln.stats.graph_breaks
    w.model.scale = 5.0  # read through the wrapped model: guarded
    torch.testing.assert_close(compiled(x)[0], w(x)[0])
    w.lin = nn.Linear(3, 3)  # the wrapper's own submodule now: the guarded absence fails
    torch.testing.assert_close(compiled(x)[0], w(x)[0])
    assert kiln.stats.graphs == 3


def test_hooks_added_after_compiling_run():
    calls = []
    m = nn.Linear(2, 2)
    compiled = kiln.compile(lambda x: m(x).sum(), backend="eager")
    x = torch.ones(1, 2, requires_grad=True)
    compiled(x).backward()
    m.register_full_backward_hook(lambda mod, grad_in, grad_out: calls.append("backward"))
    compiled(x).backward()  # (before: the cached graph ran and the hook never did)
    handle = nn.modules.module.register_module_forward_hook(lambda mod, args, out: calls.append("global"))
    try:
        compiled(x)
    finally:
        handle.remove()
    assert calls == ["backward", "global"]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_global_hook_registered_after_compiling_runs_on_inlined_submodules(backend):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    compiled = kiln.compile(m, backend=backend)
    x = torch.randn(2, 3)
    compiled(x)
    calls = []

    def hook(mod, args, out):
        calls.append(type(mod).__name__)
        return out + 1 if isinstance(mod, nn.Linear) else None

    handle = nn.modules.module.register_module_forward_hook(hook)
    try:
        want, want_calls = m(x), list(calls)
        calls.clear()
        got = compiled(x)
    finally:
        handle.remove()
    torch.testing.assert_close(got, want)
    assert calls == want_calls == ["Linear", "ReLU", "Linear", "Sequential"]  # (never kiln's graph module)
