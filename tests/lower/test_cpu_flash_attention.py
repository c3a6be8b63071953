"""ATen's CPU flash attention kept whole in inference (decomp/attention.py keep_cpu_flash) and lowered
as a library call whose query is realized in its own memory order (lower/cpu_attention.py)."""
import torch
import torch.fx as fx
import torch.nn.functional as F

import kiln
from kiln.backends.kiln import kiln_backend
from kiln.decomp.attention import keep_cpu_flash
from kiln.lower.cpu_attention import dense_in_order


def _compiled(fn, *args):
    compiled = kiln_backend(fx.symbolic_trace(fn), list(args))
    assert compiled.compiled_graph is not None, compiled.kiln_explain()
    return compiled


def test_keep_cpu_flash_only_in_float_inference_without_dropout():
    q = torch.randn(1, 2, 4, 8)
    assert keep_cpu_flash(q, q, q, 0.0, None)
    assert not keep_cpu_flash(q, q, q, 0.1, None)
    assert not keep_cpu_flash(q.half(), q.half(), q.half(), 0.0, None)
    g = q.clone().requires_grad_()
    assert not keep_cpu_flash(g, q, q, 0.0, None)
    with torch.no_grad():
        assert keep_cpu_flash(g, q, q, 0.0, None)


def test_dense_in_order_keeps_the_view_memory_order():
    # q of a fused QKV projection: [B, T, 3*H*D] sliced and viewed as [B, H, T, D]
    assert dense_in_order((1, 4, 8, 16), (1536, 16, 192, 1)) == (512, 16, 64, 1)
    assert dense_in_order((2, 3, 5), (15, 5, 1)) == (15, 5, 1)
    assert dense_in_order((2, 3), (1, 2)) == (1, 2)


def _qkv_attention(x, w, b):
    B, T, C = x.shape
    # a generated kernel computes the projection; q, k and v are views of it with gaps (GPT-2's c_attn)
    qkv = F.linear(x, w, b) * 2
    q, k, v = (qkv[..., i * C:(i + 1) * C].view(B, T, 4, C // 4).transpose(1, 2) for i in range(3))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).reshape(B, T, C) * 2


def test_fused_projection_attention_is_one_library_call_without_layout_copies():
    x, w, b = torch.randn(2, 16, 32), torch.randn(96, 32) * 0.2, torch.randn(96)
    with torch.no_grad():
        compiled = _compiled(_qkv_attention, x, w, b)
        torch.testing.assert_close(compiled(x, w, b), _qkv_attention(x, w, b))
    text = compiled.kiln_explain()
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default: fused attention (library kernel)" in text, text
    wrapper = text[text.index("wrapper:"):].splitlines()
    call = next(line for line in wrapper if "# fused attention" in line)
    query = call.split("(")[1].split(",")[0].strip()  # the buffer passed as q
    made = next(line for line in wrapper if line.strip().startswith(f"{query} = "))
    # q is written in its view's memory order ([B, T, H, D]), so ATen's output has the meta layout
    # [B, T, H, D] and is not copied (row-major q gave a row-major output and a copy per call)
    assert "(2, 4, 16, 8), (512, 8, 32, 1)" in made, made
    out = next(line for line in wrapper if "ensure_layout(extern" in line and "[0]" in line)
    assert "(2, 4, 16, 8), (512, 8, 32, 1)" in out, out

def test_attention_with_masks_and_gqa_matches_eager_in_inference():
    q, k, v = torch.randn(2, 4, 8, 16), torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16)
    bool_mask, float_mask = torch.rand(2, 1, 8, 8) > 0.3, torch.randn(2, 1, 8, 8)
    bool_mask[..., 0] = True
    cases = [(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), (q, k, v)),
             (lambda q, m: F.scaled_dot_product_attention(q, q, q, attn_mask=m) + 1, (q, bool_mask)),
             (lambda q, m: F.scaled_dot_product_attention(q, q, q, attn_mask=m, scale=0.3), (q, float_mask))]
    with torch.no_grad():
        for fn, args in cases:
            torch.testing.assert_close(_compiled(fn, *args)(*args), fn(*args))


def test_training_decomposes_attention_and_gradients_match():
    q = torch.randn(1, 2, 8, 16, requires_grad=True)
    f = lambda q: F.scaled_dot_product_attention(q, q * 0.5, q, is_causal=True).sum()  # noqa: E731
    compiled = kiln.compile(f)
    got = torch.autograd.grad(compiled(q), q)[0]
    torch.testing.assert_close(got, torch.autograd.grad(f(q), q)[0])


def test_broadcast_and_dynamic_queries_keep_the_default_realization():
    q, k = torch.randn(1, 2, 8, 16), torch.randn(3, 2, 8, 16)
    f = lambda q, k: F.scaled_dot_product_attention((q * 2).expand(3, 2, 8, 16), k, k) + 1  # noqa: E731
    with torch.no_grad():
        torch.testing.assert_close(_compiled(f, q, k)(q, k), f(q, k))
        g = kiln.compile(lambda q: F.scaled_dot_product_attention(q.transpose(1, 2) * 2, q.transpose(1, 2), q.transpose(1, 2)),
                         dynamic=True)
        for t in (8, 11):
            x = torch.randn(1, t, 2, 16)
            torch.testing.assert_close(g(x), F.scaled_dot_product_attention(x.transpose(1, 2) * 2, x.transpose(1, 2), x.transpose(1, 2)))
