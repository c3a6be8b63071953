"""Data-dependent sizes (unbacked symbols u0, u1, ...): nonzero, x[mask], masked_select, unique and
.item() stay in one graph where what follows runs on a run-time size; a decision on such a size breaks
the graph as before. Inputs keep their shapes and change their data, so the sizes vary inside one graph."""
import re

import pytest
import torch

import kiln
from kiln.debug.stats import stats

from .harness import compiles

BACKENDS = ["aot_eager", "kiln"]


def run(f, make, backend, seeds=(0, 1, 2, 3)):
    """Call one compiled entry on inputs of fixed shapes and varying data; compare with eager."""
    stats.reset()
    g = kiln.compile(f, backend=backend)
    sizes = set()
    for seed in seeds:
        torch.manual_seed(seed)
        args = make()
        got, want = g(*args), f(*args)
        got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.dtype == b.dtype
            torch.testing.assert_close(a, b)
        sizes.add(tuple(tuple(t.shape) for t in want))
    assert len(sizes) > 1, "the data should make the sizes vary"
    return g


def one_graph(g):
    assert compiles(g) == 1 and not stats.graph_breaks, (compiles(g), dict(stats.graph_breaks))
    assert stats.dynamic_graphs == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_nonzero(backend):
    def f(x):
        idx = torch.nonzero(x > 0)
        return idx.float().sum(0) + 1, idx * 2
    one_graph(run(f, lambda: (torch.randn(8, 3),), backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_boolean_mask_rows_then_matmul(backend):
    def f(x, w):
        r = x[x[:, 0] > 0]
        return (r @ w).relu(), r.mean(1), r.sum()
    g = run(f, lambda: (torch.randn(16, 4), torch.randn(4, 3)), backend)
    one_graph(g)
    if backend == "kiln":  # the extern's result size is read at run time and handed to the kernels
        text = "\n".join(kiln.explain(f, backend="kiln")(torch.randn(16, 4), torch.randn(4, 3)).backend_reports)
        assert re.search(r"u\d+ = extern\d+\.size\(0\)", text) and re.search(r"k\d+\(.*, u\d+\)", text), text[-2000:]


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_select_cat(backend):
    def f(x):
        y = torch.masked_select(x, x > 0.5)
        return y.exp().sum(), torch.cat([y, y * 2]), y.mean()
    one_graph(run(f, lambda: (torch.randn(6, 4),), backend))


@pytest.mark.parametrize("backend", ["aot_eager"])
def test_unique_and_item_as_scalar(backend):
    def f(x, n):
        u = torch.unique(x)
        return u * n.item(), u.sum()
    one_graph(run(f, lambda: (torch.randint(0, 9, (6,)), torch.randint(1, 5, ())), backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_branch_on_unbacked_size_breaks(backend):
    """``if y.shape[0] > 3`` needs the value of u0: not guessed (no hint); traced again with the graph
    broken at the mask, as without unbacked sizes."""
    def f(x):
        y = x[x > 0]
        if y.shape[0] > 3:
            return y * 2
        return y - 1
    run(f, lambda: (torch.randn(8),), backend, seeds=(0, 1, 2, 3, 4, 5))
    assert any("data-dependent" in r for r in stats.dynamic_fallbacks), dict(stats.dynamic_fallbacks)
    assert stats.graph_breaks


@pytest.mark.parametrize("backend", BACKENDS)
def test_item_as_size_breaks(backend):
    """``torch.arange(n.item())`` needs ``u0 >= 0`` (eager raises for a negative end): not known, so the
    graph breaks at ``item`` as before (still the eager result)."""
    def f(x, n):
        k = n.item()
        return torch.arange(k) * 2, x[:k]
    run(f, lambda: (torch.randn(20, 3), torch.randint(2, 9, ())), backend)
    assert stats.graph_breaks


@pytest.mark.parametrize("backend", BACKENDS)
def test_returned_unbacked_size_breaks(backend):
    def f(x):
        y = x[x > 0]
        return y * 2, y.shape[0]
    stats.reset()
    g = kiln.compile(f, backend=backend)
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(8)
        (a, n), (b, m) = g(x), f(x)
        torch.testing.assert_close(a, b)
        assert n == m


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("use", ["slice", "negative_slice", "arange", "select", "narrow"])
def test_item_as_a_bound_gives_eager_sizes(backend, use):
    """A bound read from tensor data (``.item()``) must never be guessed: the kiln backend once fixed
    ``x[:n.item()]`` at size 0 (a wrong result); now the frame breaks at ``item()``."""
    fns = {"slice": lambda x, n: x[:n.item()] * 2, "negative_slice": lambda x, n: x[-n.item():] * 2,
           "arange": lambda x, n: torch.arange(n.item()).float() + x.sum(),
           "select": lambda x, n: x[n.item()] + 1, "narrow": lambda x, n: x.narrow(0, 0, n.item()) * 2}
    f = fns[use]
    compiled = kiln.compile(f, backend=backend)
    for k in (3, 5, 1, 7):
        x, n = torch.randn(12, 3), torch.tensor(k)
        got, expected = compiled(x, n), f(x, n)
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_same_mask_indexing_twice(backend):
    # Each x[mask] has its own unbacked size: the AOT stage's CSE must not merge them (it did, and the kiln
    # wrapper was left with a symbol bound nowhere: DynamicUnsupported, then 8 graphs of static retraces).
    def f(x):
        return x[x > 0].sum(), x[x > 0] * 2
    one_graph(run(f, lambda: (torch.randn(16),), backend))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [lambda x: x * torch.nonzero(x > 0).shape[0],
                                lambda x: (x * torch.nonzero(x > 0).shape[0], torch.nonzero(x > 0)),
                                lambda x: x[x > 0].shape[0] * x,
                                lambda x: torch.unique(x.round()).numel() + x])
def test_a_data_dependent_count_used_as_a_number(fn, backend):
    """``x * n`` with ``n`` a data-dependent count: the kernel computing it reads the size the extern's
    result binds (u0), so it runs after that extern. It was fused with ``x > 0`` (the extern's input)
    into a kernel before the extern: UnboundLocalError for ``u1`` in the wrapper at the first call."""
    g = kiln.compile(fn, backend=backend)
    for seed in range(4):
        torch.manual_seed(seed)
        x = torch.randn(5, 3)
        got, want = g(x), fn(x)
        got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
