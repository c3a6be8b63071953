"""kiln.compile(model) with backend "kiln" against eager on small inference models: the graphs go
through generated C++ (no graph-level fallback) and match eager."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln
from kiln.debug.stats import stats


class TinyLM(nn.Module):
    """Embedding lookup (index), a padded causal conv (constant_pad_nd), attention, layer norm, cat."""

    def __init__(self, vocab=50, d=16, heads=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(12, d) * 0.1)
        self.conv = nn.Conv1d(d, d, 3)
        self.qkv = nn.Linear(d, 3 * d)
        self.norm = nn.LayerNorm(2 * d)
        self.head = nn.Linear(2 * d, vocab)
        self.heads = heads

    def forward(self, tokens):
        b, t = tokens.shape
        x = self.emb(tokens) + self.pos[:t]
        c = self.conv(F.pad(x.transpose(1, 2), (2, 0))).transpose(1, 2)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = [y.view(b, t, self.heads, -1).transpose(1, 2) for y in (q, k, v)]
        att = (q @ k.transpose(-1, -2)) / 8 ** 0.5
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, -1)
        h = self.norm(torch.cat([y, F.gelu(c)], -1))
        logits = self.head(h)
        return logits, logits.argmax(-1), torch.gather(logits, 2, tokens[..., None] % 7)


def test_small_models_through_generated_code():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 16), nn.LayerNorm(16), nn.Softmax(-1)).eval()
    lm = TinyLM().eval()
    cases = [(mlp, (torch.randn(4, 8),)), (lm, (torch.randint(0, 50, (2, 10)),))]
    for model, args in cases:
        stats.reset()
        kiln.reset()
        with torch.no_grad():
            expected = model(*args)
            got = kiln.compile(model)(*args)
        assert not stats.eager_fallbacks, stats.eager_fallbacks
        assert stats.kernels_generated > 0
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
