"""The scatter family (kiln/lower/scatter.py) against eager, through the loop-IR reference evaluator and
generated C++: scatter (src / value / reduce), scatter_add, scatter_reduce, index_put and what
decomposes to it (index_add, index_copy, index_fill, embedding backward), with duplicates, negative
indices, dims, dtypes, fused producers and consumers, and out-of-range indices."""
import pytest
import torch

from kiln.aot import AtenRuntime
from kiln.backends.kiln import compile_graph
from kiln.loopir.scatter import ScatterBuffer, is_update
from kiln.lower.graph import lower_graph
from kiln.lower.reference import run_reference
from kiln.options import default_options
from tests.lower.helpers import check, sample, trace

aten = torch.ops.aten
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32]
ids = [str(d).replace("torch.", "") for d in DTYPES]


def _index(shape, high, seed, dim):
    """Random positions along ``dim`` (duplicates likely)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, shape, generator=g)


def _distinct(shape, high, dim, seed=0):
    """Positions along ``dim`` that never repeat within a line (overwrite scatters are then exact)."""
    g = torch.Generator().manual_seed(seed)
    moved = list(shape)
    n = moved.pop(dim)
    lines = torch.stack([torch.randperm(high, generator=g)[:n] for _ in range(max(1, int(torch.tensor(moved).prod())))])
    return lines.reshape(*moved, n).movedim(-1, dim).contiguous()


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_scatter_src_value_and_add(dtype):
    x = sample((4, 6, 5), dtype)
    src = sample((4, 7, 5), dtype, seed=1)
    i1 = _distinct((4, 3, 5), 6, 1)
    i0 = _distinct((3, 6, 5), 4, 0, seed=2)
    dup = _index((4, 6, 3), 5, 3, 2)

    def fn(x, src, i1, i0, dup):
        return [x.scatter(1, i1, src), x.scatter(-3, i0, src[:3, :6]), x.scatter(1, i1, 2),
                x.scatter_add(2, dup, src[:, :6, :3]), torch.scatter_add(x, 1, i1, src),
                (x * 2).scatter_add(1, i1, src + 1) - 1]  # fused producers and a consumer

    check(fn, x, src, i1, i0, dup)


def test_scatter_overwrite_duplicates_last_wins_like_aten_cpu():
    x = torch.zeros(3, 4)
    src = torch.arange(30.).reshape(3, 10)
    idx = torch.tensor([[1, 1, 1, 2, 1], [0, 0, 3, 3, 0], [2, 2, 2, 2, 2]])
    check(lambda x, i, s: x.scatter(1, i, s), x, idx, src)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=["float32", "bfloat16", "int64"])
def test_scatter_reduce(reduce, dtype):
    x = sample((5, 4), dtype)
    src = sample((6, 4), dtype, seed=1)
    idx = _index((6, 4), 5, 4, 0)
    idx[:, 3] = 0  # column 3: every value into row 0; rows 1..4 of it untouched

    def fn(x, idx, src):
        return [x.scatter_reduce(0, idx, src, reduce), x.scatter_reduce(0, idx, src, reduce, include_self=False),
                x.t().scatter_reduce(1, idx.t(), src.t() * 2, reduce, include_self=False)]

    check(fn, x, idx, src)


def test_scatter_reduce_propagates_nan_and_keeps_signed_zero_identity():
    nan = float("nan")
    x = torch.tensor([1.0, nan, 3.0, 0.0])
    src = torch.tensor([nan, 2.0, -1.0, -0.0, 5.0])
    idx = torch.tensor([0, 1, 2, 3, 2])

    def fn(x, idx, src):
        return [x.scatter_reduce(0, idx, src, r, include_self=s) for r in ("amax", "amin", "sum", "prod")
                for s in (True, False)]

    check(fn, x, idx, src)


def test_scatter_legacy_reduce():
    x, src = sample((3, 5), torch.float32), sample((3, 5), torch.float32, seed=1)
    idx = _index((3, 4), 5, 1, 1)

    def fn(x, idx, src):
        return [x.scatter(1, idx, src, reduce="add"), x.scatter(1, idx, src, reduce="multiply"),
                x.scatter(1, idx, 1.5, reduce="add"), x.scatter(1, idx, 2.0, reduce="multiply")]

    check(fn, x, idx, src)


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
def test_index_put(dtype):
    x = sample((5, 4, 3), dtype)
    rows = torch.tensor([0, -1, 2, 0, 4])  # a duplicate and a negative index
    cols = torch.tensor([[1], [3]], dtype=torch.int32)  # broadcasts with rows: (2, 5)
    v = sample((5, 4, 3), dtype, seed=1)

    def fn(x, rows, cols, v):
        return [x.index_put((rows,), v, accumulate=True),
                x.index_put((rows[1:3],), v[:2]),  # distinct positions: overwrite is exact
                x.index_put((rows, cols), v[0, 0], accumulate=True),  # broadcast indices and a value row
                aten.index_put(x, [None, cols[0]], v[:, :1], True),  # a None slice before the index
                aten.index_put(x, [rows[:2], None, cols[:, 0] - 1], v[0, :, :2].t(), True),  # split: bshape first
                x.index_put((rows[1:3],), torch.tensor(7, dtype=dtype))]

    check(fn, x, rows, cols, v)


def test_index_add_copy_fill_and_embedding_backward():
    x = sample((6, 5), torch.float32)
    idx = torch.tensor([4, 0, 4, 2])
    src = sample((4, 5), torch.float32, seed=1)
    w = torch.randn(10, 3, requires_grad=True)
    tokens = torch.tensor([[1, 3, 3], [9, 1, 0]])

    def fn(x, idx, src):
        return [x.index_add(0, idx, src, alpha=2), x.index_add(1, idx, x[:, :4] * 3),
                x.index_copy(0, idx[1:], src[1:]), x.index_fill(1, idx, -1.0), x.index_fill(0, idx, 3.0)]

    check(fn, x, idx, src)
    grad = torch.randn(2, 3, 3)
    check(lambda g, t: torch.ops.aten.embedding_dense_backward(g, t, 10, -1, False), grad, tokens)
    check(lambda g, t: torch.ops.aten.embedding_dense_backward(g, t, 10, 1, False), grad, tokens)
    assert w.grad is None


def test_scatter_loop_ir_and_schedule():
    """Unit: a copy node then a ScatterBuffer of the same name that reads and updates it, in a kernel
    of its own (never fused), with the index tensor's parallel dims."""
    x, idx, src = torch.randn(4, 6), torch.tensor([[0, 5], [1, 1], [2, 0], [3, 3]]), torch.randn(4, 2)
    ag = trace(lambda x, i, s: (x + 1).scatter_add(1, i, s) * 2, (x, idx, src))
    lg = lower_graph(ag.gm)
    updates = [n for n in lg.nodes if is_update(n)]
    assert len(updates) == 1 and isinstance(updates[0], ScatterBuffer)
    upd = updates[0]
    assert upd.data.mode == "add" and upd.data.parallel_dims == (0,) and list(upd.data.ranges) == [4, 2]
    copy = next(n for n in lg.nodes if n.name == upd.name and n is not upd)
    assert lg.nodes.index(copy) < lg.nodes.index(upd)
    assert lg.buffers()[upd.name] is copy  # the wrapper allocates the copy's buffer, once
    text = lg.format()
    assert "scatter add over [4, 2]" in text and f"scatter_store({upd.name}," in text
    cg = compile_graph(ag.gm, default_options())
    groups = cg.sched.groups()
    scatter_group = next(g for g in groups if any(is_update(m.node) for m in g.members))
    assert len(scatter_group.members) == 1
    assert "inout" in [kind for _, kind in cg.kernels[scatter_group.name].params]
    assert cg.wrapper.source.count(f"{upd.name} = empty_strided") == 1


