"""torch.* and torch.nn.functional.* calls, the way model code writes them."""
import math

import torch
import torch.nn.functional as F

from .harness import check


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def test_torch_pointwise_functions():
    def fn(x):
        return torch.exp(x), torch.log1p(x.abs()), torch.sin(x) + torch.cos(x), torch.tanh(x), torch.erf(x)

    check(fn, _t(6))


def test_torch_constructors_in_graph():
    def fn(x):
        n = x.shape[-1]
        pos = torch.arange(n, dtype=torch.float32)
        eye = torch.eye(n)
        full = torch.full((n,), 0.5)
        lin = torch.linspace(0, 1, steps=n)
        return x + pos + full + lin, x @ eye

    check(fn, _t(2, 5))


def test_scaled_attention_scores_with_mask():
    def fn(q, k, v, mask):
        d = q.shape[-1]
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d)
        scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
        attn = F.softmax(scores, dim=-1)
        return torch.matmul(attn, v), attn

    mask = torch.tensor([[1, 1, 1, 0]]).expand(4, 4)
    check(fn, _t(2, 4, 8), _t(2, 4, 8, seed=1), _t(2, 4, 8, seed=2), mask)


def test_causal_mask_from_triu():
    def fn(x):
        t = x.size(1)
        causal = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        scores = x @ x.transpose(1, 2) + causal
        return scores.softmax(-1)

    check(fn, _t(2, 5, 3))


def test_causal_mask_from_tril_ones():
    def fn(scores):
        t = scores.shape[-1]
        keep = torch.tril(torch.ones(t, t, dtype=torch.bool))
        return torch.where(keep, scores, torch.tensor(float("-inf"))).softmax(dim=-1)

    check(fn, _t(3, 3))


def test_functional_activations():
    def fn(x):
        return F.relu(x), F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), F.leaky_relu(x, 0.1), F.elu(x), F.softplus(x)

    check(fn, _t(7))


def test_functional_linear_and_layer_norm():
    def fn(x, w, b):
        h = F.linear(x, w, b)
        return F.layer_norm(h, (h.shape[-1],), eps=1e-5)

    check(fn, _t(3, 4), _t(6, 4, seed=1), _t(6, seed=2))


def test_rms_norm_by_hand():
    def fn(x, weight):
        eps = 1e-6
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + eps)
        return weight * x

    check(fn, _t(2, 3, 8), torch.ones(8) * 1.5)


def test_gated_mlp_functional():
    def fn(x, w_gate, w_up, w_down):
        return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)

    check(fn, _t(2, 8), _t(16, 8, seed=1), _t(16, 8, seed=2), _t(8, 16, seed=3))


def test_rotary_embedding():
    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def fn(q, k):
        seq, dim = q.shape[-2], q.shape[-1]
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        t = torch.arange(seq, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    check(fn, _t(1, 2, 5, 8), _t(1, 2, 5, 8, seed=1))


def test_functional_dropout_eval_and_pad():
    def fn(x):
        y = F.dropout(x, p=0.5, training=False)
        return F.pad(y, (1, 2)), F.pad(y, (0, 0, 1, 0), value=3.0)

    check(fn, _t(2, 3))


def test_cross_entropy_and_mse():
    def fn(logits, target, pred, ref):
        return F.cross_entropy(logits, target), F.mse_loss(pred, ref), F.nll_loss(logits.log_softmax(-1), target, reduction="sum")

    check(fn, _t(4, 5), torch.tensor([0, 3, 1, 4]), _t(3, seed=1), _t(3, seed=2))


def test_conv_and_pool_functional():
    def fn(x, w):
        y = F.conv2d(x, w, padding=1)
        return F.max_pool2d(y, 2), F.avg_pool2d(y, kernel_size=2, stride=2), F.adaptive_avg_pool2d(y, 1).flatten(1)

    check(fn, _t(1, 2, 6, 6), _t(3, 2, 3, 3, seed=1))


def test_scaled_dot_product_attention():
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    check(fn, _t(1, 2, 4, 8), _t(1, 2, 4, 8, seed=1), _t(1, 2, 4, 8, seed=2), atol=1e-5, rtol=1e-5)


def test_torch_where_and_clamp_with_scalars():
    def fn(x):
        return torch.where(x > 0, x, 0.0), torch.clamp(x, min=-0.1), torch.maximum(x, torch.zeros_like(x))

    check(fn, _t(6))


def test_einsum_and_bmm():
    def fn(a, b):
        return torch.einsum("bij,bjk->bik", a, b), torch.bmm(a, b), torch.einsum("bij->bj", a)

    check(fn, _t(2, 3, 4), _t(2, 4, 5, seed=1))


def test_cumsum_sort_topk():
    def fn(x):
        vals, idx = torch.sort(x, dim=-1, descending=True)
        probs = vals.softmax(-1).cumsum(-1)
        return probs, idx, torch.topk(x, k=2).indices, torch.argsort(x, dim=-1)

    check(fn, _t(2, 6))


def test_normalize_and_cosine_similarity():
    def fn(a, b):
        return F.normalize(a, dim=-1), F.cosine_similarity(a, b, dim=-1)

    check(fn, _t(3, 4), _t(3, 4, seed=1))


def test_one_hot_and_embedding_functional():
    def fn(ids, table):
        return F.one_hot(ids, num_classes=5).float() @ table, F.embedding(ids, table)

    check(fn, torch.tensor([0, 4, 2]), _t(5, 3))


def test_torch_functions_with_out_of_graph_kwargs():
    def fn(x):
        return torch.sum(x, dim=(0, 1), keepdim=False), torch.mean(x, dim=-1, dtype=torch.float64), torch.flatten(x, start_dim=1)

    check(fn, _t(2, 3, 4))


def test_interpolate_nearest():
    def fn(x):
        return F.interpolate(x, scale_factor=2, mode="nearest"), F.interpolate(x, size=(3, 3), mode="bilinear", align_corners=False)

    check(fn, _t(1, 1, 2, 2))


def test_torch_ops_aten_overloads_called_directly():
    def fn(x, y):
        a = torch.ops.aten.add.Tensor(x, y)  # an OpOverload
        b = torch.ops.aten.mul(a, 2)  # an OpOverloadPacket
        c = torch.ops.aten._softmax(b, -1, False)
        return torch.ops.aten.slice.Tensor(c, 1, 0, 2), torch.ops.aten.sum.default(c)

    check(fn, _t(3, 4), _t(3, 4, seed=1), fullgraph=True)
