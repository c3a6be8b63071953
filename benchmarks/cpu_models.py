"""The models of issue 19 at the configs a user runs on the CPU (``benchmarks/cpu.py --cases issue19``).

float32, batch 1, sequence 128 (size "default"; "small" and "tiny" shrink widths and depths for quick
checks and tests):

    mlp_b1          Linear(1024, 4096), GELU, Linear(4096, 1024), LayerNorm  on [128, 1024]
    attention_b1    the hand-written attention block of tests/models (matmul, scale, mask, softmax, matmul)
    nanogpt         nanoGPT's model.py (GPT, CausalSelfAttention with SDPA is_causal, tied lm head; the
                    logits of the last position as nanoGPT returns them without targets), the
                    shakespeare_char config: 6 layers, 6 heads, 384 wide, block 256, vocab 65, no bias
    hf_bert_base    transformers BertModel, bert-base config (vocab 30522), last hidden state
    hf_gpt2_124m    transformers GPT2LMHeadModel, 124M config with vocab 50257, logits
    hf_llama_gqa    transformers LlamaForCausalLM: hidden 768, 4 layers, 12 heads, 4 KV heads (GQA),
                    intermediate 2048, vocab 32000, logits

Random weights (seeded): speed does not depend on them.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

ISSUE19_CASES = ("mlp_b1", "attention_b1", "nanogpt", "hf_bert_base", "hf_gpt2_124m", "hf_llama_gqa")
SEQ = {"tiny": 16, "small": 64, "default": 128}


# ------------------------------------------------------------------------- nanoGPT (model.py)


class NanoLayerNorm(nn.Module):
    """nanoGPT's LayerNorm with an optional bias."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, bias):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class NanoMLP(nn.Module):
    def __init__(self, n_embd, bias):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class NanoBlock(nn.Module):
    def __init__(self, n_embd, n_head, bias):
        super().__init__()
        self.ln_1 = NanoLayerNorm(n_embd, bias)
        self.attn = CausalSelfAttention(n_embd, n_head, bias)
        self.ln_2 = NanoLayerNorm(n_embd, bias)
        self.mlp = NanoMLP(n_embd, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    """nanoGPT's GPT: ``targets=None`` returns the last position's logits; with targets, (logits, loss)."""

    def __init__(self, n_layer=6, n_head=6, n_embd=384, block_size=256, vocab_size=65, bias=False):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd), wpe=nn.Embedding(block_size, n_embd), drop=nn.Dropout(0.0),
            h=nn.ModuleList([NanoBlock(n_embd, n_head, bias) for _ in range(n_layer)]),
            ln_f=NanoLayerNorm(n_embd, bias)))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is None:
            return self.lm_head(x[:, [-1], :])
        logits = self.lm_head(x)  # training, as nanoGPT: logits of every position and the loss
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


# ------------------------------------------------------------------------------------- builders


class _Field(nn.Module):
    """An HF model returning one tensor field of its output (``last_hidden_state`` or ``logits``)."""

    def __init__(self, inner, field):
        super().__init__()
        self.inner, self.field = inner, field

    def forward(self, *args):
        return getattr(self.inner(*args), self.field)


def issue19_cases(size: str) -> dict:
    """name -> builder returning (module, args, description)."""
    seq = SEQ[size]
    small = size != "default"

    def mlp_b1():
        torch.manual_seed(0)
        d = 128 if small else 1024
        m = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.LayerNorm(d))
        return m, (torch.randn(seq, d),), f"[{seq},{d}] -> {4 * d} -> {d}, LN"

    def attention_b1():
        import os
        import sys

        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from tests.models.test_small_models import TransformerBlock

        torch.manual_seed(0)
        d, heads = (64, 4) if small else (768, 12)
        return TransformerBlock(dim=d, heads=heads), (torch.randn(1, seq, d),), f"[1,{seq},{d}] heads {heads}"

    def nanogpt():
        torch.manual_seed(0)
        cfg = dict(n_layer=2, n_head=2, n_embd=64) if small else dict(n_layer=6, n_head=6, n_embd=384)
        m = NanoGPT(**cfg, block_size=256, vocab_size=65, bias=False)
        return m, (torch.randint(0, 65, (1, seq)),), f"[1,{seq}] L{cfg['n_layer']} d{cfg['n_embd']} V65"

    def hf_bert_base():
        import transformers

        torch.manual_seed(0)
        extra = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256) if small else {}
        cfg = transformers.BertConfig(**extra)
        ids = torch.randint(0, cfg.vocab_size, (1, seq))
        return (_Field(transformers.BertModel(cfg), "last_hidden_state"), (ids, torch.ones(1, seq, dtype=torch.long)),
                f"[1,{seq}] L{cfg.num_hidden_layers} d{cfg.hidden_size}")

    def hf_gpt2_124m():
        import transformers

        torch.manual_seed(0)
        extra = dict(n_embd=64, n_layer=2, n_head=4) if small else {}
        cfg = transformers.GPT2Config(**extra)  # vocab 50257
        ids = torch.randint(0, cfg.vocab_size, (1, seq))
        return _Field(transformers.GPT2LMHeadModel(cfg), "logits"), (ids,), f"[1,{seq}] L{cfg.n_layer} d{cfg.n_embd} V{cfg.vocab_size}"

    def hf_llama_gqa():
        import transformers

        torch.manual_seed(0)
        width = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2) if small else dict(hidden_size=768, intermediate_size=2048,
                                                               num_hidden_layers=4, num_attention_heads=12,
                                                               num_key_value_heads=4)
        cfg = transformers.LlamaConfig(**width, vocab_size=32000, max_position_embeddings=2048)
        ids = torch.randint(0, cfg.vocab_size, (1, seq))
        return (_Field(transformers.LlamaForCausalLM(cfg), "logits"), (ids,),
                f"[1,{seq}] L{cfg.num_hidden_layers} d{cfg.hidden_size} kv{cfg.num_key_value_heads} V32000")

    return {"mlp_b1": mlp_b1, "attention_b1": attention_b1, "nanogpt": nanogpt, "hf_bert_base": hf_bert_base,
            "hf_gpt2_124m": hf_gpt2_124m, "hf_llama_gqa": hf_llama_gqa}
