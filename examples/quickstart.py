"""A real example: compile a small transformer block with kiln and compare it with eager PyTorch."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln


class Block(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


def main() -> None:
    torch.manual_seed(0)
    model = Block().eval()
    compiled = kiln.compile(model)
    x = torch.randn(2, 16, 64)
    with torch.no_grad():
        expected = model(x)
        got = compiled(x)
        compiled(x)  # a second call hits the cache
    torch.testing.assert_close(got, expected)
    report = kiln.explain(compiled)(x)
    print(report)
    print()
    print("kiln.stats:", kiln.stats.snapshot())
    print(f"\nOK: kiln's output equals eager's (max abs diff {(got - expected).abs().max().item():.2e}); "
          f"{report.graph_count} graph, {report.ops_per_graph[0]} ops.")


if __name__ == "__main__":
    main()