def test_cpp_scatter_splits_a_parallel_dim_over_threads():
    """Large scatters run one chunk of a parallel dim per thread (no atomics); small ones run serially."""
    x = torch.randn(64, 1024)
    idx = torch.randint(0, 64, (200, 1024))
    src = torch.randn(200, 1024)
    cg = check(lambda x, i, s: x.scatter_add(0, i, s), x, idx, src)
    (src_text,) = [k.source for k in cg.kernels.values() if "scatter add" in k.source]
    assert "omp_get_thread_num" in src_text and "kiln_lo" in src_text and "#pragma omp simd" in src_text
    small = check(lambda x, i, s: x.scatter_add(0, i, s), x[:4, :8], idx[:3, :8] % 4, src[:3, :8])
    (small_text,) = [k.source for k in small.kernels.values() if "scatter add" in k.source]
    assert "omp parallel" not in small_text


def test_scatter_out_of_range_raises():
    x = torch.randn(4, 3)
    for fn, bad, good in [
        (lambda x, i: x.scatter(0, i, 1.0), torch.tensor([[4, 0, 0]]), torch.tensor([[3, 0, 1]])),
        (lambda x, i: x.scatter(0, i, 1.0), torch.tensor([[-1, 0, 0]]), torch.tensor([[0, 0, 1]])),
        (lambda x, i: x.index_put((i,), torch.tensor(1.0), accumulate=True), torch.tensor([4]), torch.tensor([-4])),
        # ops that reject negative indices, though they decompose to index / index_put (which wrap them)
        (lambda x, i: x.index_add(0, i, x[:1]), torch.tensor([-1]), torch.tensor([3])),
        (lambda x, i: x.index_copy(0, i, x[:1] * 2), torch.tensor([-1]), torch.tensor([3])),
        (lambda x, i: x.index_select(0, i) + 1, torch.tensor([-1]), torch.tensor([3])),
    ]:
        ag = trace(fn, (x, bad))
        lg = lower_graph(ag.gm)
        assert not lg.fallbacks, lg.fallbacks
        with pytest.raises(IndexError):
            run_reference(lg, [x.clone(), bad])
        compiled = AtenRuntime(ag, run=compile_graph(ag.gm, default_options()).wrapper.compile())
        with pytest.raises(IndexError):
            compiled(x, bad)
        torch.testing.assert_close(compiled(x, good), fn(x, good))


