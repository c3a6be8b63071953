"""The AOT runtimes keep eager's version counters: ``write_back`` advances a written tensor's counter by
the steps capture counted on its fake (``gm.meta["kiln_version_steps"]``), tracing leaves parameters' and
buffers' counters alone, and a returned ``x.data`` is rebuilt with a counter of its own."""
import torch

import kiln
from kiln.aot.functionalize import ViewStep
from kiln.aot.runtime import version_steps, write_back

aten = torch.ops.aten


def test_write_back_advances_the_counter_by_the_steps():
    for steps in (0, 1, 2, 3):
        target = torch.zeros(3)
        before = target._version
        write_back(target, torch.ones(3), steps=steps)
        assert torch.equal(target, torch.ones(3)) and target._version == before + steps


def test_write_back_in_place_store_counts_steps_too():
    target = torch.zeros(3)
    stored: list = []
    write_back(target, target, stored, steps=2)  # a kernel already stored the value into target
    assert target._version == 2 and not stored
    write_back(target, target, stored)  # one step: left to the caller, once for all
    assert stored == [target] and target._version == 2


def test_write_back_without_steps_is_not_in_autograd_history():
    w = torch.ones(3, requires_grad=True)
    x = w * 1
    write_back(x, torch.full((3,), 5.0), steps=0)  # eager wrote it through x.data
    assert x.grad_fn.name() == "MulBackward0" and x._version == 0
    write_back(x, torch.full((3,), 6.0) * w, steps=1)
    assert x.grad_fn.name().endswith("CopyBackwards") and x._version == 1


def test_version_steps_reads_the_captured_graphs_meta():
    gm = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    held = torch.zeros(2)
    gm.meta["kiln_version_steps"] = ({0: 2, 1: 0}, {id(held): 0})
    assert version_steps(gm, [0, 2, 3], 3, [held]) == {0: 2, 3: 0}
    assert version_steps(None, [0], 1, []) == {}


def test_data_view_step_replays_as_data():
    x = torch.ones(3, requires_grad=True)
    detached = ViewStep(aten.detach.default, (), ()).apply(x)
    data = ViewStep(aten.detach.default, (), (), own_version=True).apply(x)
    detached.add_(1)
    assert x._version == 1  # aten.detach shares x's counter
    data.add_(1)
    assert x._version == 1 and data._version == 1 and not data.requires_grad


def test_tracing_leaves_a_buffers_counter_alone():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("n", torch.zeros(()))

        def forward(self, x):
            self.n.add_(1)
            return x + self.n

    kiln.reset()
    m = Counter()
    kiln.compile(m, backend="aot_eager")(torch.ones(2))
    assert m.n._version == 1 and m.n.item() == 1
