"""Dynamic-shape corpus: Python ints derived from sizes (returned, stored on self, used in arithmetic,
as factory sizes and fill values), masks from arange(seq), and data-dependent sizes (graph breaks)."""
import math

import pytest
import torch

from .harness import backends, check


def test_return_size_arithmetic(backend):
    def f(x):
        b, t = x.shape
        return x.relu(), b * t, x.numel(), b // 3, t % 4, x.dim(), tuple(x.shape)
    check(f, lambda n: (torch.randn(n, n + 5),), backend, graphs=2)


def test_store_size_on_self(backend):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.last_batch = 0
            self.seen = 0

        def forward(self, x):
            self.last_batch = x.size(0)
            self.seen += x.shape[0]
            return self.lin(x)
    # the int attributes become symbols on their second value (Options.dynamic_ints; dynamo specializes
    # ints on modules: 5 graphs)
    check(M(), lambda n: (torch.randn(n, 4),), backend, graphs=2, attrs=("last_batch", "seen"))


def test_mean_by_size_division(backend):
    def f(x):
        return x.sum(0) / x.shape[0], x.sum() / x.numel()
    check(f, lambda n: (torch.randn(n, 3),), backend, graphs=2)


@pytest.mark.parametrize("backend", backends())
def test_sqrt_of_dynamic_dim_scaling(backend):
    def f(x):
        return x / math.sqrt(x.size(-1))
    check(f, lambda n: (torch.randn(3, n),), backend, graphs=2)


@pytest.mark.parametrize("backend", backends())
def test_size_as_float_scale(backend):
    def f(x):
        n = x.shape[0]
        return x * (1.0 / n) + float(n)
    check(f, lambda n: (torch.randn(n, 2),), backend, graphs=2)


def test_causal_mask_from_seq(backend):
    def f(scores):
        t = scores.size(-1)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        return scores.masked_fill(mask, float("-inf")).softmax(-1)
    check(f, lambda n: (torch.randn(2, n, n),), backend, graphs=2)


def test_padding_mask_from_lengths(backend):
    def f(x, lengths):
        t = x.shape[1]
        mask = torch.arange(t)[None, :] < lengths[:, None]
        return (x * mask.unsqueeze(-1)).sum(1) / lengths[:, None]
    check(f, lambda n: (torch.randn(3, n, 2), torch.tensor([n, max(n // 2, 1), 1])), backend, graphs=2)


def test_position_ids_with_past_length(backend):
    table = torch.randn(64, 4)

    def f(x, past):
        start = past.shape[1]
        pos = torch.arange(start, start + x.shape[1])
        return x + table[pos]
    check(f, lambda n: (torch.randn(2, 3, 4), torch.randn(2, n, 4)), backend, graphs=2)


def test_fill_with_size(backend):
    def f(x):
        return torch.full((x.shape[0],), x.shape[1]) + x.new_full((1,), x.shape[0])
    check(f, lambda n: (torch.randn(n, n + 1),), backend, graphs=2)


def test_size_to_tensor(backend):
    def f(x):
        n = torch.tensor(x.shape[0], dtype=torch.float32)
        return x.sum(0) / n
    check(f, lambda n: (torch.randn(n, 3),), backend)


def test_topk_k_from_size(backend):
    def f(x):
        return torch.topk(x, k=x.size(1) // 2, dim=1).values
    check(f, lambda n: (torch.randn(3, 2 * n),), backend, graphs=2)


def test_repeat_by_size(backend):
    def f(x, y):
        return x.repeat(y.shape[0], 1) + 1
    check(f, lambda n: (torch.randn(2, 3), torch.randn(n)), backend, graphs=2)


def test_linspace_steps_from_size(backend):
    def f(x):
        return x * torch.linspace(0, 1, x.shape[0])
    # the steps stay symbolic (fake/symbolic_composite.linspace; they specialized before, as in dynamo: 5)
    check(f, lambda n: (torch.randn(n),), backend, graphs=2)


def test_shape_tuple_unpack_and_index(backend):
    def f(x):
        *lead, last = x.shape
        return x.reshape(-1, last).sum(0) * len(lead), x.shape[-2] + x.size(-1)
    check(f, lambda n: (torch.randn(2, n, 3),), backend, graphs=2)


def test_size_in_list_of_shapes(backend):
    def f(x):
        shape = list(x.shape)
        shape[-1] = shape[-1] * 2
        return x.repeat(1, 2).view(shape), torch.Size(shape)
    check(f, lambda n: (torch.randn(n, 3),), backend, graphs=2)


# ---------------------------------------------------------------------------------------------
# data-dependent sizes: kiln breaks the graph (or runs eagerly); results must still equal eager
# ---------------------------------------------------------------------------------------------


def test_boolean_mask_select(backend):
    def f(x):
        y = x[x > 0]
        return y * 2, y.shape[0]
    check(f, lambda n: (torch.randn(n, 3),), backend)


def test_nonzero_then_index(backend):
    def f(x):
        idx = torch.nonzero(x > 0.5).squeeze(1)
        return x[idx].sum() + x.shape[0]
    check(f, lambda n: (torch.randn(n),), backend)


def test_unique_counts(backend):
    def f(x):
        vals, counts = torch.unique(x, return_counts=True)
        return vals * 2, counts
    check(f, lambda n: (torch.randint(0, 5, (n,)),), backend)


def test_item_used_as_size(backend):
    def f(x, k):
        n = int(k.item())
        return x[:n].sum(0), torch.zeros(n)
    check(f, lambda n: (torch.randn(n, 2), torch.tensor(n // 2)), backend)


def test_masked_select_and_where_one_arg(backend):
    def f(x):
        pos = torch.where(x > 0)
        return torch.masked_select(x, x < 0), pos[0], pos[1]
    check(f, lambda n: (torch.randn(n, 2),), backend)


def test_tolist_of_sizes(backend):
    def f(x, lengths):
        parts = torch.split(x, lengths.tolist())
        return [p.mean(0) for p in parts]
    check(f, lambda n: (torch.randn(n + 3, 2), torch.tensor([n, 3])), backend)


def test_division_by_a_size_difference_that_is_zero_raises_as_python_does():
    # n // (n - m) where n and m are one size (duck sizing): Python's ZeroDivisionError, raised as the
    # program's own (no internal error), and caught by the program's try/except
    import warnings

    import kiln

    def f(x, y):
        n, m = x.shape[0], y.shape[0]
        try:
            k = n // (n - m)
        except ZeroDivisionError:
            k = -1
        return x.sum() * k

    def g(x, y):
        return x.sum() * (x.shape[0] // (x.shape[0] - y.shape[0]))

    kiln.reset()
    cf, cg = kiln.compile(f, dynamic=True), kiln.compile(g, dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (an internal error would warn)
        for a, b in ((6, 3), (8, 2), (5, 5), (7, 7)):
            x, y = torch.ones(a), torch.ones(b)
            torch.testing.assert_close(cf(x, y), f(x, y))
            if a == b:
                with pytest.raises(ZeroDivisionError):
                    cg(x, y)
            else:
                torch.testing.assert_close(cg(x, y), g(x, y))
