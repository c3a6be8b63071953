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
