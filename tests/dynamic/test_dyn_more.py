"""Dynamic-shape corpus (more): code written the way PyTorch users write it — pooling, convs over
changing H/W, interpolate, cumsum, reductions over symbolic dims, cat/stack/split of symbolic sizes,
slices computed from sizes, loops over chunks of x.size(0), rotary embeddings, masks from lengths, and
guards that fail and recompile."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from .harness import backends, check

SHORT = (8, 5, 13, 32)  # static at 8, one dynamic entry for the rest


def _seeded(module_fn):
    torch.manual_seed(0)
    return module_fn()


# ---------------------------------------------------------------------------------------------
# pooling, convs, interpolate
# ---------------------------------------------------------------------------------------------


def test_max_pool1d_over_sequence(backend):
    def f(x):
        return F.max_pool1d(x.transpose(1, 2), kernel_size=2).transpose(1, 2)
    # ATen's max_pool1d (C++, int sizes) would specialize the length (dynamo: 4 entries); kiln runs it as
    # a 2-D pooling of a height-1 view (fake/symbolic_composite.py): one dynamic entry
    # (torch 2.11's max_pool2d meta on the transposed view guards the parity: one more entry)
    two_13 = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)
    check(f, lambda n: (torch.randn(2, 2 * n + n % 2, 3),), backend, sizes=SHORT, graphs=2 if two_13 else 3)


def test_max_pool2d_backward_over_channels_and_widths(backend):
    """Dilated, padded, ceil-mode max pooling and its backward with every dim symbolic: the scatter's
    index divides by a product of sizes, ``(s2 // 2)*Min(..)`` (printed without its parentheses once, which
    scattered every channel's gradient into the first)."""
    def f(x):  # (literal arguments: ints read from closure cells would be symbols under dynamic=True)
        out, idx = F.max_pool2d_with_indices(x, 3, 2, 1, (1, 2), ceil_mode=True, return_indices=True)
        return torch.ops.aten.max_pool2d_with_indices_backward.default(
            torch.ones_like(out), x, 3, 2, 1, (1, 2), True, idx)
    # (results only: torch 2.11's max_pool2d meta kernel guards parities of the width, more graphs there)
    check(f, lambda n: (torch.randn(1, n // 3, 3, n),), backend, sizes=(6, 9, 7, 13), dynamic=True)


def test_avg_pool2d_square_image(backend):
    def f(x):
        return F.avg_pool2d(torch.relu(x), 2) + 1
    check(f, lambda n: (torch.randn(1, 2, 2 * n, 2 * n),), backend, sizes=SHORT, graphs=2)


def test_max_pool_then_strided_conv_any_parity(backend):
    # the conv's output size over the pooled size, (s0 // 2 - 2) // 2: its dividend's sign is guarded,
    # not its value (each size compiled again, silently); odd and even sizes share the entry
    m = _seeded(lambda: nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(2, 3, 3, stride=2)))
    check(m, lambda n: (torch.randn(1, 2, 2 * n + n % 2, 2 * n + n % 2),), backend, sizes=SHORT, graphs=2)


@pytest.mark.parametrize("pool", [
    nn.AvgPool2d(3, 2, 1), nn.AvgPool2d(3, 2, 1, count_include_pad=False), nn.MaxPool2d(3, 2, 1),
    nn.AdaptiveAvgPool2d(3)], ids=["avg_pad", "avg_pad_nocount", "max_pad", "adaptive3"])
def test_pools_of_odd_sizes(backend, pool):
    # windows and divisors computed from the symbolic length (arange), not from a list of ints;
    # adaptive pooling to 3 of 5, 13, 32: none divisible, one entry (the divisible case is another)
    check(lambda x: pool(x) * 2, lambda n: (torch.randn(1, 2, n + 3, n + 3),), backend, sizes=(8, 5, 13, 32),
          graphs=2)


def test_conv_square_image_global_pool(backend):
    m = _seeded(lambda: nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.ReLU()))

    def f(x):
        h = m(x)
        return h.mean(dim=(2, 3)), h.amax(dim=(-2, -1))
    check(f, lambda n: (torch.randn(2, 2, n, n),), backend, sizes=SHORT, graphs=2)


# F.interpolate(size=...) of a symbolic-size input: the decompositions divide the sizes as 0-dim tensors
# (decomp/sampling._scale_of; a Python float of them pinned the sizes: 4 graphs, dynamo 2)


@pytest.mark.parametrize("backend", backends())
def test_interpolate_to_size_of_other_input(backend):
    # FPN-style top-down path: upsample the coarse map to the fine map's H/W
    def f(coarse, fine):
        return fine + F.interpolate(coarse, size=fine.shape[-2:], mode="nearest")
    check(f, lambda n: (torch.randn(1, 2, n, n), torch.randn(1, 2, 2 * n, 2 * n)), backend, sizes=SHORT,
          graphs=2)


@pytest.mark.parametrize("backend", backends())
def test_interpolate_bilinear_to_fixed_size(backend):
    def f(x):
        return F.interpolate(x, size=(4, 4), mode="bilinear", align_corners=False)
    check(f, lambda n: (torch.randn(1, 2, n, n),), backend, sizes=SHORT, graphs=2)


def test_adaptive_max_pool1d_fixed_output(backend):
    def f(x):
        return F.adaptive_max_pool1d(x, 4)
    check(f, lambda n: (torch.randn(2, 3, 4 * n),), backend, sizes=SHORT, graphs=2)


# ---------------------------------------------------------------------------------------------
# scans and reductions over symbolic dims
# ---------------------------------------------------------------------------------------------


def test_running_mean_with_cumsum(backend):
    def f(x):
        steps = torch.arange(1, x.size(1) + 1, dtype=x.dtype)
        return x.cumsum(1) / steps[None, :, None]
    check(f, lambda n: (torch.randn(2, n, 3),), backend, sizes=SHORT, graphs=2)


def test_reductions_over_dynamic_dim(backend):
    def f(x):
        return (x.var(1), x.std(1, unbiased=False), torch.logsumexp(x, 1), x.argmax(1), x.norm(dim=1),
                x.prod(1))
    check(f, lambda n: (torch.randn(3, n) * 0.5,), backend, sizes=SHORT, graphs=2)


def test_sort_and_gather_top_half(backend):
    def f(x):
        vals, idx = x.sort(dim=-1, descending=True)
        keep = idx[:, : x.size(-1) // 2]
        return torch.gather(x, 1, keep), vals[:, 0]
    check(f, lambda n: (torch.randn(3, n),), backend, sizes=SHORT, graphs=2)


def test_cumprod_and_cummax(backend):
    def f(x):
        return x.cumprod(0), torch.cummax(x, dim=0).values
    check(f, lambda n: (torch.rand(n, 2) + 0.5,), backend, sizes=SHORT, graphs=2)


# ---------------------------------------------------------------------------------------------
# cat / stack / split / slices of symbolic sizes
# ---------------------------------------------------------------------------------------------


def test_cat_with_flipped_and_stack_halves(backend):
    def f(x):
        both = torch.cat([x, x.flip(0)], dim=0)
        half = x.size(0) // 2
        return both * 2, torch.stack([x[:half], x[half:2 * half]], dim=1)
    check(f, lambda n: (torch.randn(n, 3),), backend, sizes=SHORT, graphs=2)


def test_split_into_sizes_from_shape(backend):
    def f(x):
        t = x.size(1)
        head, body, tail = torch.split(x, [1, t - 2, 1], dim=1)
        return head + tail, body.mean(1)
    check(f, lambda n: (torch.randn(2, n),), backend, sizes=SHORT, graphs=2)


def test_center_crop_from_sizes(backend):
    def f(x):
        h, w = x.shape[-2:]
        top, left = h // 4, w // 4
        return x[..., top:h - top, left:w - left]
    check(f, lambda n: (torch.randn(1, 2, n, n + 2),), backend, sizes=SHORT, graphs=2)


def test_shift_for_next_token_targets(backend):
    def f(logits, ids):
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
    check(f, lambda n: (torch.randn(2, n, 5), torch.randint(0, 5, (2, n))), backend, sizes=SHORT, graphs=2)


def test_diff_and_strided_downsample(backend):
    def f(x):
        return x[:, 1:] - x[:, :-1], x[:, ::2], x[:, 1::3]
    check(f, lambda n: (torch.randn(2, n),), backend, sizes=SHORT, graphs=2)


def test_unfold_sliding_windows(backend):
    def f(x):
        return x.unfold(1, 3, 1).mean(-1)
    check(f, lambda n: (torch.randn(2, n),), backend, sizes=SHORT, graphs=2)


def test_expand_repeat_for_beams(backend):
    def f(x):
        b, t = x.shape[:2]
        beams = 3
        return x[:, None].expand(b, beams, t, x.size(2)).reshape(b * beams, t, -1) * 1.5
    check(f, lambda n: (torch.randn(2, n, 4),), backend, sizes=SHORT, graphs=2)


def test_loop_over_fixed_size_chunks_specializes(backend):
    # the number of chunks is a Python constant of the loop: a guard on ceil(s0 / 4); 8 static, then
    # one entry for 2 chunks (7, 5, 6) and one for 3 (12)
    def f(x):
        outs = [c.sum(0, keepdim=True) for c in x.split(4)]
        return torch.cat(outs)
    check(f, lambda n: (torch.randn(n, 2),), backend, sizes=(8, 7, 5, 12, 6), graphs=3)


def test_loop_over_batch_in_microbatches_specializes(backend):
    def f(x, w):
        outs = []
        for i in range(0, x.size(0), 2):
            outs.append(x[i:i + 2] @ w)
        return torch.cat(outs)
    check(f, lambda n: (torch.randn(n, 3), torch.randn(3, 2)), backend, sizes=(4, 3, 4, 3), graphs=2)


# ---------------------------------------------------------------------------------------------
# attention-style code: rotary embeddings, masks from lengths, windows
# ---------------------------------------------------------------------------------------------


def test_rotary_embeddings(backend):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 4, 2).float() / 4))

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def f(q):
        t = torch.arange(q.size(2), dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return q * emb.cos() + rotate_half(q) * emb.sin()
    check(f, lambda n: (torch.randn(1, 2, n, 4),), backend, sizes=SHORT, graphs=2)


def test_key_padding_mask_attention(backend):
    def f(q, k, v, lengths):
        scores = q @ k.transpose(-1, -2) / 2.0
        pad = torch.arange(k.size(1))[None, :] >= lengths[:, None]
        scores = scores.masked_fill(pad[:, None, :], float("-inf"))
        return scores.softmax(-1) @ v
    check(f, lambda n: (torch.randn(2, 3, 4), torch.randn(2, n, 4), torch.randn(2, n, 4),
                        torch.tensor([n, max(n - 3, 1)])), backend, sizes=SHORT, graphs=2)


def test_sliding_window_mask_from_arange(backend):
    def f(scores):
        t = scores.size(-1)
        pos = torch.arange(t)
        window = (pos[:, None] - pos[None, :]).abs() <= 2
        return scores.masked_fill(~window, -1e9).softmax(-1)
    check(f, lambda n: (torch.randn(2, n, n),), backend, sizes=SHORT, graphs=2)


def test_cross_attention_different_lengths(backend):
    def f(q, kv):
        att = torch.einsum("bqd,bkd->bqk", q, kv).softmax(-1)
        return torch.einsum("bqk,bkd->bqd", att, kv)
    # both lengths change together but stay distinct: two symbols
    check(f, lambda n: (torch.randn(2, n, 4), torch.randn(2, n + 3, 4)), backend, sizes=SHORT, graphs=2)


def test_segment_sum_with_index_add(backend):
    def f(x, seg):
        out = x.new_zeros(4, x.size(1))
        return out.index_add(0, seg, x), torch.bincount(seg, minlength=4)
    check(f, lambda n: (torch.randn(n, 3), torch.randint(0, 4, (n,))), backend, sizes=SHORT, graphs=2)


def test_one_hot_and_scatter_over_dynamic_batch(backend):
    def f(labels, x):
        oh = F.one_hot(labels, num_classes=5).float()
        return oh.t() @ x, torch.zeros(labels.size(0), 5).scatter(1, labels[:, None], 1.0)
    check(f, lambda n: (torch.randint(0, 5, (n,)), torch.randn(n, 2)), backend, sizes=SHORT, graphs=2)


# ---------------------------------------------------------------------------------------------
# 0/1 specialization and guards that fail
# ---------------------------------------------------------------------------------------------


def test_truncate_to_max_length_guard(backend):
    class Truncate(nn.Module):
        max_len = 10

        def forward(self, x):
            if x.size(1) > self.max_len:
                x = x[:, -self.max_len:]
            return x.softmax(-1)
    # 8 static; 5 dynamic (s0 <= 10); 13 fails it: dynamic (s0 > 10); 2, 32, 9 hit one of them
    check(Truncate(), lambda n: (torch.randn(2, n),), backend, sizes=(8, 5, 13, 2, 32, 9), graphs=3)


def test_even_odd_pad_guard(backend):
    def f(x):
        if x.size(-1) % 2 == 1:
            x = F.pad(x, (0, 1))
        return x.view(x.size(0), -1, 2).sum(-1)
    check(f, lambda n: (torch.randn(3, n),), backend, sizes=(8, 6, 5, 13, 10, 2), graphs=3)


def test_sequence_of_one_token(backend):
    # decoding steps: a prompt (dynamic length), then single tokens (served by the dynamic entry: nothing
    # needed the length to be >= 2), then a prompt again
    def f(x, w):
        h = x @ w
        return h.softmax(1), h.size(1)
    check(f, lambda n: (torch.randn(2, n, 3), torch.randn(3, 3)), backend, sizes=(8, 5, 1, 1, 13), graphs=2)


def test_empty_and_single_row_batches(backend):
    def f(x):
        return torch.cat([x, x.mean(0, keepdim=True).expand(x.size(0), -1)], dim=1)
    # 8 static, 5 dynamic (serving 1 and 13), 0 its own entry; torch before 2.13 decides something about
    # this graph from sizes >= 2, so 1 gets an entry too
    two_13 = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)
    check(f, lambda n: (torch.randn(n, 2),), backend, sizes=(8, 5, 0, 1, 13, 0), graphs=3 if two_13 else 4)


