"""nn.Module code: layers, containers, parameters/buffers, training flags, attribute constants, super()."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .harness import check, check_recompiles


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def _seeded(cls, *args, **kwargs):
    torch.manual_seed(0)
    return cls(*args, **kwargs)


class MLP(nn.Module):
    def __init__(self, dim=8, hidden=16):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.act = nn.GELU()

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class GatedMLP(nn.Module):
    def __init__(self, dim=8, hidden=12):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Attention(nn.Module):
    def __init__(self, dim=8, heads=2, causal=True):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim ** -0.5
        self.causal = causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, attention_mask=None):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = [z.view(b, t, self.heads, self.head_dim).transpose(1, 2) for z in (q, k, v)]
        scores = (q @ k.transpose(-2, -1)) * self.scale
        if self.causal:
            causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
            scores = scores.masked_fill(causal, float("-inf"))
        if attention_mask is not None:
            scores = scores + attention_mask[:, None, None, :]
        attn = scores.softmax(dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(b, t, c)
        return self.out(y)


class Block(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = GatedMLP(dim)

    def forward(self, x, attention_mask=None):
        x = x + self.attn(self.ln1(x), attention_mask=attention_mask)
        return x + self.mlp(self.ln2(x))


def test_linear_and_activation_modules():
    check(_seeded(MLP), _t(3, 8))


def test_gated_mlp():
    check(_seeded(GatedMLP), _t(2, 4, 8))


def test_attention_module_with_mask_kwarg():
    mask = torch.tensor([[0.0, 0.0, -1e9, 0.0], [0.0, 0.0, 0.0, 0.0]])
    check(_seeded(Attention), _t(2, 4, 8), kwargs={"attention_mask": mask})


def test_transformer_block_residuals():
    check(_seeded(Block), _t(2, 3, 8), atol=1e-5, rtol=1e-5)


def test_sequential():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2), nn.Softmax(dim=-1))
    check(model, _t(3, 4))


def test_sequential_with_ordered_names_and_indexing():
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))

        def forward(self, x):
            x = self.layers[0](x)
            x = self.layers[1:](x)
            return x + self.layers[-1].bias

    check(_seeded(Head), _t(2, 4))


def test_modulelist_iteration_and_indexing():
    class Stack(nn.Module):
        def __init__(self, n=3):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])
            self.norms = nn.ModuleList(nn.LayerNorm(4) for _ in range(n))

        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = self.norms[i](x + layer(x))
            return self.layers[-1](x) + len(self.layers)

    check(_seeded(Stack), _t(2, 4))


def test_modulelist_zip_and_slicing():
    class Pyramid(nn.Module):
        def __init__(self):
            super().__init__()
            self.down = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)])
            self.scales = [0.5, 1.0, 2.0]

        def forward(self, x):
            outs = []
            for layer, s in zip(self.down[:2], self.scales):
                x = layer(x) * s
                outs.append(x)
            return outs

    check(_seeded(Pyramid), _t(1, 4))


def test_moduledict():
    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = nn.ModuleDict({"cls": nn.Linear(4, 3), "reg": nn.Linear(4, 1)})

        def forward(self, x, task="cls"):
            out = {name: head(x) for name, head in self.heads.items()}
            out["chosen"] = self.heads[task](x)
            return out, "reg" in self.heads, list(self.heads.keys())

    check(_seeded(Heads), _t(2, 4))
    check(_seeded(Heads), _t(2, 4), kwargs={"task": "reg"})


def test_nested_submodules_and_attribute_chains():
    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block(8)
            self.final = nn.LayerNorm(8)

        def forward(self, x):
            return self.final(self.block(x)) + self.block.mlp.down_proj.weight.sum(1)

    check(_seeded(Encoder), _t(1, 3, 8), atol=1e-5, rtol=1e-5)


def test_parameters_and_buffers_access():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.linspace(-1, 1, 6).reshape(2, 3))
            self.register_buffer("offset", torch.arange(3.0))
            self.register_buffer("unused", None)

        def forward(self, x):
            if self.unused is None:
                x = x + self.offset
            return x @ self.weight.t() + self.weight.shape[0]

    check(_seeded(Scaled), _t(4, 3))


def test_parameter_requires_grad_output():
    check(_seeded(nn.Linear, 3, 2), _t(4, 3))


def test_conv_batchnorm_eval():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2))
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 1.5)
    model.eval()
    check(model, _t(2, 2, 6, 6), atol=1e-5, rtol=1e-5)


def test_batchnorm_training_updates_buffers():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    model.train()
    check(model, _t(6, 4), atol=1e-5, rtol=1e-5)


def test_embedding_layernorm_dropout_eval():
    class Embed(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(10, 8)
            self.pos = nn.Embedding(6, 8)
            self.norm = nn.LayerNorm(8, eps=1e-6)
            self.drop = nn.Dropout(0.1)

        def forward(self, ids):
            positions = torch.arange(ids.shape[1]).unsqueeze(0)
            return self.drop(self.norm(self.tok(ids) + self.pos(positions)))

    model = _seeded(Embed).eval()
    check(model, torch.tensor([[1, 2, 3], [4, 5, 9]]))


def test_training_flag_branches():
    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            if self.training:
                return self.lin(x) * 0.5
            return self.lin(x)

    check(_seeded(Noisy).train(), _t(2, 3))
    check(_seeded(Noisy).eval(), _t(2, 3))


def test_train_eval_switch_recompiles():
    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(x) * (0.5 if self.training else 1.0)

    model = _seeded(Noisy)
    from .harness import CountingBackend, compile_fn, reset

    reset()
    counter = CountingBackend()
    compiled = compile_fn(model, counter)
    x = _t(2, 3)
    model.train()
    torch.testing.assert_close(compiled(x), model.lin(x) * 0.5)
    model.eval()
    torch.testing.assert_close(compiled(x), model.lin(x))
    model.train()
    compiled(x)
    assert len(counter.graphs) == 2


def test_module_attribute_constants():
    class Pool(nn.Module):
        def __init__(self, mode="mean", dims=(1,), n_out=2):
            super().__init__()
            self.mode = mode
            self.dims = dims
            self.n_out = n_out
            self.proj = nn.Linear(4, n_out)

        def forward(self, x):
            if self.mode == "mean":
                x = x.mean(dim=self.dims)
            elif self.mode == "max":
                x = x.amax(dim=self.dims)
            return self.proj(x).view(-1, self.n_out)

    check(_seeded(Pool), _t(2, 3, 4))
    check(_seeded(Pool, mode="max"), _t(2, 3, 4))


def test_super_init_and_super_forward():
    class Base(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.lin = nn.Linear(dim, dim)

        def forward(self, x):
            return self.lin(x).relu()

    class Child(Base):
        def __init__(self, dim):
            super().__init__(dim)
            self.scale = 3.0

        def forward(self, x):
            return super().forward(x) * self.scale + Base.forward(self, x)

    check(_seeded(Child, 4), _t(2, 4))


def test_forward_with_kwargs_and_defaults():
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x, *, temperature=1.0, return_logits=False, **extra):
            logits = self.lin(x) / temperature
            if return_logits:
                return logits
            if "bias" in extra:
                logits = logits + extra["bias"]
            return logits.softmax(-1)

    model = _seeded(Head)
    check(model, _t(2, 4))
    check(model, _t(2, 4), kwargs={"temperature": 0.5, "return_logits": True})
    check(model, _t(2, 4), kwargs={"bias": torch.ones(4)})


def test_custom_helper_methods():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(4, 4)
            self.k = nn.Linear(4, 4)

        def _shape(self, t):
            return t.view(t.shape[0], 2, 2)

        def scores(self, x):
            return self._shape(self.q(x)) @ self._shape(self.k(x)).transpose(-1, -2)

        def forward(self, x):
            return self.scores(x).softmax(-1)

    check(_seeded(Net), _t(3, 4))


def test_module_called_twice_shared_weights():
    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, a, b):
            return self.lin(a) + self.lin(b), self.lin(self.lin(a))

    check(_seeded(Shared), _t(2, 4), _t(2, 4, seed=1))


def test_module_passed_to_function():
    def fn(model, x):
        h = model(x)
        return h, sum([p.numel() for p in [model.fc1.weight, model.fc2.weight]])

    check(fn, _seeded(MLP), _t(2, 8))


def test_layer_scale_with_parameter_list():
    class LayerScale(nn.Module):
        def __init__(self, dim=4, depth=3, init=1e-2):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(dim, dim) for _ in range(depth)])
            self.gammas = nn.ParameterList([nn.Parameter(init * torch.ones(dim)) for _ in range(depth)])

        def forward(self, x):
            for block, gamma in zip(self.blocks, self.gammas):
                x = x + gamma * block(x)
            return x

    check(_seeded(LayerScale), _t(2, 4))


def test_residual_conv_block():
    class ResBlock(nn.Module):
        def __init__(self, c=3):
            super().__init__()
            self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(c)
            self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(c)

        def forward(self, x):
            identity = x
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + identity)

    check(_seeded(ResBlock).eval(), _t(1, 3, 5, 5), atol=1e-5, rtol=1e-5)


def test_module_with_config_object():
    class Cfg:
        def __init__(self, hidden=8, act="silu", norm_eps=1e-5):
            self.hidden, self.act, self.norm_eps = hidden, act, norm_eps

    class Layer(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.cfg = cfg
            self.lin = nn.Linear(cfg.hidden, cfg.hidden)
            self.norm = nn.LayerNorm(cfg.hidden, eps=cfg.norm_eps)

        def forward(self, x):
            act = getattr(F, self.cfg.act)
            return self.norm(act(self.lin(x))) * math.sqrt(self.cfg.hidden)

    check(_seeded(Layer, Cfg()), _t(2, 8))


def test_module_attribute_mutation_in_forward():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.steps = 0

        def forward(self, x):
            self.steps += 1
            self.last_norm = None
            return self.lin(x) * self.steps

    # One call: the attribute writes must be replayed on the module after the graph runs.
    check(_seeded(Counter), _t(2, 2), calls=1)
    # Several calls: each sees a new ``steps``; a specializing compiler recompiles per value
    # (dynamo: 2 graphs, then the int turns dynamic); what must hold is eager's result every time.
    check_recompiles(_seeded(Counter), [(_t(2, 2),)] * 3, graphs=(1, 2, 3))


def test_identity_and_flatten_modules():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Identity(), nn.Flatten(), nn.Linear(6, 2), nn.Unflatten(1, (1, 2)))
    check(model, _t(3, 2, 3))


def test_module_buffer_inplace_update():
    class Ema(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("avg", torch.zeros(3))

        def forward(self, x):
            self.avg.mul_(0.9).add_(x.mean(0) * 0.1)
            return x - self.avg

    check(_seeded(Ema), _t(4, 3))


def test_different_instances_same_class_recompile_or_share():
    # Two instances of one module class: their parameters differ, so a compiled forward must
    # never reuse the first instance's weights for the second.
    torch.manual_seed(0)
    a, b = nn.Linear(3, 3), nn.Linear(3, 3)

    def fn(m, x):
        return m(x)

    check_recompiles(fn, [(a, _t(2, 3)), (b, _t(2, 3)), (a, _t(2, 3))], graphs=(1, 2))
