"""Dynamic-shape corpus: nn.Module layers with dynamic batch / sequence / image sizes (inference), and
training steps (backward, input and parameter gradients, SGD steps over batches of changing size)."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from .harness import backends, check, sgd

TORCH_2_13 = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)

SEQS = (8, 5, 13, 2, 16)


def _seeded(module_fn):
    torch.manual_seed(0)
    return module_fn()


def test_mlp_dynamic_batch(backend):
    m = _seeded(lambda: nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 3)))
    check(m, lambda n: (torch.randn(n, 6),), backend, graphs=2)


def test_layernorm_dynamic_seq(backend):
    m = _seeded(lambda: nn.LayerNorm(8))
    check(m, lambda n: (torch.randn(2, n, 8),), backend, graphs=2)


def test_embedding_with_positions(backend):
    class Emb(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(20, 8)
            self.pos = nn.Embedding(32, 8)

        def forward(self, ids):
            pos = torch.arange(ids.shape[1]).unsqueeze(0)
            return self.tok(ids) + self.pos(pos)
    check(_seeded(Emb), lambda n: (torch.randint(0, 20, (2, n)),), backend, sizes=SEQS, graphs=2)


def test_conv2d_dynamic_image_size(backend):
    # H and W two symbols; a stride-2 conv's output size guards its dividend's sign, not its value
    m = _seeded(lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 2, 3, stride=2)))
    check(m, lambda n: (torch.randn(1, 3, n + 4, n + 6),), backend, graphs=2)


def test_conv2d_dynamic_batch_pool_flatten(backend):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3)
            self.fc = nn.Linear(4 * 3 * 3, 2)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv(x)), 2)
            return self.fc(x.view(x.size(0), -1))
    # dynamo: 3 (its conv backend choice guards on batch >= 16; kiln skips that choice for contiguous
    # operands, an input with one channel included: channels-last too, but NCHW as ATen reads it)
    check(_seeded(Net), lambda n: (torch.randn(n, 1, 8, 8),), backend, graphs=2, dynamo_graphs=3)


def test_channels_last_features_into_adaptive_avg_pool(backend):
    # ATen's adaptive_avg_pool2d to 1x1 of a channels-last input relabels its (n, c, 1, 1) mean with
    # as_strided_ (on CUDA every convolution output is channels-last): one dynamic graph, not one per size
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.pool = nn.AdaptiveAvgPool2d(1)

        def forward(self, x):
            x = x.contiguous(memory_format=torch.channels_last)
            return self.pool(torch.relu(self.conv(x))).flatten(1)
    # (torch before 2.13: its conv backend choice for channels-last operands guards on the batch size)
    with torch.no_grad():
        check(_seeded(Net), lambda n: (torch.randn(n, 3, 8, 8),), backend, graphs=2 if TORCH_2_13 else 3)


def test_adaptive_avg_pool_dynamic_hw(backend):
    m = _seeded(lambda: nn.Sequential(nn.Conv2d(2, 4, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten()))
    check(m, lambda n: (torch.randn(2, 2, n, n + 1),), backend, graphs=2)


def test_conv1d_over_sequence(backend):
    m = _seeded(lambda: nn.Conv1d(4, 6, kernel_size=3, padding=1))
    check(m, lambda n: (torch.randn(2, 4, n),), backend, graphs=2)


def test_multihead_attention_dynamic_seq(backend):
    m = _seeded(lambda: nn.MultiheadAttention(8, 2, batch_first=True)).eval()

    def make(n):
        x = torch.randn(2, n, 8)
        return x, x, x
    # (torch 2.11's C++ linear cannot take symbolic sizes; inside F.multi_head_attention_forward, which
    # runs whole on fakes, kiln's own linear rule is not reached: a static compile per size)
    check(m, make, backend, sizes=SEQS, graphs=2 if TORCH_2_13 else None)


def test_gru_dynamic_seq(backend):
    m = _seeded(lambda: nn.GRU(4, 6, batch_first=True))
    check(m, lambda n: (torch.randn(2, n, 4),), backend, sizes=(8, 5, 13))


def test_batchnorm_eval_dynamic_batch(backend):
    m = _seeded(lambda: nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))).eval()
    check(m, lambda n: (torch.randn(n, 4),), backend, graphs=2)


def test_batchnorm_train_updates_running_stats(backend):
    m = _seeded(lambda: nn.BatchNorm1d(3))
    check(m, lambda n: (torch.randn(n, 3),), backend, graphs=2)


def test_sdpa_causal_dynamic_seq(backend):
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    check(f, lambda n: tuple(torch.randn(1, 2, n, 4) for _ in range(3)), backend, graphs=2)


def test_interpolate_scale_factor(backend):
    def f(x):
        return F.interpolate(x, scale_factor=2, mode="nearest")
    check(f, lambda n: (torch.randn(1, 2, n, n),), backend, graphs=2)


def test_cross_entropy_dynamic_batch(backend):
    def f(logits, target):
        return F.cross_entropy(logits, target)
    check(f, lambda n: (torch.randn(n, 5), torch.randint(0, 5, (n,))), backend, graphs=2)


class TinyGPTBlock(nn.Module):
    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


def test_gpt_block_inference(backend):
    check(_seeded(TinyGPTBlock), lambda n: (torch.randn(2, n, 8),), backend, sizes=SEQS, graphs=2)


# ---------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------


def test_train_mlp_dynamic_batch(backend):
    m = _seeded(lambda: nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)))
    check(m, lambda n: (torch.randn(n, 4),), backend, train=True, graphs=2)


def test_train_mlp_sgd_steps(backend):
    m = _seeded(lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)))

    def loss_fn_input(n):
        return (torch.randn(n, 4),)
    check(m, loss_fn_input, backend, train=True, steps=sgd(0.05), graphs=2)


def test_train_loss_mean_over_batch(backend):
    lin = _seeded(lambda: nn.Linear(3, 1))

    def f(x, y):
        return F.mse_loss(lin(x).squeeze(-1), y)
    check(f, lambda n: (torch.randn(n, 3), torch.randn(n)), backend, train=True, graphs=2)


def test_train_through_views(backend):
    def f(x, w):
        b, t, c = x.shape
        y = (x.reshape(b * t, c) @ w).view(b, t, -1)
        return y.transpose(1, 2).softmax(-1).sum(1)
    check(f, lambda n: (torch.randn(2, n, 4), torch.randn(4, 3)), backend, train=True, graphs=2)


def test_train_embedding_layernorm(backend):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(16, 6)
            self.ln = nn.LayerNorm(6)
            self.head = nn.Linear(6, 16)

        def forward(self, ids):
            return F.cross_entropy(self.head(self.ln(self.emb(ids))).view(-1, 16), ids.view(-1))
    check(_seeded(M), lambda n: (torch.randint(0, 16, (2, n)),), backend, sizes=SEQS, train=True,
          steps=sgd(0.1), graphs=2)


def test_train_gpt_block_dynamic_seq(backend):
    check(_seeded(TinyGPTBlock), lambda n: (torch.randn(2, n, 8),), backend, sizes=SEQS, train=True,
          steps=sgd(0.01), graphs=2)


def test_train_conv_dynamic_batch(backend):
    m = _seeded(lambda: nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 4 * 4, 2)))
    check(m, lambda n: (torch.randn(n, 2, 6, 6),), backend, train=True, graphs=2)  # dynamo: 3


def test_train_masked_mean_pooling(backend):
    lin = _seeded(lambda: nn.Linear(4, 4))

    def f(x, lengths):
        mask = (torch.arange(x.shape[1])[None, :] < lengths[:, None]).float()
        h = torch.relu(lin(x)) * mask[..., None]
        return h.sum(1) / mask.sum(1, keepdim=True)
    check(f, lambda n: (torch.randn(3, n, 4), torch.tensor([n, 1, max(n - 2, 1)])), backend, train=True,
          graphs=2)


def test_train_dynamic_padding_loop(backend):
    # a fine-tuning loop with dynamic padding: each batch is padded to its longest sequence
    class Clf(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(12, 8, padding_idx=0)
            self.block = TinyGPTBlock()
            self.out = nn.Linear(8, 3)

        def forward(self, ids, labels):
            h = self.block(self.emb(ids))
            keep = (ids != 0).float().unsqueeze(-1)
            pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1)
            return F.cross_entropy(self.out(pooled), labels)

    def batch(n):
        ids = torch.randint(1, 12, (3, n))
        ids[1, n // 2:] = 0
        return ids, torch.randint(0, 3, (3,))
    check(_seeded(Clf), batch, backend, sizes=(8, 5, 13, 3, 9), train=True, steps=sgd(0.05), graphs=2)
