"""Modules that hold only settings (values/modules.py ``stateless``): guarded by class and settings, not
identity, so a new one per call (transformers builds ``nn.CrossEntropyLoss()`` in forward) reuses the
compiled code; anything that makes the new one differ still recompiles or runs as eager would."""
import torch
from torch import nn

import kiln
from kiln.capture.values.modules import stateless


def setup_function():
    kiln.reset()
    kiln.stats.reset()


class Scale(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s

    def forward(self, x):
        return x * self.s


def test_a_loss_module_made_in_every_call_compiles_once():
    def f(x, y):
        return nn.CrossEntropyLoss(label_smoothing=0.1)(x, y) * 2

    compiled = kiln.compile(f)
    for _ in range(5):
        x, y = torch.randn(4, 5), torch.randint(0, 5, (4,))
        torch.testing.assert_close(compiled(x, y), f(x, y))
    assert not kiln.stats.recompilations, kiln.stats.recompilations
    assert kiln.stats.eager_fallbacks.get("recompile limit", 0) == 0


def test_a_new_stateless_module_with_other_settings_hooks_or_tensors_is_not_taken_for_the_old():
    compiled = kiln.compile(lambda m, x: m(x))
    x = torch.randn(3)
    torch.testing.assert_close(compiled(Scale(2.0), x), x * 2)
    torch.testing.assert_close(compiled(Scale(2.0), x), x * 2)
    assert not kiln.stats.recompilations
    torch.testing.assert_close(compiled(Scale(3.0), x), x * 3)  # another setting
    hooked = Scale(2.0)
    hooked.register_forward_hook(lambda m, i, o: o + 100)
    torch.testing.assert_close(compiled(hooked, x), x * 2 + 100)
    holding = Scale(2.0)
    holding.w = nn.Parameter(torch.ones(3))  # holds a tensor: guarded by identity from now on
    torch.testing.assert_close(compiled(holding, x), x * 2)
    swapped = Scale(2.0)
    swapped.__class__ = type("Other", (Scale,), {"forward": lambda self, x: x - self.s})
    torch.testing.assert_close(compiled(swapped, x), x - 2)
    assert sum(kiln.stats.recompilations.values()) == 4  # one per new kind of module


def test_stateless_is_only_settings():
    assert stateless(nn.CrossEntropyLoss()) and stateless(nn.GELU()) and stateless(nn.Dropout(0.1))
    assert not stateless(nn.CrossEntropyLoss(weight=torch.ones(3)))  # a buffer
    assert not stateless(nn.Linear(2, 2)) and not stateless(nn.Sequential(nn.ReLU()))
    gelu = nn.GELU()
    gelu.register_forward_pre_hook(lambda m, i: None)
    assert not stateless(gelu)
    relu = nn.ReLU()
    relu.table = [1, 2]  # a mutable setting: read through the same object only
    assert not stateless(relu)


def test_torch_module_constructors_are_not_compiled_as_frames_of_their_own():
    def f(x):
        return nn.Softmax(dim=-1)(x) + nn.Dropout(0.0)(x)

    compiled = kiln.compile(f)
    for _ in range(10):
        x = torch.randn(2, 3)
        torch.testing.assert_close(compiled(x), f(x))
    assert not kiln.stats.recompilations, kiln.stats.recompilations


def test_a_write_through_one_module_is_seen_through_another_exactly_when_they_are_one_object():
    # (found by review: guarded by class, two places were taken for two objects whatever they held)
    def f(a, b, x):
        a.s = 5.0
        return b(x)

    compiled = kiln.compile(f)
    x = torch.ones(3)
    torch.testing.assert_close(compiled(Scale(2.0), Scale(2.0), x), x * 2)
    shared = Scale(2.0)
    torch.testing.assert_close(compiled(shared, shared, x), x * 5)
    torch.testing.assert_close(compiled(Scale(2.0), Scale(3.0), x), x * 3)

    def g(a, b, x):
        a.s += 1
        b.s += 1
        return x * a.s + b.s

    compiled = kiln.compile(g)
    torch.testing.assert_close(compiled(Scale(1.0), Scale(1.0), x), g(Scale(1.0), Scale(1.0), x))
    one, other = Scale(1.0), Scale(1.0)
    torch.testing.assert_close(compiled(one, one, x), g(other, other, x))


def test_walks_of_the_module_tree_see_a_submodule_shared_later():
    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.ReLU(), nn.ReLU()

        def forward(self, x):
            return x + len(list(self.modules())) + 10 * len(list(self.children()))

    w = Wrap()
    compiled = kiln.compile(w)
    x = torch.zeros(2)
    torch.testing.assert_close(compiled(x), w(x))
    w.b = w.a
    torch.testing.assert_close(compiled(x), w(x))


def test_forward_or_call_of_the_instance_or_of_a_subclass_runs_as_eager_runs_it():
    x = torch.tensor([-1.0, 2.0])
    call = kiln.compile(lambda m, x: m(x))
    gelu = nn.GELU()
    torch.testing.assert_close(call(gelu, x), gelu(x))
    gelu.forward = torch.relu  # set on the instance: nn.Module.__call__ runs it
    torch.testing.assert_close(call(gelu, x), torch.relu(x))

    class Seven(nn.ReLU):
        def __call__(self, x):
            return x * 7

    torch.testing.assert_close(kiln.compile(lambda m, x: m(x))(Seven(), x), x * 7)
    relu = nn.ReLU()
    relu._compiled_call_impl = lambda x: x * 100
    torch.testing.assert_close(kiln.compile(lambda m, x: m(x))(relu, x), x * 100)
