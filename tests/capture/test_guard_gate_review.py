"""Adversarial review of guard gates (guard_gate.py): programs that change what a gated guard reads
in ways other than the obvious `setattr`; each compiled result must equal eager's after the change."""
import collections
import functools

import pytest
import torch
import torch.nn as nn

import kiln
from kiln.capture.guard_gate import gate_functions

pytestmark = pytest.mark.skipif(gate_functions() is None, reason="kiln's C extension is older than guard gates")


@pytest.fixture(autouse=True)
def _no_grad():
    with torch.no_grad():
        yield


def body():
    """Enough submodules that the planner gates (at least 8 guards)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 1)).eval()


X = torch.randn(2, 3, 8, 8)


def after(m, mutate, x=X, backend="eager", gated=True):
    """Compile, call twice (the second call records the gate's tags), mutate, and compare with eager
    twice (the second call: after whatever the first one recorded)."""
    cm = kiln.compile(m, backend=backend)
    cm(x)
    cm(x)
    if gated:
        src = str(kiln.explain(m, backend=backend)(x).guards[0])
        assert "___gate_unchanged" in src
    mutate()
    torch.testing.assert_close(cm(x), m(x))
    torch.testing.assert_close(cm(x), m(x))


class Wrap(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = body()
        self.scale = 2.0

    def forward(self, x):
        return self.body(x) * self.scale


# ---- a class attribute's type decides how the instance attribute is read --------------------------

class Marker:
    pass


class Shadowed(Wrap):
    scale = Marker()  # a plain class attribute: the instance's 2.0 wins


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_class_attribute_type_becomes_a_data_descriptor(backend):
    """`Marker.__get__`/`__set__` set later: Shadowed's tag does not change (only Marker's), and
    `m.scale` now calls Marker.__get__."""
    class Mk:
        pass

    class S(Wrap):
        scale = Mk()

    m = S()

    def mutate():
        Mk.__get__ = lambda self, obj, cls=None: 5.0
        Mk.__set__ = lambda self, obj, value: None
    after(m, mutate, backend=backend)


def test_class_attribute_type_becomes_a_non_data_descriptor():
    """A class attribute read from the class (no instance value): its type gains __get__."""
    class Mk:
        def __mul__(self, other):
            return other * 3.0

        __rmul__ = __mul__

    class S(nn.Module):
        k = 2.0

        def __init__(self):
            super().__init__()
            self.body = body()

        def forward(self, x):
            return self.body(x) * self.k

    m = S()

    def mutate():
        S.k = 3.0  # the class's own tag changes
    after(m, mutate)
