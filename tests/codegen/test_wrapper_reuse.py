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


def test_unsafe_views_are_not_fresh():
    # no alias annotation in their schema, but the results are views of the input
    for op in (aten.unsafe_split.Tensor, aten.unsafe_split_with_sizes.default, aten.unsafe_chunk.default,
               aten._unsafe_view.default):
        assert not _returns_fresh_tensors(op), op


def test_buffer_viewed_by_unsafe_chunk_is_not_reused():
    # nn.GRU's cell: unsafe_chunk's results are views of its input; reusing that input's memory for a
    # later buffer of the same size overwrote the chunks before they were read (wrong results)
    def f(x, y, w):
        a, b = aten.unsafe_chunk.default(torch.relu(x), 2, 1)
        c = torch.tanh(y) @ w  # tanh(y) has the size of relu(x) and must not take its memory
        return a + c[:, :2], b * 2

    args = (torch.randn(4, 4), torch.randn(4, 4), torch.randn(4, 4))
    compiled = kiln_backend(fx.symbolic_trace(f), list(args), default_options())
    torch.testing.assert_close(compiled(*args), f(*args))
