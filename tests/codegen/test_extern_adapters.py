"""Arguments the wrapper adapts before an extern call (codegen/wrapper_runtime.py)."""
import pytest
import torch
import torch.nn.functional as F

from kiln.codegen.wrapper_runtime import EXTERN_ARGUMENT_ADAPTERS, aligned_attention_bias


@pytest.mark.parametrize("length", [510, 512, 17, 1])
def test_attention_bias_rows_are_16_aligned_and_broadcast_dims_stay_broadcast(length):
    base = torch.randn(2, 1, 7, length)
    bias = base.expand(2, 12, 7, length)
    out = aligned_attention_bias(bias)
    assert torch.equal(out, bias) and out.shape == bias.shape
    assert out.stride(1) == 0 and out.stride(-1) in (1, 0) or length == 1
    assert all(s % 16 == 0 for n, s in zip(out.shape[:-1], out.stride()[:-1]) if n > 1), out.stride()
    if length % 16 == 0:
        assert out is bias  # already aligned: passed as it is
    assert aligned_attention_bias(None) is None


def test_efficient_attention_bias_arguments_are_adapted():
    for name, position in (("_scaled_dot_product_efficient_attention", 3),
                           ("_scaled_dot_product_efficient_attention_backward", 4)):
        schema = getattr(torch.ops.aten, name).default._schema
        assert schema.arguments[position].name == "attn_bias"
        assert EXTERN_ARGUMENT_ADAPTERS[schema.name] == {position: "aligned_attention_bias"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_dynamic_training_attention_with_a_padding_mask_at_an_unaligned_length():
    # BERT fine-tuning with dynamic padding on the H200: "attn_bias is not correctly aligned (strideM)"
    import kiln

    def f(q, k, v, keep):
        mask = torch.where(keep[:, None, None, :], 0.0, float("-inf")).to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).float().pow(2).sum()

    compiled = kiln.compile(f, dynamic=True)
    for t in (64, 510, 77):
        q, k, v = (torch.randn(2, 4, t, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        keep = torch.arange(t, device="cuda")[None, :] < torch.tensor([[t], [t - 5]], device="cuda")
        compiled(q, k, v, keep).backward()
        got = [x.grad for x in (q, k, v)]
        q2, k2, v2 = (x.detach().requires_grad_() for x in (q, k, v))
        f(q2, k2, v2, keep).backward()
        for g, x in zip(got, (q2, k2, v2)):
            torch.testing.assert_close(g.float(), x.grad.float(), atol=5e-2, rtol=5e-2)
