"""recompile_limit counts a module's entries per instance: a layer's forward (or its resume function after a
graph break) is guarded on ``L['self']``, one entry per layer, and a 12-layer model ran its layers eagerly
after the 8th. All instances together get ``INSTANCE_FACTOR`` times the limit."""
import copy
import warnings

import torch

import kiln
from kiln.capture.convert_frame import INSTANCE_FACTOR


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        kiln.graph_break()
        return h.relu() + x


class Net(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer() for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_twelve_layers_with_a_graph_break_all_compile():
    torch.manual_seed(0)
    eager = Net(12)
    compiled = kiln.compile(copy.deepcopy(eager))
    before = kiln.stats.eager_fallbacks["recompile limit"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (the recompile-limit warning would fail the test)
        with torch.no_grad():
            for _ in range(3):
                x = torch.randn(2, 4)
                torch.testing.assert_close(compiled(x), eager(x))
    assert kiln.stats.eager_fallbacks["recompile limit"] == before


def test_the_limit_still_holds_for_one_instance():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 1

        def forward(self, x):
            return x * self.scale

    m = Scaled()
    compiled = kiln.compile(m, dynamic=False)  # (every value of scale is a constant of its own graph)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(12):
            m.scale = i + 2
            torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), float(i + 2)))
    messages = [str(w.message) for w in caught if "recompile_limit" in str(w.message)]
    assert messages and "for this module instance" in messages[0], messages


def test_instances_together_are_bounded():
    """With recompile_limit 2, a code compiled for 2 * INSTANCE_FACTOR instances stops there: later layers
    run eagerly (right results, a warning)."""
    torch.manual_seed(0)
    n = 2 * INSTANCE_FACTOR + 4
    eager = Net(n)
    compiled = kiln.compile(copy.deepcopy(eager), options={"recompile_limit": 2})
    before = kiln.stats.eager_fallbacks["recompile limit"]
    with warnings.catch_warnings(record=True), torch.no_grad():
        warnings.simplefilter("always")
        for _ in range(2):
            x = torch.randn(2, 4)
            torch.testing.assert_close(compiled(x), eager(x))
    assert kiln.stats.eager_fallbacks["recompile limit"] > before
