"""Attention masks proven causal (or proven to keep every score) are traced as ``is_causal=True`` (or no
mask): aot/causal_mask.py. End to end against eager, and the proof's refusals."""
import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln.debug.stats import stats


def _qkv(b=2, h=3, L=7, S=7, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, L, d, generator=g), torch.randn(b, h, S, d, generator=g),
            torch.randn(b, h, S, d, generator=g))


def _run(fn, *args, dynamic=False, **kwargs):
    kiln.reset()
    stats.reset()
    compiled = kiln.compile(fn, dynamic=dynamic)
    got = compiled(*args, **kwargs)
    torch.testing.assert_close(got, fn(*args, **kwargs), atol=1e-5, rtol=1e-5)
    return set(stats.causal_masks)  # (a dynamic graph may be traced more than once)


def hf_causal(q, k, v):
    # transformers 5.17's sdpa_mask: kv_idx <= q_idx from two position ranges, expanded to the batch
    L, S = q.shape[-2], k.shape[-2]
    q_idx = torch.arange(L)
    kv_idx = torch.arange(S)
    mask = kv_idx[None, None, None, :] <= q_idx[None, None, :, None]
    mask = mask.expand(q.shape[0], -1, L, S)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("dynamic", [False, True])
def test_positions_mask_becomes_is_causal(dynamic):
    assert _run(hf_causal, *_qkv(), dynamic=dynamic) == {"causal"}


def test_written_other_ways():
    def ge_form(q, k, v):  # q_idx >= kv_idx, 2-D mask
        L = q.shape[-2]
        pos = torch.arange(L)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=pos.unsqueeze(1) >= pos.unsqueeze(0))

    def lt_form(q, k, v):  # kv_idx < q_idx + 1
        L = q.shape[-2]
        pos = torch.arange(L)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=pos[None, :] < pos[:, None] + 1)

    def bias_form(q, k, v):  # 0 / -inf float mask in q's dtype
        L = q.shape[-2]
        pos = torch.arange(L)
        keep = pos[None, :] <= pos[:, None]
        zero, ninf = torch.tensor(0.0), torch.tensor(float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.where(keep, zero, ninf))

    for fn in (ge_form, lt_form, bias_form):
        assert _run(fn, *_qkv()) == {"causal"}, fn.__name__


def test_more_keys_than_queries_keeps_upper_left_alignment():
    # SDPA's is_causal is tril(ones(L, S)): key j kept for query i when j <= i, as this mask says
    assert _run(hf_causal, *_qkv(L=5, S=9)) == {"causal"}


def test_mask_keeping_everything_is_dropped():
    def bert_like(q, k, v):  # transformers 5.17's bidirectional mask without padding: positions >= 0
        S = k.shape[-2]
        keep = (torch.arange(S)[None, None, :, None] >= 0).expand(q.shape[0], -1, q.shape[-2], S)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.where(keep, torch.tensor(0.0),
                                                                              torch.tensor(float("-inf"))))

    assert _run(bert_like, *_qkv(L=6, S=6)) == {"none"}


def test_masks_that_are_not_causal_stay():
    def shifted(q, k, v):  # j <= i + 1: not causal
        pos = torch.arange(q.shape[-2])
        return F.scaled_dot_product_attention(q, k, v, attn_mask=pos[None, :] <= pos[:, None] + 1)

    def window(q, k, v):  # causal and a sliding window
        pos = torch.arange(q.shape[-2])
        mask = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - 3)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def from_one(q, k, v):  # positions from 1: j + 1 <= i + 1 is causal, but this is j <= i + 1
        pos = torch.arange(q.shape[-2])
        return F.scaled_dot_product_attention(q, k, v, attn_mask=pos[None, :] <= torch.arange(1, q.shape[-2] + 1)[:, None])

    def finfo_min(q, k, v):  # a large negative number is not -inf: the scores differ
        pos = torch.arange(q.shape[-2])
        keep = pos[None, :] <= pos[:, None]
        bias = torch.where(keep, torch.tensor(0.0), torch.tensor(torch.finfo(torch.float32).min))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    def given(q, k, v, mask):  # a mask from the caller: not proven
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    for fn in (shifted, window, from_one, finfo_min):
        assert _run(fn, *_qkv()) == set(), fn.__name__
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    assert _run(given, *_qkv(), causal) == set()