def test_empty_index_is_a_copy():
    x = torch.randn(3, 4)
    check(lambda x, i, s: [x.scatter_add(1, i, s), x.index_put((i[0],), s[0, :, None], accumulate=True)],
          x, torch.zeros(3, 0, dtype=torch.int64), torch.zeros(3, 0))


def test_kiln_compile_embedding_training_and_scatter_in_one_graph():
    """End to end through capture: an embedding's backward (index_put with accumulate) and a
    scatter_add run as generated kernels, one graph, no ATen fallback for them."""
    import kiln
    from kiln.debug.stats import stats

    emb = torch.nn.Embedding(20, 8)
    tokens = torch.tensor([[1, 5, 5, 19], [0, 1, 1, 1]])
    bins = torch.tensor([0, 2, 2, 1, 0, 2, 1, 1])

    def step(tokens, bins):
        h = emb(tokens).relu()
        pooled = torch.zeros(3, 8).scatter_add(0, bins[:, None].expand(8, 8), h.reshape(8, 8))
        return pooled.square().sum()

    kiln.reset()
    stats.reset()
    loss = kiln.compile(step)(tokens, bins)
    loss.backward()
    got = emb.weight.grad.clone()
    emb.weight.grad = None
    want = step(tokens, bins)
    want.backward()
    torch.testing.assert_close(loss, want)
    torch.testing.assert_close(got, emb.weight.grad)
    assert stats.graphs == 1 and stats.joint_graphs == 1 and stats.kernels_generated >= 4, stats.__dict__
    assert not [k for k in stats.aten_fallbacks if "scatter" in k or "index_put" in k], dict(stats.aten_fallbacks)


def test_out_of_range_index_fused_into_a_reduction_names_the_indexing_and_its_line():
    """The indexing is inlined into the reduction's kernel (ComputedBuffer.inlined): the message names it."""
    import kiln
    from kiln.errors import IndexOutOfBoundsError

    def f(x, i):
        return x[i].sum(0)

    line = f.__code__.co_firstlineno + 1
    with pytest.raises(IndexOutOfBoundsError, match=rf"in indexing x\[\.\.\.\] at .*test_scatter\.py:{line} "):
        kiln.compile(f)(torch.randn(4, 2), torch.tensor([-5, 1]))


def test_out_of_range_errors_name_the_call_the_user_wrote():
    import kiln
    from kiln.errors import IndexOutOfBoundsError

    x = torch.randn(2, 3)
    for fn, i, name in [(lambda x, i: x.index_fill(1, i, 5.0), torch.tensor([1, 3]), "index_fill"),
                        (lambda x, i: torch.take(x, i), torch.tensor([9]), "take"),
                        (lambda x, i: torch.nn.functional.embedding(i, x), torch.tensor([5]), "embedding"),
                        (lambda x, i: x[i] + 1, torch.tensor([5]), r"indexing x\[\.\.\.\]")]:
        with pytest.raises(IndexOutOfBoundsError, match=f"index out of bounds in {name} at .*test_scatter.py"):
            kiln.compile(fn)(x, i)
    with pytest.raises(IndexOutOfBoundsError, match="source has fewer elements than the mask has True values"):
        kiln.compile(lambda x, m, s: x.masked_scatter(m, s))(x, torch.ones(2, 3, dtype=torch.bool), torch.arange(4.0))
