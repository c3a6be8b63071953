"""Layouts of realized buffers: ATen's layout of the node that made the value, computed in memory order."""
import torch

from kiln.loopir.nodes import ComputedBuffer, ExternKernel, Stored, contiguous_strides
from kiln.lower.graph import lower_graph, memory_order
from tests.lower.helpers import check, clone, trace


def test_memory_order():
    assert memory_order((2, 3, 4), (12, 4, 1)) is None  # row-major
    assert memory_order((2, 3, 4, 5), (60, 1, 15, 3)) == (0, 2, 3, 1)  # channels-last
    assert memory_order((3, 4), (1, 3)) == (1, 0)  # a transpose
    assert memory_order((2, 1, 4, 5), (20, 1, 5, 1)) is None  # size-1 dims keep their place
    assert memory_order((2, 3, 1, 5), (15, 1, 15, 3)) == (0, 3, 2, 1)
    assert memory_order((3, 4), (8, 1)) is None  # not dense


def _computed(lg):
    return [n for n in lg.nodes if isinstance(n, ComputedBuffer)]


def test_channels_last_result_is_computed_in_memory_order():
    x = torch.randn(2, 5, 3, 4).contiguous(memory_format=torch.channels_last)
    fn = lambda x: x * 2 + 1  # noqa: E731
    lg = lower_graph(trace(fn, [x]).gm)
    (buf,) = _computed(lg)
    assert buf.size == (2, 3, 4, 5) and buf.stride == contiguous_strides(buf.size)
    assert buf.data.ranges == buf.size  # loops run over memory: stores are consecutive
    (out,) = lg.outputs
    assert out.size == (2, 5, 3, 4) and out.stride == fn(x).stride()
    check(fn, x)


def test_transposed_result_matches_eager_values_and_strides():
    a, b = torch.randn(6, 7), torch.randn(7, 6)
    fn = lambda a, b: a.t() * b.exp()  # noqa: E731
    lg = lower_graph(trace(fn, [a, b]).gm)
    assert _computed(lg)[0].size == (6, 7)  # eager gives the product a.t()'s layout: (7, 6) in memory order
    assert lg.outputs[0].stride == fn(a, b).stride() == (1, 7)
    check(fn, a, b)


def test_a_value_realized_for_an_extern_takes_its_own_nodes_layout():
    # the clone is realized when the convolution reads it: it must be channels-last (its own node's
    # layout), not the convolution's, or the library gets other strides than ATen's meta said
    x, w = torch.randn(1, 4, 6, 6), torch.randn(3, 4, 3, 3)
    fn = lambda x, w: torch.conv2d((x * 2).contiguous(memory_format=torch.channels_last), w)  # noqa: E731
    lg = lower_graph(trace(fn, [x, w]).gm)
    (conv,) = [n for n in lg.nodes if isinstance(n, ExternKernel)]
    arg = conv.args[0]
    assert isinstance(arg, Stored) and arg.stride == x.contiguous(memory_format=torch.channels_last).stride()
    check(fn, clone(x), w)


def test_a_broadcast_read_by_an_extern_is_its_base_with_stride_0():
    # an attention mask expanded over heads: computing the expanded tensor wrote heads times the bytes
    a, b = torch.randn(4, 8, 8), torch.randn(1, 8, 8)
    fn = lambda a, b: (torch.bmm(a, (b * 2).expand(4, 8, 8)), (b + 1).expand(4, 8, 8))  # noqa: E731
    lg = lower_graph(trace(fn, [a, b]).gm)
    assert [buf.size for buf in _computed(lg)] == [(1, 8, 8), (1, 8, 8)]
    (bmm,) = [n for n in lg.nodes if isinstance(n, ExternKernel)]
    assert bmm.args[1].size == (4, 8, 8) and bmm.args[1].stride == (0, 8, 1)
    assert lg.outputs[1].stride == fn(a, b)[1].stride() == (0, 8, 1)  # as eager's view
    check(fn, a, b)