def test_row_broadcast_from_size_one_is_not_causal():
    # the query positions broadcast from a size-1 dim: every row is j <= 0, not causal
    def row0(q, k, v):
        L = q.shape[-2]
        mask = torch.arange(L)[None, :] <= torch.arange(1)[:, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.expand(L, L))

    assert _run(row0, *_qkv()) == set()


def test_mask_eager_refuses_still_raises():
    def wrong_batch(q, k, v):  # a batch of 3 masks for a batch of 2: eager raises
        L = q.shape[-2]
        pos = torch.arange(L)
        mask = (pos[None, :] <= pos[:, None]).expand(3, 1, L, L)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    kiln.reset()
    stats.reset()
    with pytest.raises(RuntimeError):
        wrong_batch(*_qkv())
    with pytest.raises(RuntimeError):
        kiln.compile(wrong_batch)(*_qkv())
    assert dict(stats.causal_masks) == {}


def test_describe_forms_on_a_traced_graph():
    # the proof's unit: each traced node's form
    from kiln.aot.causal_mask import Form, describe
    from kiln.aot.builder import GraphBuilder  # noqa: F401  (the graphs the proof reads carry meta["val"])
    import torch.fx as fx

    g = fx.Graph()
    aten = torch.ops.aten

    def node(target, *args, val):
        n = g.call_function(target, args)
        n.meta["val"] = val
        return n

    ar = node(aten.arange.start_step, 0, 5, val=torch.arange(5))
    row = node(aten.unsqueeze.default, ar, 1, val=torch.arange(5)[:, None])
    col = node(aten.unsqueeze.default, ar, 0, val=torch.arange(5)[None, :])
    shifted = node(aten.add.Tensor, row, 2, val=torch.arange(5)[:, None] + 2)
    mask = node(aten.le.Tensor, col, shifted, val=torch.ones(5, 5, dtype=torch.bool))
    assert describe(ar, {}) == Form("positions", 1, (0,), 0)
    assert describe(row, {}) == Form("positions", 2, (0,), 0)
    assert describe(mask, {}) == Form("lower", 2, (0, 1), 2)
    stepped = node(aten.arange.start_step, 0, 10, 2, val=torch.arange(0, 10, 2))
    assert describe(stepped, {}) is None


def test_positions_that_wrap_around_in_their_dtype_are_not_proven():
    # eager's int32/int64 positions wrap past the dtype's maximum: the mask is not causal (nor all true)
    o = 2**31 - 3

    def int32_start(q, k, v):
        S, L = k.shape[-2], q.shape[-2]
        mask = torch.arange(o, o + S, dtype=torch.int32)[None, :] <= torch.arange(o, o + L, dtype=torch.int32)[:, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def int32_all_true(q, k, v):
        S, L = k.shape[-2], q.shape[-2]
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=(torch.arange(o, o + S, dtype=torch.int32) >= 0)[None, :].expand(L, S))

    def int64_shift(q, k, v):
        S, L = k.shape[-2], q.shape[-2]
        c = 2**63 - 3
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=torch.arange(S)[None, :] + c <= torch.arange(L)[:, None] + c)

    for fn in (int32_start, int32_all_true):
        assert _run(fn, *_qkv(b=1, h=1, L=6, S=6)) == set(), fn.__name__
    kiln.reset()
    stats.reset()
    kiln.compile(int64_shift)(*_qkv(b=1, h=1, L=6, S=6))  # (kiln's own kernels for this mask: not checked here)
    assert set(stats.causal_masks) == set()


def test_a_mask_that_would_grow_the_scores_raises_as_in_eager():
    # ATen adds the mask in place: a 5-D mask on 4-D attention raises in eager (fakes add out of place)
    def made(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.full((1, 1, 1, 7, 7), 0.0))

    def given(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    kiln.reset()
    for fn, args in ((made, _qkv()), (given, (*_qkv(), torch.randn(1, 1, 1, 7, 7)))):
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            fn(*args)
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            kiln.compile(fn)(*args)
    ok = torch.randn(3, 7, 7)  # (a mask of fewer dims broadcasts into the scores: fine)
    torch.testing.assert_close(kiln.compile(given)(*_qkv(), ok), given(*_qkv(), ok))
