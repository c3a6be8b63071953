"""Inputs with a storage offset (batches sliced from a big tensor, ``data[i:i + b]``) get symbolic sizes:
the generated code indexes from the tensor's data pointer, and views of inputs are replayed relative to
the caller's tensor, so the offset does not matter (they compiled once per batch size until the recompile
limit). A program that reads the offset as a number (``x.storage_offset()``, as_strided's explicit
offset) is traced static, its offset guarded (capture/output_graph.guard_storage_offset)."""
import pytest
import torch

import kiln
from kiln.api import config_of

DATA = torch.arange(400.0).reshape(100, 4)
BATCHES = ((3, 5), (10, 7), (20, 9), (1, 11), (50, 13), (7, 6), (0, 8))


def compiles(compiled) -> int:
    return sum(1 for r in config_of(compiled).compiler.records if r.graph is not None)


CASES = {
    "reduction": (lambda x: (x * 2).sum(0), 2),
    "views returned": (lambda x: (x[1:], x.t(), x.reshape(-1)[3:7]), 2),
    "in place": (lambda x: x.add_(1), 2),
    "cat and matmul": (lambda x: torch.cat([x, x[:2]]) @ torch.ones(4, 3), 2),
    "reads the offset": (lambda x: x * x.storage_offset(), len(BATCHES)),
    "explicit as_strided offset": (lambda x: x.as_strided((2, 2), (4, 1), 4) + 1, len(BATCHES)),
}


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
@pytest.mark.parametrize("name", list(CASES))
def test_batches_sliced_from_one_tensor(name, backend):
    fn, graphs = CASES[name]
    compiled = kiln.compile(fn, backend=backend)
    for start, batch in BATCHES:
        want_data, got_data = DATA.clone(), DATA.clone()
        want, got = fn(want_data[start:start + batch]), compiled(got_data[start:start + batch])
        want, got = (want if isinstance(want, tuple) else (want,)), (got if isinstance(got, tuple) else (got,))
        for a, b in zip(want, got):
            assert torch.equal(a, b) and a.stride() == b.stride() and a.storage_offset() == b.storage_offset()
        assert torch.equal(want_data, got_data)  # (the in-place write landed in the same place)
    assert compiles(compiled) == graphs
