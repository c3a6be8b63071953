"""Each lowering family against eager ATen, through the reference evaluator and generated C++, over
dtypes, broadcasting, non-contiguous / transposed / offset inputs, views of views and empty tensors.
Each test compiles one graph with many outputs."""
import pytest
import torch

from tests.lower.helpers import check, sample

ALL = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.bool]
NUMERIC = [d for d in ALL if d != torch.bool]
ids = [str(d).replace("torch.", "") for d in ALL]


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_pointwise(dtype):
    a = sample((3, 4), dtype)
    b = sample((4,), dtype, seed=1)  # broadcast
    base = sample((7, 6), dtype, seed=2)
    c = base.t()[1:4, 2:6].t()  # transposed, offset view input: (4, 3)
    b = torch.where(b == 0, torch.ones_like(b), b) if dtype != torch.bool else b

    def fn(a, b, c):
        outs = [a == b, a < b, a >= c.t(), torch.where(a > b, a, b), torch.maximum(a, b), torch.minimum(a, c.t()),
                a.to(torch.float32), a.to(torch.int64), c.t().clone(), torch.logical_and(a, b),
                torch.logical_xor(a, c.t()), torch.logical_not(a), torch.where(a != b, a, 0)]
        if dtype != torch.bool:
            outs += [a + b, a * b - c.t(), a.abs(), -a, a.sign(), a + 2, a * 3, (a + b).t().contiguous()]
        if dtype.is_floating_point:
            outs += [torch.exp(a), torch.sigmoid(b), a / b, torch.sqrt(a.abs()), torch.tanh(a) * b,
                     torch.erfinv(a / 5), torch.round(a, decimals=1), torch.floor(a), torch.clamp(a, -1, 1)]
        elif dtype != torch.bool:
            outs += [a // b, a % b, torch.bitwise_and(a, b), a.to(torch.float32) / b, torch.clamp(a, -1, 2)]
        return outs

    check(fn, a, b, c)


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_reductions(dtype):
    x = sample((3, 4, 5), dtype)
    t = sample((6, 3), dtype, seed=3).t()  # non-contiguous

    def fn(x, t):
        outs = [x.any(0), x.all(-1), x.any(), t.all(1)]
        if dtype != torch.bool:
            outs += [x.sum(0), x.sum(1), x.sum(2, keepdim=True), x.sum(), x.sum((0, 2)), t.sum(0),
                     x.amax(1), x.amin((0, 1)), x.amax(), x.argmax(1), x.argmin(2), x.argmax(),
                     t.argmax(0, keepdim=True), x.prod(1)]
        if dtype.is_floating_point:
            outs += [x.mean(1), x.softmax(-1), x.var(0), torch.logsumexp(x, 2)]
        else:
            outs += [x.sum(1, dtype=torch.int64) if dtype != torch.bool else x.sum(1)]
        return outs

    check(fn, x, t)


def test_argmax_ties_and_nans():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [float("nan"), 1.0, float("nan"), 5.0], [2.0, 2.0, 2.0, 2.0],
                      [-float("inf"), -float("inf"), -float("inf"), -float("inf")]])

    def fn(x):
        return x.argmax(1), x.argmin(1), x.amax(1), x.amin(1), x.argmax(0), x.t().argmax(1), x.max(1), x[1, 2].argmax()

    check(fn, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=["float32", "int64", "bool"])
def test_views(dtype):
    x = sample((4, 6), dtype)

    def fn(x):
        lazy = x != 0 if dtype == torch.bool else x * 2
        outs = []
        for v in (x, lazy):  # views of stored buffers follow ATen's strides; views of lazy values reindex
            outs += [v.t()[1:, ::2], v.view(2, 12)[:, 3:9].reshape(3, 2, 2), v.unsqueeze(1).expand(4, 3, 6),
                     v[2], v[:, -1], v.permute(1, 0).reshape(-1), v.reshape(4, 2, 3).transpose(0, 2)[1],
                     v.diagonal(), v[None, 1:3].squeeze(0), v.flatten()[5:17].view(3, 4).t()]
        return [o.clone() for o in outs]

    check(fn, x)


@pytest.mark.parametrize("dtype", ALL, ids=ids)
def test_shape_ops(dtype):
    x = sample((4, 5), dtype)
    y = sample((4, 3), dtype, seed=1)
    z = sample((10, 5), dtype, seed=2)[::3]  # strided (4, 5)
    val = True if dtype == torch.bool else 3

    def fn(x, y, z):
        w = x.clone()
        w[:, 1:4:2] = val  # slice_scatter with a step
        u = x.clone()
        u[2] = z[1]  # select_scatter
        d = x.clone()
        d.diagonal(1).copy_(z[0, :4])  # diagonal_scatter with an offset
        d2 = x.clone()
        d2.diagonal(-2).fill_(val)
        return [torch.cat([x, y, z], 1), torch.cat([x.t(), z.t()], 0), torch.cat([x, y.to(torch.float64)], 1),
                torch.nn.functional.pad(x, (1, 2, -1, 1), value=val), torch.nn.functional.pad(y.t(), (0, 0, 2, 0)),
                w, u, d, d2, torch.stack([x, z], 2), torch.cat([x[:, :0], y], 1)]

    check(fn, x, y, z)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool],
                         ids=["float32", "bfloat16", "int64", "bool"])
