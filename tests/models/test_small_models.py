"""End-to-end: small models written here, compiled with kiln, against eager (outputs, buffers, grads)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln


from tests.corpus.harness import CountingBackend as Counter  # records each graph, runs it as is


class MLP(nn.Module):
    def __init__(self, d=16, hidden=32, out=4):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, out)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        x = self.drop(F.gelu(self.fc1(x)))
        x = x + F.silu(self.fc2(x))
        return self.head(x)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block = nn.ModuleList([nn.Conv2d(8, 8, 3, padding=1) for _ in range(2)])
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = self.stem(x)
        for conv in self.block:
            x = x + F.relu(conv(x))
        x = self.pool(self.bn(x)).flatten(1)
        return self.fc(x)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = [y.view(b, t, self.heads, -1).transpose(1, 2) for y in (q, k, v)]
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        y = scores.softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class TransformerBlock(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, causal: bool = True):
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1) if causal else None
        x = x + self.attn(self.ln1(x), mask=mask)
        return x + self.mlp(self.ln2(x))


def run_both(model, *args, train=False, **kwargs):
    torch.manual_seed(0)
    eager = copy.deepcopy(model).train(train)
    compiled_src = copy.deepcopy(model).train(train)
    counter = Counter()
    compiled = kiln.compile(compiled_src, backend=counter)
    for _ in range(2):
        torch.manual_seed(1)
        expected = eager(*args, **kwargs)
        torch.manual_seed(1)
        got = compiled(*args, **kwargs)
        torch.testing.assert_close(got, expected)
    return eager, compiled_src, compiled, counter


def setup_function():
    kiln.reset()


def test_mlp_eval_one_graph():
    x = torch.randn(8, 16)
    _, _, compiled, counter = run_both(MLP(), x)
    assert len(counter.graphs) == 1
    assert isinstance(compiled, MLP)


def test_mlp_training_dropout_and_gradients():
    x = torch.randn(8, 16)
    eager, src, compiled, counter = run_both(MLP(), x, train=True)
    assert len(counter.graphs) == 1
    torch.manual_seed(3)
    eager(x).sum().backward()
    torch.manual_seed(3)
    compiled(x).sum().backward()
    for (name, p), q in zip(eager.named_parameters(), src.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)


def test_cnn_batchnorm_train_updates_running_stats():
    x = torch.randn(4, 3, 8, 8)
    eager, src, compiled, counter = run_both(ConvNet(), x, train=True)
    assert len(counter.graphs) == 1
    for (name, b), c in zip(eager.named_buffers(), src.buffers()):
        torch.testing.assert_close(c, b, msg=name)
    assert src.bn.num_batches_tracked.item() == 2


def test_cnn_eval_then_train_recompiles_once():
    x = torch.randn(2, 3, 8, 8)
    model = ConvNet()
    counter = Counter()
    compiled = kiln.compile(model, backend=counter)
    model.eval()
    compiled(x)
    compiled(x)
    compiled.train()  # shares state with model: the training flag is guarded
    assert model.training
    compiled(x)
    assert len(counter.graphs) == 2


def test_transformer_block_with_causal_mask():
    x = torch.randn(2, 6, 32)
    _, _, _, counter = run_both(TransformerBlock().eval(), x)
    assert len(counter.graphs) == 1
    ops = [n for n in counter.graphs[0].graph.nodes if n.op in ("call_function", "call_method")]
    assert len(ops) > 15


def test_transformer_block_kwarg_branch_recompiles():
    x = torch.randn(2, 6, 32)
    block = TransformerBlock().eval()
    counter = Counter()
    compiled = kiln.compile(block, backend=counter)
    torch.testing.assert_close(compiled(x, causal=False), block(x, causal=False))
    torch.testing.assert_close(compiled(x, causal=True), block(x, causal=True))
    assert len(counter.graphs) == 2


def test_compiled_module_behaves_like_the_module():
    model = MLP()
    compiled = kiln.compile(model)
    assert list(compiled.state_dict()) == list(model.state_dict())
    assert compiled.fc1 is model.fc1
    assert [p is q for p, q in zip(compiled.parameters(), model.parameters())] == [True] * 6
    compiled.eval()
    assert not model.training
    compiled.train()
    assert model.training
    compiled.load_state_dict(MLP().state_dict())
    torch.testing.assert_close(compiled.fc1.weight, model.fc1.weight)


def test_gru_kiln_backend_matches_eager():
    # the GRU cell's unsafe_split returns views of a buffer the wrapper used to hand to a later buffer
    torch.manual_seed(0)
    m = nn.GRU(4, 6, batch_first=True)
    x = torch.randn(2, 8, 4)
    with torch.no_grad():
        out, h = kiln.compile(m, backend="kiln")(x)
        ref_out, ref_h = m(x)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(h, ref_h)
