"""The wrapper reuses a dead buffer's memory for a later one of the same size, also when the buffer
was read by a library call whose results never alias its arguments (mm, convolution, attention)."""
import torch
import torch.fx as fx

from kiln.backends.kiln import kiln_backend
from kiln.codegen.wrapper import _returns_fresh_tensors
from kiln.options import default_options

aten = torch.ops.aten


def test_fresh_results_by_schema():
    assert _returns_fresh_tensors(aten.mm.default)
    assert _returns_fresh_tensors(aten.convolution.default)
    assert not _returns_fresh_tensors(aten.view.default)  # returns an alias of its input
    assert not _returns_fresh_tensors(aten.add_.Tensor)  # writes its input
    assert not _returns_fresh_tensors(object())


def test_buffer_read_by_mm_is_reused_after_it():
    def f(x, w1, w2):
        h = torch.relu(x) @ w1  # relu's buffer is read only by the mm
        return torch.tanh(h) @ w2  # tanh's buffer (same size) takes relu's memory

    args = (torch.randn(16, 16), torch.randn(16, 16), torch.randn(16, 16))
    compiled = kiln_backend(fx.symbolic_trace(f), list(args), default_options())
    source = compiled.compiled_graph.wrapper.source
    assert source.count("empty_strided(") == 1 and "# reuses" in source, source
    torch.testing.assert_close(compiled(*args), f(*args))