def test_indexing(dtype):
    x = sample((5, 6, 4), dtype)
    i = torch.tensor([[0, -1], [4, 2]])
    j = torch.tensor([1, 3], dtype=torch.int32)
    g = torch.randint(0, 6, (5, 3, 4), generator=torch.Generator().manual_seed(0))

    def fn(x, i, j, g):
        return [x[i], x[:, j], x[i, :, j[:1]], x[:, j, i[0]], x[1:, j][:, :, 1:], torch.gather(x, 1, g),
                torch.gather(x.transpose(0, 2), 1, g.transpose(0, 2)[:, :, :2]), x[i.t()] if dtype != torch.bool else x[i]]

    check(fn, x, i, j, g)


def test_index_out_of_bounds_raises():
    from kiln.backends.kiln import compile_graph
    from kiln.aot import AtenRuntime
    from kiln.lower.graph import lower_graph
    from kiln.lower.reference import run_reference
    from kiln.options import default_options
    from tests.lower.helpers import trace

    x, i = torch.randn(4, 3), torch.tensor([1, 4])
    ag = trace(lambda x, i: x[i] + 1, (x, i))
    lg = lower_graph(ag.gm)
    with pytest.raises(IndexError):
        run_reference(lg, [x, i])
    compiled = AtenRuntime(ag, run=compile_graph(ag.gm, default_options()).wrapper.compile())
    with pytest.raises(IndexError):
        compiled(x, i)
    torch.testing.assert_close(compiled(x, torch.tensor([-4, 3])), x[[-4, 3]] + 1)  # still works afterwards


def test_empty_tensors():
    x = torch.randn(0, 4)
    y = torch.randn(3, 4)

    def fn(x, y):
        return [x + 1, x.sum(0), x.sum(1), torch.cat([x, y], 0), torch.nn.functional.pad(x, (1, 1)),
                y[torch.zeros(0, dtype=torch.int64)], y.amax(1) if y.numel() else y, x.t().clone()]

    check(fn, x, y)


def test_transpose_and_view_copies():
    aten = torch.ops.aten
    x = sample((3, 4, 5), torch.float32)

    def fn(x):
        y = x * 2  # lazy: the copies reindex it
        outs = []
        for v in (x, y):
            outs += [aten.transpose.int(v, 0, 2).clone(), aten.expand_copy.default(v[:, :1], [3, 4, 5]),
                     aten.diagonal_copy.default(v, 1, 1, 2), aten.diagonal.default(v, -1, 0, 2).clone(),
                     aten.permute_copy.default(v, [2, 0, 1]), aten.alias_copy.default(v),
                     aten.slice_copy.Tensor(v, 2, 1, 5, 2), aten.select_copy.int(v, 1, -1)]
        return outs

    check(fn, x)


@pytest.mark.parametrize("dynamic", [False, True])
def test_index_into_an_empty_dimension_raises_not_crashes(dynamic):
    """No index is valid in a dimension of size 0: the kernel must not read (or write) element 0 of an empty
    buffer (it segfaulted); it flags the error and the call raises, naming the user's line, as eager does."""
    import kiln

    def read(x, i):
        return x[i] * 2

    def write(x, i, v):
        x = x.clone()
        x[i] = v
        return x

    g, h = kiln.compile(read, dynamic=dynamic), kiln.compile(write, dynamic=dynamic)
    if dynamic:  # the same size-generic kernels serve the non-empty sizes
        x = torch.randn(5)
        torch.testing.assert_close(g(x, torch.tensor([4, -1])), read(x, torch.tensor([4, -1])))
        torch.testing.assert_close(h(x, torch.tensor([1]), torch.tensor([5.0])), write(x, torch.tensor([1]), torch.tensor([5.0])))
    with pytest.raises(IndexError, match=r"indexing x\[\.\.\.\] at .*test_families.py:176 "):
        g(torch.randn(0), torch.tensor([0]))
    with pytest.raises(IndexError, match="index out of bounds"):
        h(torch.zeros(0), torch.tensor([0]), torch.tensor([5.0]))
    empty = g(torch.randn(0), torch.zeros(0, dtype=torch.long))  # no index, no error
    assert empty.shape == (0,)


@pytest.mark.parametrize("case", ["gather", "scatter_add", "index_add", "index_select", "embedding", "index"])
def test_an_out_of_range_index_raises_what_eager_would_catch(case):
    """Eager raises IndexError for some indexing ops and RuntimeError for others; kiln's error is both."""
    import kiln
    from torch.nn import functional as F

    fn, args = {
        "gather": (lambda x, i: torch.gather(x, 1, i), (torch.randn(2, 3), torch.tensor([[0, 3]]))),
        "scatter_add": (lambda x, i: x.scatter_add(0, i, torch.ones(1, 2)), (torch.randn(3, 2), torch.tensor([[5, 0]]))),
        "index_add": (lambda x, i: x.index_add(0, i, torch.ones(2, 2)), (torch.zeros(3, 2), torch.tensor([0, 3]))),
        "index_select": (lambda x, i: torch.index_select(x, 0, i) * 2, (torch.randn(2, 3), torch.tensor([5]))),
        "embedding": (lambda i, w: F.embedding(i, w) * 2, (torch.tensor([7]), torch.randn(3, 2))),
        "index": (lambda x, i: x[i] * 2, (torch.randn(3), torch.tensor([3]))),
    }[case]
    kiln.reset()
    with pytest.raises(Exception) as eager:
        fn(*args)
    with pytest.raises(type(eager.value)):
        kiln.compile(fn)(*args)
