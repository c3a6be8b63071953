"""Dynamic-shape corpus: broadcasting with size-1 dims, and 0/1 specialization (a size 0 or 1 gets its
own entry; sizes >= 2 share the dynamic one)."""
import pytest
import torch

from .harness import backends, check


def test_row_bias_broadcast(backend):
    bias = torch.randn(1, 3)

    def f(x):
        return x + bias, x * bias.t()[0]
    check(f, lambda n: (torch.randn(n, 3),), backend, graphs=2)


def test_outer_product_by_broadcast(backend):
    def f(x):
        return x[:, None] * x[None, :]
    check(f, lambda n: (torch.randn(n),), backend, graphs=2)


def test_attention_mask_broadcast(backend):
    def f(scores, mask):
        ext = (1.0 - mask[:, None, None, :].float()) * -1e4
        return (scores + ext).softmax(-1)
    check(f, lambda n: (torch.randn(2, 2, n, n), torch.randint(0, 2, (2, n))), backend, graphs=2)


def test_keepdim_reduction_broadcast(backend):
    def f(x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5)
    check(f, lambda n: (torch.randn(n, 6),), backend, graphs=2)


def test_bias_over_batch_and_seq(backend):
    b = torch.randn(4)

    def f(x):
        return torch.tanh(x + b)
    check(f, lambda n: (torch.randn(n, n + 1, 4),), backend, graphs=2)


def test_broadcast_two_dynamic_inputs(backend):
    def f(x, y):
        return x + y, (x * y).sum(0)
    check(f, lambda n: (torch.randn(n, 3), torch.randn(n, 1)), backend, graphs=2)


def test_batch_one_runs_in_the_dynamic_entry(backend):
    def f(x):
        return x.softmax(-1) * x.shape[0]
    # nothing in the trace needed the batch to be >= 2: size 1 is served by the dynamic entry (it had
    # an entry of its own while every symbol was >= 2; dynamo: 3)
    check(f, lambda n: (torch.randn(n, 4),), backend, sizes=(8, 5, 1, 13, 1, 2), graphs=2, dynamo_graphs=3)


def test_batch_one_first(backend):
    def f(x):
        return x.sum(0) / x.size(0)
    check(f, lambda n: (torch.randn(n, 4),), backend, sizes=(1, 8, 5, 13), graphs=2)


def test_empty_batch(backend):
    def f(x):
        return x * 2, x.sum(0), x.shape[0]
    check(f, lambda n: (torch.randn(n, 3),), backend, sizes=(8, 5, 0, 13, 0), graphs=3)


def test_size_one_changes_broadcasting(backend):
    # y is sometimes (1, 3) (broadcast) and sometimes (n, 3): a size 1 is never a symbol, so both work
    def f(x, y):
        return x - y
    check(f, lambda n: (torch.randn(n, 3), torch.randn(1 if n % 2 else n, 3)), backend,
          sizes=(8, 5, 13, 6, 2, 7), graphs=3)


def test_squeeze_of_dynamic_dim(backend):
    # squeeze(0) removes the dim only when it is 1: the size-1 entry differs from the dynamic one
    def f(x):
        return x.squeeze(0) * 2
    check(f, lambda n: (torch.randn(n, 3),), backend, sizes=(8, 5, 1, 13, 1), graphs=3)


def test_branch_on_size_one(backend):
    def f(x):
        if x.size(0) == 1:
            return x[0] + 1
        return x.mean(0)
    check(f, lambda n: (torch.randn(n, 3),), backend, sizes=(8, 5, 1, 13), graphs=3)


def test_view_of_one_by_n(backend):
    def f(x):
        return x.view(-1) + x.reshape(x.shape[1], x.shape[0]).sum(1)
    check(f, lambda n: (torch.randn(1, n),), backend, graphs=2)


def test_dynamic_size_one_in_trailing_dim(backend):
    def f(x):
        return x.expand(-1, 4) * x.mean(1, keepdim=True)
    check(f, lambda n: (torch.randn(n, 1),), backend, graphs=2)


def test_dynamic_true_sizes_one_and_zero(backend):
    def f(x):
        return (x + 1).amax(-1, keepdim=True) if x.numel() else x
    # 4 dynamic (serving 1, 7, 9 too), 0 its own (0/1 specialization of an empty tensor)
    check(f, lambda n: (torch.randn(3, n),), backend, sizes=(4, 1, 7, 0, 9, 1), dynamic=True, graphs=2,
          dynamo_graphs=2)


def test_dynamic_false_every_size(backend):
    def f(x):
        return x.cumsum(0)
    check(f, lambda n: (torch.randn(n),), backend, sizes=(8, 5, 13, 5), dynamic=False, graphs=3)


def test_where_with_broadcast_scalar_and_row(backend):
    def f(x):
        row = torch.arange(x.shape[1], dtype=x.dtype)
        return torch.where(x > 0, x, row), torch.where(x > 0, 0.0, x)
    check(f, lambda n: (torch.randn(n, n + 2),), backend, graphs=2)


def test_matmul_broadcast_batch(backend):
    w = torch.randn(3, 4, 2)

    def f(x):
        return torch.matmul(x.unsqueeze(1), w).sum(1)
    check(f, lambda n: (torch.randn(n, 5, 4),), backend, graphs=2)


def test_arange_counting_down_from_a_size(backend):
    # a negative step: ceil((start - end) / -step) values (it compiled static for every size before)
    def f(x):
        return x[: (x.shape[0] + 2) // 3] * torch.arange(x.shape[0], 0, -3), torch.arange(x.shape[0] - 1, -1, -1)
    check(f, lambda n: (torch.randn(n),), backend, graphs=2)


def test_safe_softmax_of_symbolic_sizes(backend):
    # SDPA's math path (CPU training with a mask) softmaxes with aten._safe_softmax: its meta kernel failed
    # on symbolic sizes, and every sequence length compiled a static graph
    def f(x):
        return torch.ops.aten._safe_softmax(x * 2, -1) + 1
    check(f, lambda n: (torch.randn(2, n, n),), backend, graphs=2)


class SlicedPositions(torch.nn.Module):
    """BERT's position ids: a buffer of the longest length, sliced to the input's."""

    def __init__(self):
        super().__init__()
        self.register_buffer("pos", torch.arange(16.0).unsqueeze(0))

    def forward(self, x):
        return x + self.pos[:, :x.shape[1]]


def test_a_buffer_sliced_to_the_input_length_serves_the_full_length_too(backend):
    # the slice's stride 16 equals its row-major stride only where Min(16, s0) == 16: a check that guarded
    # it (Ne(Min(16, s0), 16)) made the full length a third graph
    check(SlicedPositions(), lambda n: (torch.randn(2, n),), backend, sizes=(5, 9, 16, 7, 16), graphs=2)


def test_arange_with_a_symbolic_step(backend):
    # a step from another size: its sign is guarded, the length is symbolic (it compiled static per size)
    def f(x):
        return torch.arange(x.shape[0], 0, -x.shape[1]).float(), torch.arange(0, x.shape[0], x.shape[1]) * 2
    check(f, lambda n: (torch.randn(n, 2 + n % 5),), backend, graphs=2)