def test_a_broadcast_of_a_strided_slice_leaves_no_dead_buffer():
    # the base's ATen layout has gaps: no stride-0 view of it is possible, and nothing is computed for one
    fn = lambda x: ((x + 1)[:1, ::2].expand(3, 2), x.sum())  # noqa: E731
    x = torch.randn(4, 4)
    lg = lower_graph(trace(fn, [x]).gm)
    assert len(_computed(lg)) == 2, lg.format()  # the sum and the broadcast result: both returned
    check(fn, x)


def test_a_value_read_by_two_externs_and_returned_is_computed_once():
    x, y, z = torch.randn(8, 8), torch.randn(8, 8), torch.randn(8, 8)

    def fn(x, y, z):
        t = (x + 1).t()
        return torch.mm(t, y), torch.mm(t, z), t

    lg = lower_graph(trace(fn, [x, y, z]).gm)
    (buf,) = _computed(lg)
    assert all(n.args[0].buffer is buf for n in lg.nodes if isinstance(n, ExternKernel))
    assert lg.outputs[2].buffer is buf and lg.outputs[2].stride == fn(x, y, z)[2].stride()
    check(fn, x, y, z)


def test_small_max_pool_is_pointwise_and_keeps_channels_last():
    # a 3x3 max pool is a maximum over its taps: no reduction, eager's channels-last layout, NaN kept
    from kiln.loopir.nodes import Reduction

    x = torch.randn(2, 4, 9, 9)
    x[1, 2, 4, 4] = float("nan")
    x = x.contiguous(memory_format=torch.channels_last)
    fn = lambda x: torch.nn.functional.max_pool2d(x, 3, 2, 1)  # noqa: E731
    lg = lower_graph(trace(fn, [x]).gm)
    assert not any(isinstance(b.data, Reduction) for b in _computed(lg))
    assert lg.outputs[0].stride == fn(x).stride()
    check(fn, x)
    assert fn(x).isnan().any()


def test_relu_does_not_make_its_input_a_buffer_of_its_own():
    # relu is where(x < 0, 0, x): two readers of x, but one computation; ResNet's stem wrote the batch
    # norm's output, then relu + padding, then pooled
    x, mean, var, w, b = torch.randn(2, 4, 9, 9), torch.randn(4), torch.rand(4) + 0.5, torch.randn(4), torch.randn(4)

    def fn(x, mean, var, w, b):
        y = torch.nn.functional.batch_norm(x, mean, var, w, b, training=False)
        return torch.nn.functional.max_pool2d(y.relu(), 3, 2, 1)

    lg = lower_graph(trace(fn, [x, mean, var, w, b]).gm)
    assert len(_computed(lg)) == 2  # the padded relu(batch norm), the pooled maximum
    check(fn, x, mean, var, w, b)


def test_a_costly_value_read_by_a_reduction_and_pointwise_is_computed_once():
    # y / y.sum(): the sum's only reader also reads y, but a reduction reads y elsewhere (not at the
    # divide's index): y stays one buffer instead of being recomputed in both loops
    def fn(x):
        y = x
        for _ in range(12):
            y = (y * 1.01 + 0.1).sin()
        return y / y.sum(-1, keepdim=True)

    x = torch.randn(8, 16)
    lg = lower_graph(trace(fn, [x]).gm)
    assert len(_computed(lg)) == 3  # y, its sum, the quotient
    check(fn, x)


def test_max_pool_result_has_eagers_layout_whatever_the_input():
    # the tap chain would follow a transposed input; eager's kernel returns row-major (or channels-last
    # for a channels-last input), and a .view of the result must work as in eager
    import kiln

    x = torch.randn(2, 3, 9, 9)
    for v in (x.transpose(2, 3), x.permute(1, 0, 2, 3), x.contiguous(memory_format=torch.channels_last)[:, :, 1:]):
        for f in (lambda v: torch.nn.functional.max_pool2d(v, 3, 2),
                  lambda v: torch.nn.functional.max_pool2d(v, 3, 2, return_indices=True)):
            kiln.reset()
            got, want = kiln.compile(f)(v), f(v)
            for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                torch.testing.assert_close(g, w)
                assert g.stride() == w.stride()
    kiln.reset()
    g = lambda v: torch.nn.functional.max_pool2d(v.transpose(2, 3), 3, 2).view(2, -1)  # noqa: E731
    torch.testing.assert_close(kiln.compile(g)(x), g(x))


