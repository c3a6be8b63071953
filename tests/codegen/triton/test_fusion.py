"""Fused groups become one Triton kernel: softmax and layer_norm rows, pointwise chains."""
import torch

from kiln.aot.graph import format_graph

from tests.codegen.triton.helpers import check


def softmax(x):
    return torch.softmax(x, -1)


def layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)


def test_softmax_is_one_persistent_kernel():
    cg = check(softmax, torch.randn(5, 33), kernels=1)
    (k,) = cg.kernels.values()
    assert k.style == "persistent"
    assert k.name.startswith("triton_fused_amax_sum_sub_exp_")  # the ops it computes, in order
    assert "aten.mul.Tensor" in k.source and "aten.div" not in k.source  # CPU: exp times 1/sum, as ATen's CPU kernel
    assert "kernel-local" in k.source


def test_softmax_looped_when_rows_are_long():
    cg = check(softmax, torch.randn(3, 70), kernels=1, triton_persistent_max=16, triton_max_block=16)
    (k,) = cg.kernels.values()
    assert k.style == "looped"
    assert "for roffset in range(0, 70, RBLOCK)" in k.source


def test_layer_norm_is_one_kernel():
    x, w, b = torch.randn(6, 40), torch.randn(40), torch.randn(40)
    check(layer_norm, x, w, b, kernels=1, atol=1e-4)


def test_layer_norm_looped():
    x, w, b = torch.randn(4, 50), torch.randn(50), torch.randn(50)
    check(layer_norm, x, w, b, kernels=1, atol=1e-4, triton_persistent_max=16, triton_max_block=16)


def test_pointwise_chain_is_one_kernel():
    def f(x, y):
        return torch.relu(x * y + 1).sigmoid() - torch.tanh(y)

    cg = check(f, torch.randn(7, 9), torch.randn(7, 9), kernels=1)
    (k,) = cg.kernels.values()
    assert k.style == "pointwise"


def test_header_lists_source_ops():
    cg = check(softmax, torch.randn(2, 8))
    src = next(iter(cg.kernels.values())).source
    assert "aten.amax.default" in src and "aten.mul.Tensor" in src


def test_mlp_with_extern_matmuls():
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16),
                            torch.nn.LayerNorm(16)).eval()
    with torch.no_grad():
        cg = check(m, torch.randn(4, 16), atol=1e-5)
    assert len(cg.kernels) == 2  # gelu (after addmm), layer_norm (after addmm); the matmuls run in ATen


def test_bf16_linear_rounds_once_like_eager():
    # eager's addmm adds the bias to the float32 accumulator and rounds once; kiln keeps addmm whole in
    # bfloat16 (mm then add would round the product first and differ from eager by an ulp here and there)
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU()).eval().to(torch.bfloat16)
    x = torch.randn(32, 64).to(torch.bfloat16)
    with torch.no_grad():
        cg = check(m, x, atol=0, rtol=0)
    assert "aten.addmm.default" in format_graph(cg.gm.graph)


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
    return x * cos + rotated * sin


def test_rope_of_q_and_k_stay_separate_flat_kernels():
    # Llama's RoPE on q (4 query heads per kv head) and k: the two pointwise ops share only cos/sin
    # and the (batch, kv-head) loops. Fused side by side they made a kernel of batch * kv_heads
    # programs walking whole rows (0.9 ms on the H100 for what flat kernels do in 0.06 ms).
    def f(q, k, cos, sin):
        return _rope(q, cos, sin), _rope(k, cos, sin)

    q, k = torch.randn(2, 4, 4, 32, 16), torch.randn(2, 4, 1, 32, 16)
    cos, sin = torch.randn(32, 16), torch.randn(32, 16)
    cg = check(f, q, k, cos, sin)
    assert {k.style for k in cg.kernels.values()} == {"pointwise"}, cg.source


def test_side_by_side_rows_fuse_when_many_and_short():
    from kiln.codegen.triton.kernel import SIDE_BY_SIDE_MIN_ROWS, fusable

    class Member:  # the fields fusable reads
        is_reduction, reads = False, []

        def __init__(self, name, ranges):
            self.writes, self.ranges = [name], ranges

    few = [Member("a", [2, 4, 64]), Member("b", [2, 4, 3, 64])]
    many = [Member("a", [SIDE_BY_SIDE_MIN_ROWS, 64]), Member("b", [SIDE_BY_SIDE_MIN_ROWS, 3, 64])]
    long_rows = [Member("a", [SIDE_BY_SIDE_MIN_ROWS, 64]), Member("b", [SIDE_BY_SIDE_MIN_ROWS, 128, 64])]
    assert not fusable(few, 2)
    assert fusable(many, 1)
    assert not fusable(long_rows, 1, persistent_max=4096)


def test_values_under_the_same_mask_are_computed_once():
    # RoPE's rotate_half and cos/sin of a cat, fused for q, k and v: each output reads the cat's halves under
    # the same masks; they are loaded, and cos/sin taken, once (Llama's kernel took 20 s of ptxas with 16 copies)
    def rot(x):
        return torch.cat((-x[..., 32:], x[..., :32]), -1)

    def f(q, k, v, freqs):
        emb = torch.cat((freqs, freqs), -1)
        c, s = emb.cos(), emb.sin()
        return q * c + rot(q) * s, k * c + rot(k) * s, v * c + rot(v) * s

    q, k, v = (torch.randn(2, 4, 16, 64) for _ in range(3))
    cg = check(f, q, k, v, torch.randn(16, 32))
    (kernel,) = cg.kernels.values()
    assert kernel.source.count("libdevice.cos(") == 1 and kernel.source.count("libdevice.sin(") == 1