def test_same_sizes_then_different(backend):
    # q and k have one length first (one symbol, guarded equal), then they differ: one more entry
    def f(q, k):
        return (q @ k.t()).softmax(-1)
    check(f, lambda n: (torch.randn(n, 4), torch.randn(n if n < 10 else n - 4, 4)), backend,
          sizes=(4, 5, 6, 13, 20, 7), graphs=3, dynamo_graphs=2)


def test_one_hot_with_num_classes_from_a_size(backend):
    """F.one_hot(idx, num_classes=x.shape[1]) is symbolic (ATen's C++ body asks for the number: one graph
    per size); class values outside [0, num_classes) raise as in eager, with a symbolic or a static count."""
    def f(x, idx):
        return F.one_hot(idx, num_classes=x.shape[1]).float() * x
    compiled = check(f, lambda n: (torch.rand(3, n), torch.randint(0, n, (3,))), backend, sizes=(3, 5, 7, 9),
                     graphs=2)
    for bad in ([0, 9, 1], [0, -1, 2]):
        with pytest.raises(RuntimeError):
            compiled(torch.rand(3, 9), torch.tensor(bad))
    # a static count too (ATen's body on fake tensors is an eq with an arange, without the range check)
    import kiln

    static = kiln.compile(lambda i: F.one_hot(i, 6) * 2, backend=backend, dynamic=False)
    assert torch.equal(static(torch.tensor([[0, 5], [2, 2]])), F.one_hot(torch.tensor([[0, 5], [2, 2]]), 6) * 2)
    for bad in ([0, 6, 1], [0, -1, 2]):
        with pytest.raises(RuntimeError):
            static(torch.tensor(bad))
