"""Outputs that get no gradient: the backward runs a variant compiled with their tangents as zeros,
not autograd's materialized zeros (aot/training.py, aot/compile.py ``_backward_without``)."""
import copy

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

import kiln
from kiln.aot.training import TrainingRuntime
from kiln.backends.aot_eager import compile_aot_eager


class LMHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head = nn.Linear(12, 16), nn.Linear(16, 20)

    def forward(self, x, labels):
        hidden = torch.tanh(self.body(x))
        logits = self.head(hidden)
        return logits, F.cross_entropy(logits, labels), hidden


def _pair():
    torch.manual_seed(0)
    eager = LMHead()
    return eager, copy.deepcopy(eager)


def _check_grads(eager, other):
    for (name, p), q in zip(eager.named_parameters(), other.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-5, msg=name)


def _inputs():
    torch.manual_seed(1)
    return torch.randn(6, 12), torch.randint(0, 20, (6,))


def test_variants_per_set_of_absent_tangents():
    eager, mod = _pair()
    x, labels = _inputs()
    rt = compile_aot_eager(fx.symbolic_trace(mod), [x, labels], fallback=False)
    assert isinstance(rt, TrainingRuntime) and rt.backward_without is not None
    losses = [  # (which outputs the loss reads)
        lambda out: out[1],  # the loss only: logits and hidden absent
        lambda out: out[1] + out[0].square().mean(),  # hidden absent
        lambda out: out[1],  # the first variant again
        lambda out: out[0].sum() + out[1] + out[2].sum(),  # all present: the ahead-of-time backward
    ]
    for loss in losses:
        for m in (eager, mod):
            m.zero_grad()
        loss(eager(x, labels)).backward()
        loss(rt(x, labels)).backward()
        _check_grads(eager, mod)
    assert sorted(rt._variants) == [(0, 2), (2,)]


def test_kiln_backend_training_step_with_unused_logits():
    """The generated code of the variant (C++ here): the logits' zero tangent is a constant in the kernel
    that adds it to the loss's gradient."""
    eager, mod = _pair()
    kiln.reset()
    compiled = kiln.compile(mod)
    opt_e, opt_k = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, mod))
    for step in range(3):
        x, labels = _inputs()
        for m, opt in ((eager, opt_e), (compiled, opt_k)):
            opt.zero_grad()
            logits, loss, _ = m(x, labels)
            loss.backward()
        _check_grads(eager, mod)
        opt_e.step()
        opt_k.step()
    torch.testing.assert_close(mod.state_dict(), eager.state_dict(), atol=1e-5, rtol=1e-5)
    assert kiln.stats.stages.get("backward_variant", 0) > 0


def test_symbolic_sizes_keep_materialized_zeros():
    """A backward with size symbols is not compiled again: autograd hands it zeros, as before."""
    eager, mod = _pair()
    kiln.reset()
    compiled = kiln.compile(mod, dynamic=True, backend="aot_eager")
    for n in (6, 9):
        torch.manual_seed(n)
        x, labels = torch.randn(n, 12), torch.randint(0, 20, (n,))
        for m in (eager, mod):
            m.zero_grad()
        eager(x, labels)[1].backward()
        compiled(x, labels)[1].backward()
        _check_grads(eager, mod)
