"""Dynamic-shape corpus: data-dependent sizes (nonzero, masked_select, unique, repeat_interleave,
.item() / .tolist() used as sizes). kiln has no unbacked symbols: these break the graph (or run
eagerly); every result must equal eager, and the graphs around the break stay dynamic (the counts)."""
import pytest
import torch
import torch.nn.functional as F

from .harness import backends, check

SHORT = (8, 5, 13, 32)
# Where a graph breaks, each piece (the frame up to the break, the resume function after it) is a
# code object of its own: static at its first call, one dynamic entry after, so usually 2 per piece.


@pytest.mark.parametrize("backend", backends())
def test_trim_padding_to_longest(backend):
    # (int() of the int from .item(), a symbol of the resume function from its second value, is that
    # int: it pinned the value, a graph per length)
    # HF-style: cut a padded batch to the longest real sequence (lengths.max().item())
    def f(ids, mask):
        longest = int(mask.sum(1).max().item())
        return ids[:, :longest] * 2, mask[:, :longest].sum()
    def make(n):
        mask = torch.zeros(2, n + 4, dtype=torch.long)
        mask[0, :n] = 1
        mask[1, : max(n - 2, 1)] = 1
        return torch.randint(0, 9, (2, n + 4)), mask
    # graph 1 up to .item(), graph 2 after it: each static at 8 and dynamic once
    check(f, make, backend, sizes=SHORT, graphs=4)


@pytest.mark.parametrize("backend", backends())
def test_arange_of_item(backend):
    # a slice or arange bound from .item() breaks the graph (its sign and clamps are not known: no run-time
    # asserts yet); the int is an argument of the resume function, made a symbol on its second value
    # (Options.dynamic_ints): 2 graphs, as dynamo (it compiled again for every value before)
    def f(x, k):
        n = k.item()
        return x[:n] + torch.arange(n)[:, None]
    check(f, lambda n: (torch.randn(n + 2, 3), torch.tensor(n)), backend, sizes=SHORT, graphs=2)


def test_topk_with_k_from_tensor(backend):
    def f(scores, k):
        return scores.topk(int(k), dim=-1).indices
    check(f, lambda n: (torch.randn(2, 2 * n), torch.tensor(n)), backend, sizes=SHORT, graphs=0)  # int(k) breaks before any op; topk runs eagerly


@pytest.mark.parametrize("backend", backends(xfail={"eager": "nonzero()'s result (k, 1) has strides (1, k), not row-major by kiln's exact stride check, so it stays static in the resume function: one compile per count k (4 graphs; dynamo: 2)"}))
def test_nonzero_gather_scatter_back(backend):
    # update only the active rows, as sparse-update / MoE dispatch code does
    def f(x, active):
        idx = active.nonzero().squeeze(1)
        out = x.clone()
        out[idx] = torch.tanh(x[idx] * 2)
        return out, idx.numel()
    check(f, lambda n: (torch.randn(n, 3), torch.arange(n) % 3 == 0), backend, sizes=SHORT, graphs=2)


def test_masked_select_mean_loss(backend):
    def f(pred, target, mask):
        diff = torch.masked_select(pred - target, mask)
        return (diff ** 2).mean(), diff.shape[0]
    check(f, lambda n: (torch.randn(n, 4), torch.randn(n, 4), torch.rand(n, 4) > 0.3), backend,
          sizes=SHORT, graphs=4)


def test_boolean_index_assign(backend):
    def f(x):
        y = x.clone()
        y[y < 0] = 0.0
        return y, (x < 0).sum()
    check(f, lambda n: (torch.randn(n, 3),), backend, sizes=SHORT, graphs=2)  # a bool-mask index_put: no break


def test_unique_inverse_embedding_bag(backend):
    table = torch.randn(10, 4)

    def f(ids):
        uniq, inverse = torch.unique(ids, return_inverse=True)
        rows = table[uniq]
        return rows[inverse].sum(1), uniq.numel()
    check(f, lambda n: (torch.randint(0, 10, (n, 3)),), backend, sizes=SHORT, graphs=2)


def test_repeat_interleave_by_counts(backend):
    def f(x, counts):
        return torch.repeat_interleave(x, counts, dim=0).cumsum(0)
    check(f, lambda n: (torch.randn(n, 2), torch.arange(n) % 3), backend, sizes=SHORT, graphs=2)


@pytest.mark.parametrize("backend", backends())
def test_tolist_lengths_loop_of_slices(backend):
    # (the ints of the list the graph break hands on are int inputs of the resume function, L['...'][i],
    # symbols once they change: they were constants, a graph per lengths value)
    def f(x, lengths):
        return torch.stack([x[i, :l].mean(0) for i, l in enumerate(lengths.tolist())])
    check(f, lambda n: (torch.randn(3, n, 2), torch.tensor([n, 1, max(n // 2, 1)])), backend, sizes=SHORT,
          graphs=2)


@pytest.mark.parametrize("backend", backends(xfail={"eager": "torch.where(cond)'s rows and cols are views of one nonzero() result: inputs that share memory stay static, so the resume function compiles for every size ('L['___stack0'][1] shares memory with an input traced with dynamic sizes'; 6 graphs; dynamo: 4)"}))
def test_where_indices_then_dense_update(backend):
    def f(scores):
        rows, cols = torch.where(scores > 0.5)
        out = torch.zeros_like(scores)
        out[rows, cols] = scores[rows, cols] * 10
        return out, rows.shape[0]
    check(f, lambda n: (torch.rand(n, 4),), backend, sizes=SHORT, graphs=4)


def test_bincount_as_histogram_size(backend):
    def f(labels, x):
        counts = torch.bincount(labels)
        return counts.float() / x.size(0), counts.shape[0]
    check(f, lambda n: (torch.randint(0, 4, (n,)) + (n % 3), torch.randn(n, 2)), backend, sizes=SHORT, graphs=3)  # counts' length changes at 13: its dim becomes dynamic too


def test_branch_on_tensor_value(backend):
    def f(x):
        if x.sum() > 0:
            return x.softmax(-1) * x.size(0)
        return -x
    check(f, lambda n: (torch.randn(n, 3) + (0.5 if n % 2 else -0.5),), backend, sizes=SHORT, graphs=6, dynamo_graphs=5)  # the condition, then each branch's resume function


@pytest.mark.parametrize("backend", backends())
def test_item_as_slice_then_train(backend):
    lin = torch.nn.Linear(3, 2)

    def f(x, n_keep):
        k = int(n_keep.item())
        return F.relu(lin(x[:k])).sum(0)
    check(f, lambda n: (torch.randn(n, 3), torch.tensor(max(n // 2, 1))), backend, sizes=SHORT, train=True, graphs=2)


def test_argwhere_first_true_per_row(backend):
    def f(mask):
        hits = torch.argwhere(mask)
        first = torch.full((mask.size(0),), -1, dtype=torch.long)
        return first.scatter_reduce(0, hits[:, 0], hits[:, 1], reduce="amin", include_self=False)
    check(f, lambda n: (torch.rand(n, 5) > 0.6,), backend, sizes=SHORT, graphs=2)
