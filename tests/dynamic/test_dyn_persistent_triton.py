"""Triton reductions over a symbolic row (kiln backend, Triton interpreted on CPU): persistent under the
shape guard ``rnumel <= triton_persistent_max``; a longer row fails the guard and recompiles into the
looped style, which then serves every longer size."""
import pytest
import torch

import kiln
from kiln.api import config_of
from kiln.codegen.triton.runtime import triton_available

pytestmark = pytest.mark.skipif(triton_available() is not None, reason="needs triton")


def _entries(compiled):
    return [r for r in config_of(compiled).compiler.records if r.graph is not None]


def test_softmax_over_a_symbolic_row_persistent_then_looped(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    kiln.stats.reset()

    def f(x):
        return torch.softmax(x, dim=-1) * 2

    c = kiln.compile(f, backend="kiln", options={"cpu_codegen": "triton", "triton_persistent_max": 16})
    for n in (8, 5, 13, 16, 40, 9, 64):
        x = torch.randn(3, n)
        torch.testing.assert_close(c(x), f(x))
    entries = _entries(c)
    # static at 8; one entry (persistent, s0 <= 16) for 5..16 and 9; one (looped) for 40 and 64
    assert len(entries) == 3, [e.guards for e in entries]
    assert "guards: s0 <= 16)" in entries[1].guards, entries[1].guards
    assert "guards: none)" in entries[2].guards, entries[2].guards
    assert any("shape guard failed: s0 <= 16" in reason for reason in kiln.stats.recompilations)
