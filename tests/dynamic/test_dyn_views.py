"""Dynamic-shape corpus: views and reshapes of symbolic sizes, slicing with computed bounds, cat/stack/
split/chunk with sizes, factories sized from inputs (the way HF-style code is written)."""
import math

import pytest
import torch
import torch.nn.functional as F

from .harness import backends, check


def test_hf_attention_dynamic_seq(backend):
    torch.manual_seed(0)
    wq, wk, wv, wo = (torch.randn(16, 16) * 0.2 for _ in range(4))
    heads = 4

    def attn(x):
        bsz, seq, dim = x.size()
        head_dim = dim // heads
        q = (x @ wq).view(bsz, seq, heads, head_dim).transpose(1, 2)
        k = (x @ wk).view(bsz, seq, heads, head_dim).transpose(1, 2)
        v = (x @ wv).view(bsz, seq, heads, head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(head_dim)
        probs = scores.softmax(dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).contiguous().view(bsz, seq, dim)
        return out @ wo
    check(attn, lambda n: (torch.randn(2, n, 16),), backend, graphs=2)


def test_hf_attention_dynamic_batch_and_seq(backend):
    torch.manual_seed(0)
    w = torch.randn(8, 24) * 0.3

    def attn(x):
        b, t, c = x.shape
        q, k, v = (x @ w).split(c, dim=2)
        q = q.view(b, t, 2, c // 2).permute(0, 2, 1, 3)
        k = k.view(b, t, 2, c // 2).permute(0, 2, 3, 1)
        v = v.view(b, t, 2, c // 2).permute(0, 2, 1, 3)
        att = (q @ k) * (1.0 / math.sqrt(k.size(-2)))
        y = att.softmax(-1) @ v
        return y.permute(0, 2, 1, 3).reshape(b, t, c)
    check(attn, lambda n: (torch.randn(n, n + 3, 8),), backend, graphs=2)


def test_flatten_batch_then_linear(backend):
    w = torch.randn(12, 5)

    def f(x):
        return x.view(x.size(0), -1) @ w
    check(f, lambda n: (torch.randn(n, 3, 4),), backend, graphs=2)


def test_merge_and_split_leading_dims(backend):
    w = torch.randn(6, 4)

    def f(x):
        b, t, c = x.shape
        y = x.reshape(b * t, c) @ w
        return y.reshape(b, t, -1).relu()
    check(f, lambda n: (torch.randn(3, n, 6),), backend, graphs=2)


def test_flatten_unflatten(backend):
    def f(x):
        b, t = x.shape[:2]
        y = x.flatten(0, 1) * 2
        return y.unflatten(0, (b, t)).sum(-1)
    check(f, lambda n: (torch.randn(n, 3, 2),), backend, graphs=2)


@pytest.mark.parametrize("backend", backends())
def test_view_minus_one_groups(backend):
    def f(x):
        return x.view(-1, 4).sum(1), x.view(4, -1).amax(0)
    check(f, lambda n: (torch.randn(n * 4),), backend, graphs=2)


def test_permute_contiguous_view(backend):
    def f(x):
        b, c, h = x.shape
        return x.permute(0, 2, 1).contiguous().view(b * h, c).mean(0)
    check(f, lambda n: (torch.randn(2, 3, n),), backend, graphs=2)


def test_transpose_then_reshape_copies(backend):
    def f(x):
        return x.transpose(0, 1).reshape(-1) + torch.arange(x.numel())
    check(f, lambda n: (torch.randn(n, 3),), backend, graphs=2)


def test_chunk_static_last_dim(backend):
    def f(x):
        q, k, v = x.chunk(3, dim=-1)
        return q * k + v
    check(f, lambda n: (torch.randn(n, 9),), backend, graphs=2)


def test_chunk_dynamic_dim(backend):
    def f(x):
        a, b = x.chunk(2, dim=0)
        return a.sum(0) - b.sum(0)
    check(f, lambda n: (torch.randn(2 * n, 3),), backend, graphs=2)


def test_expand_to_batch(backend):
    cls = torch.randn(1, 1, 4)

    def f(x):
        tok = cls.expand(x.shape[0], -1, -1)
        return torch.cat([tok, x], dim=1)
    check(f, lambda n: (torch.randn(n, 3, 4),), backend, graphs=2)


def test_narrow_with_computed_length(backend):
    def f(x):
        return x.narrow(0, 1, x.size(0) - 2) * 3
    check(f, lambda n: (torch.randn(n + 2, 2),), backend, graphs=2)


def test_slice_halves_and_swap(backend):
    def f(x):
        half = x.shape[0] // 2
        return torch.cat([x[half:], x[:half]], dim=0)
    check(f, lambda n: (torch.randn(n, 3),), backend, graphs=2)


def test_slice_with_negative_computed_bound(backend):
    def f(x):
        n = x.shape[-1]
        return x[..., 1:n - 1] - x[..., : -2]
    check(f, lambda n: (torch.randn(2, n + 2),), backend, graphs=2)


def test_strided_slice_odd_sizes(backend):
    def f(x):
        return x[::2] + 1, x[1::2].sum()
    check(f, lambda n: (torch.randn(n, 2),), backend, sizes=(8, 5, 13, 6, 32), graphs=2)


def test_split_by_computed_sizes(backend):
    def f(x):
        n = x.size(0)
        a, b = x.split([n // 2, n - n // 2])
        return a.sum(0) * b.mean(0)
    check(f, lambda n: (torch.randn(n, 3),), backend, graphs=2)


def test_split_fixed_chunk_size(backend):
    def f(x):
        return [p.sum(-1) for p in x.split(2, dim=1)]
    check(f, lambda n: (torch.randn(n, 6),), backend, graphs=2)


def test_stack_of_unbind_over_static_dim(backend):
    def f(x):
        rows = x.unbind(1)
        return torch.stack([r * (i + 1) for i, r in enumerate(rows)], dim=0)
    check(f, lambda n: (torch.randn(n, 3),), backend, graphs=2)


def test_squeeze_unsqueeze_static_dims(backend):
    def f(x):
        return x.unsqueeze(1).squeeze(-1).unsqueeze(0).sum(0)
    check(f, lambda n: (torch.randn(n, 4, 1),), backend, graphs=2)


def test_view_as_reshape_as_expand_as(backend):
    def f(x, y):
        return x.view_as(y) + y, x.reshape_as(y), x.new_ones(1, 1).expand_as(y)
    check(f, lambda n: (torch.randn(n * 2), torch.randn(n, 2)), backend, graphs=2)


def test_zeros_and_ones_sized_from_input(backend):
    def f(x):
        z = torch.zeros(x.shape[0], 3)
        o = torch.ones(x.size(0), x.size(1) * 2, dtype=torch.int64)
        z[:, 1] = x.sum(1)
        return z, o, x.new_zeros(x.shape), torch.zeros_like(x) + 1
    check(f, lambda n: (torch.randn(n, 3),), backend, graphs=2)


def test_full_and_empty_like(backend):
    def f(x):
        e = torch.empty_like(x).fill_(2.0)
        return torch.full((x.shape[0], 2), 0.5) * x[:, :2] + e[:, :2]
    check(f, lambda n: (torch.randn(n, 3),), backend, graphs=2)


def test_cat_inputs_of_different_dynamic_lengths(backend):
    def f(x, y):
        z = torch.cat([x, y], 0)
        return z.view(-1, 2).sum(0), z.shape[0]
    check(f, lambda n: (torch.randn(n, 2), torch.randn(n + 3, 2)), backend, graphs=2)


def test_index_select_with_arange(backend):
    def f(x):
        idx = torch.arange(0, x.shape[0], 2)
        return x.index_select(0, idx)
    check(f, lambda n: (torch.randn(n, 3),), backend, graphs=2)


def test_gather_last_token(backend):
    def f(h, lengths):
        idx = (lengths - 1).view(-1, 1, 1).expand(-1, 1, h.size(-1))
        return h.gather(1, idx).squeeze(1)
    check(f, lambda n: (torch.randn(3, n, 4), torch.tensor([n, 1, max(n - 1, 1)])), backend, graphs=2)


def test_roll_and_flip(backend):
    def f(x):
        return torch.roll(x, shifts=1, dims=0) + x.flip(0)
    check(f, lambda n: (torch.randn(n, 3),), backend, graphs=2)


def test_pad_to_multiple_of_eight(backend):
    def f(x):
        pad = (-x.shape[1]) % 8
        y = F.pad(x, (0, pad))
        return y.view(x.shape[0], -1, 8).sum(-1)
    check(f, lambda n: (torch.randn(2, n),), backend, sizes=(8, 5, 13, 16, 3), graphs=2)


def test_dtype_copies_of_views_that_are_not_dense(backend):
    # `.to(dtype)` of a strided view: ATen lays the copy out by the view's stride order (infer_dense_strides)
    def f(x):
        q, k, v = x.split(x.size(-1) // 3, dim=-1)  # views with the row stride of x
        a = q.to(torch.float64)
        b = k.transpose(0, 1).to(torch.float64)
        c = v[:, ::2].to(torch.float64)
        return a * 2, b + 1, c.sum(-1), (a.stride(), b.stride(), c.stride())

    check(f, lambda n: (torch.randn(n, 4, 12),), backend, graphs=2)


def test_unbind_into_q_k_v(backend):
    def f(qkv):
        q, k, v = qkv.unbind(2)  # (a symbolic-size rule: the number of views is the static 3)
        return (q * k).sum(-1, keepdim=True) * v

    check(f, lambda n: (torch.randn(2, n, 3, 4),), backend, graphs=2)


def test_view_minus_one_after_a_star_unpacked_shape(backend):
    # the -1 is s0*(2*s1) / (2*s0): s1 in lowest terms; a size the view cannot split raises as in eager
    check(lambda x: x.view(*x.shape[:-1], 2, -1).sum(-1), lambda n: (torch.randn(n, 2 * n + 4),), backend, graphs=2)


def test_view_minus_one_needs_an_even_size():
    import kiln

    compiled = kiln.compile(lambda x: x.view(x.shape[0], 2, -1), backend="aot_eager", dynamic=True)
    for n in (6, 10):
        torch.testing.assert_close(compiled(torch.ones(3, n)), torch.ones(3, 2, n // 2))
    with pytest.raises(RuntimeError, match="invalid for input of size 21"):
        compiled(torch.ones(3, 7))


def test_advanced_indexing_with_broadcast_index_tensors(backend):
    # transformers' padding mask: mask[batch_idx[:, None, None, None], kv_idx[None, None, None, :]]
    def f(mask, x):
        b, s = mask.shape
        batch_idx = torch.arange(b)
        kv_idx = torch.arange(s)
        picked = mask[batch_idx[:, None, None, None], kv_idx[None, None, None, :]]
        return torch.where(picked, x[:, None, None, :], -1.0)
    check(f, lambda n: ((torch.arange(3 * n).view(3, n) % 3 > 0), torch.randn(3, n)), backend, graphs=2)


def test_advanced_indexing_of_dims_apart_moves_them_to_the_front(backend):
    def f(x, i, j):
        return x[i, :, j] * 2  # indexed dims 0 and 2 are not adjacent: the index shape comes first
    check(f, lambda n: (torch.randn(4, n, 5), torch.tensor([0, 3, 1]), torch.tensor([4, 0, 2])), backend, graphs=2)


def test_advanced_indexing_with_a_symbolic_index_shape(backend):
    def f(x, idx):
        return x[:, idx] + 1  # the index tensor's length is the changing size
    check(f, lambda n: (torch.randn(3, 10), torch.arange(n) % 10), backend, graphs=2)