def test_a_value_cheap_to_recompute_is_inlined_into_each_reader():
    # a cross-entropy gradient: -1/n at each row's label, 0 elsewhere, read by a row sum and by the
    # softmax term; it reads one label per row, so each reader computes it again instead of reading a
    # [rows, vocabulary] buffer written for them (GPT-2: 823 MB written, then read twice)
    labels, logp = torch.randint(0, 64, (8,)), torch.randn(8, 64).log_softmax(-1)

    def fn(labels, logp):
        grad = torch.where(torch.arange(64) == labels[:, None], -1.0 / 8, 0.0)
        return grad - logp.exp() * grad.sum(1, keepdim=True)

    lg = lower_graph(trace(fn, [labels, logp]).gm)
    assert [buf.size for buf in _computed(lg)] == [(8, 1), (8, 64)]  # the sum and the result
    check(fn, labels, logp)

    def costly(labels, logp):  # the same value through exp: computed once, read twice
        grad = torch.where(torch.arange(64) == labels[:, None], -1.0 / 8, 0.0).exp().exp()
        return grad - logp.exp() * grad.sum(1, keepdim=True)

    lg = lower_graph(trace(costly, [labels, logp]).gm)
    assert [buf.size for buf in _computed(lg)] == [(8, 64), (8, 1), (8, 64)]
    check(costly, labels, logp)


def test_cheap_to_recompute_counts_the_elements_each_load_touches():
    from kiln.loopir.nodes import Lazy
    from kiln.lower.graph import cheap_to_recompute

    def lazy(index_of, size=(64, 512)):
        def body(ops, index):
            return ops.add(ops.load("x", index_of(index)), ops.constant(1.0, torch.float32))

        return Lazy(size, torch.float32, torch.device("cpu"), body, 20)

    assert cheap_to_recompute(lazy(lambda i: i[0]))  # one element per row
    assert cheap_to_recompute(lazy(lambda i: i[1]))  # one row for all 64 rows
    assert not cheap_to_recompute(lazy(lambda i: i[1], size=(8, 512)))  # one row for 8: 1/8 of the reads
    assert not cheap_to_recompute(lazy(lambda i: 512 * i[0] + i[1]))
    assert not cheap_to_recompute(lazy(lambda i: i[0], size=(4, 4)))  # too small to matter


def test_on_the_gpu_a_value_is_recomputed_where_that_loads_fewer_bytes():
    # GPT-2's recomputed GELU in the backward: tanh(x...) + 1 as float32 from a bfloat16 x, read by the
    # GELU's output and by its derivative: two bf16 reads beat a float32 write and two float32 reads
    from kiln.loopir.nodes import Lazy
    from kiln.lower.graph import cheap_to_recompute

    def body(ops, index):
        x = ops.to_dtype(ops.load("x", 512 * index[0] + index[1]), torch.float32)
        return ops.add(ops.tanh(ops.mul(x, x)), ops.constant(1.0, torch.float32))

    value = Lazy((64, 512), torch.float32, torch.device("cuda"), body, 20)
    dtypes = {"x": torch.bfloat16}
    assert cheap_to_recompute(value, 2, dtypes, memory_bound=True)
    assert not cheap_to_recompute(value, 2, dtypes, memory_bound=False)  # C++: tanh is not free there

    def two_inputs(ops, index):
        i = 512 * index[0] + index[1]
        return ops.tanh(ops.add(ops.load("x", i), ops.load("y", i)))

    value = Lazy((64, 512), torch.float32, torch.device("cuda"), two_inputs, 20)
    dtypes = {"x": torch.float32, "y": torch.float32}
    assert not cheap_to_recompute(value, 2, dtypes, memory_bound=True)  # 2 x 8 bytes loaded > 4 + 2 x 4
